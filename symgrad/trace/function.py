"""``Function``: a Python function traced per argument signature, its traces cached and retraced."""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from symgrad.compile import function as compiled
from symgrad.compile import tiers
from symgrad.expr import ndarrays, tracing
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.printing import format as format_exprs
from symgrad.expr.tracing import context
from symgrad.trace import limits
from symgrad.trace.batched import Batched
from symgrad.trace.captured import WRAPPERS
from symgrad.trace.errors import caught, describe, holds_int, int_use, traced, user_level, user_line
from symgrad.trace.record import Trace
from symgrad.trace.rules import TRANSFORMS
from symgrad.trace.signature import (
    OTHER,
    PLAIN,
    SYMBOLIC,
    auto_static,
    has_symbolic,
    int_tuple,
    is_rolled,
    signature,
    static_key,
)
from symgrad.util import chunks, pytree


class Function:
    """A Python function traced, differentiated and compiled per argument shapes.

    Made by ``sg.jit``, ``sg.grad``, ``sg.value_and_grad``, ``sg.jacobian``, ``sg.hessian``
    and ``sg.hvp``. After a call, ``.exprs`` is what ``fn`` returned on symbolic arguments,
    ``.formulas()`` prints it with its derivatives, ``.source`` is the generated code;
    ``.trace(*args)`` gives the ``Trace`` for other argument shapes. Called with
    symbolic arguments (inside another transform), it returns expressions.

    >>> import math, numpy as np, symgrad as sg
    >>> def f(x):
    ...     return np.sum(x[1:] * x[:-1]) + np.sin(x[0])
    >>> df = sg.grad(f)
    >>> df(np.array([0.0, 2.0, 3.0]))
    array([3., 3., 2.])
    >>> print(df.formulas())
    f = x[1]*x[2] + x[0]*x[1] + sin(x[0])
    df/dx[0] = x[1] + cos(x[0])
    df/dx[1] = x[0] + x[2]
    df/dx[2] = x[1]
    >>> sg.grad(sg.grad(np.sin))(0.5) == -math.sin(0.5)  # transforms compose
    True
    """

    def __init__(self, fn: Any, transform: str, argnums: Any = 0, static_argnums: Any = (),
                 static_argnames: Any = (), sparse: bool = False, backend: str = "auto",
                 has_aux: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"sg.{transform}: expected a function, got {type(fn).__name__}")
        if backend not in compiled.BACKENDS:
            raise ValueError(f"backend must be one of {compiled.BACKENDS}, got {backend!r}")
        self.fn, self.transform, self.sparse, self.backend = fn, transform, bool(sparse), backend
        self.rule = TRANSFORMS[transform]
        self.has_aux = bool(has_aux)
        self.argnums_spec = int(argnums) if isinstance(argnums, np.integer) else argnums
        self.argnums = int_tuple(argnums, "argnums")
        if self.rule.extra == "v" and len(self.argnums) != 1:
            raise ValueError(f"sg.{transform}: differentiate with respect to one argument (an int argnums)")
        if sparse and not self.rule.sparse:
            raise ValueError(f"sparse=True is for sg.jacobian and sg.hessian, not sg.{transform}")
        self.static_argnums = frozenset(int_tuple(static_argnums, "static_argnums"))
        both = sorted(set(self.argnums) & self.static_argnums) if self.rule.wrt == "argnums" else []
        if both:
            raise ValueError(f"sg.{transform}: argument {both[0]} is in argnums and static_argnums: a static "
                             "argument is not traced, so it cannot be differentiated")
        names = (static_argnames,) if isinstance(static_argnames, str) else static_argnames
        self.static_argnames = frozenset(names)
        self._traces: OrderedDict = OrderedDict()
        self._sparse_rolled: OrderedDict = OrderedDict()  # signature -> RolledSparse, or None
        self._last_sparse: Any = None  # the RolledSparse of the latest call
        self._last: Trace | None = None
        self._fallback = True  # element by element where the rolled trace fails (False: raise)
        self._sums: dict = {}  # Function.sum's vmapped sums, by call arity and argnums
        self._changes = 0  # traces made again (a captured value changed, a branch not traced yet)
        self._ints_static = False  # Python ints not differentiated: static (once one was used as a size)
        self._noted = False  # whether the element-by-element warning was given
        functools.update_wrapper(self, fn, updated=())  # not fn.__dict__: a Function inside keeps its own
        self.__name__ = getattr(fn, "__name__", None) or describe(fn)
        self.who = f"sg.{transform}({self.__name__})"

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """On a method: bound to the instance, which comes first (static, as an object that is not numbers).

        >>> import numpy as np, symgrad as sg
        >>> class Model:
        ...     scale = 2.0
        ...     @sg.jit
        ...     def predict(self, x):
        ...         return self.scale * x
        >>> Model().predict(np.array([1.0, 2.0]))
        array([2., 4.])
        """
        return self if instance is None else types.MethodType(self, instance)

    def argument_names(self, n: int) -> list[str]:
        """The names of fn's first ``n`` positional parameters (``arg0`` ... past them: ``*args``).

        >>> import symgrad as sg
        >>> sg.grad(lambda x, *rest: x).argument_names(3)
        ['x', 'rest1', 'rest2']
        """
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "arg")
        return names[:n] + [f"{star}{i}" for i in range(len(names[:n]), n)]

    def differentiated(self, n_args: int, slots: dict) -> list:
        """The differentiated arguments' keys: argnums (negative ones from the end), all for jit / jvp / vjp."""
        if self.rule.wrt == "all":
            return list(slots)
        if self.rule.wrt == "positional":
            return [i for i in range(n_args) if i in slots]
        keys = []
        for n in self.argnums:
            k = n + n_args if n < 0 else n
            if not 0 <= k < n_args or k not in slots:
                raise TypeError(f"{self.who}: argnums {n} is not a traced positional argument "
                                f"(called with {n_args} positional arguments)")
            keys.append(k)
        return keys

    def signature_key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The trace cache key (shapes, tree structures, static values); None for symbolic arguments."""
        if not (kwargs or self.static_argnums or self._ints_static):
            key = tuple(map(signature, args))
            if OTHER not in key:
                return None if SYMBOLIC in key else key
        n = len(args)
        sigs = [self._static_key(i, a, n) or signature(a, True) for i, a in enumerate(args)]
        for k in sorted(kwargs):
            v = kwargs[k]
            sigs.append((k, self._static_key(k, v, n) or signature(v, True)))
            if sigs[-1][1] is SYMBOLIC:
                return None
        key = tuple(sigs)
        return None if SYMBOLIC in key else key

    def _static_key(self, key: Any, value: Any, n_args: int) -> tuple | None:
        """What keys the trace for a static argument (None: traced). Named static: its value, as JAX
        (hash and ==); static without asking: ints, bools and strings by value, any other object by
        identity (two equal objects may hold different attributes, which the trace reads)."""
        if key in self.static_argnums or key in self.static_argnames:
            return static_key(value, key, self)
        if not self.is_static(key, value, n_args):
            return None
        leaves, treedef = pytree.flatten(value)  # (the trace keeps the objects alive: an id stays theirs)
        return ("static", treedef, tuple(leaf if type(leaf) in (int, *PLAIN) else ("object", id(leaf))
                                         for leaf in leaves))

    def is_static(self, key: Any, value: Any, n_args: int) -> bool:
        """Whether the argument at ``key`` (a position or a name) is static: named so, or not
        differentiated and a Python bool, string or other object (see auto_static), or an int once one
        was used as a size (ints are traced first, as JAX traces them: an index needs no new trace)."""
        if key in self.static_argnums or key in self.static_argnames:
            return True
        if isinstance(key, int) and (self.rule.wrt == "positional" or self.rule.wrt == "argnums" and (
                key in self.argnums or key - n_args in self.argnums)):
            return False
        return auto_static(value, self._ints_static)

    def trace(self, *args: Any, **kwargs: Any) -> Trace:
        """The ``Trace`` for these arguments' shapes (traced and compiled on first use)."""
        args, kwargs, _ = self._split_extra(args, kwargs)
        return self.traced_at(self.signature_key(args, kwargs), args, kwargs)

    def traced_at(self, key: tuple | None, args: tuple, kwargs: dict) -> Trace:
        """The trace for arguments whose ``signature_key`` is ``key``: a cached one whose branches hold there,
        else a new one (Python ints traced again as values where one was used as a size)."""
        if key is None:
            raise TypeError(f"{self.who}.trace: the arguments are symbolic; call the function instead")
        t = self._cached(key, args, kwargs)
        if t is None:
            try:
                t = self._new_trace(args, kwargs)
            except (TracingError, TypeError) as e:  # an int used as a size: traced again, ints as their values
                if self._ints_static or not int_use(e) or not holds_int((args, kwargs)):
                    raise
                self._ints_static = True
                return self.traced_at(self.signature_key(args, kwargs), args, kwargs)
            branches = self._traces.setdefault(key, [])
            if branches:
                self._retraced("Python if / while on traced values took another way (sg.cond, sg.where or "
                               "sg.while_loop(..., max_steps=) trace every way at once)")
            branches.insert(0, t)
            del branches[limits.MAX_BRANCHES:]
            if len(self._traces) > limits.MAX_TRACES:
                self._traces.popitem(last=False)
        self._last = t
        return t

    def _cached(self, key: tuple, args: tuple, kwargs: dict) -> Trace | None:
        """The trace of this signature whose Python branches hold at these arguments, if it is current."""
        branches = self._traces.get(key, ())
        for t in branches:
            if t.watched and t.stale():
                del self._traces[key]
                self._retraced("values it reads from globals, closures or attributes changed (pass values "
                               "that change as arguments, data, to trace once)")
                return None
            if not t.guards or t.guarded(args, kwargs):
                return t
        return None

    def _rolled_sparse(self, key: tuple, args: tuple, kwargs: dict) -> Any:
        """A sparse Jacobian or Hessian of arrays of ``limits.ROLLED_MIN`` elements or more, rolled
        (trace/sparse.py's RolledSparse), made once per signature; None where the function has no rolled
        form (the element path's, as before)."""
        if not isinstance(self.argnums_spec, int) or context.depth or not self._large(args, kwargs):
            return None
        if key not in self._sparse_rolled:
            from symgrad.trace.sparse import RolledSparse  # (here: SciPy's sparse matrices cost 70 ms at import)

            try:
                with tiers.building():  # (its kernels' background compiles wait for the pattern)
                    self._sparse_rolled[key] = RolledSparse(self, args, kwargs)
            except (TracingError, NotImplementedError, TypeError):
                self._sparse_rolled[key] = None
            if len(self._sparse_rolled) > limits.MAX_TRACES:
                self._sparse_rolled.popitem(last=False)
        return self._sparse_rolled[key]

    def _retraced(self, why: str) -> None:
        """One warning when tracing again keeps happening."""
        self._changes += 1
        if self._changes == limits.RETRACES_NOTE:
            warnings.warn(f"{self.who}: traced again {limits.RETRACES_NOTE} times: {why}",
                          stacklevel=user_level())

    def _new_trace(self, args: tuple, kwargs: dict) -> Trace:
        """Array arguments as rolled arrays where the transform takes them; where fn does something
        that has no rolled form, element by element (object arrays of variables), as before."""
        if self.rule.rolled and not self.sparse and (not self._fallback or self._large(args, kwargs)):
            try:
                return self._rolled(args, kwargs)
            except (TracingError, NotImplementedError, TypeError) as e:
                if not self._fallback or int_use(e) and not self._ints_static and holds_int((args, kwargs)):
                    raise
                why = f"{str(e).splitlines()[0].removeprefix(f'{self.who}: ')} ({user_line(e)})"  # (named once)
                t = traced(lambda: Trace(self, args, kwargs))
                t.fallback = why
                self._note(why, args, kwargs)
                return t
        if self.rule.rolled and not self.sparse:
            try:
                with tracing.rolling_long_loops(limits.LONG_LOOP):
                    return traced(lambda: Trace(self, args, kwargs))
            except tracing.LongLoop as e:  # rolled, where it can be: one loop, not the step's nodes per step
                with contextlib.suppress(TracingError, NotImplementedError, TypeError):
                    t = self._rolled(args, kwargs)
                    t.rolled_for = str(e)
                    return t
        return traced(lambda: Trace(self, args, kwargs))

    def _rolled(self, args: tuple, kwargs: dict) -> Trace:
        """The rolled trace, or TracingError where fn caught one of its refusals in an ``except`` of its own
        (around a construct with no rolled form): that branch's value is not what NumPy computes."""
        with tracing.refusals() as seen:
            t = traced(lambda: Trace(self, args, kwargs, indexed=True))
        found = caught(seen)
        if found is not None:
            e, where = found
            raise TracingError(f"{self.who}: {str(e).splitlines()[0]}, caught by an except of fn's own at {where} "
                               "(its branch would run where NumPy's code does not)") from e
        return t

    def _note(self, why: str, args: tuple, kwargs: dict) -> None:
        """One warning (per function) where a trace goes element by element for want of a rolled form."""
        if self._noted:
            return
        self._noted = True
        n = sum(np.size(leaf) for leaf in pytree.flatten((args, kwargs))[0] if not isinstance(leaf, str))
        warnings.warn(f"{self.who}: {why}: tracing its {n} array elements one by one instead (slow at large "
                      "sizes; .explain() says which path each trace took)", stacklevel=user_level())

    def explain(self) -> str:
        """How each traced signature runs: rolled (loops over whole arrays) or element by element,
        and why (the construct without a rolled form, and the line), its size, the compiled program.

        >>> import numpy as np, symgrad as sg
        >>> f = sg.grad(lambda x: np.sum(x ** 2), backend="vm")
        >>> _ = f(np.ones(100))
        >>> print(f.explain())
        sg.grad(<lambda>)
          x: (100,) -> rolled (whole arrays: loops), 6 nodes, loops on vm
        """
        sparse = [f"  {s.explain()}" for s in self._sparse_rolled.values() if s is not None]
        if not self._traces and not sparse:
            return f"{self.who}: not traced yet (call it first)"
        return "\n".join([self.who, *(t.explain() for ts in self._traces.values() for t in ts), *sparse])

    def _large(self, args: tuple, kwargs: dict) -> bool:
        """Whether a traced argument holds an array of ``limits.ROLLED_MIN`` elements or more (then all of
        them trace as rolled arrays: a small one meets a large one in ``X @ w``), or integers
        (labels, an index: only rolled arrays gather through traced integers)."""
        traced = [a for k, a in (*enumerate(args), *kwargs.items())
                  if k not in self.static_argnums and k not in self.static_argnames]
        leaves = pytree.flatten(traced)[0]
        return any(np.size(leaf) >= limits.ROLLED_MIN or ndarrays.holds_integers(leaf) for leaf in leaves)

    def _split_extra(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, Any]:
        """fn's arguments and the vector an hvp takes besides (last, or v=)."""
        if self.rule.extra != "v":
            return args, kwargs, None
        if "v" in kwargs:
            return args, {k: v for k, v in kwargs.items() if k != "v"}, kwargs["v"]
        if not args:
            raise TypeError("sg.hvp: call it as hv(*args, v) with the vector v last")
        return args[:-1], kwargs, args[-1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.rule.extra == "v":
            return self.call(*self._split_extra(args, kwargs))
        key = self.signature_key(args, kwargs)
        sparse = self._rolled_sparse(key, args, kwargs) if self.sparse and key is not None else None
        if sparse is not None:
            self._last_sparse = sparse
            return sparse(args, kwargs)
        t = None if key is None or context.depth else self._cached(key, args, kwargs)
        if t is None:
            if key is not None and chunks.holds_chunks(args, kwargs):
                return chunks.run("lazy_map", self, *args, **kwargs)
            return self.call(args, kwargs)
        self._last = t
        return t.run(args, kwargs)

    def call(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """Call with fn's arguments and the transform's vector (hvp's v, jvp's tangents, a vjp's cotangent)."""
        key = self.signature_key(args, kwargs)
        if key is None or context.depth or extra is not None and has_symbolic(extra):
            if self.transform == "jit":  # inside another trace jit is the function itself
                if context.depth:
                    context.called.append(self.fn)  # (the outer trace watches what it captures)
                return self.fn(*args, **kwargs)
            rolled_args = any(map(is_rolled, pytree.flatten((args, kwargs, extra))[0]))  # (vmap of a vjp)
            try:
                return Trace(self, args, kwargs, fresh=True, indexed=rolled_args).symbolic(args, kwargs, extra)
            except (TracingError, TypeError):
                if self._ints_static or not holds_int((args, kwargs)):
                    raise
                self._ints_static = True  # (an int used as a size: traced again, ints as their values)
                return self.call(args, kwargs, extra)
        return self.traced_at(key, args, kwargs).run(args, kwargs, extra)

    def call_many(self, args: tuple, kwargs: dict, extras: list) -> list:
        """``call(args, kwargs, extra)`` for each of ``extras`` (a jvp's tangents, a vjp's cotangents,
        an hvp's vectors) at the same arguments: one batched kernel call where the arguments are
        numbers (a compressed sparse Jacobian's products), else a call each.

        >>> import numpy as np, symgrad as sg
        >>> from symgrad.trace.function import Function
        >>> jvp = Function(np.sin, "jvp")
        >>> np.vstack([t for _, t in jvp.call_many((np.zeros(2),), {}, [(np.ones(2),), (np.array([0.0, 2.0]),)])])
        array([[1., 1.],
               [0., 2.]])
        """
        key = self.signature_key(args, kwargs)
        if key is None or context.depth or any(has_symbolic(e) for e in extras) or self.transform == "jit":
            return [self.call(args, kwargs, extra) for extra in extras]
        return self.traced_at(key, args, kwargs).run_many(args, kwargs, extras)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """The sum over data rows: every traced argument not differentiated (not in ``argnums``)
        carries a leading axis of N rows, one sample each, and ``fn`` is written for one row.

        It is ``sg.value_and_grad(lambda w, *data: np.sum(sg.vmap(fn, in_axes)(w, *data)))``: the
        rows are one more index of the rolled expressions (matrix products over the batch where
        fn multiplies a row by a matrix). Where fn has no rolled form, fn is traced for one row
        and the compiled kernel adds up values and gradients over the rows in parallel.

        >>> import numpy as np, symgrad as sg
        >>> vg = sg.value_and_grad(lambda w, t, y: (w[0] * t + w[1] - y) ** 2, backend="vm")
        >>> vg.sum(np.array([2.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 4.0]))
        (1.0, array([-2., -2.]))
        """
        if not self.rule.summable:
            raise TypeError(f"sum: for sg.grad and sg.value_and_grad, not sg.{self.transform}")
        argnums = {n + len(args) if n < 0 else n for n in self.argnums}
        data = [i for i in range(len(args)) if i not in argnums and i not in self.static_argnums]
        data += [k for k in kwargs if k not in self.static_argnames]
        pick = lambda key: kwargs[key] if isinstance(key, str) else args[key]
        counts = {key: np.shape(pick(key))[:1] for key in data}
        if not data or any(c != counts[data[0]] for c in counts.values()) or counts[data[0]] == ():
            unknown = any(np.isnan(c).any() for c in counts.values())  # (a Dask array filtered by a mask)
            raise ValueError("sum: the data arguments (those not in argnums) need a leading axis of the same "
                             f"number of rows, got shapes {[np.shape(pick(k)) for k in data]}"
                             + (" (unknown row counts: call .compute_chunk_sizes() on them)" if unknown else ""))
        if chunks.holds_chunks(args, kwargs):  # rows in chunks: one task each, on Dask's workers
            return chunks.run("sum_now", self, *args, **kwargs)
        if not self.has_aux:
            try:
                return self._summed(len(args), argnums)(*args, **kwargs)
            except (TracingError, NotImplementedError, TypeError):
                pass  # no rolled form: one row traced, the kernel loops over the rows
        n = counts[data[0]][0]
        left, parts = np.arange(n), []
        while len(left):  # rows by the way Python if / while on their values went: one trace each
            row = lambda key, value, first=left[0]: np.asarray(value)[first] if key in counts else value
            t = self.trace(*(row(i, a) for i, a in enumerate(args)), **{k: row(k, v) for k, v in kwargs.items()})
            rows = [np.reshape(pick(key), (n, -1))[left] for key in t.data_keys]
            if t.constant_values is not None:  # the NumPy constants fn captured: the same in every row
                rows.append(np.broadcast_to(t.constant_values, (len(left), t.constant_values.size)))
            P, x = np.hstack(rows).astype(float, copy=False), t.packed(t.wrt_keys, args, kwargs)
            same = t.holds(t.conditions(x, P)) if t.guards else np.ones(len(left), bool)
            if not same[0]:
                raise RuntimeError(f"{self.who}.sum: a row's traced branch does not hold at that row")
            parts.append(t.compiled.sum(x, P[same]))
            left = left[~same]
        return t.assemble(sum(parts[1:], parts[0]))

    def _summed(self, n_args: int, argnums: set) -> Function:
        """The same transform of ``np.sum(vmap(fn)(...))`` over the data rows, traced rolled only."""
        key = (n_args, tuple(sorted(argnums)))
        if self._sums.get(key) is None:
            in_axes = tuple(None if i in argnums or i in self.static_argnums else 0 for i in range(n_args))
            static = self.static_argnames

            def total(*a: Any, **k: Any) -> Any:
                fixed = {name: v for name, v in k.items() if name in static}
                row = functools.partial(self.fn, **fixed) if fixed else self.fn
                mapped = {name: v for name, v in k.items() if name not in static}
                return np.sum(Batched(row, in_axes)(*a, **mapped))

            f = Function(total, self.transform, self.argnums_spec, tuple(self.static_argnums), tuple(static),
                         backend=self.backend)
            f._fallback = False
            self._sums[key] = f
        return self._sums[key]

    def ready(self, backend: str | None = None) -> Function:
        """Wait until every compiled signature (sparse Jacobians and Hessians included) runs on its final
        kernels, or on ``backend``'s (``Compiled.ready``: a new one starts on the loop VM or its C kernels
        while the others compile in the background), and return the function.

        >>> import numpy as np, symgrad as sg
        >>> h = sg.hessian(lambda x: np.sum(x[1:] * x[:-1] ** 2), sparse=True)
        >>> h(np.ones(300)).shape == h.ready()(np.ones(300)).shape
        True
        """
        for trace in [t for ts in self._traces.values() for t in ts]:
            if "compiled" in vars(trace):  # (compiled already: not compiled here)
                trace.compiled.ready(backend)
        for sparse in self._sparse_rolled.values():
            if sparse is not None:
                sparse.ready(backend)
        return self

    def _latest(self) -> Trace:
        if self._last is None:
            if any(s is not None for s in self._sparse_rolled.values()):
                raise RuntimeError(f"{self.__name__} computes a rolled sparse matrix, which has no single trace: "
                                   ".explain() says how it runs, .ready() waits for its compiled kernels")
            raise RuntimeError(f"{self.__name__} has not been traced yet: call it once, or use "
                               ".trace(*args) to trace it for given argument shapes")
        return self._last

    @property
    def exprs(self) -> Any:
        """What the function returned on symbolic arguments (latest trace)."""
        return self._latest().exprs

    @property
    def derivatives(self) -> Any:
        """The derivative expressions compiled (latest trace): gradient, Jacobian, Hessian, H·Δ."""
        return self._latest().derivatives

    @property
    def source(self) -> str:
        """The generated code of the compiled kernel (latest trace)."""
        return self._latest().source

    @property
    def compiled(self) -> compiled.Compiled:
        """The ``Compiled`` behind the latest trace."""
        return self._latest().compiled

    def formulas(self) -> str:
        """The traced function and its derivatives as formulas (latest trace); of a sparse Jacobian or
        Hessian of large arrays, its entries by band (``bands``)."""
        if self._last_sparse is not None:
            return format_exprs(self.bands())
        return self._latest().formulas()

    def bands(self) -> dict[str, Expr]:
        """The latest sparse Jacobian or Hessian of large arrays (``sparse=True``) as one formula per
        band: entry ``(i, i + c)`` over the row index ``i`` for each offset ``c`` (and ``(i, a(i))`` for
        another address ``a``), with the conditions on ``i`` under which it is there. For
        ``sg.format`` or ``sg.latex``.

        >>> import numpy as np, symgrad as sg
        >>> h = sg.hessian(lambda x: np.sum(x[1:] * x[:-1] ** 2), sparse=True)
        >>> _ = h(np.ones(100))
        >>> print(sg.format(h.bands()))
        H[j, j - 1] = where(j - 1 >= 0, 2*x[j - 1], 0)
        H[j, j] = where(j <= 98, 2*x[j + 1], 0)
        H[j, j + 1] = where(j <= 98, 2*x[j], 0)
        """
        if self._last_sparse is None:
            raise RuntimeError(f"{self.who}.bands: call it first, sparse=True on arrays of {limits.ROLLED_MIN} "
                               "elements or more (a rolled sparse Jacobian or Hessian)")
        return self._last_sparse.bands()

    def __reduce__(self) -> tuple:  # pickles by reference to fn; traces again where it lands
        return (Function, (self.fn, self.transform, self.argnums_spec, tuple(self.static_argnums),
                           tuple(self.static_argnames), self.sparse, self.backend, self.has_aux))

    def __repr__(self) -> str:
        return f"<{self.who}, {len(self._traces)} traced signature(s)>"


WRAPPERS.append(Function)  # (its fn is the user's: a trace watches what that captures)
