"""Models built from scalars, rolled back into sums over an index.

A model written as CasADi SX or SymPy users write them, ``sum(term(x[i], x[i+1]) for i in
range(n))`` over variables ``x[0] ... x[n-1]`` (``sg.vector``), is a sum of n alike terms: n copies
of one small graph, compiled as straight-line code (n times the instructions, n times the
derivative) unless rolled. ``reroll`` finds the terms of the sum that are the same graph at
entries shifted by a constant step (``x[2i], x[2i+1], x[2i+2]``: a spring chain's points) and
writes each such family as ``sg.sum(term(x[s*i + c]), i)`` over the vector as one array, so the
rolled path (loops, rolled derivatives) compiles it once whatever n. Other terms stay as they are,
reading the array's entries.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from symgrad.expr import rolled
from symgrad.expr.build import apply
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import substitute, terms, topo_order, total

MIN_TERMS = 64  # a family of alike terms this long is rolled (shorter ones run as fast straight-line)
_ENTRY = re.compile(r"(.+)\[(\d+)\]\Z")
_WORK = 20  # the terms' graphs may hold this many times the model's nodes (shared parts: give up)


def arrays(inputs: list[Expr]) -> tuple[list[Expr], dict[Expr, tuple[Expr, int]]]:
    """The inputs with each run of variables ``name[0], name[1], ...`` (in order) as one array of
    that name; and where each such variable is: (its array, its position).

    >>> import symgrad as sg
    >>> new, where = arrays([*sg.vector("x", 3), sg.Var("a")])
    >>> new, where[sg.Var("x[2]")]
    ([x, a], (x, 2))
    """
    out: list[Expr] = []
    where: dict[Expr, tuple[Expr, int]] = {}
    k = 0
    while k < len(inputs):
        name, end = _entry(inputs[k], 0), k + 1
        while name is not None and end < len(inputs) and _entry(inputs[end], end - k) == name:
            end += 1
        if end - k < 2:
            out.append(inputs[k])
            k += 1
            continue
        arr = rolled.array(name, end - k)
        where.update((inputs[j], (arr, j - k)) for j in range(k, end))
        out.append(arr)
        k = end
    return out, where


def _entry(v: Expr, position: int) -> str | None:
    """The vector's name where ``v`` is the variable ``name[position]``."""
    m = _ENTRY.match(v.payload) if v.op.name == "var" else None
    return m[1] if m and m[2] == str(position) else None


def reroll(f: Expr, inputs: list[Expr]) -> tuple[Expr, list[Expr]] | None:
    """``f`` with its families of alike terms rolled, and the inputs as arrays (the same flat
    layout: an array stands for its variables in order); None where nothing rolls.

    >>> import symgrad as sg
    >>> x = sg.vector("x", 100)
    >>> g, new = reroll(sum((x[i + 1] - x[i]) ** 2 for i in range(99)), list(x))
    >>> g.op.name, new, sg.compile(g, new, backend="vm")(range(100))  # one loop over 99 alike terms
    ('sum', [x], 99.0)
    """
    new, where = arrays(inputs)
    if not where:
        return None
    # (a term there k times, as -x[i] - x[i] splits, is k * term: the runs step by one base at a time)
    counts = Counter(terms(f, signed=True))
    parts_of_f = [t if k == 1 else apply(OPS["mul"], (float(k), t)) for t, k in counts.items()]
    if len(parts_of_f) < MIN_TERMS:
        return None
    families: dict[int, list[tuple[int, Expr]]] = {}  # a term's shape (see _canonical) -> (base, term)
    seen: tuple[dict, dict] = ({}, {})
    budget = _WORK * len(topo_order([f]))
    for term in parts_of_f:
        order = topo_order([term])
        budget -= len(order)
        if budget < 0:
            return None
        base = min((where[v][1] for v in order if v in where), default=0)
        families.setdefault(_canonical(order, base, where, seen), []).append((base, term))
    parts: list[Expr] = []
    rolls = 0
    for members in families.values():
        for run in _runs(sorted(members, key=lambda m: m[0])):
            if len(run) >= MIN_TERMS:
                parts.append(_rolled(run, rolls, where))
                rolls += 1
            else:
                parts.append(_entries(run, where))
    if not rolls:
        return None
    return total(parts), new


def _canonical(order: list[Expr], base: int, where: dict, seen: tuple[dict, dict]) -> int:
    """A number for the graph of a term (``order``: its nodes, topologically) with its variables
    read as offsets from ``base``, up to the order of commutative arguments: equal numbers, the same
    function of the entries at ``base + offset`` (the canonical order of ``a + b`` ties on alike
    shapes, so it may differ from term to term). ``seen``: (node -> number for nodes reading no
    variable, shape -> number), shared between terms."""
    numbers, shapes = seen
    local: dict[Expr, int] = {}
    for n in order:
        if n in numbers:
            continue
        if n in where:
            key: tuple = ("entry", where[n][0], where[n][1] - base)
        else:
            args = [local[a] if a in local else numbers[a] for a in n.args]
            key = (n.op.name, n.payload, tuple(sorted(args) if n.op.commutative else args))
        number = shapes.setdefault(key, len(shapes))
        if n in where or any(a in local for a in n.args):
            local[n] = number
        else:
            numbers[n] = number
    return local[order[-1]] if order[-1] in local else numbers[order[-1]]


def _runs(members: list[tuple[int, Any]]) -> list[list[tuple[int, Any]]]:
    """Members sorted by base, cut into runs whose bases step by one constant (at least 1)."""
    runs: list[list] = []
    for m in members:
        run = runs[-1] if runs else []
        step = run[1][0] - run[0][0] if len(run) > 1 else None
        if run and m[0] > run[-1][0] and (step is None or m[0] - run[-1][0] == step):
            run.append(m)
        else:
            runs.append([m])
    return runs


def _rolled(run: list[tuple[int, Expr]], k: int, where: dict) -> Expr:
    """The run's terms as one sum over an index ``i``: its first term reading the entries ``step * i``
    further on (bases ``first + step * i``)."""
    step, first = run[1][0] - run[0][0], run[0][1]
    i = rolled.index(f"i#r{k}", len(run))
    entries = {v: rolled.subscript(where[v][0], i * step + where[v][1]) for v in topo_order([first]) if v in where}
    return rolled.reduce("sum", substitute(first, entries), i)


def _entries(run: list[tuple[int, Expr]], where: dict) -> Expr:
    """The run's terms added as they are, each variable read from its array."""
    total = None
    for _, term in run:
        leaves = {n: rolled.subscript(*where[n]) for n in topo_order([term]) if n in where}
        t = substitute(term, leaves)
        total = t if total is None else total + t
    return total
