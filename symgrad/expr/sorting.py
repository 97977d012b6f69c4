"""Sorting and what builds on it on traced arrays: ``np.sort``, ``np.argsort``, ``np.partition``,
``np.median``, ``np.quantile``, ``np.percentile``.

The order depends on the values, so it is computed where the function runs. A rolled array is
sorted by gathering through its ``argsort`` node (a stable sort, nan last, as NumPy's): the
permutation is integer data, and the gather's adjoint scatters each element's adjoint back to
where it came from (as JAX's sort). An array traced element by element (under 64 elements) is
sorted by a network of compare-exchanges (Batcher's odd-even merge sort) written with ``where``:
the same order, nan last, ties broken by position (a stable sort, as the rolled path's), so at a
tie the derivative follows the same element on both paths (and JAX's). Quantiles are NumPy's own:
the positions NumPy's method gives for the sorted row (found by running ``np.quantile`` on the
positions 0..n-1), interpolated between neighbours.

>>> import numpy as np, symgrad as sg
>>> sg.grad(lambda x: np.sort(x)[0] + 2 * np.median(x))(np.array([3.0, 1.0, 2.0]))
array([0., 1., 2.])
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from symgrad.expr import batching, diff, ops, rolled, serialize, sparsity
from symgrad.expr.build import apply, const
from symgrad.expr.functions import wrap
from symgrad.expr.ndarrays import element, fresh, from_elements, is_array, reshape
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.reshaping import transpose


@functools.cache
def network(n: int) -> tuple[tuple[int, int], ...]:
    """The compare-exchanges sorting ``n`` values: Batcher's odd-even merge sort, its comparators
    touching positions past ``n`` dropped (those hold +inf: they never move).

    >>> network(3)
    ((0, 1), (0, 2), (1, 2))
    """
    pairs, p = [], 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                pairs += [(i + j, i + j + k) for i in range(min(k, n - j - k))
                          if (i + j) // (2 * p) == (i + j + k) // (2 * p)]
            k //= 2
        p *= 2
    return tuple(pairs)


def _exchange(a: Expr, i: Expr, b: Expr, j: Expr) -> tuple[Expr, Expr, Expr, Expr]:
    """The values ``a`` and ``b``, from positions ``i`` and ``j``, in NumPy's stable order: by value, nan
    last, ties (nan among nan too) by position; the positions move with them. A network that breaks ties
    by position sorts stably, so the derivative at a tie follows the same element as the rolled path's."""
    lt, eq, ne, where = ops.lt, ops.eq, ops.ne, ops.where
    before = apply(lt, (i, j))
    nan_a, nan_b = apply(ne, (a, a)), apply(ne, (b, b))
    keep = apply(lt, (a, b)) + apply(eq, (a, b)) * before + nan_b * (1.0 - nan_a) + nan_a * nan_b * before
    return (apply(where, (keep, a, b)), apply(where, (keep, i, j)), apply(where, (keep, b, a)),
            apply(where, (keep, j, i)))


def _sorted_elements(values: np.ndarray, axis: int) -> np.ndarray:
    """The object array ``values`` sorted along ``axis`` by the network."""
    values = np.moveaxis(values, axis, -1)
    out = np.empty(values.shape, dtype=object)
    pairs = network(values.shape[-1])
    for at in np.ndindex(values.shape[:-1]):
        row = [v if isinstance(v, Expr) else const(float(v)) for v in values[at]]
        where = [const(float(k)) for k in range(len(row))]
        for i, j in pairs:
            row[i], where[i], row[j], where[j] = _exchange(row[i], where[i], row[j], where[j])
        out[at] = row
    return np.moveaxis(out, -1, axis)


def _sorted_rolled(a: Expr, axis: int) -> Expr:
    """The rolled array ``a`` sorted along ``axis``: gathered through its argsort."""
    n = a.shape[axis]
    if n == 1:
        return a
    order, J = rolled.argsort(a, axis), fresh(a.shape)
    at = apply(ops.as_index, (element(order, J), const(float(n))))
    return rolled.tensor(element(a, (*J[:axis], at, *J[axis + 1:])), *J)


