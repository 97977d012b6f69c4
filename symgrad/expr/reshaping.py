"""Rolled arrays' axes moved, joined and cut: ``np.transpose``, ``np.moveaxis``, ``np.squeeze``,
``np.concatenate`` / ``np.stack`` (each element read from the array its position falls in),
``np.split`` and ``np.pad``. (``reshape`` itself, which elements and indexing build on, is in
``ndarrays.py``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr import ops, rolled
from symgrad.expr.build import apply, const
from symgrad.expr.ndarrays import _axes, element, fresh, from_elements, getitem, is_array, operand, reshape
from symgrad.expr.node import Expr, TracingError


def transpose(arr: Expr, axes: Any = None) -> Expr:
    """``np.transpose``: the axes permuted (reversed by default).

    >>> import symgrad as sg
    >>> transpose(sg.array("A", (2, 3))).shape
    (3, 2)
    """
    order = tuple(reversed(range(arr.ndim))) if axes is None else tuple(int(a) % arr.ndim for a in axes)
    J = fresh(tuple(arr.shape[d] for d in order))
    idx = [None] * arr.ndim
    for j, d in zip(J, order):
        idx[d] = j
    return rolled.tensor(element(arr, tuple(idx)), *J)


MAX_PIECES = 16  # arrays joined by one concatenate / stack in rolled form (a constraint vector: 12)
INLINED_PARTS = 8  # parts up to which a concatenation inlines their formulas (an LSTM's gates: 4)


def concatenate(arrays: Any, axis: int | None = 0, out: Any = None, **rest: Any) -> Expr:
    """``np.concatenate``: each output element read from the array its position falls in (the
    others' reads, out of their range there, guarded).

    >>> import symgrad as sg
    >>> x, y = sg.array("x", 2), sg.array("y", 1)
    >>> concatenate([x, y])
    tensor(where(j < 2, x[j], y[j - 2]), j=0..2)
    """
    arrays = [operand(a if isinstance(a, Expr | np.ndarray) else _listed(a)) for a in arrays]
    if axis is None:
        arrays, axis = [reshape(a, -1) if is_array(a) else a for a in arrays], 0
    if out is not None or not all(is_array(a) for a in arrays):
        raise TracingError("np.concatenate of traced arrays with scalars or out= has no rolled form")
    if len(arrays) > MAX_PIECES:  # each element a chain of that many branches (and its derivative worse)
        raise TracingError(f"np.concatenate / np.stack of {len(arrays)} arrays (a Python loop over rows?): "
                           "traced element by element; sg.vmap maps a function over rows as one loop")
    axis = int(axis) % arrays[0].ndim
    shapes = [a.shape[:axis] + a.shape[axis + 1:] for a in arrays]
    if any(len(a.shape) != arrays[0].ndim or s != shapes[0] for a, s in zip(arrays, shapes)):
        raise ValueError(f"concatenate: shapes {[a.shape for a in arrays]} differ off axis {axis}")
    sizes = [a.shape[axis] for a in arrays]
    J = fresh(arrays[0].shape[:axis] + (sum(sizes),) + arrays[0].shape[axis + 1:])
    starts = np.cumsum([0, *sizes]).tolist()
    value = None
    for a, start, stop in reversed(list(zip(arrays, starts, starts[1:]))):
        at = J[:axis] + (J[axis] - start if start else J[axis],) + J[axis + 1:]
        # Past INLINED_PARTS parts, a part computed is read, not inlined: each element tests its
        # index against every part, and so does each read's adjoint (a constraint vector of 12 parts:
        # its Lagrangian's gradient took 7x the primal's time, not 3x).
        inline = len(arrays) <= INLINED_PARTS or a.op.name != "tensor" or a.args[0].op.name in ("load", "const")
        at = element(a, at) if inline else apply(ops.load, (a, *at))
        value = at if value is None else apply(ops.OPS["where"], (J[axis] < float(stop), at, value))
    return rolled.tensor(rolled.tidy(value), *J)


def _listed(a: Any) -> Any:
    """A list (or tuple) in a concatenation as an array: of numbers, NumPy's; holding traced scalars
    (``[np.sum(x) - 1]`` closing a constraint vector), a rolled array of them."""
    values = np.array(a, dtype=object)
    if any(isinstance(e, Expr) for e in values.ravel()):
        return from_elements(values)
    return np.asarray(a, dtype=float)


def stack(arrays: Any, axis: int = 0, out: Any = None, **rest: Any) -> Expr:
    """``np.stack``: the arrays along a new axis.

    >>> import symgrad as sg
    >>> stack([sg.array("x", 3), sg.array("y", 3)], axis=1).shape
    (3, 2)
    """
    arrays = [operand(a) for a in arrays]
    if not all(is_array(a) for a in arrays):
        raise TracingError("np.stack of traced arrays with scalars or constants has no rolled form")
    axis = int(axis) % (arrays[0].ndim + 1)
    grown = [reshape(a, a.shape[:axis] + (1,) + a.shape[axis:]) for a in arrays]
    return concatenate(grown, axis, out)


def split(a: Expr, indices_or_sections: Any, axis: int = 0, even: bool = True) -> list[Expr]:
    """``np.split`` / ``np.array_split`` (``even=False``): slices along ``axis``.

    >>> import symgrad as sg
    >>> [p.shape for p in split(sg.array("x", 10), [3, 8])]
    [(3,), (5,), (2,)]
    """
    axis = int(axis) % a.ndim
    n = a.shape[axis]
    if isinstance(indices_or_sections, int | np.integer):
        k = int(indices_or_sections)
        if k < 1 or even and n % k:
            raise ValueError(f"array split does not result in an equal division: {n} into {k}")
        cuts = [i * (n // k) + min(i, n % k) for i in range(1, k)]
    else:
        cuts = [int(c) for c in indices_or_sections]
    bounds = zip([0, *cuts], [*cuts, n])
    return [getitem(a, (slice(None),) * axis + (slice(lo, hi),)) for lo, hi in bounds]


def moveaxis(a: Expr, source: Any, destination: Any) -> Expr:
    """``np.moveaxis`` (and ``np.swapaxes`` through it): a transpose.

    >>> import symgrad as sg
    >>> moveaxis(sg.array("A", (2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    src = [int(s) % a.ndim for s in np.atleast_1d(source)]
    dst = [int(d) % a.ndim for d in np.atleast_1d(destination)]
    order = [d for d in range(a.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def squeeze(a: Expr, axis: Any = None) -> Expr:
    """``np.squeeze``: the size-1 axes (or those named) dropped.

    >>> import symgrad as sg
    >>> squeeze(sg.array("A", (1, 3, 1))).shape
    (3,)
    """
    axes = {d for d in range(a.ndim) if a.shape[d] == 1} if axis is None else _axes(axis, a.ndim)
    if any(a.shape[d] != 1 for d in axes):
        raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one (shape {a.shape})")
    shape = tuple(d for i, d in enumerate(a.shape) if i not in axes)
    return reshape(a, shape) if shape else element(a, (const(0.0),) * a.ndim)


def pad(a: Expr, pad_width: Any, mode: str = "constant", constant_values: Any = 0.0) -> Expr:
    """``np.pad`` in modes ``constant`` (one value) and ``wrap``: each element read where it
    falls in ``a``, or the constant.

    >>> import symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(pad(x, (1, 2)), {x: [1, 2, 3]})
    array([0., 1., 2., 3., 0., 0.])
    """
    widths = np.broadcast_to(np.asarray(pad_width, dtype=int), (a.ndim, 2))
    if mode not in ("constant", "wrap") or np.ndim(constant_values) or (widths < 0).any():
        raise TracingError(f"np.pad(mode={mode!r}, constant_values={constant_values!r}) of a traced array has no "
                           "rolled form (modes constant, with one value, and wrap have)")
    J = fresh(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, widths.tolist())))
    inside, address = [], []
    for j, n, (lo, hi) in zip(J, a.shape, widths.tolist()):
        at = j - lo if lo else j
        address.append(rolled.canonical(at % n) if mode == "wrap" and (lo or hi) else at)
        if mode == "constant" and lo:
            inside.append(j >= float(lo))
        if mode == "constant" and hi:
            inside.append(j <= float(lo + n - 1))
    value = element(a, tuple(address)) if not inside else rolled.subscript(a, tuple(address), guarded=True)
    for condition in inside:
        value = apply(ops.OPS["where"], (condition, value, float(constant_values)))
    return rolled.tensor(rolled.tidy(value), *J)
