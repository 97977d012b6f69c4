"""Reverse mode's gathers: an array's adjoint from the adjoints of its loads.

Each load's address is solved for its indices (``solve``: affine addresses, strides, periodic
``% m``, mixed-radix digits, one-to-one tables through their inverse tables), so the adjoint at
a position is one formula guarded by where the solution lies in range (Halide's scatter-to-gather);
an address that cannot be inverted is scattered (a ``scatter`` node read at the position). The
node constructors, index ranges, substitution and ``tidy`` these build on are in ``rolled.py``.
"""

from __future__ import annotations

import functools

import numpy as np

from symgrad.expr import ops
from symgrad.expr.build import _zero_where, apply
from symgrad.expr.node import Expr, intern
from symgrad.expr.rolled import (
    affine,
    by_name,
    costly,
    fresh_index,
    fresh_indices,
    reduce,
    scatter,
    shape_of,
    substitute_indices,
    table,
    tensor,
    tidy,
    value_range,
)
from symgrad.expr.traverse import substitute, topo_order


def solve(address: Expr, target: Expr, solved: dict, strides: bool = True) -> tuple[Expr, Expr, list[Expr]] | None:
    """Invert ``address = target`` for one index of ``address`` (indices in ``solved`` already known):
    (the index, its expression in ``target`` and the other indices, the conditions for a solution).

    Affine addresses with a coefficient ±1 solve exactly, other coefficients (``strides``) with a
    divisibility condition, ``(affine) % m`` when the index's range fits in one period, and with
    ``strides`` a one-to-one table read at such an address (a permutation: through the inverse
    table, -1 where no entry maps); None otherwise (other tables, several indices without a unit
    coefficient): the caller scatters instead, or (a Jacobian's row, which cannot scatter) tests
    every address: a sum over the table's length at each target, n**3 for an n x n Jacobian.

    >>> from symgrad.expr.rolled import index
    >>> i, j = index("i", 4), index("j", 6)
    >>> solve(i + 2, j, {})  # (j - 2 <= 3 holds over j in 0..5: settled as it is made, 1)
    (i, j - 2, [j - 2 >= 0, 1])
    >>> solve(apply(ops.load, (table([2, 0, 1]), i)), index("k", 3), {})[1]
    [1, 2, 0][k]
    """
    if strides and address.op.name == "load" and address.args[0].op.name == "table" and len(address.args) == 2 \
            and target.op.name == "index":
        inverse = _inverse(address.args[0].payload[1], target.payload[1])
        if inverse is None:
            return None
        at = apply(ops.load, (inverse, target))
        inner = address.args[1]
        if inner.op.name == "index" and inner not in solved:  # (its range may be shorter than the table's)
            return inner, at, [at >= 0, at <= inner.payload[1] - 1]
        step = solve(inner, at, solved, strides)
        return None if step is None else (step[0], step[1], [at >= 0, *step[2]])
    periodic = address.op.name == "mod" and address.args[1].op.name == "const"
    form = affine(address.args[0] if periodic else address)
    if form is None:
        return None
    terms, offset = form
    free = [i for i in terms if i not in solved]
    if not free:
        return None
    digit = None if periodic else _leading_digit(terms, free, strides)
    i = digit if digit is not None else min(free, key=lambda k: (abs(terms[k]) != 1, str(k)))
    c = terms[i]
    rest = sum((terms[k] * (solved.get(k, k)) for k in terms if k is not i and (k in solved or digit is None)),
               intern(ops.OPS["const"], (), 0.0))
    rhs = target - offset - rest
    n = i.payload[1]
    if digit is not None:  # the other free terms lie in 0..c-1: they are the remainder
        value = rhs // c
        return i, value, [value >= 0, value <= n - 1]
    if periodic:
        m = int(address.args[1].payload)
        if abs(c) != 1 or n > m:
            return None
        value = (rhs if c == 1 else -rhs) % m
        return i, value, [value <= n - 1]
    if abs(c) == 1:
        value = _remainder(rhs) if c == 1 else -rhs
        return i, value, [value >= 0, value <= n - 1]
    if not strides:
        return None
    value = rhs // c
    return i, value, [rhs % abs(c) == 0, value >= 0, value <= n - 1]