def _shape(a: Any) -> tuple:
    return a.shape if is_array(a) else np.shape(a)


def _along(a: Any, axis: Any) -> tuple[Any, int, tuple]:
    """``a`` and the one axis to sort along: ``axis`` (normalised), or, for None or a tuple, the last of
    ``a`` raveled or with those axes moved last and joined; and ``a``'s shape with those axes 1
    (``keepdims``)."""
    rolled_in, shape = is_array(a), _shape(a)
    if not rolled_in:
        a = np.asarray(a, dtype=object)
    ndim = len(shape)
    axes = range(ndim) if axis is None else [int(k) for k in (axis if isinstance(axis, tuple | list) else (axis,))]
    for k in axes:
        if not -ndim <= k < ndim:
            raise np.exceptions.AxisError(k, ndim)
    axes = sorted({k % ndim for k in axes})
    ones = tuple(1 if d in axes else n for d, n in enumerate(shape))
    if axis is not None and not axes:  # (axis=(): each element alone, a row of one)
        return (reshape(a, (*shape, 1)) if rolled_in else np.reshape(a, (*shape, 1))), ndim, ones
    if axis is None or len(axes) > 1:
        kept = [d for d in range(ndim) if d not in axes]
        moved = (transpose(a, (*kept, *axes)) if rolled_in else np.transpose(a, (*kept, *axes))) if ndim else a
        joined = (*(shape[d] for d in kept), -1)
        return (reshape(moved, joined) if rolled_in else np.reshape(moved, joined)), len(kept), ones
    return a, axes[0], ones


def _sorted(a: Any, axis: int) -> Any:
    return _sorted_rolled(a, axis) if is_array(a) else wrap(_sorted_elements(a, axis))


def _take(s: Any, k: int, axis: int) -> Any:
    """The sorted rows ``s`` at position ``k`` along ``axis``."""
    return s[(slice(None),) * axis + (k,)]


def _nan_where_nan(s: Any, axis: int, value: Any) -> Any:
    """``value`` of the sorted rows ``s``, nan where a row holds a nan (then it is last)."""
    last = _take(s, -1, axis)
    return np.where(last != last, np.nan, value)


def _traced(a: Any) -> bool:
    return isinstance(a, Expr) or isinstance(a, np.ndarray) and a.dtype == object


def _no_options(who: str, **options: Any) -> None:
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise TracingError(f"np.{who}(..., {', '.join(given)}=...) of a traced array is not supported")


def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Any:
    """``np.sort``: ``a`` sorted along ``axis`` (None: raveled), nan last. Its derivative sends each
    element's adjoint back to where the element came from.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: np.sort(x) @ np.arange(3.0))(np.array([5.0, -1.0, 2.0]))
    array([2., 0., 1.])
    """
    _no_options("sort", order=order)
    return _sorted(*_along(a, axis)[:2])


def argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Any:
    """``np.argsort``: the positions sorting ``a`` along ``axis`` (a stable sort, nan last), integers
    computed where the function runs: index with them (``x[np.argsort(x)]``), no derivative.

    >>> import symgrad as sg
    >>> sg.jit(lambda x: np.argsort(x) * 1.0)(np.array([5.0, -1.0, 2.0]))
    array([1., 2., 0.])
    """
    _no_options("argsort", order=order)
    along, at, _ = _along(a, axis)
    if not is_array(along):
        along = from_elements(along)
    return rolled.argsort(along, at)


def partition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None) -> Any:
    """``np.partition``: ``a`` with each ``kth`` element where sorting puts it, the smaller before and
    the larger after: here the whole of ``a`` sorted along ``axis``, which is such an order.

    >>> import symgrad as sg
    >>> sg.jit(lambda x: np.partition(x, 1))(np.array([5.0, -1.0, 2.0]))
    array([-1.,  2.,  5.])
    """
    _no_options("partition", order=order)
    along, at, _ = _along(a, axis)
    n = _shape(along)[at]
    for k in np.ravel(np.asarray(kth)):
        if not -n <= int(k) < n:
            raise ValueError(f"kth(={int(k)}) out of bounds ({n})")
    return sort(a, axis)


