"""Indexed expressions, the user's side: ``sg.array``, ``sg.index``, ``sg.sum`` / ``max`` / ``min``,
``sg.tensor``, ``sg.table``, ``sg.unroll``.

A formula written once at index ``i`` stands for every ``i``: its size (and the time to
differentiate and compile it) does not depend on the arrays' sizes. The nodes and their
checks live in ``symgrad.expr.rolled``; this module is the API over them.
"""

from __future__ import annotations

from typing import Any

from symgrad.expr import rolled
from symgrad.expr.node import Expr
from symgrad.expr.rolled import array, index, table, tensor, unroll

__all__ = ["array", "index", "max", "min", "sum", "table", "tensor", "unroll"]


def _reduce(kind: str, body: Any, indices: tuple) -> Expr:
    if not indices:
        if not (isinstance(body, Expr) and body.op.array_valued):
            raise TypeError(f"sg.{kind}: give the index symbol(s) to reduce over, as in sg.{kind}(x[i] ** 2, i)")
        indices = rolled.fresh_indices(body)
        body = rolled.subscript(body, indices)
    for i in reversed(indices):  # the first index outermost
        body = rolled.reduce(kind, body, i)
    return body


def sum(body: Any, *indices: Expr) -> Expr:  # noqa: A001 - sg.sum, as np.sum
    """The sum of ``body`` over the index symbols ``indices`` (all of an array's elements, given an array).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 4), sg.index("i", 3)
    >>> f = sg.sum((x[i + 1] - x[i]) ** 2, i)
    >>> f, sg.evaluate(f, {x: [0.0, 1.0, 3.0, 6.0]})
    (sum((x[i + 1] - x[i])**2, i=0..2), 14.0)
    """
    return _reduce("sum", body, indices)


def max(body: Any, *indices: Expr) -> Expr:  # noqa: A001
    """The largest value of ``body`` over ``indices``; its derivative is shared evenly among ties.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> sg.evaluate(sg.max(x[i], i), {x: [1.0, 5.0, 2.0]})
    5.0
    """
    return _reduce("max", body, indices)


def min(body: Any, *indices: Expr) -> Expr:  # noqa: A001
    """The smallest value of ``body`` over ``indices``; its derivative is shared evenly among ties.

    >>> import symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(sg.min(x), {x: [1.0, 5.0, 2.0]})
    1.0
    """
    return _reduce("min", body, indices)
