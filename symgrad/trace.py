"""Function-level API: trace a Python function with symbolic arguments, differentiate, compile.

``sg.jit(fn)``, ``sg.grad(fn)``, ``sg.value_and_grad(fn)``, ``sg.jacobian(fn)``,
``sg.hessian(fn)`` and ``sg.hvp(fn)`` return a :class:`Function`. Its first call with
given argument shapes calls ``fn`` once on symbolic arguments (an expression for each
float, a :class:`~symgrad.expr.arrays.SymArray` of variables for each array),
differentiates what ``fn`` returns and compiles the result; later calls with those shapes
go straight to the compiled kernel. Conventions follow JAX: ``argnums`` (an int or a
tuple) picks the differentiated arguments and gradients come shaped like them. The other
arguments are data: traced as parameters, so new values need no recompile. Arguments
named in ``static_argnums`` / ``static_argnames`` are passed to ``fn`` as they are
(ints, flags, sizes) and a new value traces again.

Given expressions instead of a function, the same names are the symbolic operations:
``sg.grad(f, wrt)`` is the gradient formula, ``sg.hessian(f, wrt, sparse=True)`` the sparse
Hessian's formulas.
"""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from typing import Any

import numpy as np

from symgrad.compile import function as compiled
from symgrad.expr import diff as symbolic
from symgrad.expr.arrays import SymArray
from symgrad.expr.build import Var
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.printing import format as format_exprs
from symgrad.expr.sparsity import SparseExprs, sparse_hessian, sparse_jacobian
from symgrad.expr.traverse import as_expr_list

MAX_TRACES = 32  # argument signatures remembered per function (oldest dropped first)
_SCALAR_OUT = ("grad", "value_and_grad", "hessian", "hvp")
_MATRICES = {  # (transform, sparse) -> the derivative matrix of the outputs
    ("jacobian", False): symbolic.jacobian,
    ("jacobian", True): sparse_jacobian,
    ("hessian", False): lambda outputs, inputs: symbolic.hessian(outputs[0], inputs),
    ("hessian", True): lambda outputs, inputs: sparse_hessian(outputs[0], inputs),
}


def _symbolic(name: str, shape: tuple) -> Any:
    """A variable for a float argument, an array of variables named ``name[i, j]`` for an array."""
    if shape == ():
        return Var(name)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = Var(f"{name}[{', '.join(map(str, index))}]")
    return out.view(SymArray)


def _leaves(value: Any, who: str) -> list[tuple[Any, tuple]]:
    """What ``fn`` returned as (value, shape) pieces: a scalar, an array, or each item of a tuple."""
    out = []
    for item in value if isinstance(value, tuple) else (value,):
        arr = None if isinstance(item, Expr) else np.asarray(item, dtype=object)
        if arr is not None and not all(isinstance(v, Expr | float | int | np.number) for v in arr.ravel()):
            raise TypeError(f"{who}: the function returned {type(item).__name__}; return expressions, "
                            "numbers, arrays of them, or a tuple of those")
        out.append((item, () if arr is None else arr.shape))
    return out


def _cuts(shapes: list[tuple]) -> list[tuple[int, int, tuple]]:
    """(start, stop, shape) of each shape's run in a flat vector holding them in order."""
    bounds = np.cumsum([0] + [int(np.prod(s, dtype=np.int64)) for s in shapes]).tolist()
    return list(zip(bounds[:-1], bounds[1:], shapes))


def _cut(flat: np.ndarray, cuts: list, axis_shape: tuple = ()) -> list:
    """The last axis of ``flat`` cut into those shapes (floats for scalar shapes)."""
    parts = []
    for lo, hi, shape in cuts:
        piece = flat[..., lo:hi].reshape(axis_shape + shape)
        parts.append(float(piece) if piece.ndim == 0 else piece)
    return parts


