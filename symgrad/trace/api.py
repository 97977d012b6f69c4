"""The public transforms: a Python function is traced, expressions are differentiated as they are."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, TypeVar, overload

import numpy as np

from symgrad.compile import function as compiled
from symgrad.expr import diff as symbolic
from symgrad.expr.functions import SymArray
from symgrad.expr.node import Expr
from symgrad.expr.sparsity import SparseExprs, sparse_hessian, sparse_jacobian
from symgrad.expr.tracing import context
from symgrad.expr.traverse import as_expr_list, object_array
from symgrad.trace.batched import Batched
from symgrad.trace.function import Function
from symgrad.trace.record import Trace
from symgrad.trace.signature import tangent_of
from symgrad.util import pytree

# ---- the public names: a Python function is traced, expressions are differentiated as they are ----

# The types of the options, as an IDE shows them (every option is a named parameter: none hides in **kwargs).
ArgNums: TypeAlias = int | Sequence[int]  # argument positions: one, or several (derivatives then a tuple)
Names: TypeAlias = str | Iterable[str]  # keyword-argument names
Backend: TypeAlias = Literal["auto", "numba", "vm", "python", "c"]  # symgrad.compile.function.BACKENDS
Wrt: TypeAlias = Expr | Sequence[Expr] | np.ndarray  # variables (sg.symbols, sg.vector) or arrays (sg.array)
Formulas: TypeAlias = Expr | Sequence[Expr] | np.ndarray  # expressions: one, a list, an object array
Derivatives: TypeAlias = Expr | list[Expr] | np.ndarray  # in wrt's structure (see symgrad.expr.diff)
F = TypeVar("F", bound=Callable[..., Any])


def _is_function(f: Any) -> bool:
    return callable(f) and not isinstance(f, Expr | SymArray)


def _argnums(positional: Any, keyword: Any) -> Any:
    return keyword if keyword is not None else 0 if positional is None else positional


def _named_keywords(transform: F) -> F:
    """``transform`` raising, for an unknown keyword, a TypeError that names it and lists the accepted ones
    (Python's own lists none); nothing else changes, signature and docstring included.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: x, has_axu=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: sg.grad() got an unexpected keyword argument 'has_axu' (did you mean 'has_aux'?); accepted: f, ...
    """
    accepted = list(inspect.signature(transform).parameters)

    @functools.wraps(transform)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return transform(*args, **kwargs)
        except TypeError:
            unknown = [k for k in kwargs if k not in accepted]
            if not unknown:
                raise
            close = difflib.get_close_matches(unknown[0], accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"sg.{transform.__name__}() got an unexpected keyword argument {unknown[0]!r}{hint}; "
                            f"accepted: {', '.join(accepted)}") from None

    return checked  # type: ignore[return-value]


_DEFAULTS = {"argnums": None, "has_aux": False, "static_argnums": (), "static_argnames": (), "sparse": False,
             "backend": "auto", "params": ()}


def _unused(name: str, form: str, **given: Any) -> None:
    """A TypeError naming the options given (not left at their defaults) that only the other form of sg.<name>
    takes: ``form`` is what they apply to. Ignoring them would hide a mistake.

    >>> _unused("grad", "a Python function", has_aux=True, argnums=None)
    Traceback (most recent call last):
    TypeError: sg.grad(): has_aux applies to a Python function, not to expressions
    """
    set_ = [k for k, v in given.items() if not (v is _DEFAULTS[k] or (
        type(v) is type(_DEFAULTS[k]) and v == _DEFAULTS[k]))]
    if set_:
        other = "expressions" if form == "a Python function" else "a Python function"
        raise TypeError(f"sg.{name}(): {', '.join(set_)} applies to {form}, not to {other}")


@overload
def jit(fn: None = None, *, static_argnums: ArgNums = (), static_argnames: Names = (),
        backend: Backend = "auto") -> Callable[[Callable[..., Any]], Function]: ...
@overload
def jit(fn: Callable[..., Any], *, static_argnums: ArgNums = (), static_argnames: Names = (),
        backend: Backend = "auto") -> Function: ...
@_named_keywords
def jit(fn: Callable[..., Any] | None = None, *, static_argnums: ArgNums = (), static_argnames: Names = (),
        backend: Backend = "auto") -> Function | Callable[[Callable[..., Any]], Function]:
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


class Printed(str):
    """Text that shows as itself at the prompt (make_jaxpr's formulas)."""

    def __repr__(self) -> str:
        return str(self)


@_named_keywords
def make_jaxpr(fn: Callable[..., Any], static_argnums: ArgNums = ()) -> Callable[..., Printed]:
    """``jax.make_jaxpr``: a function of example arguments giving what ``fn`` traces to on them:
    symgrad's formulas (a flat let-form: what prints more than once, and is not short, named once),
    not compiled.

    >>> import numpy as np, symgrad as sg
    >>> sg.make_jaxpr(lambda x, y: np.sin(x * y + 0.5) * y + np.sin(x * y + 0.5))(1.0, 2.0)
    t1 = sin(x*y + 0.5)
    f = y*t1 + t1
    """
    f = Function(fn, "jit", (), static_argnums)
    return lambda *args, **kwargs: Printed(f.trace(*args, **kwargs).formulas())


@overload
def grad(f: Callable[..., Any], wrt: ArgNums | None = None, *, argnums: ArgNums | None = None,
         has_aux: bool = False, static_argnums: ArgNums = (), static_argnames: Names = (),
         backend: Backend = "auto") -> Function: ...
@overload
def grad(f: Expr | float, wrt: Wrt, *, argnums: None = None, has_aux: bool = False, static_argnums: ArgNums = (),
         static_argnames: Names = (), backend: Backend = "auto") -> Derivatives: ...
@_named_keywords
def grad(f: Callable[..., Any] | Expr | float, wrt: ArgNums | Wrt | None = None, *, argnums: ArgNums | None = None,
         has_aux: bool = False, static_argnums: ArgNums = (), static_argnames: Names = (),
         backend: Backend = "auto") -> Function | Derivatives:
    """The gradient: of a Python function (a compiled function, JAX-style ``argnums``), or of an expression.

    For a function: ``wrt`` or ``argnums`` the differentiated arguments (0 by default); ``has_aux``: fn
    returns ``(value, aux)``, aux not differentiated; ``static_argnums`` / ``static_argnames``: arguments
    passed as they are (a new value traces again); ``backend``: as for ``sg.jit``.
    For an expression: ``wrt`` the variables; the options are the function form's.

    >>> import symgrad as sg
    >>> sg.grad(lambda x, y: x * y + sg.sin(x), argnums=(0, 1))(2.0, 3.0)
    (2.5838531634528574, 2.0)
    >>> sg.grad(lambda p: p["a"] * p["b"])({"a": 2.0, "b": 3.0})
    {'a': 3.0, 'b': 2.0}
    >>> x, y = sg.symbols("x y")
    >>> sg.grad(x * y + sg.sin(x), [x, y])
    [y + cos(x), x]
    """
    if _is_function(f):
        return Function(f, "grad", _argnums(wrt, argnums), static_argnums, static_argnames, False, backend,
                        has_aux)
    _unused("grad", "a Python function", argnums=argnums, has_aux=has_aux, static_argnums=static_argnums,
            static_argnames=static_argnames, backend=backend)
    return symbolic.grad(f, wrt)


@overload
def value_and_grad(f: Callable[..., Any], wrt: ArgNums | None = None, params: Sequence[Expr] = (),
                   backend: Backend = "auto", *, argnums: ArgNums | None = None, has_aux: bool = False,
                   static_argnums: ArgNums = (), static_argnames: Names = ()) -> Function: ...
@overload
def value_and_grad(f: Expr, wrt: Wrt, params: Sequence[Expr] = (), backend: Backend = "auto", *,
                   argnums: None = None, has_aux: bool = False, static_argnums: ArgNums = (),
                   static_argnames: Names = ()) -> compiled.Compiled: ...
@_named_keywords
def value_and_grad(f: Callable[..., Any] | Expr, wrt: ArgNums | Wrt | None = None, params: Sequence[Expr] = (),
                   backend: Backend = "auto", *, argnums: ArgNums | None = None, has_aux: bool = False,
                   static_argnums: ArgNums = (), static_argnames: Names = ()) -> Function | compiled.Compiled:
    """A compiled function returning ``(value, gradient)``: of a Python function, or of an expression.

    For a function, the options are ``sg.grad``'s; with ``has_aux=True`` the result is
    ``((value, aux), gradient)``, as in JAX. For an expression, ``wrt`` are the variables (the vector
    ``x``) and ``params`` further variables passed as ``p``: see ``symgrad.compile.function.value_and_grad``.

    >>> import numpy as np, symgrad as sg
    >>> vg = sg.value_and_grad(lambda x: np.sum(x ** 2))
    >>> vg(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))
    """
    if _is_function(f):
        _unused("value_and_grad", "expressions", params=params)
        return Function(f, "value_and_grad", _argnums(wrt, argnums), static_argnums, static_argnames, False,
                        backend, has_aux)
    _unused("value_and_grad", "a Python function", argnums=argnums, has_aux=has_aux,
            static_argnums=static_argnums, static_argnames=static_argnames)
    return compiled.value_and_grad(f, wrt, params, backend)


@overload
def jacobian(f: Callable[..., Any], wrt: ArgNums | None = None, *, sparse: bool = False,
             argnums: ArgNums | None = None, has_aux: bool = False, static_argnums: ArgNums = (),
             static_argnames: Names = (), backend: Backend = "auto") -> Function: ...
@overload
def jacobian(f: Formulas, wrt: Wrt, *, sparse: bool = False, argnums: None = None, has_aux: bool = False,
             static_argnums: ArgNums = (), static_argnames: Names = (),
             backend: Backend = "auto") -> Derivatives | SparseExprs: ...
@_named_keywords
def jacobian(f: Callable[..., Any] | Formulas, wrt: ArgNums | Wrt | None = None, *, sparse: bool = False,
             argnums: ArgNums | None = None, has_aux: bool = False, static_argnums: ArgNums = (),
             static_argnames: Names = (), backend: Backend = "auto") -> Function | Derivatives | SparseExprs:
    """The Jacobian of a Python function (compiled) or of expressions; ``sparse=True``: CSR, nonzeros only.

    For a function, each output leaf gets a block per differentiated argument, shaped
    ``output.shape + argument.shape`` (JAX's ``jacrev``); the other options are ``sg.grad``'s.

    >>> import numpy as np, symgrad as sg
    >>> sg.jacobian(lambda x: x[1:] - x[:-1] ** 2)(np.array([1.0, 2.0, 3.0]))
    array([[-2.,  1.,  0.],
           [ 0., -4.,  1.]])
    """
    if _is_function(f):
        return Function(f, "jacobian", _argnums(wrt, argnums), static_argnums, static_argnames, sparse, backend,
                        has_aux)
    _unused("jacobian", "a Python function", argnums=argnums, has_aux=has_aux, static_argnums=static_argnums,
            static_argnames=static_argnames, backend=backend)
    return sparse_jacobian(f, wrt) if sparse else symbolic.jacobian(f, wrt)


@_named_keywords
def jacfwd(fun: Callable[..., Any], argnums: ArgNums = 0, *, has_aux: bool = False, static_argnums: ArgNums = (),
           static_argnames: Names = (), sparse: bool = False, backend: Backend = "auto") -> Function:
    """JAX's ``jacfwd``: the ``jacobian`` of a Python function, a block ``output.shape +
    argument.shape`` per output leaf and differentiated argument. Derivatives are formulas here:
    forward and reverse mode give the same ones, and the same numbers. Options: ``sg.jacobian``'s.

    >>> import numpy as np, symgrad as sg
    >>> sg.jacfwd(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    return jacobian(fun, argnums=argnums, has_aux=has_aux, static_argnums=static_argnums,
                    static_argnames=static_argnames, sparse=sparse, backend=backend)


@_named_keywords
def jacrev(fun: Callable[..., Any], argnums: ArgNums = 0, *, has_aux: bool = False, static_argnums: ArgNums = (),
           static_argnames: Names = (), sparse: bool = False, backend: Backend = "auto") -> Function:
    """JAX's ``jacrev``: the ``jacobian`` of a Python function (as ``jacfwd``).

    >>> import numpy as np, symgrad as sg
    >>> sg.jacrev(lambda x, y: x * y, argnums=(0, 1))(np.array([1.0, 2.0]), 3.0)
    (array([[3., 0.],
           [0., 3.]]), array([1., 2.]))
    """
    return jacobian(fun, argnums=argnums, has_aux=has_aux, static_argnums=static_argnums,
                    static_argnames=static_argnames, sparse=sparse, backend=backend)


@overload
def hessian(f: Callable[..., Any], wrt: ArgNums | None = None, *, sparse: bool = False,
            argnums: ArgNums | None = None, has_aux: bool = False, static_argnums: ArgNums = (),
            static_argnames: Names = (), backend: Backend = "auto") -> Function: ...
@overload
def hessian(f: Expr | float, wrt: Wrt, *, sparse: bool = False, argnums: None = None, has_aux: bool = False,
            static_argnums: ArgNums = (), static_argnames: Names = (),
            backend: Backend = "auto") -> Derivatives | SparseExprs: ...
@_named_keywords
def hessian(f: Callable[..., Any] | Expr | float, wrt: ArgNums | Wrt | None = None, *, sparse: bool = False,
            argnums: ArgNums | None = None, has_aux: bool = False, static_argnums: ArgNums = (),
            static_argnames: Names = (), backend: Backend = "auto") -> Function | Derivatives | SparseExprs:
    """The Hessian of a Python function (compiled) or of an expression; ``sparse=True``: CSR, nonzeros only.

    With ``sparse=True`` only the structurally nonzero entries are differentiated and
    compiled; no n-by-n array is ever made. The other options are ``sg.grad``'s.

    >>> import numpy as np, symgrad as sg
    >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
    >>> h(np.array([1.0, 2.0, 3.0])).toarray()
    array([[0., 4., 0.],
           [4., 2., 6.],
           [0., 6., 4.]])
    """
    if _is_function(f):
        return Function(f, "hessian", _argnums(wrt, argnums), static_argnums, static_argnames, sparse, backend,
                        has_aux)
    _unused("hessian", "a Python function", argnums=argnums, has_aux=has_aux, static_argnums=static_argnums,
            static_argnames=static_argnames, backend=backend)
    return sparse_hessian(f, wrt) if sparse else symbolic.hessian(f, wrt)


@overload
def hvp(f: Callable[..., Any], wrt: int | None = None, params: Sequence[Expr] = (), backend: Backend = "auto", *,
        argnums: int | None = None, static_argnums: ArgNums = (), static_argnames: Names = ()) -> Function: ...
@overload
def hvp(f: Expr, wrt: Wrt, params: Sequence[Expr] = (), backend: Backend = "auto", *, argnums: None = None,
        static_argnums: ArgNums = (), static_argnames: Names = ()) -> compiled.Compiled: ...
@_named_keywords
def hvp(f: Callable[..., Any] | Expr, wrt: int | Wrt | None = None, params: Sequence[Expr] = (),
        backend: Backend = "auto", *, argnums: int | None = None, static_argnums: ArgNums = (),
        static_argnames: Names = ()) -> Function | compiled.Compiled:
    """Hessian-vector products ``H(x) @ v`` without forming ``H`` (forward over reverse mode).

    For a Python function: ``hvp(fn)(*args, v)``, ``v`` shaped like the differentiated
    argument (one: an int ``argnums``); ``static_argnums`` / ``static_argnames`` as for ``sg.grad``.
    For an expression: a compiled ``hv(x, p)`` where ``p`` holds the values of ``params`` followed by ``v``.

    >>> import numpy as np, symgrad as sg
    >>> hv = sg.hvp(lambda x: np.sum(x ** 3))
    >>> hv(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    >>> x, y = sg.symbols("x y")
    >>> sg.hvp(x * x * y, [x, y])([1.0, 2.0], [1.0, 0.0])
    array([4., 2.])
    """
    if _is_function(f):
        _unused("hvp", "expressions", params=params)
        return Function(f, "hvp", _argnums(wrt, argnums), static_argnums, static_argnames, False, backend)
    _unused("hvp", "a Python function", argnums=argnums, static_argnums=static_argnums,
            static_argnames=static_argnames)
    inputs = as_expr_list(wrt)
    tangents = [tangent_of(v) for v in inputs]
    hv = symbolic.jvp(symbolic.grad(f, inputs), inputs, tangents)
    return compiled.compile(object_array(hv), inputs, [*as_expr_list(params), *tangents], backend)


@functools.lru_cache(maxsize=64)
def _applied(fn: Any, transform: str, has_aux: bool, backend: str) -> Function:
    """The Function behind sg.jvp / sg.vjp of ``fn``, so repeated calls reuse its traces (bounded)."""
    return Function(fn, transform, (), backend=backend, has_aux=has_aux)


def _applied_to(fn: Any, transform: str, has_aux: bool, backend: str) -> Function:
    if not callable(fn):
        raise TypeError(f"sg.{transform}: expected a function, got {type(fn).__name__}")
    try:
        return _applied(fn, transform, bool(has_aux), backend)
    except TypeError:  # an unhashable callable: no reuse
        return Function(fn, transform, (), backend=backend, has_aux=has_aux)


@overload
def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], *, has_aux: bool = False,
        backend: Backend = "auto") -> tuple[Any, ...]: ...
@overload
def jvp(fn: Formulas, primals: Wrt, tangents: Sequence[Any], *, has_aux: bool = False,
        backend: Backend = "auto") -> Expr | list[Expr] | np.ndarray: ...
@_named_keywords
def jvp(fn: Callable[..., Any] | Formulas, primals: Sequence[Any] | Wrt, tangents: Sequence[Any], *,
        has_aux: bool = False, backend: Backend = "auto") -> tuple[Any, ...] | Expr | list[Expr] | np.ndarray:
    """Forward mode, as ``jax.jvp``: ``(fn(*primals), directional derivative along tangents)``.

    ``primals`` and ``tangents`` are tuples of the same structure; outputs come in fn's
    structure. With ``has_aux=True``: ``(out, tangent_out, aux)``.

    >>> import numpy as np, symgrad as sg
    >>> sg.jvp(lambda x, y: x * np.sin(y), (2.0, 0.0), (1.0, 1.0))
    (0.0, 2.0)
    >>> x, y = sg.symbols("x y")
    >>> sg.jvp(x * y, [x, y], [1, 0])  # of expressions: wrt variables and their tangents
    y
    """
    if not _is_function(fn):  # expressions: the symbolic forward mode
        _unused("jvp", "a Python function", has_aux=has_aux, backend=backend)
        return symbolic.jvp(fn, primals, tangents)
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise TypeError("sg.jvp: primals and tangents must be tuples (one entry per argument of fn)")
    if len(primals) != len(tangents):
        raise ValueError(f"sg.jvp: {len(primals)} primals but {len(tangents)} tangents")
    out = _applied_to(fn, "jvp", has_aux, backend).call(tuple(primals), {}, tuple(tangents))
    return (*out[0], out[1]) if has_aux else out


@_named_keywords
def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
        backend: Backend = "auto") -> tuple[Any, Callable[[Any], tuple[Any, ...]]] | tuple[Any, Callable, Any]:
    """Reverse mode, as ``jax.vjp``: ``(fn(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` gives a tuple
    with one cotangent per primal, ``cotangent`` being shaped like fn's output.
    With ``has_aux=True``: ``(out, vjp_fn, aux)``.

    >>> import numpy as np, symgrad as sg
    >>> out, back = sg.vjp(lambda x: x ** 2, np.array([1.0, 3.0]))
    >>> out, back(np.array([1.0, 10.0]))
    (array([1., 9.]), (array([ 2., 60.]),))
    """
    F = _applied_to(fn, "vjp", has_aux, backend)
    result = F.call(primals, {}, _zeros_like_output(F, primals))
    (out, _), aux = result if has_aux else (result, None)

    def vjp_fn(cotangent: Any) -> tuple:
        back = F.call(primals, {}, cotangent)
        return (back[0] if has_aux else back)[1]

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


@_named_keywords
def linearize(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
              backend: Backend = "auto") -> tuple[Any, Callable[..., Any]] | tuple[Any, Callable[..., Any], Any]:
    """As ``jax.linearize``: ``(fn(*primals), jvp_fn)``, ``jvp_fn(*tangents)`` the directional
    derivative at ``primals`` (one tangent per primal, shaped like it). With ``has_aux=True``:
    ``(out, jvp_fn, aux)``. The tangent map is the compiled forward mode at the fixed point.

    >>> import numpy as np, symgrad as sg
    >>> y, f_jvp = sg.linearize(np.sin, 0.0)
    >>> y, f_jvp(2.0)
    (0.0, 2.0)
    """
    F = _applied_to(fn, "jvp", has_aux, backend)
    zeros = tuple(pytree.tree_map(lambda v: np.zeros(np.shape(v)) if np.ndim(v) else 0.0, p) for p in primals)
    first = F.call(primals, {}, zeros)

    def jvp_fn(*tangents: Any) -> Any:
        if len(tangents) != len(primals):
            raise TypeError(f"sg.linearize: the tangent map takes {len(primals)} tangent(s), one per primal, "
                            f"got {len(tangents)}")
        out = F.call(primals, {}, tangents)
        return (out[0] if has_aux else out)[1]

    if has_aux:
        (out, _), aux = first
        return out, jvp_fn, aux
    return first[0], jvp_fn


def _zeros_like_output(F: Function, primals: tuple) -> Any:
    """A zero cotangent in the structure of fn's output (to evaluate the output itself)."""
    if F.signature_key(primals, {}) is None or context.depth:  # inside a trace: the output's structure, fresh
        t = Trace(F, primals, {}, fresh=True)
    else:
        t = F.traced_at(F.signature_key(primals, {}), primals, {})
    return pytree.unflatten(t.out_tree, [np.zeros(s) if s else 0.0 for _, s in t.outputs])


@_named_keywords
def vmap(fn: Callable[..., Any], in_axes: int | None | Sequence[Any] | dict = 0,
         out_axes: int | None | Sequence[Any] = 0, *, backend: Backend = "auto") -> Function:
    """``fn`` mapped over an axis of its arguments (``in_axes``), results stacked along ``out_axes``.

    ``in_axes``: an int (every positional argument), or a tuple with an int or None per
    argument (None: not mapped, the same for every row), or for a pytree argument a tree of those
    with its structure down to some depth (``({"w": None, "b": 0},)``); keyword arguments map along 0.
    ``out_axes``: an int, or a tuple with one per output leaf (None: an output that does not
    vary over the batch). JAX's conventions throughout; ``backend`` as for ``sg.jit``.

    >>> import numpy as np, symgrad as sg
    >>> f = sg.vmap(lambda w, x: np.dot(w, x) ** 2, in_axes=(None, 0))
    >>> f(np.array([1.0, 2.0]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    array([1., 4., 9.])
    >>> per_example = sg.vmap(sg.grad(lambda w, x: np.dot(w, x) ** 2), in_axes=(None, 0))
    >>> per_example(np.array([1.0, 2.0]), np.array([[1.0, 0.0], [0.0, 1.0]]))
    array([[2., 0.],
           [0., 4.]])
    """
    if not callable(fn):
        raise TypeError(f"sg.vmap: expected a function, got {type(fn).__name__}")
    return Function(Batched(fn, in_axes, out_axes), "jit", backend=backend)
