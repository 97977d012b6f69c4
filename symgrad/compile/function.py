"""The Compiled object users call, and ``compile`` / ``value_and_grad`` that make it.

The call path is designed against measured call costs: a fast path that hands the
arguments straight to a Numba kernel frozen to one signature (float64 C-contiguous
arrays), and a slow path, taken only when that kernel refuses its arguments, that converts
them (lists, integers, strided arrays) or raises an error naming the culprit.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numba
import numpy as np

from symgrad.compile import backends, c_backend, loop_vm, scan_loops, tiers  # noqa: F401 (importing them registers their rows)
from symgrad.compile.backends import numba_on_disk
from symgrad.compile.kernels import REGISTRY, Kernels
from symgrad.compile.loop_program import LoopProgram
from symgrad.compile.lower import lower
from symgrad.compile.program import Program
from symgrad.expr.diff import grad
from symgrad.expr.node import Expr
from symgrad.expr.reroll import reroll
from symgrad.expr.serialize import dumps, loads
from symgrad.expr.sparsity import SparseExprs
from symgrad.expr.traverse import as_expr_list
from symgrad.util.chunks import is_chunked, run
from symgrad.util.progress import phase

BACKENDS = ("auto", *REGISTRY["program"])
# Above this many instructions "auto" picks the VM: Numba's compile (~2 ms per statement)
# then costs more than the VM's slower run saves for all but very hot loops.
AUTO_THRESHOLD = 200
# Under "auto" a loop program not yet in the disk cache runs on the loop VM at once while Numba
# compiles it on a background thread; the Numba kernels take over when ready (Compiled.ready()). A short
# straight-line program starts on the C compiler's kernels the same way (_tiered_straight).
TIERED = True

_EMPTY = np.empty(0)
_TIMED = object()  # (a Compiled's sample where no tier is to come: none kept)
# A tier's kernels timed on a sampled call: 2 to 50 calls each, alternating, for ~0.2 s (the best of
# five could pick the slower tier on a busy machine: llsq's gradient kept Numba's 8.9 ms over C's 3.4 ms).
TIMED_CALLS, TIMING_SECONDS = 50, 0.2
_empty = np.empty
_ndarray, _F64 = np.ndarray, np.dtype(np.float64)
# Rows per thread below which a batch or sum runs on the calling thread alone.
MIN_ROWS_PER_THREAD = 1024
_SCALAR, _VALUE_GRAD, _ARRAY = range(3)


class Compiled:
    """A compiled function of a float64 vector ``x`` (and parameters ``p``).

    Made by ``compile`` and ``value_and_grad``. Call it with one point, use
    ``.batch`` for many points and ``.sum`` for a sum over data rows. ``.program`` is the
    lowered instruction list, ``.source`` the generated code, ``.backend`` what runs it.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> f = sg.compile(x * y + sg.sin(x), [x, y], backend="python")
    >>> f([2.0, 3.0])
    6.909297426825682
    """

    def __init__(self, program: Program, kernels: Kernels, shape: tuple, pattern: tuple | None = None,
                 roots: list[Expr] | None = None) -> None:
        self.program, self.backend, self.shape = program, kernels.backend, shape
        self._kernels, self._source = kernels.kernel, kernels.source
        # A sparse matrix (indices, indptr, shape): the kernels compute its data, in CSR order.
        self._pattern = pattern
        self._roots = roots  # the interpreter backend evaluates the expressions themselves
        self._flat = pattern is None and len(shape) == 1  # array results returned as computed
        self._kind = _ARRAY if not program.returns_value else _SCALAR if shape == () else _VALUE_GRAD
        self._n_out = program.n_out
        self._point = self._kernels("point")
        self._final: Any = None  # a Future of the kernels taking over last (tiered compilation)
        self._tiers: list[tuple[str, Any]] = []  # (backend, Future of its kernels taking over)
        self._rank = -1  # the tier running it
        self._auto = False  # tiered under "auto" (pickled as "auto", whether or not a tier is still to come)
        self._sample: Any = _TIMED  # a call's (x, p) while a tier may come: the C and Numba kernels timed on it

    @property
    def source(self) -> str:
        """The generated code (numba), or the instruction listing the VM and interpreter run."""
        if callable(self._source):
            self._source = self._source()
        return self._source

    @property
    def pattern(self) -> tuple | None:
        """A sparse result's pattern, ``(indices, indptr, shape)`` in CSR order (its entries as computed), or None.

        >>> import symgrad as sg
        >>> x = sg.vector("x", 2)
        >>> sg.compile(sg.hessian(x[0] * x[1], list(x), sparse=True), list(x)).pattern[2]
        (2, 2)
        """
        return self._pattern

    @property
    def n_ops(self) -> int:
        """The number of arithmetic instructions in the program (loads and stores not counted).

        >>> import symgrad as sg
        >>> x = sg.Var("x")
        >>> sg.compile(sg.sin(x) * x, [x], backend="vm").n_ops
        2
        """
        return self.program.n_ops

    def __call__(self, x: Any, p: Any = _EMPTY, out: np.ndarray | None = None) -> Any:
        # Converted up front: a kernel refusing a list or float32 array raises slowly (~40 us).
        if type(x) is not _ndarray or x.dtype is not _F64:
            x = _converted(x)
        if p is not _EMPTY and (type(p) is not _ndarray or p.dtype is not _F64):
            p = _converted(p)
        if self._sample is not _TIMED:  # (tiers to come)
            self._sample = (x, p)
        try:
            if out is not None:
                value = self._point(x, p, out)
                return value if self._kind == _VALUE_GRAD else out
            if self._kind == _SCALAR:
                return self._point(x, p, _EMPTY)
            buf = _empty(self._n_out)
            if self._kind == _VALUE_GRAD:
                return self._point(x, p, buf), buf
            self._point(x, p, buf)
            return buf if self._flat else self._shaped(buf)
        except (TypeError, ValueError):
            return self._checked_call(x, p, out)

    def __reduce__(self) -> tuple:
        # The program travels (arrays and names), not the kernels: the receiver loads them from
        # the disk cache, or compiles them, exactly as a first compile would.
        # The interpreter's expressions travel as a sg.dumps document, checked where they land (a loop
        # program's are its own roots).
        backend = "auto" if self._auto else self.backend  # (tiered: tiered again where it lands)
        roots = None if self._roots is None or isinstance(self.program, LoopProgram) else dumps(self._roots)
        return _unpickled, (self.program, backend, self.shape, self._pattern, roots)

    def ready(self, backend: str | None = None) -> Compiled:
        """Wait until the final kernels run it, or those of ``backend`` ("c", "numba") once they are
        under way (under ``"auto"``, a loop program runs on the loop VM while the C compiler and Numba
        compile it in the background), and return it.

        >>> import symgrad as sg
        >>> x = sg.Var("x")
        >>> sg.compile(x * x, [x], backend="vm").ready().backend
        'vm'
        """
        if backend is not None and backend not in BACKENDS[1:]:
            raise ValueError(f"ready(): backend must be None or one of {BACKENDS[1:]}, got {backend!r}")
        for tier, future in self._tiers:
            if backend is None or tier == backend:
                future.result()
        return self

    def _upgrade(self, *made: tuple[str, Any]) -> Compiled:
        """Run on the kernels each ``make()`` of ``made`` ((backend, make) pairs, slower to faster)
        returns once a background thread has made them (unless dropped before its turn:
        ``drop_background_compiles``). Each backend's tiers run on a thread of its own, a tier starting
        once the one before it is in (Numba's compile beside gcc's took the cores the C kernels, sooner
        in, were waiting for: an LSTM gradient's 1.8 s after its first result, not 0.9); a tier never
        replaces a faster one that came in first."""
        self._auto = True
        if not made:
            return self
        generation = tiers.GENERATION[0]

        def swap(rank: int, backend: str, make: Any, before: Future | None) -> bool:
            if before is not None:
                wait([before])
            if tiers.GENERATION[0] != generation:  # (dropped: nobody will use it; it runs on the VM)
                return False
            if backend != "c":  # (Numba's compile holds the GIL; the C compiler runs in its own process)
                tiers.after_builds()
            try:
                with c_backend.background():
                    kernels = make()
                    point = kernels.kernel("point")
            except c_backend.CompilerError:  # (warned once: tiers.c_kernels)
                return False
            except Exception as e:  # (out of memory in LLVM, say): the loop VM goes on running it
                warnings.warn(f"symgrad: compiling a loop program failed ({type(e).__name__}: {e}); "
                              "it runs on the kernels it has", stacklevel=1)
                return False  # (not _final = None here: the Future may not be stored yet)
            if backend == "numba" and self.backend == "c" and not self._faster(point):
                return False  # (the C kernels stay: as fast or faster on this function)
            with tiers.CHANGED:
                if rank < self._rank:
                    return False
                self._rank = rank
                self._kernels, self._source, self.backend = kernels.kernel, kernels.source, kernels.backend
                self._point = point
            return True

        def last(rank: int, backend: str, make: Any, before: Future | None) -> bool:
            try:
                return swap(rank, backend, make, before)
            finally:
                self._sample = _TIMED  # (no call's arguments kept past the last tier)

        self._sample = None
        steps, self._tiers = [swap] * (len(made) - 1) + [last], []
        for rank, (step, (backend, make)) in enumerate(zip(steps, made, strict=True)):
            before = self._tiers[-1][1] if self._tiers else None
            self._tiers.append((backend, tiers.worker(backend).submit(step, rank, backend, make, before)))
        self._final = self._tiers[-1][1]
        return self

    def _faster(self, point: Any) -> bool:
        """Whether the kernel ``point`` runs a call sampled from the running ones at least 5% faster than
        the running kernel (the best of a few timed calls each, alternating; no sample: yes). Which wins
        depends on the function: an LSTM's gradient runs 104 ms a call on the C kernels, 111-119 ms on
        Numba's; log-sum-exp the other way round."""
        sample, self._sample = self._sample, _TIMED
        if sample is None or sample is _TIMED:
            return True
        best, out, start = [math.inf, math.inf], np.empty(self._n_out), time.perf_counter()  # (new, running)
        try:
            for k in range(2 * TIMED_CALLS):
                began = time.perf_counter()
                (point, self._point)[k % 2](*sample, out)
                best[k % 2] = min(best[k % 2], time.perf_counter() - began)
                if k % 2 and k >= 3 and time.perf_counter() - start > TIMING_SECONDS:
                    break
        except Exception:  # noqa: BLE001 (the sampled call failed, on either: the later tier, as without a sample)
            return True
        return best[0] < 0.95 * best[1]

    def _shaped(self, data: np.ndarray) -> Any:
        return data.reshape(self.shape) if self._pattern is None else _csr(data, self._pattern)

    def _checked_call(self, x: Any, p: Any, out: np.ndarray | None) -> Any:
        """The slow path: convert the arguments, or raise an error that names the culprit."""
        x2, p2 = self._vector(x, "x"), self._vector(p, "p")
        out2 = None if out is None else self._out(out)
        if x2 is x and p2 is p and out2 is out:
            raise  # the arguments were fine: the kernel's own error stands
        result = self(x2, p2, out2)
        return out if self._kind == _ARRAY and out is not None else result

    def batch(self, X: Any, P: Any = None) -> Any:
        """Evaluate at each row of ``X`` (shape (N, n)); ``P``: one row of params, or N rows.

        Returns results with a leading axis N: values (N,), a value-and-gradient gives
        (values (N,), gradients (N, n)), arrays give (N, *shape), a sparse matrix gives its
        data arrays (N, nnz) in its fixed pattern. Rows run in parallel.

        >>> import symgrad as sg
        >>> x, y = sg.symbols("x y")
        >>> sg.compile(x * y, [x, y], backend="vm").batch([[1.0, 2.0], [3.0, 4.0]])
        array([ 2., 12.])
        """
        if is_chunked(X) or is_chunked(P):  # rows in Dask chunks
            return run("lazy_map", self, X) if P is None else run("lazy_map", self, X, P)
        X = self._matrix(X, "X", len(self.program.inputs))
        P = self._matrix(P, "P", len(self.program.params), rows=(1, len(X)))
        n = len(X)
        V = _empty(n if self.program.returns_value else 0)
        OUT = _empty((n, self._n_out))
        kernel = self._kernels("batch")
        # (a loop program's row is whole arrays: worth a thread from two rows on)
        _on_threads(n, lambda lo, hi: kernel(X, P, V, OUT, lo, hi),
                    1 if isinstance(self.program, LoopProgram) else MIN_ROWS_PER_THREAD)
        if self._kind == _SCALAR:
            return V
        if self._kind == _VALUE_GRAD:
            return V, OUT
        return OUT.reshape((n, *self.shape))

    def sum(self, x: Any, P: Any) -> Any:
        """The sum over the rows of ``P`` (one data sample per row) of the outputs at ``x``.

        Reduced inside the kernel, in parallel, with one accumulator per thread: a loss and
        its gradient over N samples costs no N-row intermediate array.

        >>> import symgrad as sg
        >>> a, t = sg.symbols("a t")
        >>> vg = sg.value_and_grad((a * t - 1.0) ** 2, [a], params=[t], backend="vm")
        >>> vg.sum([2.0], [[1.0], [2.0]])  # (2-1)**2 + (4-1)**2, and 2*1*1 + 2*3*2
        (10.0, array([14.]))
        """
        if is_chunked(P):  # rows in a Dask array's chunks: one task each, on Dask's workers
            return run("sum_now", self, x, P)
        x = self._vector(x, "x")
        P = self._matrix(P, "P", len(self.program.params))
        kernel = self._kernels("total")
        parts = _on_threads(len(P), lambda lo, hi: _total_part(kernel, x, P, lo, hi, self._n_out))
        sums = np.sum(parts, axis=0)
        if self._kind == _SCALAR:
            return float(sums[0])
        if self._kind == _VALUE_GRAD:
            return float(sums[0]), sums[1:]
        return self._shaped(sums[1:])

    def _names(self, which: str) -> tuple[str, ...]:
        return self.program.inputs if which in ("x", "X") else self.program.params

    def _vector(self, value: Any, which: str) -> np.ndarray:
        names = self._names(which)
        if value is _EMPTY and names:
            raise TypeError(f"missing params: expected p of shape ({len(names)},) for {_names_brief(names)}")
        a = _as_float(value, which)
        if a.ndim == 0 and len(names) == 1 or a.ndim > 1 and a.shape == getattr(names, "shape", None):
            a = a.reshape(-1)  # (one array input: its own shape will do)
        if a.shape != (len(names),):
            raise ValueError(f"{which}: expected shape ({len(names)},) for {_names_brief(names)}, "
                             f"got shape {a.shape}")
        return a

    def _matrix(self, value: Any, which: str, n: int, rows: tuple | None = None) -> np.ndarray:
        names = self._names(which)
        if value is None:
            if n:
                raise TypeError(f"missing params: expected {which} of shape (N, {n}) for {_names_brief(names)}")
            return np.zeros((rows[0] if rows else 0, 0))
        a = _as_float(value, which)
        if a.ndim == 1 and rows is not None:
            a = a.reshape(1, -1)
        if a.ndim == 1 and n == 1:
            a = a.reshape(-1, 1)
        if a.ndim != 2 or a.shape[1] != n or (rows is not None and a.shape[0] not in rows):
            want = f"({'1 or ' + str(rows[1]) if rows else 'N'}, {n})"
            raise ValueError(f"{which}: expected shape {want} for {_names_brief(names)}, got shape {a.shape}")
        return a

    def _out(self, out: Any) -> np.ndarray:
        if self._kind == _SCALAR:
            raise TypeError("out: a function with one scalar output returns its value; it takes no out array")
        want = (self._n_out,) if self._kind == _VALUE_GRAD else self.shape
        if not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != want \
                or not out.flags.c_contiguous or not out.flags.writeable:
            got = f"{type(out).__name__} of shape {getattr(out, 'shape', '?')}, dtype {getattr(out, 'dtype', '?')}"
            raise ValueError(f"out: expected a writable C-contiguous float64 array of shape {want}, got {got}")
        return out if out.ndim == 1 else out.reshape(-1)

    def __repr__(self) -> str:
        p = f", params {_names_brief(self.program.params)}" if self.program.params else ""
        return (f"<Compiled {self.backend}: {self.n_ops} ops, inputs {_names_brief(self.program.inputs)}{p}, "
                f"outputs {self.shape or 'scalar'}>")


def _names_brief(names: Any, shown: int = 6) -> str:
    if not isinstance(names, tuple):  # a rolled program's layout: its arrays' names and shapes
        return repr(names)
    if len(names) <= shown:
        return str(list(names))
    return f"[{', '.join(map(repr, names[:shown - 2]))}, ..., {names[-1]!r}] ({len(names)})"


def _csr(data: np.ndarray, pattern: tuple) -> Any:
    from scipy.sparse import csr_matrix  # only sparse results need SciPy

    indices, indptr, shape = pattern
    return csr_matrix((data, indices, indptr), shape=shape, copy=False)


def _total_part(kernel: Any, x: np.ndarray, P: np.ndarray, lo: int, hi: int, n_out: int) -> np.ndarray:
    acc = _empty(n_out + 1)
    kernel(x, P, acc, lo, hi)
    return acc


def _on_threads(n: int, run: Any, rows_per_thread: int = MIN_ROWS_PER_THREAD) -> list:
    """``run(lo, hi)`` over slices of ``range(n)``, one per thread (kernels release the GIL)."""
    k = max(1, min(numba.get_num_threads(), n // rows_per_thread))
    bounds = [n * i // k for i in range(k + 1)]
    if k == 1:
        return [run(0, n)]
    return list(_thread_pool().map(run, bounds[:-1], bounds[1:]))


@functools.lru_cache(None)
def _thread_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS, thread_name_prefix="symgrad")


# A forked child inherits the pool without its threads: it would wait on them forever.
os.register_at_fork(after_in_child=_thread_pool.cache_clear)


def _converted(value: Any) -> Any:
    """A real array-like as a float64 array, cheaply; anything else as it is (the slow path names it)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64) if value.dtype.kind in "biuf" else value
    if type(value) is list or type(value) is tuple:
        try:
            a = np.array(value)
        except (TypeError, ValueError, OverflowError):
            return value
        return a if a.dtype is _F64 else a.astype(np.float64) if a.dtype.kind in "biuf" else value
    return value


def _as_float(value: Any, which: str) -> np.ndarray:
    """``value`` as a C-contiguous float64 array, or an error naming ``which`` and what is wrong with it."""
    try:
        a = np.asarray(value)
    except (ValueError, OverflowError) as e:  # ragged nesting, or a number NumPy cannot hold
        raise ValueError(f"{which}: expected a rectangular array of real numbers, got {_brief(value)}: "
                         f"{str(e).split('. ')[0]}") from None
    if a.dtype.kind == "c":
        raise TypeError(f"{which}: complex values are not supported, got {a.dtype}")
    if a.dtype.kind == "O" and a.size and all(isinstance(v, int | float) and not isinstance(v, bool)
                                               for v in a.ravel()):
        try:
            a = a.astype(np.float64)
        except OverflowError:
            raise ValueError(f"{which}: a value is too large for a float64 (|x| > 1.8e308), got {_brief(value)}") \
                from None
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{which}: expected real numbers, got {_brief(value)} (dtype {a.dtype})")
    a = np.ascontiguousarray(a, dtype=np.float64)
    return a if a.flags.writeable else a.copy()


def _brief(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _make(roots: list[Expr], inputs: Any, params: Any, backend: str, shape: tuple,
          returns_value: bool, pattern: tuple | None = None) -> Compiled:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    with phase("compiling"):
        return _made(roots, inputs, params, backend, shape, returns_value, pattern)


def _made(roots: list[Expr], inputs: Any, params: Any, backend: str, shape: tuple,
          returns_value: bool, pattern: tuple | None) -> Compiled:
    return _on(lower(roots, inputs, params, returns_value=returns_value), backend, shape, pattern, roots)


def _on(program: Program, backend: str, shape: tuple, pattern: tuple | None, roots: list[Expr] | None) -> Compiled:
    """``program``'s Compiled on ``backend``, "auto" choosing (and tiering a loop program, or a short
    straight-line one)."""
    if backend == "auto" and isinstance(program, LoopProgram):
        if TIERED:
            return _tiered(program, shape, pattern, numba_on_disk(program))
        backend = "numba"
    elif backend == "auto" and len(program) <= AUTO_THRESHOLD:
        if TIERED:  # (even where Numba's kernels are on disk: a fresh process loads them in ~0.7 s, C's in ~0.01)
            return _tiered_straight(program, shape, pattern)
        backend = "numba"
    elif backend == "auto":
        backend = "vm"
    needs_roots = backend in REGISTRY["program"] and REGISTRY["program"][backend].needs_roots
    return _from_program(program, backend, shape, pattern, roots if needs_roots else None)


def _tiered(program: LoopProgram, shape: tuple, pattern: tuple | None, numba_ready: bool = False) -> Compiled:
    """A loop program under "auto": its first kernels at once (the loop VM's where they are compiled, else
    the C compiler's, in a fraction of a second; a long kernel's first built quickly: c_backend.QUICK_LINES),
    then the C compiler's and Numba's as each is ready: all with the same bits (the C loops call fastmath's
    exp and log as Numba's do, and BLAS as Numba calls it). A C compiler that fails (or whose objects do
    not load) is warned of once and not used again in this process. Where the disk cache holds Numba's
    kernels (``numba_ready``) and not the C compiler's, Numba's; where it holds both, the C kernels at once
    and Numba's only if a timed call finds them faster, as when both were compiled (k-means' Hessian
    diagonal: 6.9 ms a call on the C kernels, 14 on Numba's, which a second process took from the disk)."""
    c = tiers.C_TIER and not tiers.C_FAILED and c_backend.available() and c_backend.has_room()
    translated = tiers.c_kernels(program) if c else None  # (parsed here, built on a worker)
    ready = translated is not None and translated.on_disk()  # (built before: loaded at once, no VM first)
    if numba_ready and not ready:
        return _from_program(program, "numba", shape, pattern, None)
    numba_tier = [("numba", lambda: program.kernels("numba"))] if tiers.NUMBA_TIER else []
    if loop_vm.at_hand() and not ready or (program.split and translated is None) or not (translated or numba_tier):
        # (a long program compiles for minutes in Numba: the VM's own first compile, seconds, is worth it then)
        first = [("c", lambda: tiers.c_built(translated))] if translated is not None else []
        return Compiled(program, program.kernels("vm"), shape, pattern)._upgrade(*first, *numba_tier)
    if translated is not None:
        quick = None if ready else translated.quick  # (a long kernel: built quickly first, then in full)
        later = [("c", lambda: tiers.c_built(translated))] if quick else []
        try:
            first = tiers.c_built(quick or translated)
            return Compiled(program, first, shape, pattern)._upgrade(*later, *numba_tier)
        except c_backend.CompilerError:
            pass  # (warned)
    return _from_program(program, "numba" if numba_tier else "vm", shape, pattern, None)


def _tiered_straight(program: Program, shape: tuple, pattern: tuple | None) -> Compiled:
    """A short straight-line program under "auto": the C compiler's kernels first (~0.1 s to build where
    Numba's compile takes 0.4-1 s; from the disk cache ~0.01 s where loading Numba's takes a fresh process
    ~0.7 s; a call through ctypes costs ~7 us), then Numba's (~1 us a call) once compiled or loaded: the same
    bits (both call the C library's exp, log, ...)."""
    numba_tier = [("numba", lambda: program.kernels("numba"))] if tiers.NUMBA_TIER else []
    if tiers.C_TIER and not tiers.C_FAILED and c_backend.available() and c_backend.has_room():
        try:
            return Compiled(program, tiers.c_built(program.kernels("c")), shape, pattern)._upgrade(*numba_tier)
        except c_backend.CompilerError:
            pass  # (warned)
    return _from_program(program, "numba", shape, pattern, None)


def _from_program(program: Program, backend: str, shape: tuple, pattern: tuple | None,
                  roots: list[Expr] | None) -> Compiled:
    """The Compiled for a lowered program (also how a pickled one comes back: disk cache, or a recompile)."""
    kernels = program.kernels(backend, roots)
    return Compiled(program, kernels, shape, pattern, roots)


def _unpickled(program: Program, backend: str, shape: tuple, pattern: tuple | None, roots: str | None) -> Compiled:
    """A pickled Compiled: the interpreter's expressions (if any) loaded by sg.loads, which checks them; a
    tiered one ("auto") tiered again where it lands (the disk cache's kernels, or the first ones at once)."""
    if backend == "auto":
        return _on(program, "auto", shape, pattern, None)
    return _from_program(program, backend, shape, pattern, None if roots is None else loads(roots))


def compile(outputs: Any, inputs: Any, params: Any = (), backend: str = "auto") -> Compiled:
    """Compile expressions into a fast function of ``x`` (values of ``inputs``, in order).

    One expression gives a function returning a float; a list or array of expressions
    gives one returning an array of the same shape; a sparse matrix of expressions
    (``sg.hessian(f, x, sparse=True)``) gives one returning a ``scipy.sparse.csr_matrix``.
    ``params`` are further variables passed as a second vector ``p`` (data, not
    differentiated). ``backend``: ``"numba"`` (straight-line kernels), ``"vm"`` (the
    pre-compiled interpreter, ready at once for large graphs), ``"python"`` (the
    reference interpreter) or ``"auto"``.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> h = sg.compile(sg.hessian(x**2 * y, [x, y]), [x, y], backend="vm")
    >>> h([1.0, 2.0])
    array([[4., 2.],
           [2., 0.]])
    """
    if isinstance(outputs, SparseExprs):
        pattern = (outputs.indices, outputs.indptr, outputs.shape)
        return _make(outputs.exprs, inputs, params, backend, (outputs.nnz,), False, pattern)
    roots = as_expr_list(outputs)
    if isinstance(outputs, Expr) and outputs.op.array_valued:  # a rolled array: its shape
        return _make(roots, inputs, params, backend, outputs.shape, False)
    if any(r.op.array_valued for r in roots):  # several: their elements one after another
        return _make(roots, inputs, params, backend, (sum(math.prod(r.shape) for r in roots),), False)
    scalar = isinstance(outputs, Expr) or isinstance(outputs, (int, float))
    return _make(roots, inputs, params, backend, () if scalar else np.shape(outputs), scalar)


def value_and_grad(f: Any, wrt: Any, params: Any = (), backend: str = "auto", *, gradient: Any = None) -> Compiled:
    """Compile ``f`` and its gradient: ``vg(x)`` returns ``(value, gradient array)``.

    ``vg(x, out=g)`` writes the gradient into ``g`` and returns the value (no allocation).
    ``gradient``: the gradient's expressions when the caller has built them already.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> vg = sg.value_and_grad(x * y + sg.sin(x), [x, y], backend="vm")
    >>> vg([2.0, 3.0])
    (6.909297426825682, array([2.58385316, 2.        ]))
    """
    wrt_list = as_expr_list(wrt)
    for v in wrt_list:
        if v.op.name not in ("var", "array"):
            raise TypeError(f"value_and_grad: wrt must be variables or arrays (sg.array), got the expression {v}")
    f_expr = as_expr_list(f)
    if len(f_expr) != 1 or f_expr[0].op.array_valued:
        raise ValueError(f"value_and_grad needs one scalar expression, got {_outputs_brief(f)}")
    if gradient is None:
        rolled = reroll(f_expr[0], wrt_list) if all(v.op.name == "var" for v in wrt_list) else None
        if rolled is not None:  # a model built from scalars: its alike terms as loops (expr/reroll.py)
            f_expr, wrt_list = [rolled[0]], rolled[1]
        gradient = grad(f_expr[0], wrt_list)
    size = sum(math.prod(v.shape) for v in wrt_list)
    return _make([f_expr[0], *gradient], wrt_list, params, backend, (size,), True)


def _outputs_brief(f: Any) -> str:
    return f"the array {str(f)[:60]}" if isinstance(f, Expr) else f"{len(as_expr_list(f))} expressions"