class Trace:
    """One traced signature of a :class:`Function`: its symbolic inputs, formulas and kernel."""

    def __init__(self, owner: Function, args: tuple, kwargs: dict) -> None:
        self.owner = owner
        names = owner._names(len(args))
        self.arguments: dict[str, Any] = {}
        self.dynamic: list[tuple[Any, tuple]] = []  # (position or keyword, shape) of traced arguments
        sym_args = [self._argument(names[i], i, a) for i, a in enumerate(args)]
        sym_kwargs = {k: self._argument(k, k, v) for k, v in kwargs.items()}
        for n in owner.argnums:
            if n >= len(args) or n in owner.static_argnums:
                raise TypeError(f"{owner.__name__}: argnums {n} is not a traced positional argument "
                                f"(called with {len(args)} positional arguments)")
        with paused_gc():
            result = owner.fn(*sym_args, **sym_kwargs)
        self.exprs = result
        shapes = dict(self.dynamic)
        wrt_keys = list(owner.argnums) if owner.transform != "jit" else list(shapes)
        self.wrt = [(k, shapes[k]) for k in wrt_keys]
        self.data = [(k, s) for k, s in self.dynamic if k not in wrt_keys]
        self._cuts = _cuts([s for _, s in self.wrt])
        self._whole = len(self.wrt) == 1 and len(self.wrt[0][1]) == 1  # one vector: the gradient as is
        inputs = [v for k, _ in self.wrt for v in as_expr_list(self._sym(k, sym_args, sym_kwargs))]
        params = [v for k, _ in self.data for v in as_expr_list(self._sym(k, sym_args, sym_kwargs))]
        self.derivatives, self.compiled = self._build(result, inputs, params)

    def _argument(self, name: str, key: Any, value: Any) -> Any:
        if key in self.owner.static_argnums or key in self.owner.static_argnames:
            return value
        arr = np.asarray(value) if not isinstance(value, Expr) else None
        if arr is None or arr.dtype.kind not in "biuf":
            raise TypeError(f"{self.owner.__name__}: argument {name!r} is {type(value).__name__}; numbers and "
                            "arrays of numbers are traced, anything else must be static (static_argnums / "
                            "static_argnames)")
        self.dynamic.append((key, arr.shape))
        sym = _symbolic(name, arr.shape)
        self.arguments[name] = sym
        return sym

    @staticmethod
    def _sym(key: Any, args: list, kwargs: dict) -> Any:
        return kwargs[key] if isinstance(key, str) else args[key]

    def _build(self, result: Any, inputs: list[Expr], params: list[Expr]) -> tuple[Any, compiled.Compiled]:
        owner, transform = self.owner, self.owner.transform
        who = f"sg.{transform}({owner.__name__})"
        leaves = _leaves(result, who)
        self._out_shapes = [shape for _, shape in leaves]
        self._out_cuts = _cuts(self._out_shapes)
        if transform in _SCALAR_OUT and (len(leaves) != 1 or leaves[0][1] != ()):
            shapes = ", ".join(str(s) for _, s in leaves)
            raise TypeError(f"{who}: the function must return one scalar, got shape {shapes}; "
                            "use sg.jacobian for vector outputs")
        outputs = [e for v, _ in leaves for e in as_expr_list(v)]
        backend = owner.backend
        if transform == "jit":
            single = leaves[0][0] if len(leaves) == 1 else outputs
            return None, compiled.compile(single, inputs, params, backend)
        if transform in ("grad", "value_and_grad"):
            g = symbolic.grad(outputs[0], inputs)
            return g, compiled.value_and_grad(outputs[0], inputs, params, backend, gradient=g)
        if transform == "hvp":
            tangents = [Var(f"Δ{v.payload}") for v in inputs]
            hv = symbolic.jvp(symbolic.grad(outputs[0], inputs), inputs, tangents)
            return hv, compiled.compile(hv, inputs, [*params, *tangents], backend)
        if transform == "jacobian" and len(leaves) != 1:
            raise TypeError(f"{who}: the function must return one scalar or array, got {len(leaves)} values")
        exprs = _MATRICES[transform, owner.sparse](outputs, inputs)
        return exprs, compiled.compile(exprs, inputs, params, backend)

    def formulas(self) -> str:
        """The traced outputs and their derivatives, every shared subexpression named once."""
        labels: dict[str, Expr] = {}
        leaves = _leaves(self.exprs, "formulas")
        for i, (value, shape) in enumerate(leaves):
            name = f"f{i}" if len(leaves) > 1 else "f"
            for index, e in zip(np.ndindex(*shape), as_expr_list(value)):
                labels[f"{name}[{', '.join(map(str, index))}]" if shape else name] = e
        d = self.derivatives
        if d is not None:
            exprs = d.exprs if isinstance(d, SparseExprs) else as_expr_list(d)
            labels.update(zip(self._derivative_labels(len(exprs)), exprs))
        return format_exprs(labels)

    def _derivative_labels(self, n: int) -> list[str]:
        inputs = [str(v) for k, _ in self.wrt for v in as_expr_list(self.arguments[self._name(k)])]
        t = self.owner.transform
        if t in ("grad", "value_and_grad"):
            return [f"df/d{v}" for v in inputs]
        if t == "hvp":
            return [f"(H·Δ)[{v}]" for v in inputs]
        d = self.derivatives
        if isinstance(d, SparseExprs):
            rows = np.repeat(np.arange(len(d.indptr) - 1), np.diff(d.indptr))
            pairs = zip(rows, d.indices)
        else:
            pairs = (divmod(k, len(inputs)) for k in range(n))
        if t == "hessian":
            return [f"d2f/d{inputs[i]}d{inputs[j]}" for i, j in pairs]
        return [f"df[{i}]/d{inputs[j]}" for i, j in pairs]

    def _name(self, key: Any) -> str:
        return key if isinstance(key, str) else self.owner._names(key + 1)[key]

    @property
    def source(self) -> str:
        """The generated code of the compiled kernel (or the VM's instruction listing)."""
        return self.compiled.source

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        x = self._pack(self.wrt, args, kwargs)
        p = self._pack(self.data, args, kwargs)
        if self.owner.transform == "hvp":
            p = np.concatenate([p, np.ravel(kwargs["v"] if "v" in kwargs else args[-1])])
        out = self.compiled(x, p)
        return self._unpack(out)

    @staticmethod
    def _pack(slots: list, args: tuple, kwargs: dict) -> np.ndarray:
        if len(slots) == 1:
            key = slots[0][0]
            return np.ravel(kwargs[key] if isinstance(key, str) else args[key])
        if not slots:
            return compiled._EMPTY
        return np.concatenate([np.ravel(kwargs[k] if isinstance(k, str) else args[k]) for k, _ in slots])

    def _split(self, flat: np.ndarray, axis_shape: tuple = ()) -> list:
        """Cut the last axis of ``flat`` into the differentiated arguments' shapes."""
        return [flat] if self._whole and not axis_shape else _cut(flat, self._cuts, axis_shape)

    def _one(self, parts: list) -> Any:
        return parts[0] if isinstance(self.owner.argnums_spec, int) else tuple(parts)

    def _unpack(self, out: Any) -> Any:
        t = self.owner.transform
        if t == "jit":
            return self._outputs(out)
        if t == "value_and_grad":
            return out[0], self._one(self._split(out[1]))
        if t == "grad":
            return self._one(self._split(out[1]))
        if t == "hvp":
            return self._one(self._split(out))
        if self.owner.sparse:
            return out
        if t == "jacobian":
            out_shape = self._out_shapes[0]
            return self._one(self._split(out.reshape(out_shape + (-1,)) if out.ndim else out, out_shape))
        blocks = [self._split(row_block, shape) for row_block, (_, shape) in
                  zip(self._split_rows(out), self.wrt)]
        return blocks[0][0] if isinstance(self.owner.argnums_spec, int) else tuple(map(tuple, blocks))

    def _split_rows(self, H: np.ndarray) -> list[np.ndarray]:
        return [H[lo:hi] for lo, hi, _ in self._cuts]

    def _outputs(self, out: Any) -> Any:
        return tuple(_cut(out, self._out_cuts)) if isinstance(self.exprs, tuple) else out


