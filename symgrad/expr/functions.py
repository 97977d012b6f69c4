"""The public sg.* functions: NumPy-like ufuncs over expressions, numbers and arrays.

``sg.sin(x)`` of an expression builds a node, of a number or float array returns NumPy's
value, and of an array holding expressions applies elementwise and returns a
``SymArray``. One function per op-table row (``FUNCS``); ``UFUNCS`` maps NumPy's ufuncs
onto them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from numbers import Real
from typing import Any

import numpy as np

from symgrad.expr.build import _as_expr, apply
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.ops import FUNCTIONS, OPS, Op, call_template


class SymArray(np.ndarray):
    """An object array of expressions whose NumPy operations build expressions.

    Tracing passes array arguments as SymArrays; ``sg.vector`` and friends return plain
    object arrays, which ``wrap`` turns into one. NumPy's hooks (``__array_ufunc__``,
    ``__array_function__``, answered by ``arrays.py``) are installed by ``methods.py``.

    >>> import numpy as np, symgrad as sg
    >>> from symgrad.expr.functions import wrap
    >>> x = wrap(sg.vector("x", 2))
    >>> np.maximum(x, 0.0)
    SymArray([maximum(0, x[0]), maximum(0, x[1])], dtype=object)
    >>> np.where(x > 1, x, 0.0).tolist()
    [where(x[0] > 1, x[0], 0), where(x[1] > 1, x[1], 0)]
    """

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        """To a float dtype: the same expressions (they are floats once evaluated); others raise."""
        if np.dtype(dtype).kind in "fO":
            return self.copy()
        raise TracingError(f"astype({np.dtype(dtype)}) of a symbolic array: only float types are traced; "
                           "use np.floor / np.rint for integral values")

    @property
    def imag(self) -> Any:
        """Zeros: traced values are real."""
        return wrap(np.zeros(self.shape, dtype=object) + 0.0)

    def __getitem__(self, key: Any) -> Any:
        for k in key if isinstance(key, tuple) else (key,):
            if isinstance(k, np.ndarray) and k.dtype == object:  # (NumPy's own error names no cause)
                raise TracingError(MASK_MESSAGE if _conditions(k) else "an array of traced values as an index: "
                                   "an index array must be made of integers known while tracing (or an argument "
                                   "of an integer dtype, traced rolled)")
            if isinstance(k, Expr) and (k.op.array_valued or _positions(k)):  # traced integers: a gather, rolled
                return GATHER[0](self, key)
            if isinstance(k, Expr):  # (fori_loop then runs its loop in Python; an int argument is specialised)
                raise TracingError(f"an array traced element by element indexed by the traced scalar "
                                   f"{' '.join(str(k).split())[:60]}: an index must be known while tracing (a "
                                   "Python int, a static argument), an integer argument, or np.argsort's")
        return super().__getitem__(key)


MASK_MESSAGE = ("a[mask] with a traced boolean mask: how many entries it keeps depends on the values, unknown "
                "while tracing (JAX refuses it too); write np.where(mask, a, 0.0) (np.sum(np.where(a > 1, a, "
                "0.0)) for np.sum(a[a > 1]))")
_CONDITIONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _positions(k: Expr) -> bool:
    """Whether the scalar ``k`` reads np.argsort's positions (integers computed where the function runs)."""
    stack, seen = [k], set()
    while stack:
        node = stack.pop()
        if node.op.name == "argsort":
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(node.args)
    return False


def _conditions(k: np.ndarray) -> bool:
    return any(isinstance(e, Expr) and e.op.name in _CONDITIONS for e in k.ravel())


def wrap(result: Any) -> Any:
    """An object array as a ``SymArray`` (a 0-d one as its element); anything else as is."""
    if isinstance(result, np.ndarray) and result.dtype == object:
        return result[()] if result.ndim == 0 else result.view(SymArray)
    return result


