"""The ranges a one-dimensional loop runs in (``_partition``): runs of iterations in which every
guarded read is inside its array, each emitted with the comparisons of the index its range settles
folded (``_within``), apart from the few iterations between them. loop_source.py emits a loop per
range.
"""

from __future__ import annotations

from symgrad.expr.node import Expr
from symgrad.expr.rolled import affine, index, settled, substitute_indices, value_range
from symgrad.expr.traverse import rewrite, topo_order


def _within(renamed: list, i: Expr, lo: int, hi: int) -> tuple[Expr, list] | None:
    """The bodies (and addresses) over ``lo <= i < hi`` as functions of a new index ``j`` (i = j + lo),
    with the comparisons of ``i`` that range decides folded (``where(i < 1, a, b)`` is ``b`` past the
    first iteration: the read ``a`` needs, guarded, is gone); None where none is decided."""
    j = index(f"{i.payload[0].split('#')[0]}#{lo}", hi - lo)
    shift = {i: j + lo}
    shifted = [substitute_indices(b, shift) for b, _ in renamed]  # (apply folds the comparisons it settles)
    found = [_decided(b) for b in shifted]
    if sum(map(_comparisons, found)) == sum(_comparisons(b) for b, _ in renamed):
        return None
    return j, [(f, [substitute_indices(a, shift) for a in addresses]) for f, (_, addresses) in zip(found, renamed)]


def _comparisons(e: Expr) -> int:
    """How many comparisons of index arithmetic ``e`` makes (none of them the arrays' it reads)."""
    return sum(1 for n in topo_order([e], _ARRAYS) if n.op.name in _COMPARED and n.free)


def _decided(e: Expr) -> Expr:
    """``e`` with each comparison of index arithmetic whose sides' ranges settle it as 1 or 0 (those apply
    did not settle as it substituted: of two bare indices, which its rules do not look at)."""
    def rule(node: Expr, args: tuple) -> Expr | None:
        return settled(node.op.name, *args) if node.op.name in _COMPARED else None

    return rewrite([e], rule, known=_ARRAYS).get(e, e)  # (the arrays it reads are computed elsewhere)


def _index_form(a: Expr) -> tuple | None:
    """``a`` as (affine's (coefficients, constant), d) where it is index arithmetic, an affine one
    or one floor-divided by a positive constant d (``i // 14 < 3``: the layers of a stack), else
    None (a comparison may compare values: ``x[i] < 0.5``)."""
    try:
        value_range(a)
    except (TypeError, OverflowError):
        return None
    divisor = 1
    if a.op.name == "floor_divide" and a.args[1].op.name == "const" and a.args[1].payload > 0:
        a, divisor = a.args[0], int(a.args[1].payload)
    form = affine(a)
    return None if form is None else (form, divisor)


class _Arrays:
    """Array-valued nodes, as topo_order's ``known``: a walk of a loop's body stops at the arrays it reads."""

    def __contains__(self, node: Expr) -> bool:
        return node.op.array_valued


_ARRAYS = _Arrays()
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}  # k op (i + c) is (i + c) flipped k
_ORDERINGS = frozenset(_FLIPPED)  # comparisons monotone in a - b: settled by its range's ends
_COMPARED = _ORDERINGS | {"eq", "ne"}


def _partition(i: Expr, bodies: list[Expr]) -> list[tuple[int, int, bool]]:
    """The ranges a one-dimensional loop over ``i`` runs in, each with whether it is a run of its
    own: the runs of iterations between the points where a guarded read at ``i + c`` enters or
    leaves its array (``x[i - 1]``, ``x[i + 1]``: all but the first and the last) or a comparison of
    ``i + c`` with a constant flips (a concatenation's parts), of at least ``RUN`` iterations (the
    ``RUNS`` longest), apart from the iterations between them. In a run the guards hold by its
    range (LLVM removes them and vectorises, where otherwise it peels iterations off: LLVM 22 can
    abort doing that), and the comparisons it settles are folded (_within). One range when there
    is nothing to split (a run if it compares ``i``: its comparisons may all be settled)."""
    n = i.payload[1]
    cuts, compared = {0, n}, False
    for node in topo_order(bodies, _ARRAYS):
        if node.op.name == "load" and node.payload == "guarded":
            for a, size in zip(node.args[1:], node.args[0].shape):
                form = affine(a)
                if form is not None and len(form[0]) == 1 and form[0].get(i) == 1:
                    cuts |= {-form[1], size - form[1]}
        elif node.op.name in _ORDERINGS:
            forms = [_index_form(a) for a in node.args]
            if all(f is not None for f in forms) and [len(f[0][0]) for f in forms] in ([1, 0], [0, 1]):
                op = node.op.name if forms[0][0][0] else _FLIPPED[node.op.name]  # as (i + c) // d op k
                (form, divisor), ((_, k), _) = forms if forms[0][0][0] else forms[::-1]
                if form[0].get(i) == 1:  # true for i < k*d - c (lt), i < (k + 1)*d - c (le), ...: flips at
                    cuts.add((k + (op in ("le", "gt"))) * divisor - form[1])
                    compared = True
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    if len(cuts) == 2:  # (its comparisons may still be settled: gates[28:42] of a concatenation of four)
        return [(0, n, compared)]
    runs = sorted((r for r in zip(cuts, cuts[1:]) if r[1] - r[0] >= RUN), key=lambda r: r[0] - r[1])[:RUNS]
    runs = sorted(runs or [max(zip(cuts, cuts[1:]), key=lambda r: r[1] - r[0])])
    ranges, at = [], 0
    for lo, hi in runs:
        ranges += [(at, lo, False)] * (at < lo) + [(lo, hi, True)]
        at = hi
    return ranges + [(at, n, False)] * (at < n)


RUN, RUNS = 8, 8  # (each run is a copy of the loop's body: a concatenation of parts has one a part)