class Function:
    """A Python function traced, differentiated and compiled per argument shapes.

    Made by ``sg.jit``, ``sg.grad``, ``sg.value_and_grad``, ``sg.jacobian``, ``sg.hessian``
    and ``sg.hvp``. After a call, ``.exprs`` is what ``fn`` returned on symbolic arguments,
    ``.formulas()`` prints it with its derivatives, ``.source`` is the generated code;
    ``.trace(*args)`` gives the :class:`Trace` for other argument shapes.

    >>> import numpy as np, symgrad as sg
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
    """

    def __init__(self, fn: Any, transform: str, argnums: Any = 0, static_argnums: Any = (),
                 static_argnames: Any = (), sparse: bool = False, backend: str = "auto") -> None:
        if not callable(fn):
            raise TypeError(f"sg.{transform}: expected a function, got {type(fn).__name__}")
        if backend not in compiled.BACKENDS:
            raise ValueError(f"backend must be one of {compiled.BACKENDS}, got {backend!r}")
        self.fn, self.transform, self.sparse, self.backend = fn, transform, bool(sparse), backend
        self.argnums_spec = argnums
        self.argnums = _int_tuple(argnums, "argnums")
        if transform == "hvp" and len(self.argnums) != 1:
            raise ValueError("sg.hvp: differentiate with respect to one argument (an int argnums)")
        if sparse and transform not in ("jacobian", "hessian"):
            raise ValueError(f"sparse=True is for sg.jacobian and sg.hessian, not sg.{transform}")
        self.static_argnums = frozenset(_int_tuple(static_argnums, "static_argnums"))
        names = (static_argnames,) if isinstance(static_argnames, str) else static_argnames
        self.static_argnames = frozenset(names)
        self._traces: OrderedDict = OrderedDict()
        self._last: Trace | None = None
        functools.update_wrapper(self, fn)

    def _names(self, n: int) -> list[str]:
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "arg")
        return names[:n] + [f"{star}{i}" for i in range(len(names[:n]), n)]

    def _key(self, args: tuple, kwargs: dict) -> tuple:
        if not kwargs and not self.static_argnums:
            return tuple(map(np.shape, args))
        key = []
        for i, a in enumerate(args):
            key.append(_static(a, i, self) if i in self.static_argnums else np.shape(a))
        for k in sorted(kwargs):
            key.append((k, _static(kwargs[k], k, self) if k in self.static_argnames else np.shape(kwargs[k])))
        return tuple(key)

    def trace(self, *args: Any, **kwargs: Any) -> Trace:
        """The :class:`Trace` for these arguments' shapes (traced and compiled on first use)."""
        args, kwargs = self._traced_arguments(args, kwargs)
        key = self._key(args, kwargs)
        t = self._traces.get(key)
        if t is None:
            t = Trace(self, args, kwargs)
            self._traces[key] = t
            if len(self._traces) > MAX_TRACES:
                self._traces.popitem(last=False)
        self._last = t
        return t

    def _traced_arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The arguments ``fn`` takes: an hvp's call has the vector ``v`` besides (last, or v=)."""
        if self.transform != "hvp":
            return args, kwargs
        if "v" in kwargs:
            return args, {k: v for k, v in kwargs.items() if k != "v"}
        if not args:
            raise TypeError("sg.hvp: call it as hv(*args, v) with the vector v last")
        return args[:-1], kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t = self._traces.get(self._key(*self._traced_arguments(args, kwargs)) if self.transform == "hvp"
                             else self._key(args, kwargs))
        if t is None:
            t = self.trace(*args, **kwargs)
        self._last = t
        return t(args, kwargs)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """The sum over data rows: every traced argument not differentiated (not in ``argnums``)
        carries a leading axis of N rows, one sample each; ``fn`` is traced for one row and
        the compiled kernel adds up values and gradients over the rows in parallel.

        >>> import numpy as np, symgrad as sg
        >>> vg = sg.value_and_grad(lambda w, t, y: (w[0] * t + w[1] - y) ** 2, backend="vm")
        >>> vg.sum(np.array([2.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 4.0]))
        (1.0, array([-2., -2.]))
        """
        if self.transform not in ("grad", "value_and_grad"):
            raise TypeError(f"sum: for sg.grad and sg.value_and_grad, not sg.{self.transform}")
        data = [i for i in range(len(args)) if i not in self.argnums and i not in self.static_argnums]
        data += [k for k in kwargs if k not in self.static_argnames]
        pick = lambda key: kwargs[key] if isinstance(key, str) else args[key]
        counts = {key: np.shape(pick(key))[:1] for key in data}
        if not data or any(c != counts[data[0]] for c in counts.values()) or counts[data[0]] == ():
            raise ValueError("sum: the data arguments (those not in argnums) need a leading axis of the same "
                             f"number of rows, got shapes {[np.shape(pick(k)) for k in data]}")
        one_row = lambda key, value: np.asarray(value)[0] if key in counts else value
        t = self.trace(*(one_row(i, a) for i, a in enumerate(args)),
                       **{k: one_row(k, v) for k, v in kwargs.items()})
        n = counts[data[0]][0]
        P = np.hstack([np.reshape(pick(key), (n, -1)) for key, _ in t.data]).astype(float, copy=False)
        value, grads = t.compiled.sum(Trace._pack(t.wrt, args, kwargs), P)
        parts = t._one(t._split(grads))
        return (value, parts) if self.transform == "value_and_grad" else parts

    def _latest(self) -> Trace:
        if self._last is None:
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
        """The :class:`~symgrad.Compiled` behind the latest trace."""
        return self._latest().compiled

    def formulas(self) -> str:
        """The traced function and its derivatives as formulas (latest trace)."""
        return self._latest().formulas()

    def __reduce__(self) -> tuple:  # pickles by reference to fn; traces again where it lands
        return (Function, (self.fn, self.transform, self.argnums_spec, tuple(self.static_argnums),
                           tuple(self.static_argnames), self.sparse, self.backend))

    def __repr__(self) -> str:
        return f"<sg.{self.transform}({self.__name__}), {len(self._traces)} traced signature(s)>"


