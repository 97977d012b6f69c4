"""Dask arrays as data: ``vg.sum``, ``sg.vmap`` and ``Compiled.batch`` / ``.sum`` over rows held in chunks.

A data argument that is a Dask array (rows in chunks along its first axis) turns the call into a Dask
graph: one task per chunk runs the in-memory path on that chunk (``vg.sum`` of the chunk's rows, the
vmapped function on them, ``Compiled.batch`` of them), and a sum adds the chunks' results in a binary
tree in chunk order. Dask runs the graph: its threads in this process, or a ``dask.distributed``
cluster where a ``Client`` is active (a LocalCluster, dask-jobqueue on HPC, Kubernetes); symgrad has no
scheduler, pool or RPC of its own, and Dask stays optional (imported here, on first use only).

Why the pieces are as they are:

- The function reaches each worker once per computation, as one graph key that every chunk task depends
  on (its pickle: a ``Function`` by reference to the Python function, traced again where it lands; a
  ``Compiled`` as its program, whose kernels come from the worker's disk cache). A worker process keeps
  what it unpickled under the pickle's digest, so its traces and kernels serve the next computation (an
  optimizer's next step); a restarted worker makes them again: no result depends on them.
- The parameters (the arguments that are not rows) are one more key, sent once per worker; a task
  carries the chunk's keys and its number.
- A task runs Numba's kernels on one thread, so a chunk's sum does not depend on the worker's cores
  (Dask's workers and threads are the parallelism), and the chunks' results are added in a fixed tree,
  not in the order they finish: the result is the same bits whatever the workers, the scheduling or a
  retry of a lost chunk; ``dask.config.set(scheduler="sync")`` gives those bits in this process.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from symgrad.util import pytree
from symgrad.util.chunks import is_chunked
from symgrad.util.progress import phase

_KEEP = 16  # functions a process keeps loaded (an optimizer's loss, its gradient, a model ...)
_loaded: OrderedDict = OrderedDict()  # digest -> the function, in this process
_warm: set = set()  # (digest, what, chunk shapes) that ran here once: traced, compiled
_lock = threading.Lock()
_passes = [0]  # sums computed over Dask arrays in this process (an optimizer's epochs)


class Shipped:
    """A function on its way to Dask's workers: its pickle (cloudpickle: a lambda travels by value), and
    the pickle's digest, under which each process keeps what it loaded. Where it was made it is the
    object itself, so Dask's local schedulers reuse the caller's traces.

    >>> import symgrad as sg
    >>> vg = sg.value_and_grad(lambda w, x: (w - x) ** 2)
    >>> Shipped(vg).load() is vg
    True
    """

    def __init__(self, obj: Any) -> None:
        import cloudpickle  # (a dependency of Dask)

        self.payload = cloudpickle.dumps(obj)
        self.digest = hashlib.blake2b(self.payload, digest_size=16).hexdigest()
        _keep(self.digest, obj)

    def __getstate__(self) -> tuple:
        return self.payload, self.digest

    def __setstate__(self, state: tuple) -> None:
        self.payload, self.digest = state

    def __dask_tokenize__(self) -> str:
        return self.digest

    def load(self) -> Any:
        with _lock:
            obj = _loaded.get(self.digest)
            if obj is not None:
                _loaded.move_to_end(self.digest)
                return obj
        obj = pickle.loads(self.payload)
        _keep(self.digest, obj)
        return obj


def _keep(digest: str, obj: Any) -> None:
    with _lock:
        _loaded[digest] = obj
        _loaded.move_to_end(digest)
        while len(_loaded) > _KEEP:
            _loaded.popitem(last=False)


class _Arguments:
    """The call's arguments with the row leaves left out, filled with a chunk's blocks in each task."""

    def __init__(self, treedef: Any, leaves: list, slots: list[int]) -> None:
        self.treedef, self.leaves, self.slots = treedef, leaves, slots

    def __dask_tokenize__(self) -> Any:
        from dask.base import tokenize

        return tokenize(repr(self.treedef), self.leaves, self.slots)

    def fill(self, blocks: tuple) -> tuple:
        leaves = list(self.leaves)
        for j, block in zip(self.slots, blocks):
            leaves[j] = block
        return pytree.unflatten(self.treedef, leaves)


class _Rows:
    """The row leaves of a call (Dask arrays, and NumPy arrays of as many rows, split alike) in common
    chunks along the first axis, and everything else as one parameter key."""

    def __init__(self, args: tuple, kwargs: dict, is_row: list[bool], who: str) -> None:
        import dask
        import dask.array as da

        leaves, treedef = pytree.flatten((args, kwargs))
        bad = [leaf for leaf, row in zip(leaves, is_row) if not row and is_chunked(leaf)]
        if bad:
            raise TypeError(f"{who}: a Dask collection among the parameters (the arguments that are not rows); "
                            "they go to every task: pass NumPy arrays")
        slots = [j for j, row in enumerate(is_row) if row]
        lead = next((leaves[j] for j in slots if is_chunked(leaves[j])), None)
        if not isinstance(lead, da.Array) or lead.ndim == 0:
            raise TypeError(f"{who}: rows in a Dask array of one row per entry of its first axis, got "
                            f"{type(lead).__name__}")
        self.chunks = lead.chunks[0]
        self.n = lead.shape[0]
        shapes = [np.shape(leaves[j]) for j in slots]
        if any(s[:1] != (self.n,) for s in shapes) or np.isnan(self.n):
            raise ValueError(f"{who}: the data arguments need a leading axis of the same (known) number of rows, "
                             f"got shapes {shapes}" + (" (unknown row counts: call .compute_chunk_sizes() on them)"
                                                       if np.isnan(self.n) else ""))
        arrays = []
        for j in slots:
            leaf = leaves[j]
            if not is_chunked(leaf):
                leaf = np.asarray(leaf)
                leaf = da.from_array(leaf, chunks=(self.chunks, *leaf.shape[1:]))
            elif not isinstance(leaf, da.Array):
                raise TypeError(f"{who}: rows in a Dask array, got {type(leaf).__name__}")
            arrays.append(leaf.rechunk({0: self.chunks, **{a: -1 for a in range(1, leaf.ndim)}}))
        self.dtypes = [a.dtype for a in arrays]
        self.shapes = [a.shape[1:] for a in arrays]
        self.blocks = [a.to_delayed().ravel() for a in arrays]
        rest = [None if j in slots else leaf for j, leaf in enumerate(leaves)]
        self.arguments = _Arguments(treedef, rest, slots)
        self.params = dask.delayed(self.arguments, pure=True)
        self.bounds = np.cumsum((0, *self.chunks)).tolist()

    def tasks(self, shipped: Any, what: Any, name: str, empty: bool = True) -> list:
        """One task per chunk: ``what(function, args, kwargs)`` on the chunk's rows (not on an empty
        chunk, unless ``empty``: a sum of no rows adds nothing, and a kernel has no rows to run)."""
        import dask

        run = dask.delayed(_chunk, pure=True)
        return [run(shipped, what, self.params, (i, self.bounds[i], self.bounds[i + 1]),
                    *(b[i] for b in self.blocks), dask_key_name=(name, i)) for i in range(len(self.chunks))
                if empty or self.chunks[i]]

    def example(self, rows: int) -> tuple:
        """The arguments with ``rows`` zero rows in each row leaf (shapes and dtypes, no data)."""
        return self.arguments.fill(tuple(np.zeros((rows, *s), dt) for s, dt in zip(self.shapes, self.dtypes)))


def _chunk(shipped: Shipped, what: Any, params: _Arguments, chunk: tuple, *blocks: Any) -> Any:
    """A task: ``what`` on one chunk, on one Numba thread; an error names the chunk."""
    import numba

    i, lo, hi = chunk
    obj = shipped.load()
    args, kwargs = params.fill(blocks)
    key = (shipped.digest, what, tuple(np.shape(b) for b in blocks))
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        if key in _warm:
            return what(obj, args, kwargs)
        with _first:  # a process's threads trace and compile a new chunk shape once, not each for itself
            out = what(obj, args, kwargs)
            if len(_warm) > 1000:
                _warm.clear()
            _warm.add(key)
            return out
    except Exception as e:
        raise _named(e, f"chunk {i} (rows {lo}..{hi - 1})") from e
    finally:
        numba.set_num_threads(before)


_first = threading.Lock()


def _named(e: Exception, where: str) -> Exception:
    """``e`` again, its message led by ``where`` (a RuntimeError where its type takes no message)."""
    message = f"{where}: {type(e).__name__}: {e}"
    try:
        named = type(e)(message)
    except Exception:
        return RuntimeError(message)
    return named if str(where) in str(named) else RuntimeError(message)


def _sum_of(obj: Any, args: tuple, kwargs: dict) -> Any:
    return obj.sum(*args, **kwargs)


def _call_of(obj: Any, args: tuple, kwargs: dict) -> list:
    return pytree.flatten(obj(*args, **kwargs))[0]


def _batch_of(obj: Any, args: tuple, kwargs: dict) -> list:
    return pytree.flatten(obj.batch(*args))[0]


def _added(a: Any, b: Any) -> Any:
    """Two chunks' results added leaf by leaf (a value, gradients in their structure)."""
    left, tree = pytree.flatten(a)
    return pytree.unflatten(tree, [x + y for x, y in zip(left, pytree.flatten(b)[0])])


