"""NumPy functions on rolled arrays written with the rolled primitives (gathers by constant index
tables, slices, reductions, concatenation, scans): shapes and copies, flips and rolls, differences,
tiles and repeats, triangles and traces, cumulative products and extrema. Each is NumPy's function
(same arguments, same result); each registers itself in ``dispatch.FUNCTIONS``.

>>> import numpy as np, symgrad as sg
>>> x = sg.array("x", 4)
>>> sg.evaluate(np.roll(x, 1), {x: [1.0, 2.0, 3.0, 4.0]})
array([4., 1., 2., 3.])
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from symgrad.expr import dispatch, ndarrays, ops, updates
from symgrad.expr.build import apply
from symgrad.expr.dispatch import FUNCTIONS
from symgrad.expr.functions import rint
from symgrad.expr.ndarrays import getitem, is_array, operand, reshape
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.reshaping import concatenate, moveaxis


def _axis(axis: Any, ndim: int) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def _along(a: Expr, axis: int, index: Any) -> Expr:
    """``a`` indexed along ``axis`` by ``index`` (a slice or a constant integer array)."""
    return getitem(a, (slice(None),) * axis + (index,))


def _like(fill: Any) -> Any:
    def make(a: Any, *args: Any, dtype: Any = None, shape: Any = None, **rest: Any) -> Any:
        out_shape = np.shape(a) if shape is None else tuple(np.atleast_1d(shape))
        value = fill if fill is not None else args[0]
        if isinstance(value, Expr):  # a traced fill value: broadcast to the shape
            return ndarrays.elementwise(lambda v: v, (value,), out_shape)
        return np.full(out_shape, value, dtype=dtype if dtype is not None else float)
    return make


def broadcast_to(a: Any, shape: Any, subok: bool = False) -> Any:
    """``np.broadcast_to``: ``a`` repeated along new leading axes and its axes of one element.

    >>> import symgrad as sg
    >>> sg.evaluate(broadcast_to(sg.array("v", 2), (3, 2)), {"v": [1.0, 2.0]}).tolist()
    [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    """
    shape = tuple(shape) if np.iterable(shape) else (shape,)
    if any(isinstance(d, bool | np.bool_) for d in shape):
        raise TypeError(f"np.broadcast_to: the shape must be integers, got {shape}")
    shape = tuple(map(operator.index, shape))  # (NumPy's TypeError for 1.5)
    if any(d < 0 for d in shape):
        raise ValueError(f"np.broadcast_to: all elements of the shape must be non-negative, got {shape}")
    if 0 in shape:
        raise TracingError(f"np.broadcast_to to the empty shape {shape} has no rolled form")
    return ndarrays.elementwise(lambda v: v, (a,), shape)


def flip(a: Expr, axis: Any = None) -> Expr:
    """``np.flip``: the order of the entries along ``axis`` (all axes: None) reversed."""
    axes = range(a.ndim) if axis is None else [_axis(k, a.ndim) for k in np.atleast_1d(axis)]
    return getitem(a, tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(a.ndim)))


def roll(a: Expr, shift: Any, axis: Any = None) -> Expr:
    """``np.roll``: entries shifted along ``axis`` (the flattened array: None), wrapping around."""
    if axis is None:
        return reshape(roll(reshape(a, -1), shift, 0), a.shape)
    shifts, axes = np.broadcast_arrays(np.atleast_1d(shift), np.atleast_1d(axis))
    for s, d in zip(shifts, axes):
        d = _axis(d, a.ndim)
        n = a.shape[d]
        a = _along(a, d, (np.arange(n) - int(s)) % n) if n and int(s) % n else a
    return a


def diff(a: Expr, n: int = 1, axis: int = -1, prepend: Any = np._NoValue, append: Any = np._NoValue) -> Expr:
    """``np.diff``: ``n``-th differences along ``axis``, after ``prepend`` / ``append``."""
    axis = _axis(axis, a.ndim)
    if prepend is not np._NoValue or append is not np._NoValue:
        width = tuple(1 if d == axis else m for d, m in enumerate(a.shape))
        ends = [np.broadcast_to(v, width) if np.ndim(v) == 0 else v for v in (prepend, append)]
        pieces = [ends[0]] if prepend is not np._NoValue else []
        pieces += [a] + ([ends[1]] if append is not np._NoValue else [])
        a = concatenate(pieces, axis)
    for _ in range(n):
        a = _along(a, axis, slice(1, None)) - _along(a, axis, slice(None, -1))
    return a


def tile(a: Expr, reps: Any) -> Expr:
    """``np.tile``: ``a`` repeated ``reps`` times along each axis."""
    reps = tuple(int(r) for r in np.atleast_1d(reps))
    if len(reps) > a.ndim:
        a = reshape(a, (1,) * (len(reps) - a.ndim) + a.shape)
    reps = (1,) * (a.ndim - len(reps)) + reps
    for d, r in enumerate(reps):
        if r != 1:
            a = _along(a, d, np.arange(a.shape[d] * r) % a.shape[d])
    return a


def repeat(a: Expr, repeats: Any, axis: Any = None) -> Expr:
    """``np.repeat``: each entry repeated ``repeats`` times (or as many as its entry of ``repeats``)."""
    if axis is None:
        a, axis = reshape(a, -1), 0
    axis = _axis(axis, a.ndim)
    return _along(a, axis, np.repeat(np.arange(a.shape[axis]), repeats))


def take(a: Expr, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Expr:
    """``np.take``: the entries at ``indices`` along ``axis`` (the flattened array: None)."""
    if out is not None or mode != "raise":
        raise TracingError("np.take(..., out= / mode=) of a traced array has no rolled form")
    if axis is None:
        a, axis = reshape(a, -1), 0
    return _along(a, _axis(axis, a.ndim), indices)


def _flat(v: Any) -> Expr:
    """``v`` (a rolled array, a traced scalar, numbers) as a flat rolled array."""
    if is_array(v):
        return reshape(v, -1)
    if isinstance(v, Expr):
        return ndarrays.elementwise(lambda z, u: z + u, (operand(np.zeros(1)), v))
    return operand(np.ravel(np.asarray(v, dtype=float)))


def append(arr: Any, values: Any, axis: Any = None) -> Expr:
    """``np.append``: ``values`` after ``arr`` (both flattened: axis None)."""
    if axis is None:
        return concatenate([_flat(arr), _flat(values)])
    return concatenate([arr, values], axis)


def _triangle(upper: bool) -> Any:
    def cut(m: Expr, k: int = 0) -> Expr:
        rows, cols = m.shape[-2:]
        keep = (np.triu if upper else np.tril)(np.ones((rows, cols), dtype=bool), k)
        return ndarrays.elementwise(lambda c, v: apply(ops.OPS["where"], (c, v, 0.0)), (operand(keep * 1.0), m))
    return cut


def diagonal(a: Expr, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """``np.diagonal``: the diagonal (``offset`` above it) over ``axis1`` and ``axis2``, a last axis."""
    m = moveaxis(a, [_axis(axis1, a.ndim), _axis(axis2, a.ndim)], [-2, -1])
    rows, cols = m.shape[-2:]
    i = np.arange(max(0, min(rows + min(offset, 0), cols - max(offset, 0))))
    if not i.size:
        return np.zeros((*m.shape[:-2], 0))
    return getitem(m, (Ellipsis, i - min(offset, 0), i + max(offset, 0)))


def trace(a: Expr, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> Any:
    """``np.trace``: the sum of the diagonal (``offset`` above it) over ``axis1`` and ``axis2``."""
    picked = diagonal(a, offset, axis1, axis2)
    if not np.shape(picked)[-1]:
        return np.zeros(np.shape(picked)[:-1]) if np.ndim(picked) > 1 else 0.0
    return np.sum(picked, axis=-1)


def diag(v: Expr, k: int = 0) -> Expr:
    """``np.diag``: a matrix's ``k``-th diagonal, or the square matrix with a vector there (zeros
    elsewhere: ``zeros.at[rows, cols].set(v)``)."""
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"np.diag: the input must be 1-d or 2-d, got shape {v.shape}")
    m = v.shape[0]
    n = m + abs(k)
    return updates.update(np.zeros((n, n)), (np.arange(m) - min(k, 0), np.arange(m) + max(k, 0)), v, "set")


def vdot(a: Any, b: Any) -> Any:
    """``np.vdot`` of real arrays: the sum of the products of their flattened entries."""
    return np.sum(np.ravel(a) * np.ravel(b))


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None) -> Any:
    """``np.cross`` of 3-vectors (and of 2-vectors: the z component) along the last axis."""
    if axis is not None or (axisa, axisb, axisc) != (-1, -1, -1):
        raise TracingError("np.cross(..., axis=...) of traced arrays has no rolled form: vectors on the last axis")
    n = {np.shape(a)[-1], np.shape(b)[-1]}
    at = lambda v, k: getitem(v, (Ellipsis, k)) if is_array(v) else np.asarray(v)[..., k]  # noqa: E731
    if n == {2}:
        return at(a, 0) * at(b, 1) - at(a, 1) * at(b, 0)
    if n != {3}:
        raise TracingError(f"np.cross of vectors of {sorted(n)} entries has no rolled form (3 or 2)")
    # (entry k reads entries k+1 and k+2 mod 3: one rolled array, also of one 3-vector, whose three
    # scalars stacked were an array traced element by element, vmap's rows included)
    turn = lambda v, k: np.roll(v, -k, axis=-1)  # noqa: E731
    return turn(a, 1) * turn(b, 2) - turn(a, 2) * turn(b, 1)


def kron(a: Any, b: Any) -> Any:
    """``np.kron`` of vectors and of matrices."""
    if np.ndim(a) != np.ndim(b) or np.ndim(a) not in (1, 2):
        raise TracingError("np.kron of traced arrays: vectors or matrices of the same dimension")
    if np.ndim(a) == 1:
        return np.reshape(np.einsum("i,j->ij", a, b), (-1,))
    (m, n), (p, q) = np.shape(a), np.shape(b)
    return np.reshape(np.einsum("ij,kl->ikjl", a, b), (m * p, n * q))


def accumulate(kind: str, a: Expr, axis: Any = None) -> Expr:
    """The running product, maximum or minimum along ``axis`` (the flattened array: None): NumPy's
    ``np.cumprod``, ``np.maximum.accumulate``, ``np.minimum.accumulate``, as a scan over the axis."""
    from symgrad.expr import scans  # (scans builds on ndarrays, as this module)

    if axis is None:
        a, axis = reshape(a, -1), 0
    axis = _axis(axis, a.ndim)
    rows = moveaxis(a, axis, 0) if axis else a
    n = rows.shape[0]
    if n == 1:
        return a
    combine = {"prod": lambda c, r: c * r, "max": np.maximum, "min": np.minimum}[kind]
    # The scan's node is every carry, the first row its initial one: the running values themselves
    # (no concatenation copying them after the loop).
    shape = rows.shape[1:] or (1,)
    stack = reshape(rows, (n, *shape))
    c, r = scans.placeholder(shape), scans.placeholder(shape)
    R = scans.make(combine(c, r), c, getitem(stack, (0,)), [(r, getitem(stack, (slice(1, None),)))], [])
    out = reshape(R, rows.shape)
    return moveaxis(out, 0, axis) if axis else out


def _round(a: Expr, decimals: int = 0, out: Any = None) -> Expr:
    """``np.round``: to ``decimals`` places, half to even; derivative 0."""
    if out is not None:
        raise TracingError("np.round(..., out=...) of a traced array has no rolled form")
    scale = 10.0 ** decimals
    return ndarrays.elementwise(lambda v: rint(v * scale) / scale, (a,))


def _size(a: Any, axis: Any = None) -> int:
    return math.prod(a.shape) if axis is None else a.shape[int(axis)]


FUNCTIONS.update({
    np.zeros_like: _like(0.0), np.ones_like: _like(1.0), np.empty_like: _like(0.0), np.full_like: _like(None),
    np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim, np.size: _size, np.copy: lambda a, **kw: a,
    np.flip: flip, np.fliplr: lambda m: flip(m, 1), np.flipud: lambda m: flip(m, 0), np.roll: roll,
    np.diff: diff, np.tile: tile, np.repeat: repeat, np.take: take, np.append: append,
    np.triu: _triangle(True), np.tril: _triangle(False), np.trace: trace, np.vdot: vdot, np.cross: cross,
    np.diagonal: diagonal, np.diag: diag, np.diagflat: lambda v, k=0: diag(reshape(v, -1), k),
    np.kron: kron, np.round: _round, np.around: _round, np.broadcast_to: broadcast_to,
    np.cumprod: lambda a, axis=None, dtype=None, out=None: accumulate("prod", a, axis),
})
dispatch.ACCUMULATE.update({ufunc: lambda a, axis, kind=kind: accumulate(kind, a, axis)
                            for ufunc, kind in ((np.multiply, "prod"), (np.maximum, "max"), (np.minimum, "min"))})
