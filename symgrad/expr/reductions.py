"""NumPy's reductions and statistics on rolled arrays: ``np.sum`` / ``max`` / ``min`` over axes
(``reduce``), ``mean``, ``var``, ``std``, ``cumsum`` (running sums), ``np.linalg.norm`` and ``np.prod``
(multiplied out over small axes), and ``root_of_squares`` (a square root whose derivative is 0 at 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from symgrad.expr import ops, rolled
from symgrad.expr.build import apply
from symgrad.expr.ndarrays import _axes, element, elementwise, fresh, getitem, is_array, reshape
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.reshaping import moveaxis


def reduce(kind: str, arr: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.sum`` / ``np.max`` / ``np.min`` of ``arr`` over ``axis`` (None: all).

    >>> import numpy as np, symgrad as sg
    >>> A = sg.array("A", (2, 3))
    >>> sg.evaluate(reduce("max", A, axis=1), {A: np.arange(6.0).reshape(2, 3)})
    array([2., 5.])
    """
    if not is_array(arr):
        return arr
    axes = _axes(axis, arr.ndim)
    idx = fresh(arr.shape)
    body = element(arr, idx)
    for d in sorted(axes, reverse=True):
        body = rolled.reduce(kind, body, idx[d])
    kept = [idx[d] for d in range(arr.ndim) if d not in axes]
    out = rolled.tensor(body, *kept) if kept else body
    if not keepdims:
        return out
    # The size-1 axes as a view of the reduced array (inlined where read): the reduction stays one
    # tensor over its own indices, which derivatives (a max's ties) read instead of recomputing.
    shape = tuple(1 if d in axes else n for d, n in enumerate(arr.shape))
    return reshape(out, shape) if kept else rolled.tensor(out, *fresh(shape))


def mean(arr: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.mean``: the sum over the axes divided by their size.

    >>> import symgrad as sg
    >>> x = sg.array("x", 4)
    >>> sg.evaluate(mean(x), {x: [1.0, 2.0, 3.0, 6.0]})
    3.0
    """
    if not is_array(arr):
        return arr
    count = math.prod(arr.shape[d] for d in _axes(axis, arr.ndim))
    return _divide(reduce("sum", arr, axis, keepdims), float(count))


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``np.cumsum``: the running sums along ``axis`` (None: of the raveled array), one loop adding
    each element to the sum before it (NumPy's order of additions); the gradient sums backwards.

    >>> import numpy as np, symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(np.cumsum(x), {x: [1.0, 2.0, 3.0]})
    array([1., 3., 6.])
    """
    if out is not None:
        raise TracingError("np.cumsum(..., out=...) on a traced array has no rolled form")
    if not is_array(a):  # a number's running sums: itself, as one element
        return rolled.tensor(a, *fresh((1,)))
    if axis is None:
        a, axis = reshape(a, -1), 0
    (axis,) = _axes(axis, a.ndim)
    return rolled.cumsum(a, axis)


def _divide(a: Any, b: Any) -> Any:
    return elementwise(lambda x, y: x / y, (a, b))


def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False,
        **rest: Any) -> Any:
    """``np.var``: the mean squared deviation from the mean over the axes (``ddof`` as NumPy).

    >>> import symgrad as sg
    >>> x = sg.array("x", 4)
    >>> sg.evaluate(var(x, ddof=1), {x: [1.0, 2.0, 3.0, 6.0]})
    4.666666666666667
    """
    if out is not None or rest.get("where", True) is not True:
        raise TracingError("np.var(..., out= / where=) on a traced array has no rolled form")
    if not is_array(a):
        return elementwise(lambda v: v * 0.0, (a,))
    count = math.prod(a.shape[d] for d in _axes(axis, a.ndim))
    deviation = elementwise(lambda v, m: (v - m) * (v - m), (a, mean(a, axis, keepdims=True)))
    return _divide(reduce("sum", deviation, axis, keepdims), float(count - ddof))


def std(*args: Any, **kwargs: Any) -> Any:
    """``np.std``: the square root of ``np.var``.

    >>> import symgrad as sg
    >>> x = sg.array("x", 2)
    >>> sg.evaluate(std(x), {x: [1.0, 3.0]})
    1.0
    """
    return elementwise(root_of_squares, (var(*args, **kwargs),))


def root_of_squares(v: Any) -> Expr:
    """The square root of a sum of squares (np.std, np.linalg.norm), whose derivative is 0 where it is 0
    (as ``|x|``'s at 0, and central differences: the spread of a constant, the norm of 0, moves as fast
    up as down; sqrt's partial there is inf).

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> sg.evaluate(sg.diff(root_of_squares(x * x), x), {x: 0.0})
    0.0
    """
    return apply(ops.OPS["where"], (apply(ops.OPS["eq"], (v, 0.0)), 0.0, apply(ops.OPS["sqrt"], (v,))))