def tree_sum(parts: list, add: Any = None) -> Any:
    """The sum of ``parts`` in a binary tree by position: ``(p0 + p1) + (p2 + p3)``, then ``+ p4``;
    the same order whatever the order the parts are ready in. ``add`` makes a sum of two (a task).

    >>> tree_sum([1.0, 2.0, 3.0, 4.0, 5.0])
    15.0
    """
    add = add or _added
    while len(parts) > 1:
        parts = [add(parts[j], parts[j + 1]) if j + 1 < len(parts) else parts[j] for j in range(0, len(parts), 2)]
    return parts[0]


def _data_rows(f: Any, args: tuple, kwargs: dict) -> list[bool]:
    """Per leaf of ``(args, kwargs)``: whether it holds rows (the arguments ``f.sum`` sums over)."""
    from symgrad.compile.function import Compiled

    if isinstance(f, Compiled):  # sum(x, P): P's rows
        rows = [False, True]
    else:
        argnums = {n + len(args) if n < 0 else n for n in f.argnums}
        rows = [i not in argnums and i not in f.static_argnums for i in range(len(args))]
    rows += [k not in getattr(f, "static_argnames", ()) for k in sorted(kwargs)]
    keys = [*args, *(kwargs[k] for k in sorted(kwargs))]
    return [row for key, row in zip(keys, rows) for _ in pytree.flatten(key)[0]]