def _int_tuple(spec: Any, what: str) -> tuple[int, ...]:
    items = (spec,) if isinstance(spec, int | np.integer) else spec
    try:
        out = tuple(int(i) for i in items)
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of ints, got {spec!r}") from None
    if any(i < 0 for i in out):
        raise ValueError(f"{what} must be non-negative, got {spec!r}")
    return out


def _static(value: Any, where: Any, owner: Function) -> Any:
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{owner.__name__}: static argument {where!r} must be hashable (it keys the trace "
                        f"cache), got {type(value).__name__}") from None
    return ("static", value)


# ---- the public names: a Python function is traced, expressions are differentiated as they are ----

def _is_function(f: Any) -> bool:
    return callable(f) and not isinstance(f, Expr | SymArray)


def _argnums(positional: Any, keyword: Any) -> Any:
    return keyword if keyword is not None else 0 if positional is None else positional


def jit(fn: Any = None, *, static_argnums: Any = (), static_argnames: Any = (), backend: str = "auto") -> Any:
    """Compile a Python function of floats and arrays (a decorator, with or without options).

    >>> import numpy as np, symgrad as sg
    >>> @sg.jit
    ... def f(x, y):
    ...     return np.tanh(x) * y
    >>> f(np.array([0.0, 1.0]), 2.0)
    array([0.        , 1.52318831])
    """
    make = lambda f: Function(f, "jit", (), static_argnums, static_argnames, False, backend)
    return make if fn is None else make(fn)


