"""The rows of a rolled vector split into pieces on which their formulas are simpler.

A concatenation's rows are ``where(i < 2p, errors[i // 2, i % 2], 1 - w[i - 2p]**2)``: every row holds
both branches and its own ``i // 2``. Split at the points where a condition on ``i`` changes, and
each range into rows ``lo + d*j + r`` (``d`` the period of the ``%`` and ``//`` in the addresses),
each piece is a tensor over ``j`` whose conditions are decided and whose addresses are affine in
``j`` where they were so on its rows: the reprojection's two rows ``2j`` and ``2j + 1`` become two
formulas over ``j`` that share the observation's work, and the weights' rows keep theirs alone.
Every rewritten address or condition is checked against its values on the piece's rows: a piece
equals its rows, whatever the split.
"""

from __future__ import annotations

import math

import numpy as np

from symgrad.expr.build import apply, const
from symgrad.expr.node import Expr
from symgrad.expr.rolled import canonical, index, substitute_indices
from symgrad.expr.sparsity import _COMPARE, _INTEGER, _decided, _Grid, _indexed, _inlined
from symgrad.expr.traverse import topo_order

CUTS_MAX = 4  # a condition changing more often over the rows (i % 2 == 0) is left to the rows
PIECE_MIN = 64  # rows: a shorter range stays with its neighbour, its conditions undecided
PERIOD_MAX = 8  # rows lo + d*j + r for r < d: d formulas over j where each had one over i
_INDEX_OPS = frozenset({"neg", *_INTEGER})  # (the arithmetic _indexed evaluates)


def row_pieces(rows: Expr) -> list[tuple[Expr, np.ndarray]]:
    """``rows`` (a tensor over one index ``i``, the tensors it reads inlined) as pieces: each a tensor
    over a new index and the row each of its elements is.

    >>> import numpy as np, symgrad as sg
    >>> x, i = sg.array("x", 300), sg.index("i", 300)
    >>> rows = sg.tensor(sg.where(i < 200, x[i // 2] * (i % 2 + 1), x[299 - i]), i)
    >>> for piece, at in row_pieces(rows):
    ...     print(piece, at[:3].tolist())
    tensor(x[i], i=0..99) [0, 2, 4]
    tensor(2*x[i], i=0..99) [1, 3, 5]
    tensor(x[99 - i], i=0..99) [200, 201, 202]
    """
    if rows.op.name != "tensor" or len(rows.args) != 2:
        raise NotImplementedError("row pieces: the rows of a rolled vector (a tensor over one index)")
    body, i = _inlined(rows.args[0]), rows.args[1]
    n = i.payload[1]
    marks: dict[Expr, bool] = {}
    for node in topo_order([body]):
        marks[node] = _marked(node, marks)
    pure, grid = [node for node in marks if node.free == {i}], _Grid((i,))
    cuts = set()
    for node in pure:
        if node.op.name in _COMPARE and marks[node]:
            holds = np.broadcast_to(_decided(node, grid), (n,))
            changes = np.flatnonzero(holds[1:] != holds[:-1]) + 1
            if changes.size <= CUTS_MAX:
                cuts.update(changes.tolist())
    edges = [0]
    for cut in sorted(cuts):  # (a first or last row apart: a formula more to compile, no work saved)
        if cut - edges[-1] >= PIECE_MIN and n - cut >= PIECE_MIN:
            edges.append(cut)
    edges.append(n)
    if len(edges) == 2 and _period(pure) == 1:
        return [(apply(rows.op, (body, i)), np.arange(n))]
    pieces = []
    for lo, hi in zip(edges, edges[1:]):
        j = index(i.payload[0], hi - lo)
        piece = _decided_on(substitute_indices(body, {i: j + lo}), j)
        d = _period([node for node in topo_order([piece]) if node.free == {j}])
        if d == 1 or d > PERIOD_MAX or (hi - lo) % d:
            pieces.append((apply(rows.op, (piece, j)), lo + np.arange(hi - lo)))
            continue
        j = index(i.payload[0], (hi - lo) // d)
        for r in range(d):
            piece = _decided_on(substitute_indices(body, {i: d * j + (lo + r)}), j)
            pieces.append((apply(rows.op, (piece, j)), lo + r + d * np.arange(j.payload[1])))
    return pieces


def _period(nodes: list[Expr]) -> int:
    """The least common multiple of the divisors of the ``%`` and ``//`` among ``nodes``."""
    return math.lcm(*(abs(int(node.args[1].payload)) for node in nodes if node.op.name in ("mod", "floor_divide")
                      and node.args[1].op.name == "const" and float(node.args[1].payload).is_integer()))


def _decided_on(body: Expr, j: Expr) -> Expr:
    """``body`` with each comparison of ``j`` alone that is the same at every ``j`` replaced by its value,
    and each address part of ``j`` alone that is affine in ``j`` over its range written so."""
    grid, count = _Grid((j,)), j.payload[1]
    new: dict[Expr, Expr] = {}
    marks: dict[Expr, bool] = {}
    for node in topo_order([body]):
        args = tuple(new.get(a, a) for a in node.args)
        built = node if all(a is b for a, b in zip(args, node.args)) else apply(node.op, args, node.payload)
        new[node], marks[built] = built, _marked(built, marks)
        if built.free != {j} or not marks[built]:
            continue
        if built.op.name in _COMPARE:
            holds = np.broadcast_to(_decided(built, grid), (count,))
            if holds.all() or not holds.any():
                new[node] = const(1.0 if holds[0] else 0.0)
            continue
        values = np.broadcast_to(_indexed(built, grid), (count,))
        step = int(values[1] - values[0]) if count > 1 else 0
        if np.array_equal(values, values[0] + step * np.arange(count)):
            new[node] = canonical(step * j + int(values[0])) if step else const(float(values[0]))
            marks[new[node]] = True
    return new[body]


def _marked(node: Expr, marks: dict) -> bool:
    """Whether ``node`` is index arithmetic, or a comparison of it, given ``marks`` of its arguments."""
    name = node.op.name
    if name == "const":
        return float(node.payload).is_integer()
    if name in ("index", "table"):
        return True
    if name == "load":
        return node.args[0].op.name == "table" and all(marks.get(a, False) for a in node.args[1:])
    return (name in _INDEX_OPS or name in _COMPARE) and all(marks.get(a, False) for a in node.args)