def norm(x: Expr, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.linalg.norm`` of vectors (``ord`` None/2, 1, inf, -inf, p) and the Frobenius norm of
    matrices (``ord`` None or "fro").

    >>> import symgrad as sg
    >>> x = sg.array("x", 2)
    >>> float(sg.evaluate(norm(x), {x: [3, 4]}))
    5.0
    """
    vector = axis is not None and np.ndim(axis) == 0 or axis is None and x.ndim == 1
    if vector and ord == "fro":
        raise ValueError("Invalid norm order 'fro' for vectors")
    absolute = elementwise(lambda v: apply(ops.OPS["abs"], (v,)), (x,))
    if ord in (None, 2, "fro") and (vector or ord != 2):
        return elementwise(root_of_squares, (reduce("sum", elementwise(lambda v: v * v, (x,)), axis, keepdims),))
    if not vector:
        raise TracingError(f"np.linalg.norm(ord={ord!r}) of a matrix has no rolled form")
    if ord in (np.inf, -np.inf):
        return reduce("max" if ord > 0 else "min", absolute, axis, keepdims)
    if ord == 1:
        return reduce("sum", absolute, axis, keepdims)
    if isinstance(ord, int | float) and ord > 0:
        power = reduce("sum", elementwise(lambda v: v ** float(ord), (absolute,)), axis, keepdims)
        return elementwise(lambda v: v ** (1.0 / ord), (power,))
    raise TracingError(f"np.linalg.norm(ord={ord!r}) of a traced array has no rolled form")


PROD_MAX = 16  # np.prod multiplies out axes up to this size (a product has no rolled reduction)


def prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **rest: Any) -> Any:
    """``np.prod`` over axes of at most ``PROD_MAX`` elements, multiplied out (exact derivatives at zeros).

    >>> import symgrad as sg
    >>> A = sg.array("A", (2, 3))
    >>> sg.evaluate(prod(A, axis=1), {A: [[1, 2, 3], [4, 5, 6]]})
    array([  6., 120.])
    """
    if out is not None or rest:
        raise TracingError(f"np.prod(..., {', '.join(['out', *rest] if out is not None else rest)}) on a traced "
                           "array has no rolled form")
    if not is_array(a):
        return a
    axes = sorted(_axes(axis, a.ndim))
    if math.prod(a.shape[d] for d in axes) > PROD_MAX:
        raise TracingError(f"np.prod over {math.prod(a.shape[d] for d in axes)} elements (more than {PROD_MAX}) "
                           "has no rolled form")
    moved = moveaxis(a, axes, list(range(len(axes)))) if axes != list(range(len(axes))) else a
    rest_shape = moved.shape[len(axes):]
    flat = reshape(moved, (math.prod(moved.shape[:len(axes)]), *rest_shape)) if len(axes) != 1 else moved
    parts = [getitem(flat, (k,)) for k in range(flat.shape[0])]
    total = parts[0]
    for p in parts[1:]:
        total = elementwise(lambda u, v: u * v, (total, p))
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape))
        return reshape(total, shape) if is_array(total) else rolled.tensor(total, *fresh(shape))
    return total


# ---- NumPy's nan-ignoring reductions: the nan entries masked out with np.where, so they work on rolled
# arrays and traced object arrays alike (NumPy's own copy into a boolean mask, np.copyto, cannot)


def _no_out(name: str, out: Any) -> None:
    if out is not None:
        raise TracingError(f"np.{name}(..., out=...) of a traced array has no rolled form")


def _count(a: Any, axis: Any, keepdims: bool) -> Any:
    return np.sum(np.where(a != a, 0.0, 1.0), axis=axis, keepdims=keepdims)


def nansum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """``np.nansum``: the sum with nan entries counted as 0.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: nansum(x * x))(np.array([1.0, np.nan, 3.0]))
    array([2., 0., 6.])
    """
    _no_out("nansum", out)
    return np.sum(np.where(a != a, 0.0, a), axis=axis, keepdims=keepdims)


def nanmean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """``np.nanmean``: the mean of the entries that are not nan (nan where there are none).

    >>> import symgrad as sg
    >>> sg.jit(lambda x: nanmean(x, axis=0))(np.array([[1.0, np.nan], [3.0, 4.0]]))
    array([2., 4.])
    """
    _no_out("nanmean", out)
    return nansum(a, axis, keepdims=keepdims) / _count(a, axis, keepdims)


def nanvar(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: float = 0,
           keepdims: bool = False) -> Any:
    """``np.nanvar``: the variance of the entries that are not nan, divided by their count less ``ddof``.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: nanvar(x))(np.array([1.0, np.nan, 3.0]))
    array([-1.,  0.,  1.])
    """
    _no_out("nanvar", out)
    d = np.where(a != a, 0.0, a - nanmean(a, axis, keepdims=True))
    return np.sum(d * d, axis=axis, keepdims=keepdims) / (_count(a, axis, keepdims) - ddof)


def nanstd(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: float = 0,
           keepdims: bool = False) -> Any:
    """``np.nanstd``: the square root of ``nanvar`` (derivative 0 where it is 0, as ``np.std``'s).

    >>> import symgrad as sg
    >>> float(sg.jit(lambda x: nanstd(x))(np.array([1.0, np.nan, 3.0])))
    1.0
    """
    v = nanvar(a, axis, dtype, out, ddof, keepdims)
    return np.where(v == 0.0, 0.0, np.sqrt(v))


def _nan_extreme(name: str, pick: Any, fill: float) -> Any:
    def extreme(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        _no_out(name, out)
        found = pick(np.where(a != a, fill, a), axis=axis, keepdims=keepdims)
        return np.where(_count(a, axis, keepdims) == 0.0, np.nan, found)
    extreme.__name__ = name
    extreme.__doc__ = (f"``np.{name}``: ignoring nan entries (nan where all are).\n\n"
                       "    >>> import symgrad as sg\n"
                       f"    >>> float(sg.jit(lambda x: np.{name}(x))(np.array([1.0, np.nan, 3.0])))\n"
                       f"    {3.0 if name == 'nanmax' else 1.0}\n")
    return extreme


nanmax, nanmin = _nan_extreme("nanmax", np.max, -math.inf), _nan_extreme("nanmin", np.min, math.inf)
NANS = {np.nansum: nansum, np.nanmean: nanmean, np.nanvar: nanvar, np.nanstd: nanstd, np.nanmax: nanmax,
        np.nanmin: nanmin}