def grad(f: Any, wrt: Any = None, *, argnums: Any = None, **options: Any) -> Any:
    """The gradient: of a Python function (a compiled function, JAX-style ``argnums``), or of an expression.

    >>> import symgrad as sg
    >>> sg.grad(lambda x, y: x * y + sg.sin(x), argnums=(0, 1))(2.0, 3.0)
    (2.5838531634528574, 2.0)
    >>> x, y = sg.symbols("x y")
    >>> sg.grad(x * y + sg.sin(x), [x, y])
    [y + cos(x), x]
    """
    if _is_function(f):
        return Function(f, "grad", _argnums(wrt, argnums), **options)
    return symbolic.grad(f, wrt)


def value_and_grad(f: Any, wrt: Any = None, params: Any = (), backend: str = "auto", *, argnums: Any = None,
                   **options: Any) -> Any:
    """A compiled function returning ``(value, gradient)``: of a Python function, or of an expression.

    For an expression, ``wrt`` are the variables (the vector ``x``) and ``params`` further
    variables passed as ``p``: see :func:`symgrad.compile.function.value_and_grad`.

    >>> import numpy as np, symgrad as sg
    >>> vg = sg.value_and_grad(lambda x: np.sum(x ** 2))
    >>> vg(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))
    """
    if _is_function(f):
        return Function(f, "value_and_grad", _argnums(wrt, argnums), backend=backend, **options)
    return compiled.value_and_grad(f, wrt, params, backend)