def lazy_sum(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``f.sum(*args, **kwargs)`` as a Dask delayed value, for rows in Dask arrays: one task per chunk
    (``f.sum`` of its rows), the chunks' results added in a fixed tree. ``f`` is a ``Function``
    (``sg.value_and_grad``, ``sg.grad``) or a ``Compiled`` (``sum(x, P)``, P's rows in chunks).
    ``vg.sum`` computes it at once; this leaves when, and with what else, to the caller.

    >>> import dask, dask.array as da, numpy as np, symgrad as sg
    >>> vg = sg.value_and_grad(lambda w, t, y: (w[0] * t + w[1] - y) ** 2)
    >>> t, y = da.arange(6.0, chunks=2), da.ones(6, chunks=2)
    >>> total = lazy_sum(vg, np.array([1.0, 0.0]), t, y)
    >>> dask.compute(total, scheduler="sync")[0]
    (31.0, array([80., 18.]))
    """
    import dask

    who = f"{getattr(f, '_who', 'Compiled')}.sum"
    from symgrad.compile.function import Compiled

    if isinstance(f, Compiled):
        _widths(f, (None, *args[1:]))
    rows = _Rows(args, kwargs, _data_rows(f, args, kwargs), who)
    shipped = dask.delayed(Shipped(f), pure=True)
    token = dask.base.tokenize(shipped.key, rows.params.key, [[b.key for b in bs] for bs in rows.blocks])
    parts = rows.tasks(shipped, _sum_of, f"symgrad-sum-{token}", empty=False)
    if not parts:
        raise ValueError(f"{who}: the Dask arrays hold no rows")
    add, level = dask.delayed(_added, pure=True), [0]

    def pair(a: Any, b: Any) -> Any:
        level[0] += 1
        return add(a, b, dask_key_name=(f"symgrad-add-{token}", level[0]))

    return tree_sum(parts, pair)


def sum_now(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``lazy_sum``, computed: one pass over the data (an epoch), shown as progress while it runs.

    >>> import dask, dask.array as da, numpy as np, symgrad as sg
    >>> vg = sg.value_and_grad(lambda w, t: (w[0] * t) ** 2)
    >>> with dask.config.set(scheduler="sync"):
    ...     sum_now(vg, np.array([1.0]), da.arange(4.0, chunks=2))
    (14.0, array([28.]))
    """
    total = lazy_sum(f, *args, **kwargs)
    _passes[0] += 1
    with phase(f"Dask: pass {_passes[0]} over the data"):
        return total.compute()


def lazy_map(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    """A vmapped function (``sg.vmap``) or a ``Compiled``'s ``batch(X, P)`` on rows in Dask arrays: the
    result in its structure, as Dask arrays of chunks computed when asked, one task per chunk.

    >>> import dask.array as da, numpy as np, symgrad as sg
    >>> f = sg.vmap(lambda w, x: np.dot(w, x) ** 2, in_axes=(None, 0))
    >>> z = lazy_map(f, np.array([1.0, 2.0]), da.ones((5, 2), chunks=(2, 2)))
    >>> z.chunks, z.compute(scheduler="sync")
    (((2, 2, 1),), array([9., 9., 9., 9., 9.]))
    """
    import dask
    import dask.array as da

    from symgrad.compile.function import Compiled

    if isinstance(f, Compiled):
        _widths(f, args)
        rows = _Rows(args, kwargs, _batch_rows(args), "Compiled.batch")
        empty = f.batch(*rows.example(0)[0])
        tree_leaves, out_tree = pytree.flatten(empty)
        outs = [(leaf.shape[1:], leaf.dtype) for leaf in tree_leaves]
        what = _batch_of
    else:
        rows = _Rows(args, kwargs, _mapped_rows(f, args, kwargs), f"{f.who}")
        example_args, example_kwargs = rows.example(1)
        t = f.trace(*example_args, **example_kwargs)
        out_tree = t.out_tree
        outs = [(shape[1:], np.dtype(dtype or np.float64)) for shape, dtype in t.blocks]
        what = _call_of
    shipped = dask.delayed(Shipped(f), pure=True)
    token = dask.base.tokenize(shipped.key, rows.params.key, [[b.key for b in bs] for bs in rows.blocks])
    parts = rows.tasks(shipped, what, f"symgrad-map-{token}")
    arrays = [da.concatenate([da.from_delayed(part[j], (n, *shape), dtype) for part, n in zip(parts, rows.chunks)])
              for j, (shape, dtype) in enumerate(outs)]
    return pytree.unflatten(out_tree, arrays)


def _widths(f: Any, args: tuple) -> None:
    """Compiled.batch(X, P) / .sum(x, P): X's and P's columns checked before anything is sent."""
    for value, which, n in zip(args, ("X", "P"), (len(f.program.inputs), len(f.program.params))):
        if value is not None and np.ndim(value) == 2 and np.shape(value)[1] != n:
            raise ValueError(f"{which}: expected shape (N, {n}), got shape {np.shape(value)}")


def _batch_rows(args: tuple) -> list[bool]:
    """batch(X, P): X's rows, and P's where it has as many (a Dask array, or N rows of a NumPy one)."""
    if not 1 <= len(args) <= 2:
        raise TypeError("Compiled.batch(X, P): one or two arguments")
    X, P = (*args, None)[:2]
    n = np.shape(X)[0] if np.ndim(X) else None
    per_row = P is not None and (is_chunked(P) or np.ndim(P) == 2 and np.shape(P)[0] == n != 1)
    return [True] + ([per_row] if len(args) == 2 and P is not None else [])


def _mapped_rows(f: Any, args: tuple, kwargs: dict) -> list[bool]:
    """Per leaf: whether vmap maps it (rows), from its in_axes; Dask arrays along their first axis only."""
    from symgrad.trace.batched import Batched, _in_axes, _per_leaf

    fn = f.fn
    if not isinstance(fn, Batched):
        raise TypeError(f"{f.who}: a Dask array is rows in chunks: map a function over them with sg.vmap as the "
                        "outermost transform (sg.vmap(sg.jit(f)), not sg.jit(sg.vmap(f))), or sum over them "
                        "with .sum (sg.value_and_grad, sg.grad)")
    if any(a != 0 for a in (fn.out_axes if isinstance(fn.out_axes, tuple | list) else [fn.out_axes])):
        raise ValueError(f"{f.who}: on Dask arrays results stack along axis 0 (out_axes=0)")
    axes = _in_axes(fn.in_axes, len(args), fn.__name__)
    in_order = (*args, *(kwargs[k] for k in sorted(kwargs)))
    leaf_axes = [a for arg, axis in zip(in_order, (*axes, *[0] * len(kwargs)))
                 for a in _per_leaf(arg, axis, fn.__name__)]
    if any(a not in (None, 0) for a in leaf_axes):
        raise ValueError(f"{f.who}: on Dask arrays, map along the first axis (rows in chunks): in_axes 0 or None")
    return [a == 0 for a in leaf_axes]