def _remainder(e: Expr) -> Expr:
    """``a - c*(a // c)`` (what a leading digit leaves) as ``a % c``, whose range, 0..c-1, settles guards."""
    if e.op.name == "sub" and e.args[1].op.name == "mul" and e.args[1].args[0].op.name == "const":
        c, q = e.args[1].args
        if q.op.name == "floor_divide" and q.args[0] is e.args[0] and q.args[1].op.name == "const" \
                and q.args[1].payload == c.payload and c.payload > 0:
            return e.args[0] % int(c.payload)
    return e


def _leading_digit(terms: dict, free: list, strides: bool) -> Expr | None:
    """The index of the largest coefficient where the free terms are the digits of a mixed-radix
    number (``32*j + l``, l in 0..31: a reshaped slice), each coefficient past the largest sum of
    the terms below it: then that index is the target's quotient and the rest its remainder,
    solved one after another, where solving ``l`` alone would leave j to sum over."""
    if len(free) < 2 or any(terms[k] <= 0 for k in free) or not strides and min(terms[k] for k in free) != 1:
        return None  # (without strides the last digit must have a unit coefficient to be solved)
    span, ordered = 0, sorted((k for k in free if k.payload[1] > 1), key=lambda k: terms[k])  # (0..0: no digit)
    for k in ordered:
        if terms[k] <= span:
            return None
        span += terms[k] * (k.payload[1] - 1)
    return ordered[-1] if len(ordered) > 1 else None


@functools.lru_cache(maxsize=64)  # (keyed by the values: == on Exprs builds nodes, no cache key compares them)
def _inverse(entries: tuple, n: int) -> Expr | None:
    """The table of positions of a one-to-one table of ``entries`` (values below ``n``): entry v holds the
    k with entries[k] = v, -1 where none does; None where two entries are equal."""
    values = np.array(entries)
    if values.size > n or np.unique(values).size != values.size or values.min() < 0 or values.max() >= n:
        return None
    out = np.full(n, -1)
    out[values] = np.arange(values.size)
    return table(out)

class Memo(dict):
    """What the gathers of one reverse sweep share: ``rolled.tidy``'s results (node -> tidied node) and, in
    ``costly``, whether a node reaches a costly one (node -> bool). Their adjoints share most of their
    parts: an LSTM's 165 sites each walked the whole step's adjoint again (0.6 s of its first result)."""

    __slots__ = ("costly",)

    def __init__(self) -> None:
        super().__init__()
        self.costly: dict[Expr, bool] = {}


def gather_adjoint(x: Expr, sites: list, outer: tuple = (), memo: Memo | None = None) -> Expr:
    """The adjoint of the input array ``x`` from its loads' adjoints: a tensor over fresh indices
    (over ``outer`` first, when the adjoints vary over a Jacobian's output indices)."""
    targets = fresh_indices(x)
    return tensor(gather(x, sites, targets, outer, memo), *outer, *targets)


def gather(arr: Expr, sites: list, targets: tuple, outer: tuple = (), memo: Memo | None = None) -> Expr:
    """The adjoint of ``arr`` at position ``targets``: the sum over its loads ``(arr[a(I)], w(I))`` of
    the w(I) with a(I) == targets. Each site is inverted (Halide's scatter-to-gather: one formula,
    guarded by where its solution lies in range) where ``solve`` can, and scattered otherwise.
    The ``outer`` indices (a Jacobian's rows) are fixed: never solved for, never summed.
    ``memo``: shared by the gathers of one reverse sweep."""
    memo = Memo() if memo is None else memo
    total = None
    named = frozenset().union(*(t.free for t in targets)).difference(outer)
    for load, w in sites:
        load, w = _apart(load, w, targets, named)
        term = _inverted(load, w, targets, outer, memo)
        if term is None:
            term = _scattered(arr, load, w, targets)
        total = term if total is None else total + term
    return total


