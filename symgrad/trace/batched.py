"""``sg.vmap``: a function of one example mapped over a batch axis, as ``jax.vmap``.

``vmap(fn)`` is a compiled function (``sg.jit``) of the batch. Traced on rolled arrays (large
batches) fn sees one example, placeholders shaped like a row, and the batch is one more index
in the rolled expressions (``symgrad.expr.batching``): one trace, a loop over the rows in the
compiled code, matrix-vector work per example turned into matrix products; so are NumPy arrays
mapped inside a trace (``np.arange(n)``: captured constants). Traced element by element (small
arrays), or where fn needs a row as a Python value, fn is called once per row, results stacked.

It composes: ``sg.vmap(sg.grad(loss), in_axes=(None, 0, 0))`` gives per-example gradients,
``sg.grad(lambda w: np.sum(sg.vmap(f, (None, 0))(w, X)))`` differentiates through a batch.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import numpy as np

from symgrad.expr import batching, ndarrays, rolled, tracing
from symgrad.expr.build import Var, const
from symgrad.expr.functions import wrap
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.traverse import as_expr_list, object_array
from symgrad.trace.captured import WRAPPERS
from symgrad.trace.signature import is_rolled
from symgrad.util import pytree

_fresh = itertools.count(1)


class Batched:
    """The batched function vmap compiles, called on symbolic arguments (inside a trace);
    ``Function.sum`` sums one over the data rows.

    >>> import symgrad as sg
    >>> x = sg.array("X", (4, 3))
    >>> Batched(lambda row: row[0] * row[2])(x).shape
    (4,)
    """

    def __init__(self, fn: Any, in_axes: Any = 0, out_axes: Any = 0) -> None:
        self.fn, self.in_axes, self.out_axes = fn, in_axes, out_axes
        self.__name__ = f"vmap({getattr(fn, '__name__', type(fn).__name__)})"
        try:
            self.__signature__ = inspect.signature(fn)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        axes = _in_axes(self.in_axes, len(args), self.__name__)
        leaves, treedef = pytree.flatten((args, kwargs))
        in_order = (*args, *(kwargs[k] for k in sorted(kwargs)))  # pytree's order: a dict's keys sorted
        leaf_axes = [a for arg, axis in zip(in_order, (*axes, *[0] * len(kwargs)))
                     for a in _per_leaf(arg, axis, self.__name__)]
        size = _size(leaves, leaf_axes, self.__name__)
        ints = [ndarrays.holds_integers(leaf) for leaf in leaves]
        if all(is_rolled(leaf) for leaf, a in zip(leaves, leaf_axes) if a is not None):
            return self._rolled(leaves, leaf_axes, treedef, size, ints)
        captured = [ndarrays.operand(leaf) if a is not None and _numbers(leaf) and tracing.active() else leaf
                    for leaf, a in zip(leaves, leaf_axes)]
        if all(is_rolled(leaf) for leaf, a in zip(captured, leaf_axes) if a is not None):
            try:  # NumPy arrays mapped inside a trace (an np.arange of rows): one trace, not one per row
                return self._rolled(captured, leaf_axes, treedef, size, ints)
            except TracingError:  # (fn needs a row as a Python value: a shape, a range)
                pass
        return self._rows(leaves, leaf_axes, treedef, size)

    def _rolled(self, leaves: list, leaf_axes: list, treedef: Any, size: int, ints: list) -> Any:
        """One call of fn on placeholders for a row, then the batch as an extra index (``ints``: which
        leaves hold integers, whose rows may index)."""
        k = next(_fresh)
        b = rolled.fresh_index(rolled.index("b", size))  # (named from the one counter derivatives use)
        mapped, row_leaves, indices = {}, [], []
        for n, (leaf, axis) in enumerate(zip(leaves, leaf_axes)):
            if axis is None:
                row_leaves.append(leaf)
                continue
            shape = tuple(d for i, d in enumerate(leaf.shape) if i != axis)
            row = rolled.array(f"row#{k}_{n}", shape) if shape else Var(f"row#{k}_{n}")
            mapped[row] = (leaf, axis)
            row_leaves.append(row)
            indices.append(n)
        row_args, row_kwargs = pytree.unflatten(treedef, row_leaves)
        with tracing.integers(row for row, n in zip(mapped, indices) if ints[n]):
            out, out_tree = pytree.flatten(self.fn(*row_args, **row_kwargs))
        out = [_rolled_output(o, self.__name__) for o in out]
        results = batching.batch(out, mapped, b)
        axes = _out_axes(self.out_axes, len(out), self.__name__)
        placed = [_placed(e, axis, to, size, self.__name__) for (e, axis), to in zip(results, axes)]
        return pytree.unflatten(out_tree, placed)

    def _rows(self, leaves: list, leaf_axes: list, treedef: Any, size: int) -> Any:
        """fn called on each row in turn (element-by-element traces), the results stacked."""
        rows = []
        for r in range(size):
            row = [leaf if a is None else _take(leaf, r, a) for leaf, a in zip(leaves, leaf_axes)]
            row_args, row_kwargs = pytree.unflatten(treedef, row)
            rows.append(pytree.flatten(self.fn(*row_args, **row_kwargs)))
        out_tree = rows[0][1]
        if any(t != out_tree for _, t in rows):
            raise ValueError(f"{self.__name__}: the function returned different structures for different rows")
        axes = _out_axes(self.out_axes, len(rows[0][0]), self.__name__)
        stacked = [_stack([r[0][n] for r in rows], axis, self.__name__) for n, axis in enumerate(axes)]
        return pytree.unflatten(out_tree, stacked)



def _numbers(leaf: Any) -> bool:
    return isinstance(leaf, np.ndarray) and leaf.dtype.kind in "biuf" and leaf.ndim > 0 and leaf.size > 0


def _in_axes(spec: Any, n: int, who: str) -> list:
    if spec is None or isinstance(spec, int | np.integer):
        return [spec] * n
    if isinstance(spec, list):
        spec = tuple(spec)
    if not isinstance(spec, tuple) or len(spec) != n:
        raise ValueError(f"{who}: in_axes must be an int, None or a tuple with one entry per positional "
                         f"argument ({n}), got {spec!r}")
    return list(spec)


def _per_leaf(arg: Any, axis: Any, who: str) -> list:
    """The axis of each leaf of one argument: its in_axes entry, an int or None for all of them, or
    a tree of those with the argument's structure down to some depth (JAX's prefix)."""
    try:
        axes = pytree.broadcast_prefix(axis, arg)
    except ValueError:
        raise ValueError(f"{who}: the in_axes entry {axis!r} does not match the argument's structure "
                         f"{pytree.tree_structure(arg)}") from None
    bad = [a for a in axes if a is not None and not isinstance(a, int | np.integer)]
    if bad:
        raise ValueError(f"{who}: each in_axes entry must be an int or None (or a tree of them), got {bad[0]!r}")
    return [None if a is None else _axis(leaf, int(a), who) for leaf, a in zip(pytree.flatten(arg)[0], axes)]


def _axis(leaf: Any, axis: int, who: str) -> int:
    ndim = len(_shape(leaf))
    if not -ndim <= axis < ndim:
        raise ValueError(f"{who}: cannot map over axis {axis} of an argument of shape {_shape(leaf)} "
                         f"(rank {ndim}); give None in in_axes for arguments that are not mapped")
    return axis % ndim


def _shape(leaf: Any) -> tuple:
    return leaf.shape if isinstance(leaf, Expr | np.ndarray) else np.shape(leaf)


def _size(leaves: list, axes: list, who: str) -> int:
    sizes = {_shape(leaf)[a] for leaf, a in zip(leaves, axes) if a is not None}
    if not sizes:
        raise ValueError(f"{who}: in_axes maps no argument (every entry is None)")
    if len(sizes) > 1:
        shapes = [(_shape(leaf), a) for leaf, a in zip(leaves, axes) if a is not None]
        raise ValueError(f"{who}: the mapped axes have different sizes {sorted(sizes)}: "
                         + ", ".join(f"axis {a} of shape {s}" for s, a in shapes))
    return sizes.pop()


def _out_axes(spec: Any, n: int, who: str) -> list:
    if spec is None or isinstance(spec, int | np.integer):
        return [spec] * n
    axes = pytree.flatten(spec)[0] if not isinstance(spec, tuple | list) else list(spec)
    if len(axes) != n:
        raise ValueError(f"{who}: out_axes has {len(axes)} entries for {n} outputs")
    return axes


def _rolled_output(o: Any, who: str) -> Expr:
    """An output of fn on a row as one expression."""
    if isinstance(o, int | float | np.number):
        return const(float(o))
    if isinstance(o, np.ndarray) and o.ndim == 0:
        return _rolled_output(o[()], who)
    if not isinstance(o, Expr):  # (the trace then goes element by element: rows one at a time)
        raise TypeError(f"{who}: the function returned an array built element by element")
    return o


def _placed(e: Expr, axis: int | None, out_axis: Any, size: int, who: str) -> Expr:
    if out_axis is None:
        if axis is not None:
            raise ValueError(f"{who}: an output varies over the batch but its out_axes entry is None")
        return e
    ndim = len(e.shape) + (axis is None)
    if not isinstance(out_axis, int | np.integer) or not -ndim <= out_axis < ndim:
        raise ValueError(f"{who}: out_axes {out_axis} is out of range for an output of rank {ndim}")
    return batching.place(e, axis, out_axis % ndim, size)


def _take(leaf: Any, r: int, axis: int) -> Any:
    if isinstance(leaf, np.ndarray) and leaf.dtype == object:
        return wrap(np.take(leaf, r, axis=axis))
    return leaf[(slice(None),) * axis + (r,)]


def _stack(outs: list, axis: Any, who: str) -> Any:
    if axis is None:  # (hash-consed: the same expression is the same object; == would build one)
        first = as_expr_list(outs[0])
        if any(len(e := as_expr_list(o)) != len(first) or any(a is not b for a, b in zip(e, first)) for o in outs):
            raise ValueError(f"{who}: an output varies over the batch but its out_axes entry is None")
        return outs[0]
    if any(is_rolled(o) for o in outs):
        return np.stack(outs, axis=axis)
    cells = [object_array(o) if not isinstance(o, Expr) else _cell(o) for o in outs]
    return wrap(np.stack(cells, axis=axis))


def _cell(e: Expr) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = e
    return out


WRAPPERS.append(Batched)  # (its fn is the user's: a trace watches what that captures)
