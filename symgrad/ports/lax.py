"""The ``jax.lax`` functions symgrad has, under JAX's names: where JAX code reads
``from jax import lax``, ``from symgrad import lax`` runs it unchanged.

>>> import numpy as np
>>> from symgrad import lax
>>> lax.fori_loop(0, 3, lambda i, v: v * 2.0, 1.0)
8.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr.functions import FUNCS
from symgrad.expr.node import TracingError
from symgrad.expr.scan_function import scan
from symgrad.trace.control import cond, fori_loop, switch, while_loop
from symgrad.util import pytree

stop_gradient = FUNCS["stop_gradient"]

__all__ = ["associative_scan", "cond", "dynamic_slice", "dynamic_update_slice", "fori_loop", "map", "scan",
           "select", "sort", "stop_gradient", "switch", "while_loop"]


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``jax.lax.select``: ``on_true`` where ``pred``, else ``on_false`` (``np.where``).

    >>> select(np.array([True, False]), np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    array([1., 4.])
    """
    return np.where(pred, on_true, on_false)


def sort(operand: Any, dimension: int = -1, is_stable: bool = True, num_keys: int = 1) -> Any:
    """``jax.lax.sort`` of one array: ``np.sort`` along ``dimension`` (stable whatever ``is_stable``;
    sorting several operands by keys raises NotImplementedError).

    >>> sort(np.array([3.0, 1.0, 2.0]))
    array([1., 2., 3.])
    """
    if isinstance(operand, tuple | list):
        raise NotImplementedError("lax.sort of several operands (sorting by keys): sort one array, or gather the "
                                  "others with np.argsort of the keys")
    return np.sort(operand, axis=dimension)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001 (JAX's name)
    """``jax.lax.map``: ``f`` applied to each row of ``xs`` (a pytree), results stacked: one scan.
    ``batch_size`` (JAX: rows vmapped together) gives the same results: accepted, checked.

    >>> map(lambda row: row * 2.0, np.array([1.0, 2.0]), batch_size=2)
    array([2., 4.])
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer)
                                   or batch_size < 1):
        raise ValueError(f"lax.map: batch_size must be a positive integer, got {batch_size!r}")
    return scan(lambda carry, x: (carry, f(x)), 0.0, xs)[1]


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0) -> Any:
    """``jax.lax.associative_scan``: the running ``fn``-reduction of ``elems`` (a pytree of arrays)
    along ``axis``, ``out[i] = fn(out[i-1], elems[i])``; ``reverse``: from the end. One scan (in
    order: JAX combines as a tree, so sums round differently), differentiable in every mode.

    >>> associative_scan(np.add, np.arange(1.0, 5.0))
    array([ 1.,  3.,  6., 10.])
    >>> associative_scan(np.multiply, np.arange(1.0, 5.0), reverse=True)
    array([24., 24., 12.,  4.])
    """
    leaves, tree = pytree.flatten(elems)
    lengths = {np.shape(leaf)[axis] if np.ndim(leaf) else None for leaf in leaves}
    if len(lengths) != 1 or None in lengths or 0 in lengths:
        raise ValueError(f"associative_scan: the elements need one non-empty length along axis {axis}, got "
                         f"shapes {[np.shape(leaf) for leaf in leaves]}")
    rows = [np.moveaxis(leaf, axis, 0) for leaf in leaves]
    rows = [row[::-1] for row in rows] if reverse else rows
    first = pytree.unflatten(tree, [row[0] for row in rows])

    def step(carry: Any, x: Any) -> tuple:
        out = fn(carry, x)
        return out, out

    _, ys = scan(step, first, pytree.unflatten(tree, [row[1:] for row in rows]))
    out = [np.concatenate([row[:1], y]) for row, y in zip(rows, pytree.flatten(ys)[0])]
    out = [row[::-1] for row in out] if reverse else out
    return pytree.unflatten(tree, [np.moveaxis(row, 0, axis) for row in out])


def _starts(name: str, shape: tuple, starts: Any, sizes: tuple) -> list[int]:
    """JAX's start indices: one per axis, each clamped so that the slice fits (as JAX clamps them)."""
    starts = list(np.atleast_1d(np.asarray(starts, dtype=object))) if not isinstance(starts, list | tuple) \
        else list(starts)
    if len(starts) != len(shape) or len(sizes) != len(shape):
        raise ValueError(f"lax.{name}: an array of shape {shape} takes {len(shape)} start indices and sizes, got "
                         f"{len(starts)} and {len(sizes)}")
    out = []
    for axis, (s, n, k) in enumerate(zip(starts, shape, sizes)):
        if not (isinstance(s, int | np.integer) or isinstance(s, float | np.floating) and float(s).is_integer()):
            raise TracingError(f"lax.{name}: start index {axis} is {str(s)[:40]}, not a number: symgrad's "
                               "slices start at indices known when the function is traced (pass them as data)")
        if not 0 <= k <= n:
            raise ValueError(f"lax.{name}: a slice of {k} along axis {axis} of an array of shape {shape}")
        out.append(min(max(int(s), 0), n - k))
    return out


def dynamic_slice(operand: Any, start_indices: Any, slice_sizes: Any) -> Any:
    """``jax.lax.dynamic_slice``: the block of ``slice_sizes`` starting at ``start_indices`` (clamped
    into the array, as JAX does).

    >>> dynamic_slice(np.arange(6.0).reshape(2, 3), (1, 2), (1, 2))
    array([[4., 5.]])
    """
    sizes = tuple(int(k) for k in slice_sizes)
    starts = _starts("dynamic_slice", np.shape(operand), start_indices, sizes)
    return operand[tuple(slice(s, s + k) for s, k in zip(starts, sizes))]


def dynamic_update_slice(operand: Any, update: Any, start_indices: Any) -> Any:
    """``jax.lax.dynamic_update_slice``: ``operand`` with the block at ``start_indices`` (clamped, as
    JAX does) replaced by ``update``: a mask choosing between the two, ``update`` padded to shape.

    >>> dynamic_update_slice(np.zeros((2, 3)), np.ones((1, 2)), (1, 5))
    array([[0., 0., 0.],
           [0., 1., 1.]])
    """
    shape, sizes = np.shape(operand), np.shape(update)
    starts = _starts("dynamic_update_slice", shape, start_indices, sizes)
    block = tuple(slice(s, s + k) for s, k in zip(starts, sizes))
    mask = np.zeros(shape, dtype=bool)
    mask[block] = True
    padded = np.pad(update, [(s, n - s - k) for s, n, k in zip(starts, shape, sizes)])
    return np.where(mask, padded, operand)