def _apart(load: Expr, w: Expr, targets: tuple, named: frozenset) -> tuple[Expr, Expr]:
    """The site with its indices that the targets also name renamed: they are different indices.
    (A Hessian differentiates a first adjoint, a tensor over l reading x[p[l]], into x's adjoint at
    l again: solving or summing the site's l would capture the target's.) Not an index that is a whole
    address at its own target's position and nowhere else: it solves to itself, and keeping it keeps
    the site's body the node the forward pass shares (t[j, u] read in a tensor over j, u)."""
    addresses = load.args[1:]
    same = {a for a, t in zip(addresses, targets)
            if a is t and sum(a in b.free for b in (*addresses, *targets)) == 2}
    clash = load.free.intersection(named).difference(same)
    if not clash:
        return load, w
    fresh = {i: fresh_index(i) for i in by_name(clash)}
    return substitute_indices(load, fresh), substitute_indices(w, fresh)


def _scattered(arr: Expr, load: Expr, w: Expr, targets: tuple) -> Expr:
    """The scatter of ``w`` at the load's addresses, read at ``targets``. A conditional zero around w
    whose condition reads arrays of arr's shape only at those same addresses (``where(x[p[k]] > 0,
    ..., 0)`` for a load of ``x[p[k]]``) is a condition on the target: it is read there, outside the
    scatter, where the rule for * keeps a nan partial of an untaken branch out of the gradient."""
    moved = []
    while (side := _zero_where(w)) is not None:
        at_target = _at_target(w.args[0], load, arr.shape, targets)
        if at_target is None:
            break
        moved.append((at_target, side))
        w = w.args[side]
    term = apply(ops.load, (_scatter(arr, load, w), *targets))
    for condition, side in reversed(moved):
        term = _masked(condition, side, term)
    return term


def _at_target(condition: Expr, load: Expr, shape: tuple, targets: tuple) -> Expr | None:
    """``condition`` with its loads at the load's addresses read at ``targets`` instead, or None where
    it still varies over the load's indices (it reads something else that varies)."""
    if not condition.free.intersection(load.free):
        return condition  # the same at every term of the scatter
    order = topo_order([condition])
    if any(n.op.binds and load.free.intersection(n.args[1:]) for n in order):
        return None  # a reduction inside binds one of those indices: its loads are not the load's
    same = lambda n: len(n.args) == len(load.args) and all(a is b for a, b in zip(n.args[1:], load.args[1:]))  # noqa: E731
    moved = {n: apply(ops.load, (n.args[0], *targets)) for n in order
             if n.op.name == "load" and n.payload is None and n.args[0].shape == shape and same(n)}
    if not moved:
        return None
    out = substitute(condition, moved)
    return None if out.free.intersection(load.free) else out


def _inverted(load: Expr, w: Expr, targets: tuple, outer: tuple, memo: Memo) -> Expr | None:
    solved: dict[Expr, Expr] = {o: o for o in outer}
    guards: list[Expr] = []
    tested = []  # addresses no index can be solved from: tested at every value of their indices
    for address, target in zip(load.args[1:], targets):
        if not address.free and not outer and target.payload[1] > 1:
            return None  # a fixed row (W[2] of a stack of weights): one add per term scattered, where a
            # gather would test every row at every target for each site (an LSTM's: 67 cycles an entry)
        if all(i in solved for i in address.free):
            guards.append(target == (substitute_indices(address, solved) if solved else address))
            continue
        # A stride (2*i + 1) is scattered in gradients: one add per term, where a gather would test
        # divisibility at every target for each site (the spring chain: 1.5x slower). Jacobians
        # (``outer``), which cannot scatter, gather.
        step = solve(address, target, solved, strides=bool(outer))
        if step is None:
            if not outer:
                return None
            tested.append((address, target))  # (a Jacobian's row cannot scatter: a masked sum instead)
            continue
        digits = False
        while step is not None:
            i, value, conditions = step  # (earlier solutions and conditions may read i: in terms of value now)
            solved = {k: substitute_indices(v, {i: value}) for k, v in solved.items()} | {i: value}
            guards = [substitute_indices(g, {i: value}) for g in guards] + conditions
            # A digit of a mixed-radix address leaves the rest to solve from the same address
            # (an index solved in terms of other free ones, i = t - j of x[i + j], does not).
            more = not value.free.intersection(load.free) and address.free.difference(solved)
            digits = digits or bool(more)
            step = solve(address, target, solved, strides=bool(outer)) if more else None
        if digits and address.free.difference(solved):  # (digits left unsolved are summed: tested)
            guards.append(target == substitute_indices(address, solved))
    guards += [target == substitute_indices(address, solved) for address, target in tested]
    term = tidy(_at(w, load, solved, memo.costly), memo)
    for condition in reversed(guards):
        condition = tidy(condition, memo)
        settled = _settled(condition)
        if settled is False:
            return intern(ops.OPS["const"], (), 0.0)
        if settled is None:
            term = ops.where(condition, term, 0.0)
    for i in by_name(load.free.difference(solved)):  # indices no address pins down: summed
        term = reduce("sum", term, i)
    return term