def jacobian(f: Any, wrt: Any = None, *, sparse: bool = False, argnums: Any = None, **options: Any) -> Any:
    """The Jacobian of a Python function (compiled) or of expressions; ``sparse=True``: CSR, nonzeros only.

    >>> import numpy as np, symgrad as sg
    >>> sg.jacobian(lambda x: x[1:] - x[:-1] ** 2)(np.array([1.0, 2.0, 3.0]))
    array([[-2.,  1.,  0.],
           [ 0., -4.,  1.]])
    """
    if _is_function(f):
        return Function(f, "jacobian", _argnums(wrt, argnums), sparse=sparse, **options)
    return sparse_jacobian(f, wrt) if sparse else symbolic.jacobian(f, wrt)


def hessian(f: Any, wrt: Any = None, *, sparse: bool = False, argnums: Any = None, **options: Any) -> Any:
    """The Hessian of a Python function (compiled) or of an expression; ``sparse=True``: CSR, nonzeros only.

    With ``sparse=True`` only the structurally nonzero entries are differentiated and
    compiled; no n-by-n array is ever made.

    >>> import numpy as np, symgrad as sg
    >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
    >>> h(np.array([1.0, 2.0, 3.0])).toarray()
    array([[0., 4., 0.],
           [4., 2., 6.],
           [0., 6., 4.]])
    """
    if _is_function(f):
        return Function(f, "hessian", _argnums(wrt, argnums), sparse=sparse, **options)
    return sparse_hessian(f, wrt) if sparse else symbolic.hessian(f, wrt)


def hvp(f: Any, wrt: Any = None, params: Any = (), backend: str = "auto", *, argnums: Any = None,
        **options: Any) -> Any:
    """Hessian-vector products ``H(x) @ v`` without forming ``H`` (forward over reverse mode).

    For a Python function: ``hvp(fn)(*args, v)``. For an expression: a compiled ``hv(x, p)``
    where ``p`` holds the values of ``params`` followed by ``v``.

    >>> import numpy as np, symgrad as sg
    >>> hv = sg.hvp(lambda x: np.sum(x ** 3))
    >>> hv(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    >>> x, y = sg.symbols("x y")
    >>> sg.hvp(x * x * y, [x, y])([1.0, 2.0], [1.0, 0.0])
    array([4., 2.])
    """
    if _is_function(f):
        return Function(f, "hvp", _argnums(wrt, argnums), backend=backend, **options)
    inputs = as_expr_list(wrt)
    tangents = [Var(f"Δ{v.payload}") for v in inputs]
    hv = symbolic.jvp(symbolic.grad(f, inputs), inputs, tangents)
    return compiled.compile(np.array(hv, dtype=object), inputs, [*as_expr_list(params), *tangents], backend)