def median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """``np.median``: the middle of the sorted values along ``axis`` (the mean of the two middle ones
    of an even count); nan where the values hold one.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: np.median(x))(np.array([4.0, 1.0, 3.0, 2.0]))
    array([0. , 0. , 0.5, 0.5])
    """
    _no_options("median", out=out)
    along, at, ones = _along(a, axis)
    s, n = _sorted(along, at), _shape(along)[at]
    middle = _take(s, n // 2, at) if n % 2 else (_take(s, n // 2 - 1, at) + _take(s, n // 2, at)) * 0.5
    result = _nan_where_nan(s, at, middle)
    return _reshaped(result, ones) if keepdims else result


def _reshaped(a: Any, shape: tuple) -> Any:
    return reshape(a, shape) if is_array(a) else wrap(np.reshape(np.asarray(a, dtype=object), shape))


def quantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, weights: Any = None,
             interpolation: Any = None) -> Any:
    """``np.quantile`` with any of NumPy's methods: for each ``q`` (numbers known while tracing), the
    sorted values at the position NumPy's method gives, interpolated between the two around it; nan
    where the values hold one. The axes of ``q`` come first.

    >>> import symgrad as sg
    >>> sg.grad(lambda x: np.quantile(x, 0.25))(np.array([4.0, 1.0, 3.0, 2.0]))
    array([0.  , 0.25, 0.  , 0.75])
    """
    _no_options("quantile", out=out, weights=weights, interpolation=interpolation)
    return _quantiles(a, q, axis, method, keepdims, "quantile")


def percentile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False, *, weights: Any = None,
               interpolation: Any = None) -> Any:
    """``np.percentile``: ``np.quantile`` at ``q / 100``.

    >>> import symgrad as sg
    >>> float(sg.jit(lambda x: np.percentile(x, 50))(np.array([4.0, 1.0, 3.0])))
    3.0
    """
    _no_options("percentile", out=out, weights=weights, interpolation=interpolation)
    if _traced(q):
        raise TracingError("np.percentile of a traced q: the percentiles must be numbers known while tracing "
                           "(a static argument: static_argnums)")
    q = np.true_divide(q, 100)
    if np.any((q < 0) | (q > 1)):
        raise ValueError("Percentiles must be in the range [0, 100]")
    return _quantiles(a, q, axis, method, keepdims, "percentile")


def _quantiles(a: Any, q: Any, axis: Any, method: str, keepdims: bool, who: str) -> Any:
    if _traced(q):
        raise TracingError(f"np.{who} of a traced q: the quantiles must be numbers known while tracing (a static "
                           "argument: static_argnums)")
    q = np.asarray(q, dtype=float)
    along, at, ones = _along(a, axis)
    s, n = _sorted(along, at), _shape(along)[at]
    positions = np.quantile(np.arange(n, dtype=float), q, method=method)  # (NumPy's checks of q and method)
    picked = []
    for v in np.ravel(positions):
        lo = int(np.floor(v))
        g, below = float(v - lo), _take(s, lo, at)
        above = _take(s, min(lo + 1, n - 1), at)  # (NumPy's interpolation, its two forms)
        if g == 0.0:  # (NumPy's below + (above - below) * 0: nan where the difference is not finite)
            finite = np.abs(above - below if lo + 1 < n else below) < np.inf  # (x - x: 0 in the graph)
            picked.append(np.where(finite, below, np.nan))
        else:
            picked.append(above - (above - below) * (1.0 - g) if g >= 0.5 else below + (above - below) * g)
    picked = [_nan_where_nan(s, at, p) for p in picked]
    rest = ones if keepdims else _shape(picked[0])
    return _reshaped(picked[0] if q.ndim == 0 else np.stack(picked), (*q.shape, *rest))