def _at(w: Expr, load: Expr, solved: dict, known: dict) -> Expr:
    """w at the solution. Where w calls transcendental functions or reduces, a load from w
    materialised over the load's indices: computed once per index value (in one loop with the
    other sites' adjoints and the value, by the compiler), however many sites read it shifted.
    Cheap arithmetic is recomputed at each site instead: no temporary array to fill and read.
    A conditional zero around w (``where(c, y, 0)``) stays outside what is materialised, so the
    rule ``x * where(c, y, 0) -> where(c, x*y, 0)`` still keeps a nan partial out where c fails.
    ``known``: Memo.costly."""
    zeros = []  # the conditional zeros around w, outermost first: (condition, the side y is on)
    while (taken := _zero_where(w)) is not None:
        zeros.append((w.args[0], taken))
        w = w.args[taken]
    # Over what w varies over (not broadcast along the load's other indices), in the order the
    # addresses name them: the adjoint of x[r, c] is then that tensor itself.
    order = [*(i for a in load.args[1:] for i in by_name(a.free)), *by_name(w.free)]
    indices = tuple(i for i in dict.fromkeys(order) if i in w.free)  # (w may vary over a Jacobian's rows)
    for n in topo_order([w], known):
        known[n] = costly(n) or any(known[a] for a in n.args)
    if not indices or not known[w]:
        term = substitute_indices(w, solved)
    else:
        term = apply(ops.load, (tensor(w, *indices), *(solved.get(i, i) for i in indices)))
    for condition, taken in reversed(zeros):
        term = _masked(substitute_indices(condition, solved), taken, term)
    return term


def _masked(condition: Expr, side: int, term: Expr) -> Expr:
    """``term`` where ``condition`` holds (``side`` 1) or fails (2), else 0."""
    return ops.where(condition, term, 0.0) if side == 1 else ops.where(condition, 0.0, term)

def _settled(condition: Expr) -> bool | None:
    """True or False when a guard ``a >= c``, ``a <= c`` holds everywhere or nowhere in its indices' ranges."""
    name, args = condition.op.name, condition.args
    if name == "const":
        return condition.payload != 0.0
    if name not in ("ge", "le") or args[1].op.name != "const":
        return None
    try:
        lo, hi = value_range(args[0])
    except TypeError:
        return None
    c = args[1].payload
    if name == "ge":
        return True if lo >= c else False if hi < c else None
    return True if hi <= c else False if lo > c else None


def _scatter(arr: Expr, load: Expr, w: Expr) -> Expr:
    """sum over the load's indices of w into position a(I): for addresses solve cannot invert. A
    guarded load's address may leave the array where its value is discarded (w is 0 there): those
    terms are masked and their addresses wrapped into range (adding 0 anywhere changes nothing)."""
    addresses = []
    for a, n in zip(load.args[1:], shape_of(arr)):
        lo, hi = value_range(a)
        if lo < 0:
            w = ops.where(a >= 0, w, 0.0)
        if hi >= n:
            w = ops.where(a < n, w, 0.0)
        addresses.append(a if 0 <= lo and hi < n else a % n)
    return scatter(w, tuple(addresses), tuple(by_name(load.free)), shape_of(arr))
