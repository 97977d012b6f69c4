"""JAX's functional updates, ``x.at[idx].set(v)`` (``add``, ``multiply``, ``divide``, ``power``,
``min``, ``max``, ``get``): a new array, ``x`` unchanged, on traced arrays (rolled or element by
element) and on the arrays ``symgrad.numpy`` makes.

A constant index (ints, slices, integer arrays: any NumPy index) is resolved once, with NumPy, into
the positions it hits: the update is a ``where`` over those positions, the new values gathered from
``v`` at constant addresses (the last of repeated positions wins for ``set``, as NumPy's assignment;
``add`` sums them, through a constant 0/1 matrix; the others apply in turn). A traced index (a
scalar, as a loop counter) tests each position along its axis (``arange(n) == i``); an index out of
range updates nothing (JAX's default, ``mode="drop"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr import ndarrays
from symgrad.expr.functions import wrap
from symgrad.expr.node import Expr, TracingError

# kind -> (NumPy's ufunc combining an entry with v, None: v replaces it; what the method does)
_OPS: dict[str, tuple] = {
    "set": (None, "replaced by"), "add": (np.add, "plus (repeated positions: each time)"),
    "multiply": (np.multiply, "times"), "divide": (np.divide, "divided by"), "power": (np.power, "to the power"),
    "min": (np.minimum, "the minimum of theirs and"), "max": (np.maximum, "the maximum of theirs and"),
}


class At:
    """``x.at``: index it (``x.at[idx]``) for an update of those entries.

    >>> import numpy as np, symgrad as sg
    >>> f = lambda x: np.sum(x.at[1].set(0.0) * x)
    >>> sg.grad(f)(np.array([1.0, 2.0, 3.0]))
    array([2., 0., 6.])
    """

    __slots__ = ("x",)

    def __init__(self, x: Any) -> None:
        self.x = x

    def __getitem__(self, idx: Any) -> Ref:
        return Ref(self.x, idx)


class Ref:
    """``x.at[idx]``: its methods return the updated array."""

    __slots__ = ("x", "idx")

    def __init__(self, x: Any, idx: Any) -> None:
        self.x, self.idx = x, idx

    def get(self, **_: Any) -> Any:
        """``x[idx]``."""
        return self.x[self.idx]


def _method(kind: str) -> Any:
    def method(self: Ref, v: Any, **_: Any) -> Any:
        return update(self.x, self.idx, v, kind)

    method.__name__ = method.__qualname__ = kind
    method.__doc__ = f"``x`` with the entries at ``idx`` {_OPS[kind][1]} ``v``."
    return method


def _traced(k: Any) -> bool:
    return isinstance(k, Expr) and k.op.name != "const"


def update(x: Any, idx: Any, v: Any, kind: str) -> Any:
    """``x.at[idx].<kind>(v)``: the updated array (see the module's docstring).

    >>> import numpy as np
    >>> update(np.zeros(4), np.array([1, 1, 3]), 1.0, "add")
    array([0., 2., 0., 1.])
    """
    key = idx if isinstance(idx, tuple) else (idx,)
    if isinstance(x, np.ndarray) and x.dtype == object and not any(isinstance(e, Expr) for e in x.flat):
        x = np.array(x, dtype=float)  # (jnp.zeros(n, dtype=w.dtype) of a traced w: numbers, updated rolled)
    if any(map(_traced, key)):
        return _at_traced(x, key, v, kind)
    shape = tuple(x.shape)
    positions = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[idx]
    if not _symbolic(x) and not _symbolic(v):  # numbers: NumPy's own (C order: reshape(-1) is a view of it,
        out = np.array(x, order="C")  # not of a copy the update would be lost in, as for x.T)
        values = np.broadcast_to(v, positions.shape).ravel()
        if kind == "set":
            out.reshape(-1)[positions.ravel()] = values
        else:
            _OPS[kind][0].at(out.reshape(-1), positions.ravel(), values)
        return out.view(type(x)) if isinstance(x, np.ndarray) else out
    flat = positions.ravel()
    if kind == "set" or kind != "add" and np.unique(flat).size == flat.size:
        return _layer(x, flat, v, positions.shape, kind)
    if kind == "add":
        return x + _added(flat, v, positions.shape, shape)
    out, layers = x, _layers(flat)
    for take in layers:  # (repeated positions: one pass per repetition, each a where)
        out = _layer(out, flat[take], _values(v, positions.shape)[take], None, kind)
    return out


def _combined(x: Any, v: Any, kind: str) -> Any:
    ufunc = _OPS[kind][0]
    return v if ufunc is None else ufunc(x, v)


def _symbolic(v: Any) -> bool:
    return isinstance(v, Expr) or isinstance(v, np.ndarray) and v.dtype == object


def _values(v: Any, shape: tuple) -> Any:
    """``v`` broadcast to ``shape``, flat."""
    return np.reshape(v * np.ones(shape) if np.shape(v) != shape else v, -1)


def _layer(x: Any, flat: np.ndarray, v: Any, shape: tuple | None, kind: str) -> Any:
    """``x`` updated at the flat positions ``flat`` (the last of a repeated one wins) with ``v``."""
    size = int(np.prod(x.shape, dtype=np.int64))
    source = np.full(size, -1)
    source[flat] = np.arange(flat.size)
    hit = (source >= 0).reshape(x.shape)
    if np.ndim(v) == 0:
        new = v
    else:
        values = _values(v, shape) if shape is not None else v
        new = values[np.where(source >= 0, source, 0)].reshape(x.shape)
    return wrap(np.where(hit, _combined(x, new, kind), x))  # (NumPy's where of an Array and a SymArray: plain)


def _added(flat: np.ndarray, v: Any, shape: tuple, x_shape: tuple) -> Any:
    """The sum at each position of ``x_shape`` of the entries of ``v`` (broadcast to ``shape``) that
    ``flat`` sends there: a constant 0/1 matrix times them where positions repeat, a gather if not."""
    size = int(np.prod(x_shape, dtype=np.int64))
    if np.unique(flat).size == flat.size:
        return _layer(np.zeros(x_shape), flat, v, shape, "set")
    M = np.zeros((size, flat.size))
    np.add.at(M, (flat, np.arange(flat.size)), 1.0)
    return (M @ _values(v, shape)).reshape(x_shape)


def _layers(flat: np.ndarray) -> list[np.ndarray]:
    """The entries of ``flat`` by repetition: the first time each position comes, the second, ..."""
    order = np.argsort(flat, kind="stable")
    rank = np.empty(flat.size, dtype=np.int64)
    sorted_flat = flat[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_flat)) + 1]
    counts = np.diff(np.r_[starts, flat.size])
    rank[order] = np.arange(flat.size) - np.repeat(starts, counts)
    return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1 if flat.size else 0)]


def _at_traced(x: Any, key: tuple, v: Any, kind: str) -> Any:
    """A traced index: scalars (a loop's counter) on the leading axes, whole axes (``:``) between."""
    shape = tuple(x.shape)
    if len(key) > len(shape) or not all(_traced(k) or isinstance(k, int | np.integer) or k == slice(None)
                                        for k in key):
        raise TracingError(f"x.at[{key}] with a traced index: only scalar indices (and ':') are supported, "
                           f"on an array of shape {shape}")
    hit, scalar_axes = True, []
    for axis, k in enumerate(key):
        if isinstance(k, slice):
            continue
        n = shape[axis]
        k = np.where(k < 0, k + n, k)
        along = np.arange(n).reshape((n,) + (1,) * (len(shape) - axis - 1))
        along = ndarrays.operand(along.astype(float)) if isinstance(x, Expr) else along  # (rolled, not n nodes)
        hit = hit * (along == k) if hit is not True else along == k
        scalar_axes.append(axis)
    if np.ndim(v):
        v = np.expand_dims(v, tuple(a for a in scalar_axes if a < len(shape)))
    return np.where(hit, _combined(x, v, kind), x)


for _kind in _OPS:
    setattr(Ref, _kind, _method(_kind))
Ref.mul = Ref.multiply
