"""The flat argument vectors ``x`` and ``p`` of a ``LoopProgram``: ``Layout``, each array raveled,
then one entry per scalar, in order (read by the loops' source, loop_source.py, and the record,
loop_program.py).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.expr.node import Expr
from symgrad.expr.rolled import shape_of


class Layout(Sequence):
    """The entries of a flat argument vector: each array raveled, then one per scalar, in order.
    Named like ``x[0, 1]`` on demand (an array may have 10**6 elements: no list of names is made).

    >>> import symgrad as sg
    >>> v = Layout([sg.array("x", (2, 2)), sg.Var("a")])
    >>> len(v), v[1], v[-1], v[:2]
    (5, 'x[0, 1]', 'a', ['x[0, 0]', 'x[0, 1]'])
    """

    def __init__(self, exprs: Sequence[Expr]) -> None:
        self.exprs = tuple(exprs)
        sizes = [math.prod(shape_of(v)) if v.op.name == "array" else 1 for v in self.exprs]
        self.starts = [0, *itertools.accumulate(sizes)]
        # One array: calls may pass it in its own shape (the gradient comes back raveled).
        self.shape = self.exprs[0].shape if len(self.exprs) == 1 and self.exprs[0].op.name == "array" else None

    def blocks(self) -> list[tuple[Expr, int, int]]:
        """(input, its first entry, its number of entries), in order."""
        return [(v, a, b - a) for v, a, b in zip(self.exprs, self.starts, self.starts[1:])]

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        k = k + len(self) if k < 0 else k
        if not 0 <= k < len(self):
            raise IndexError(k)
        block = bisect.bisect_right(self.starts, k) - 1
        v = self.exprs[block]
        if v.op.name != "array":
            return v.payload
        where = np.unravel_index(k - self.starts[block], v.shape)
        return f"{v.payload[0]}[{', '.join(str(int(w)) for w in where)}]"

    def __repr__(self) -> str:
        names = (f"{v.payload[0]}{list(v.shape)}" if v.op.name == "array" else v.payload for v in self.exprs)
        return f"({', '.join(names)})"
