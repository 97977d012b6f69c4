"""Rolled expressions: index symbols, symbolic arrays, loads, reductions and tensors.

The same formula at every index is one node, whatever the size: ``sum(100*(x[i+1] - x[i]**2)**2, i)``
has the same few nodes for n = 10 and n = 10**6. Array nodes (``array`` inputs, ``tensor``
results, constant integer ``table``s) are Exprs like any other; subscripting one with index
expressions gives a scalar ``load``; ``reduce`` and ``tensor`` bind index symbols. Every access
is checked when it is built: the range of each index expression (affine, periodic ``% n``,
or through a table) must lie inside the array. ``unroll`` gives the same function as an
ordinary scalar graph (the oracle).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import interp, ops
from symgrad.expr.build import _zero_where, apply
from symgrad.expr.node import Expr, intern, name_order
from symgrad.expr.traverse import rewrite, substitute, topo_order

INDEX_LIMIT = 2**53  # index values, array sizes and sizes of axes stay below: exact as floats and as int64


def _size(d: Any) -> bool:
    """Whether ``d`` is a size: a positive integer (not a bool) below ``INDEX_LIMIT``."""
    return isinstance(d, int | np.integer) and not isinstance(d, bool | np.bool_) and 1 <= d < INDEX_LIMIT


def index(name: str, size: int) -> Expr:
    """An index symbol ranging over ``0 .. size-1`` (names containing ``#`` are those derivatives
    create: ``x#3``; give yours plain names, so they never meet one).

    >>> i = index("i", 9)
    >>> i, i.shape, value_range(i + 1)
    (i, (), (1, 9))
    """
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ValueError(f"an index name must be printable text, got {name!r}")
    if not _size(size):
        raise ValueError(f"index {name!r}: the size must be a positive integer below 2**53, got {size!r}")
    return intern(ops.index, (), (name, int(size)))


def array(name: str, shape: int | tuple) -> Expr:
    """A symbolic array input called ``name`` with a concrete shape.

    >>> x = array("x", 5)
    >>> x, x.shape
    (x, (5,))
    """
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not shape or not all(map(_size, shape)) or math.prod(map(int, shape)) >= INDEX_LIMIT:
        raise ValueError(f"array {name!r}: the shape must be positive integers, fewer than 2**53 elements in "
                         f"all, got {shape!r}")
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ValueError(f"an array name must be printable text, got {name!r}")
    return intern(ops.array, (), (name, tuple(int(d) for d in shape)))


def table(values: Any) -> Expr:
    """A constant integer array (mesh connectivity, permutations) to gather through: ``x[table(I)[i]]``.

    >>> table([2, 0, 1]).shape
    (3,)
    """
    a = np.asarray(values)
    if a.dtype.kind not in "iu" or a.ndim == 0 or a.size == 0:
        raise TypeError(f"a table must be a non-empty integer array, got dtype {a.dtype}, shape {a.shape}")
    return intern(ops.table, (), (a.shape, tuple(int(v) for v in a.ravel())))


def shape_of(node: Expr) -> tuple:
    """The shape of an array node; () for scalars."""
    name = node.op.name
    if name == "array" or name == "table" or name == "scatter":
        return node.payload[1] if name == "array" else node.payload[0]
    if name == "tensor":
        return tuple(i.payload[1] for i in node.args[1:])
    if name == "cumsum":
        return shape_of(node.args[0])
    if name == "scan":
        return (node.payload[0] + 1, *shape_of(node.args[0]))
    return ()


class NotAnIndex(TypeError):
    """What value_range raises for an expression that is not index arithmetic. Its message prints
    the expression when shown, not when raised: the planner and the emitters ask value_range
    whether arbitrary nodes are index arithmetic and catch this (printing an LSTM gradient's scan
    for each of them took 57 s)."""

    def __init__(self, whole: Expr, detail: Callable[[], str]) -> None:
        super().__init__()
        self.whole, self.detail = whole, detail

    def __str__(self) -> str:
        return f"index expression {self.whole}: {self.detail()}"


def value_range(e: Expr) -> tuple[int, int]:
    """The smallest and largest value an index expression takes over its indices' ranges.

    Index expressions are built from index symbols, integer constants, ``+``, ``-``, ``*`` by a
    constant, ``%`` and ``//`` by a nonzero integer constant (floored, as Python's) and loads from tables.

    >>> i, j = index("i", 4), index("j", 3)
    >>> value_range(2 * i - j + 1), value_range((i + 3) % 4)
    ((-1, 7), (0, 3))
    """
    ranges: dict[Expr, tuple[int, int]] = {}
    stack = [e]
    while stack:  # iterative post-order
        node = stack[-1]
        pending = [a for a in node.args if a not in ranges and not _is_array(a)] if node.op.name != "as_index" \
            else []
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        lo, hi = ranges[node] = _range(node, ranges, e)
        if -INDEX_LIMIT >= lo or hi >= INDEX_LIMIT:
            raise OverflowError(f"index expression {str(e)[:80]}: {str(node)[:60]} takes values {lo}..{hi}, "
                                "beyond +-2**53, where index arithmetic (floats in the loop VM) stops being exact")
    return ranges[e]


def _range(node: Expr, ranges: dict, whole: Expr) -> tuple[int, int]:
    name, args = node.op.name, node.args
    if name == "index":
        return 0, node.payload[1] - 1
    if name == "const":
        if not float(node.payload).is_integer():
            raise NotAnIndex(whole, lambda: f"{node.payload!r} is not an integer")
        return int(node.payload), int(node.payload)
    if name == "as_index":  # whatever the value, in 0 .. n-1
        return 0, int(args[1].payload) - 1
    if name == "load":
        if args[0].op.name != "table":
            raise NotAnIndex(whole, lambda: f"an index can read tables (or as_index of data), not {args[0]}")
        values = args[0].payload[1]
        return min(values), max(values)
    r = [ranges[a] for a in args]
    if name in ("add", "sub"):
        (a0, a1), (b0, b1) = r
        return (a0 + b0, a1 + b1) if name == "add" else (a0 - b1, a1 - b0)
    if name == "neg":
        return -r[0][1], -r[0][0]
    if name == "mul" and (r[0][0] == r[0][1] or r[1][0] == r[1][1]):
        products = [a * b for a in r[0] for b in r[1]]
        return min(products), max(products)
    c = _divisor(args[1]) if len(args) == 2 else 0
    if name == "mod" and c:  # (floored, as Python's: the sign of the divisor)
        return (0, c - 1) if c > 0 else (c + 1, 0)
    if name == "floor_divide" and c:  # (monotone in the dividend: falling where c < 0)
        return tuple(sorted((r[0][0] // c, r[0][1] // c)))
    raise NotAnIndex(whole, lambda: f"{name} is not allowed in an index (use +, -, * by a constant, % and // by a "
                     "nonzero constant, and tables)")


def _divisor(node: Expr) -> int:
    """The nonzero whole number a constant holds (a divisor an index may use), else 0."""
    value = node.payload if node.op.name == "const" else 0
    return int(value) if value and float(value).is_integer() else 0


def _is_array(node: Expr) -> bool:
    return node.op.array_valued


def subscript(arr: Expr, key: Any, guarded: bool = False) -> Expr:
    """``arr[key]``: the element at index expressions, checked against the array's shape.

    ``guarded=True`` skips the range check and marks the load (payload ``"guarded"``): derivatives
    make such loads, reading neighbours inside a ``where`` whose condition keeps the value out
    where the address leaves the array; evaluators clamp the address of a guarded load only.

    >>> x, i = array("x", 5), index("i", 4)
    >>> subscript(x, i + 1)
    x[i + 1]
    """
    if not _is_array(arr):
        raise TypeError(f"only arrays can be subscripted, not the expression {arr}")
    key = key if isinstance(key, tuple) else (key,)
    shape = shape_of(arr)
    if len(key) != len(shape):
        raise IndexError(f"{arr} has {len(shape)} dimension(s), indexed with {len(key)}")
    idx = tuple(k if isinstance(k, Expr) else _integer(k, arr) for k in key)
    for dim, (k, n) in enumerate(zip(idx, shape)):
        lo, hi = value_range(k)
        if not guarded and (lo < 0 or hi >= n):
            where = f" (dimension {dim})" if len(shape) > 1 else ""
            raise IndexError(f"{arr}[{', '.join(map(str, idx))}]: the index {k} takes values {lo}..{hi}, "
                             f"outside 0..{n - 1}{where}" + _ranges(k))
    return apply(ops.load, (arr, *idx), "guarded" if guarded else None)


def _integer(k: Any, arr: Expr) -> Expr:
    if isinstance(k, int | np.integer):
        return intern(ops.OPS["const"], (), float(k))
    raise TypeError(f"{arr}: an index must be an integer or an index expression, got {type(k).__name__} {k!r}")


def _ranges(k: Expr) -> str:
    idx = sorted(k.free, key=lambda i: i.payload[0])
    return f", with {', '.join(f'{i} in 0..{i.payload[1] - 1}' for i in idx)}" if idx else ""


def reduce(name: str, body: Any, i: Expr) -> Expr:
    """``name`` ("sum", "max", "min") of ``body`` over the index ``i``.

    >>> x, i = array("x", 3), index("i", 3)
    >>> reduce("sum", x[i] ** 2, i)
    sum(x[i]**2, i=0..2)
    """
    if not (isinstance(i, Expr) and i.op.name == "index"):
        raise TypeError(f"{name}: reduce over an index symbol (sg.index), got {i!r}")
    body = body if isinstance(body, Expr) else intern(ops.OPS["const"], (), float(body))
    if _is_array(body):
        raise TypeError(f"{name}: the body must be a scalar expression, got the array {body}")
    if i.payload[1] == 1:  # over one element: that element (so x - mean(x) over an axis of one folds to 0)
        return substitute_indices(body, {i: intern(ops.OPS["const"], (), 0.0)})
    return apply(ops.OPS[name], (body, i))


def tensor(body: Any, *indices: Expr) -> Expr:
    """The array whose element at ``indices`` is ``body`` (materialised once).

    >>> A, v = array("A", (2, 3)), array("v", 3)
    >>> r, c = index("r", 2), index("c", 3)
    >>> tensor(reduce("sum", A[r, c] * v[c], c), r).shape
    (2,)
    """
    if not indices or not all(isinstance(i, Expr) and i.op.name == "index" for i in indices):
        raise TypeError("tensor: give the index symbols (sg.index) the array runs over")
    if len(set(indices)) != len(indices):
        raise ValueError(f"tensor: an index appears twice in {list(indices)}")
    body = body if isinstance(body, Expr) else intern(ops.OPS["const"], (), float(body))
    if body.op.name == "load" and body.payload is None and len(body.args) == len(indices) + 1 and \
            all(a is i and i.payload[1] == n for a, i, n in zip(body.args[1:], indices, body.args[0].shape)):
        return body.args[0]  # tensor(t[i, j], i, j) is t (i, j over all of t)
    outer = body.free.difference(indices)
    if outer:
        raise ValueError(f"tensor: the body {body} also varies over {sorted(str(i) for i in outer)}, which the "
                         "tensor does not bind: reduce over it inside, or add it to the tensor's indices")
    return apply(ops.tensor, (body, *indices))


def affine(e: Expr) -> tuple[dict[Expr, int], int] | None:
    """``e`` as sum(coefficient * index) + constant, or None (tables, ``%``, products of indices).

    >>> i, j = index("i", 4), index("j", 3)
    >>> sorted((str(k), c) for k, c in affine(2 * i - j + 1)[0].items()), affine(2 * i - j + 1)[1]
    ([('i', 2), ('j', -1)], 1)
    """
    terms: dict[Expr, int] = {}
    offset = 0
    stack = [(e, 1)]
    while stack:
        node, sign = stack.pop()
        name = node.op.name
        if name == "index":
            terms[node] = terms.get(node, 0) + sign
        elif name == "const":
            offset += sign * int(node.payload)
        elif name in ("add", "sub"):
            stack += [(node.args[0], sign), (node.args[1], sign if name == "add" else -sign)]
        elif name == "neg":
            stack.append((node.args[0], -sign))
        elif name == "mul" and node.args[0].op.name == "const":
            stack.append((node.args[1], sign * int(node.args[0].payload)))
        else:
            return None
    return {i: c for i, c in terms.items() if c}, offset


def solve(address: Expr, target: Expr, solved: dict, strides: bool = True) -> tuple[Expr, Expr, list[Expr]] | None:
    """Invert ``address = target`` for one index of ``address`` (indices in ``solved`` already known):
    (the index, its expression in ``target`` and the other indices, the conditions for a solution).

    Affine addresses with a coefficient ±1 solve exactly, other coefficients (``strides``) with a
    divisibility condition, ``(affine) % m`` when the index's range fits in one period, and with
    ``strides`` a one-to-one table read at such an address (a permutation: through the inverse
    table, -1 where no entry maps); None otherwise (other tables, several indices without a unit
    coefficient): the caller scatters instead, or (a Jacobian's row, which cannot scatter) tests
    every address: a sum over the table's length at each target, n**3 for an n x n Jacobian.

    >>> i, j = index("i", 4), index("j", 6)
    >>> solve(i + 2, j, {})
    (i, j - 2, [j - 2 >= 0, j - 2 <= 3])
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


_FRESH = itertools.count()  # names of the index symbols derivatives introduce: x#0, x#1, ...


def zeros_like(x: Expr) -> Expr:
    """The zero array shaped like the array ``x`` (its gradient where it does not appear).

    >>> zeros_like(array("x", (2, 3))).shape
    (2, 3)
    """
    return tensor(0.0, *fresh_indices(x))


def fresh_indices(x: Expr) -> tuple:
    """New index symbols over the array ``x``'s axes (named ``x#7``: no user index is)."""
    name = x.payload[0] if x.op.name == "array" else "k"
    return tuple(index(f"{name}#{next(_FRESH)}", n) for n in shape_of(x))


def by_name(indices: Any) -> list[Expr]:
    """Index symbols in one order, by name and size (not by their printed form: derivatives'
    indices all print alike, and printing costs more than the sort). Fresh indices (``i#7``) in the
    order they were made: ``i#9`` before ``i#10``, so a trace's order (of sums: their rounding) is
    the same whatever the counter stood at when it began.

    >>> by_name({index("j", 2), index("i", 3)})
    [i, j]
    >>> [i.payload[0] for i in by_name({index("i#10", 3), index("i#9", 3)})]
    ['i#9', 'i#10']
    """
    return sorted(indices, key=lambda i: (name_order(i.payload[0]), i.payload[1]))


def fresh_index(i: Expr) -> Expr:
    """A new index symbol over the same range as ``i`` (named ``i#7``: no user index is)."""
    return index(f"{i.payload[0].split('#')[0]}#{next(_FRESH)}", i.payload[1])


def gather_adjoint(x: Expr, sites: list, outer: tuple = (), memo: dict | None = None) -> Expr:
    """The adjoint of the input array ``x`` from its loads' adjoints: a tensor over fresh indices
    (over ``outer`` first, when the adjoints vary over a Jacobian's output indices)."""
    targets = fresh_indices(x)
    return tensor(gather(x, sites, targets, outer, memo), *outer, *targets)


def gather(arr: Expr, sites: list, targets: tuple, outer: tuple = (), memo: dict | None = None) -> Expr:
    """The adjoint of ``arr`` at position ``targets``: the sum over its loads ``(arr[a(I)], w(I))`` of
    the w(I) with a(I) == targets. Each site is inverted (Halide's scatter-to-gather: one formula,
    guarded by where its solution lies in range) where ``solve`` can, and scattered otherwise.
    The ``outer`` indices (a Jacobian's rows) are fixed: never solved for, never summed.
    ``memo``: as for ``tidy``, shared by the gathers of one reverse sweep."""
    memo = {} if memo is None else memo
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


def _inverted(load: Expr, w: Expr, targets: tuple, outer: tuple, memo: dict) -> Expr | None:
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
    term = tidy(_at(w, load, solved), memo)
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


def _at(w: Expr, load: Expr, solved: dict) -> Expr:
    """w at the solution. Where w calls transcendental functions or reduces, a load from w
    materialised over the load's indices: computed once per index value (in one loop with the
    other sites' adjoints and the value, by the compiler), however many sites read it shifted.
    Cheap arithmetic is recomputed at each site instead: no temporary array to fill and read.
    A conditional zero around w (``where(c, y, 0)``) stays outside what is materialised, so the
    rule ``x * where(c, y, 0) -> where(c, x*y, 0)`` still keeps a nan partial out where c fails."""
    zeros = []  # the conditional zeros around w, outermost first: (condition, the side y is on)
    while (taken := _zero_where(w)) is not None:
        zeros.append((w.args[0], taken))
        w = w.args[taken]
    # Over what w varies over (not broadcast along the load's other indices), in the order the
    # addresses name them: the adjoint of x[r, c] is then that tensor itself.
    order = [*(i for a in load.args[1:] for i in by_name(a.free)), *by_name(w.free)]
    indices = tuple(i for i in dict.fromkeys(order) if i in w.free)  # (w may vary over a Jacobian's rows)
    if not indices or not any(costly(n) for n in topo_order([w])):
        term = substitute_indices(w, solved)
    else:
        term = apply(ops.load, (tensor(w, *indices), *(solved.get(i, i) for i in indices)))
    for condition, taken in reversed(zeros):
        term = _masked(substitute_indices(condition, solved), taken, term)
    return term


def _masked(condition: Expr, side: int, term: Expr) -> Expr:
    """``term`` where ``condition`` holds (``side`` 1) or fails (2), else 0."""
    return ops.where(condition, term, 0.0) if side == 1 else ops.where(condition, 0.0, term)


def costly(node: Expr) -> bool:
    """Whether computing ``node`` costs much more than arithmetic: a reduction, or a call of a
    transcendental function (worth computing once and reading, not recomputing per use).

    >>> x, i = array("x", 3), index("i", 3)
    >>> costly(subscript(x, i) * 2.0), costly(reduce("sum", subscript(x, i), i))
    (False, True)
    """
    template = _CHEAP.sub("(", node.op.numba or "")  # ("math." also finds fastmath.'s calls)
    return node.op.name in ("sum", "max", "min") or any(call in template for call in ("math.", "np.", "special."))


_CHEAP = re.compile(r"fastmath\.(select|lt|le|gt|ge|eq|ne)\(")  # calls that are arithmetic: a select, a compare


def substitute_indices(e: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """``e`` with the free occurrences of index symbols replaced (never a bound one: inside a
    reduction, tensor or scatter the indices it binds are left alone; one a replacing value
    mentions is renamed first, so nothing is captured — recursing once per such binder).

    >>> x, y, i = array("x", 3), array("y", 3), index("i", 3)
    >>> substitute_indices(x[i] * reduce("sum", y[i] * x[i], i), {i: 2 - i})
    x[2 - i]*sum(y[i]*x[i], i=0..2)
    """
    done: dict[tuple, Expr] = {}
    stack = [(e, frozenset(mapping), False)]
    while stack:
        node, keys, ready = stack.pop()
        if (node, keys) in done:
            continue
        if not keys.intersection(node.free):
            done[node, keys] = node
            continue
        if node in keys:
            done[node, keys] = mapping[node]
            continue
        inner = keys.difference(node.args[1:]) if node.op.binds else keys
        brought = frozenset().union(*(mapping[k].free for k in inner.intersection(node.free)))
        clash = brought.intersection(node.args[1:]) if node.op.binds else None
        if clash:  # a value brings in an index this node binds: rename the bound one first
            fresh = {b: fresh_index(b) for b in clash if b.op.name == "index"}
            renamed = apply(node.op, (substitute_indices(node.args[0], fresh),
                                      *(fresh.get(a, a) for a in node.args[1:])), node.payload)
            done[node, keys] = substitute_indices(renamed, {k: mapping[k] for k in keys})
            continue
        if not ready:
            stack.append((node, keys, True))
            stack += [(a, inner, False) for a in node.args]
            continue
        done[node, keys] = apply(node.op, tuple(done[a, inner] for a in node.args), node.payload)
    return done[e, frozenset(mapping)]


def canonical(e: Expr) -> Expr:
    """An affine index expression in one form: indices by name, then the constant (j - 1 + 1 is j).

    A periodic address ``(a % m + c) % m`` is ``(a + c) % m``, and ``a % m`` is ``a`` where ``a``
    stays in ``0 .. m-1`` over its indices' ranges.

    >>> i, j = index("i", 4), index("j", 3)
    >>> canonical(j - 1 + 1 + 2 * i - i)  # (commutative + then orders its arguments canonically)
    j + i
    >>> canonical(((j - 1) % 3 + 1) % 3), canonical((i + 1) % 9)
    (j, i + 1)
    """
    if e.op.name == "mod" and e.args[1].op.name == "const":
        m = e.args[1].payload
        inner = e.args[0]
        if inner.op.name in ("add", "sub"):  # (a % m + c) % m = (a + c) % m, either argument order
            inner = apply(inner.op, tuple(a.args[0] if a.op.name == "mod" and a.args[1] is e.args[1] else a
                                          for a in inner.args))
        inner = canonical(inner)
        try:
            lo, hi = value_range(inner)
        except TypeError:  # not an index expression (a value compared modulo m): as it is
            return e
        return inner if 0 <= lo and hi < m else apply(ops.OPS["mod"], (inner, e.args[1]))
    form = affine(e)
    if form is None:
        return e
    terms, offset = form
    out = None
    for i in by_name(terms):
        c = terms[i]
        term = i if abs(c) == 1 else abs(c) * i
        out = (term if c > 0 else -term) if out is None else out + term if c > 0 else out - term
    if out is None:
        return intern(ops.OPS["const"], (), float(offset))
    return out + offset if offset > 0 else out - (-offset) if offset < 0 else out


def tidy(e: Expr, memo: dict | None = None) -> Expr:
    """``e`` rebuilt once, bottom up, with every load's address and every comparison's sides in
    canonical form, and each load whose address can leave its array marked guarded (subscript).

    ``memo`` (node -> tidied node) is shared by callers that tidy many expressions sharing parts,
    such as one reverse sweep: the walk stops at nodes tidied before.

    >>> x, i = array("x", 3), index("i", 3)
    >>> tidy(ops.where(i - 1 + 1 >= 1, subscript(x, i - 1, guarded=True), 0.0))
    where(i >= 1, x[i - 1], 0)
    """
    return rewrite([e], _tidied, memo)[e]


def _tidied(node: Expr, args: tuple) -> Expr:
    payload = node.payload
    if node.op.name == "load":
        args = (args[0], *(canonical(a) if a.free else a for a in args[1:]))
        if payload is None and any(not 0 <= lo <= hi < n for (lo, hi), n in
                                   zip(map(value_range, args[1:]), args[0].shape)):
            payload = "guarded"
    elif node.op.name in ("ge", "le", "eq"):
        args = tuple(canonical(a) if a.free else a for a in args)
    if payload is not node.payload or any(a is not b for a, b in zip(args, node.args)):
        return apply(node.op, args, payload)
    return node


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


def scatter(body: Expr, addresses: tuple, indices: tuple, shape: tuple) -> Expr:
    """The array of ``shape`` whose element j is the sum of ``body`` over ``indices`` where the
    ``addresses`` equal j (a scatter-add; derivatives make it where they cannot gather).

    >>> x, i = array("x", 3), index("i", 4)
    >>> scatter(x[i % 3], (table([0, 2, 2, 1])[i],), (i,), (3,)).shape
    (3,)
    """
    shape = tuple(int(d) for d in shape)
    if len(addresses) != len(shape) or not all(isinstance(i, Expr) and i.op.name == "index" for i in indices):
        raise ValueError(f"scatter: {len(addresses)} addresses for shape {shape}, indices {list(indices)}")
    for a, n in zip(addresses, shape):
        lo, hi = value_range(a)
        if lo < 0 or hi >= n:
            raise IndexError(f"scatter: the address {a} takes values {lo}..{hi}, outside 0..{n - 1}")
    if body.free.union(*(a.free for a in addresses)).difference(indices):
        raise ValueError(f"scatter: the body or addresses vary over indices beyond {list(indices)}")
    return intern(ops.scatter, (body, *addresses, *indices), (shape, len(addresses)))


def cumsum(arr: Expr, axis: int, reverse: bool = False) -> Expr:
    """The running sums of the array ``arr`` along ``axis`` (from the end: ``reverse``), a loop
    that adds each element to the sum before it. Its derivative is the reversed running sum.

    >>> x = array("x", 4)
    >>> cumsum(x, 0), cumsum(x, 0).shape
    (cumsum(x, axis=0), (4,))
    """
    if not _is_array(arr):
        raise TypeError(f"cumsum: running sums of an array, not of the expression {arr}")
    shape = shape_of(arr)
    if not isinstance(axis, int | np.integer) or not 0 <= axis < len(shape):
        raise ValueError(f"cumsum: axis {axis!r} is not an axis of {arr}, of shape {shape}")
    return intern(ops.cumsum, (arr,), (int(axis), bool(reverse)))


def unroll(exprs: Any) -> Any:
    """The same function as an ordinary scalar graph: array inputs become variables ``x[0]``,
    ``x[1, 2]``, ..., sums become chains of additions (the oracle for rolled expressions).

    >>> x, i = array("x", 3), index("i", 2)
    >>> unroll(reduce("sum", x[i + 1] * x[i], i))
    x[1]*x[2] + x[0]*x[1]
    """
    return interp.evaluate(exprs, {}, symbolic=True)