def take_along_axis(arr: Any, indices: Any, axis: Any = -1) -> Any:
    """``np.take_along_axis`` with traced positions (``np.argsort``'s): ``arr`` read along ``axis`` where
    ``indices`` say, the other axes broadcast as NumPy's; the derivative scatters back by them.

    >>> import symgrad as sg
    >>> x = np.array([[3.0, 1.0, 2.0], [0.5, 9.0, 4.0]])
    >>> sg.jit(lambda a: np.take_along_axis(a, np.argsort(a, axis=1), axis=1))(x)
    array([[1. , 2. , 3. ],
           [0.5, 4. , 9. ]])
    """
    if _traced(indices) and not is_array(indices):  # (positions read element by element beside small arrays)
        indices = from_elements(np.asarray(indices, dtype=object))
    if not is_array(indices):  # (numbers: NumPy's own, on the object array)
        return wrap(np.take_along_axis._implementation(np.asarray(arr, dtype=object).view(np.ndarray), indices,
                                                       axis))
    if axis is None:
        arr, axis = (reshape(arr, -1) if is_array(arr) else np.ravel(np.asarray(arr, dtype=object))), 0
    if not is_array(arr):
        arr = from_elements(np.asarray(arr, dtype=object))
    ndim = len(arr.shape)
    if len(indices.shape) != ndim:
        raise ValueError(f"`indices` and `arr` must have the same number of dimensions, got {len(indices.shape)} "
                         f"and {ndim}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    axis %= ndim
    shape = [max(a, b) if k != axis else b for k, (a, b) in enumerate(zip(arr.shape, indices.shape))]
    if any(k != axis and 1 != a != s or 1 != b != s for k, (a, b, s) in
           enumerate(zip(arr.shape, indices.shape, shape))):
        raise ValueError(f"shape mismatch: arr {arr.shape} and indices {indices.shape} do not broadcast")
    J = fresh(tuple(shape))
    at = lambda size, k: J[k] if size != 1 or shape[k] == 1 else const(0.0)  # noqa: E731
    position = element(indices, tuple(at(b, k) for k, b in enumerate(indices.shape)))
    address = tuple(apply(ops.as_index, (position, const(float(arr.shape[axis])))) if k == axis else at(a, k)
                    for k, a in enumerate(arr.shape))
    return rolled.tensor(element(arr, address), *J)


# NumPy's functions here, for traced object arrays (arrays.py) and rolled arrays (dispatch.py) alike
SORTING = {np.sort: sort, np.argsort: argsort, np.partition: partition, np.median: median,
           np.quantile: quantile, np.percentile: percentile, np.take_along_axis: take_along_axis}


# ---- the argsort node's rows in the passes' tables

def _batched(node: Expr, args: tuple, lifted: list, b: Expr) -> tuple[Expr, int] | None:
    """The argsort of a batched array: along the same axis of each example."""
    if lifted[0] is None:
        return None
    whole, axis = lifted[0]
    return rolled.argsort(whole, node.payload + (axis <= node.payload)), axis


def _read(k: int, payload: Any, arguments: tuple) -> Expr:
    """An argsort node read back (``serialize.PAYLOADS``): its axis checked against its array's."""
    try:
        if type(payload) is not int:
            raise ValueError(f"its payload is an axis, got {str(payload)[:40]}")
        return rolled.argsort(arguments[0], payload)
    except (TypeError, ValueError) as e:
        raise serialize.FormatError(f"symgrad JSON: node {k} (argsort): {serialize.one_line(e, 200)}") from None


batching.RULES["argsort"] = _batched
diff.TANGENTS["argsort"] = lambda node, tangent: None  # (integer data: no tangent)
sparsity.PATTERNS["argsort"] = sparsity.PATTERNS["table"]  # (integer data: no input reaches it)
serialize.PAYLOADS["argsort"] = (lambda axis: axis, _read)