def _object0d(value: Any) -> Any:
    """A 0-d object array holding ``value`` (so NumPy does not ask the Expr how to run the ufunc)."""
    out = np.empty((), dtype=object)
    out[()] = value
    return out


def elementwise(op: Op) -> Callable:
    """``op`` applied to each element of arrays holding expressions or numbers (broadcast): a plain
    object array, or one expression when every argument is a single value."""
    each = np.frompyfunc(lambda *xs: apply(op, xs), op.arity, 1)

    def run(*values: Any) -> Any:
        with np.errstate(all="ignore"):  # (constants folded to nan, data's nan: not the user's arithmetic)
            return each(*(v.view(np.ndarray) if isinstance(v, np.ndarray) else _object0d(v) for v in values))
    return run


ON_ARRAYS: list[Callable] = []  # ndarrays.elementwise, installed by methods.py (ndarrays reaches this module)
GATHER: list[Callable] = []  # a SymArray indexed by traced integers: ndarrays' rolled gather, installed alike


def _lift(op: Op) -> Callable:
    """The public function for ``op``, like a NumPy ufunc: expressions give expressions, numbers and
    float arrays give NumPy's values, arrays holding expressions (traced arrays) apply elementwise."""
    each = elementwise(op)

    def fn(*args: Any) -> Any:
        if len(args) != op.arity:
            raise TypeError(f"{op.name}() takes {op.arity} argument(s), got {len(args)}")
        if not any(isinstance(a, np.ndarray | list | tuple) for a in args) and any(type(a) is Expr for a in args):
            if any(a.op.array_valued for a in args if type(a) is Expr):  # a rolled array: elementwise
                return ON_ARRAYS[0](lambda *xs: apply(op, xs), args)
            return apply(op, args)
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) if isinstance(a, list | tuple) else a
                  for a in args]
        if any(isinstance(a, Expr) or isinstance(a, np.ndarray) and a.dtype == object for a in arrays):
            return wrap(each(*arrays))
        if all(isinstance(a, Real | np.bool_ | np.ndarray) for a in arrays):
            with np.errstate(all="ignore"):
                return op.impl(*(np.asarray(a, dtype=float) for a in arrays))
        return apply(op, args)  # raises the error naming what is not a number

    names = ("c", "x", "y") if op.arity == 3 else ("x", "y")[: op.arity]
    template = op.template or call_template(op.name + "(", op.arity, ")")
    example = "".join(p if isinstance(p, str) else names[p[0]] for p in template)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__signature__ = inspect.Signature(  # (fn takes *args: help() and editors show the op's arguments)
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY, annotation=Any) for n in names],
        return_annotation=Any)
    fn.__doc__ = (f"{op.doc or 'Elementwise ' + op.name}: of an expression, a number or an array "
                  f"(elementwise).\n\n    >>> import symgrad as sg\n    >>> c, x, y = sg.symbols('c x y')"
                  f"\n    >>> sg.{op.name}({', '.join(names)})\n    {example}\n")
    return fn


FUNCS: dict[str, Callable] = {name: _lift(op) for name, op in FUNCTIONS.items()}
UFUNCS = {op.ufunc: FUNCS[name] for name, op in OPS.items() if op.ufunc is not None}


_TWO52 = 2.0 ** 52  # at and above this magnitude every float is an integer


def rint(a: Any) -> Any:
    """Round half to even (np.rint), through the float rounding of |a| + 2**52; derivative 0, as NumPy's.

    >>> import symgrad as sg
    >>> [rint(sg.const(v)) for v in (0.5, 1.5, -2.5, 2.6)]
    [0, 2, -2, 3]
    """
    a = _as_expr(a, OPS["abs"]) if not isinstance(a, np.ndarray) else a
    rounded = FUNCS["sign"](a) * ((FUNCS["abs"](a) + _TWO52) - _TWO52)
    return FUNCS["stop_gradient"](FUNCS["where"](FUNCS["abs"](a) < _TWO52, rounded, a))
