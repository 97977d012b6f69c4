"""Rolled expressions: index symbols, symbolic arrays, loads, reductions and tensors.

The same formula at every index is one node, whatever the size: ``sum(100*(x[i+1] - x[i]**2)**2, i)``
has the same few nodes for n = 10 and n = 10**6. Array nodes (``array`` inputs, ``tensor``
results, constant integer ``table``s) are Exprs like any other; subscripting one with index
expressions gives a scalar ``load``; ``reduce`` and ``tensor`` bind index symbols. Every access
is checked when it is built: the range of each index expression (affine, periodic ``% n``,
or through a table) must lie inside the array. ``unroll`` gives the same function as an
ordinary scalar graph (the oracle). Reverse mode's gathers, which invert addresses, are in ``gathers.py``.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import build, interp, ops
from symgrad.expr.build import apply
from symgrad.expr.node import Expr, intern, name_order
from symgrad.expr.traverse import rewrite

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
    if name == "cumsum" or name == "argsort":
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
        return _table_range(args[0])
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


@functools.lru_cache(maxsize=8)  # (a table holds its entries: a few kept)
def _table_range(table_node: Expr) -> tuple[int, int]:
    """A table's smallest and largest entry (a schedule's check asks for a bundle adjustment's 31 843 entries
    thousands of times: 0.56 s of its first result)."""
    values = np.asarray(table_node.payload[1])
    return int(values.min()), int(values.max())


def _divisor(node: Expr) -> int:
    """The nonzero whole number a constant holds (a divisor an index may use), else 0."""
    value = node.payload if node.op.name == "const" else 0
    return int(value) if value and float(value).is_integer() else 0


def _is_array(node: Expr) -> bool:
    return node.op.array_valued


_INDEX_OPS = frozenset(("index", "const", "add", "sub", "neg", "mul", "mod", "floor_divide"))
# a comparison -> whether it holds for every value of a and b in their ranges, or for none
_DECIDED = {"lt": (lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),
            "le": (lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),
            "gt": (lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),
            "ge": (lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),
            "eq": (lambda a, b: a[0] == a[1] == b[0] == b[1], lambda a, b: a[1] < b[0] or b[1] < a[0]),
            "ne": (lambda a, b: a[1] < b[0] or b[1] < a[0], lambda a, b: a[0] == a[1] == b[0] == b[1])}


def settled(name: str, a: Expr, b: Expr) -> Expr | None:
    """The comparison ``name`` of index expressions ``a`` and ``b`` as 1 or 0 where their ranges decide
    it, else None: ``k + 70 < 70`` over k in 0..69 (a slice of a concatenation, which picks its part by
    comparing the index) is 0, so a where on it is its other branch, not a select in every loop and a
    clamped read of the part it never takes.

    >>> k = index("k", 70)
    >>> settled("lt", k + 70, build.const(70.0)), settled("lt", k, build.const(35.0))
    (0, None)
    """
    ra, rb = (_index_span(a), _index_span(b)) if a.free or b.free else (None, None)
    if ra is None or rb is None:
        return None
    holds, fails = _DECIDED[name]
    return build.const(1.0) if holds(ra, rb) else build.const(0.0) if fails(ra, rb) else None


def settled_division(name: str, a: Expr, b: Expr) -> Expr | None:
    """``a % b`` or ``a // b`` (``name``: mod, floor_divide) of an index expression ``a`` by a whole
    constant where ``a``'s range lies in one block of ``b``: ``a - k*b`` and ``k``, else None. The gates
    of a concatenation's adjoint read ``(i + 14) % 14`` over i in 0..13, which is ``i``.

    >>> i, d = index("i", 14), build.const(14.0)
    >>> settled_division("mod", i + 14, d), settled_division("floor_divide", i + 14, d)
    (i, 1)
    """
    c = _divisor(b)
    span = _index_span(a) if c and a.free else None
    if span is None or span[0] // c != span[1] // c:
        return None
    k = span[0] // c
    return build.const(float(k)) if name == "floor_divide" else canonical(a - k * c) if k else a


def _index_span(e: Expr) -> tuple[int, int] | None:
    """``value_range(e)`` where ``e`` is index arithmetic (an op of it at the top, as apply's rules meet it),
    else None."""
    if e.op.name not in _INDEX_OPS:
        return None
    try:
        return value_range(e)
    except (NotAnIndex, OverflowError):
        return None


for _name in _DECIDED:  # (build.py's table of rewrites: apply settles a comparison as it makes it)
    build.RULES[_name] = (*build.RULES.get(_name, ()), functools.partial(settled, _name))
for _name in ("mod", "floor_divide"):
    build.RULES[_name] = (*build.RULES.get(_name, ()), functools.partial(settled_division, _name))


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
        inner = e.args[0]
        if inner.op.name in ("add", "sub"):  # (a % m + c) % m = (a + c) % m, either argument order
            inner = apply(inner.op, tuple(a.args[0] if a.op.name == "mod" and a.args[1] is e.args[1] else a
                                          for a in inner.args))
        return apply(ops.OPS["mod"], (canonical(inner), e.args[1]))  # (settled_division: in one block, no %)
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


def argsort(arr: Expr, axis: int) -> Expr:
    """The positions that sort the array ``arr`` along ``axis`` (a stable sort, nan last): integer data
    computed where it runs, through which ``np.sort`` gathers (its adjoint scatters back by them).

    >>> x = array("x", 4)
    >>> argsort(x, 0), argsort(x, 0).shape
    (argsort(x, axis=0), (4,))
    """
    if not _is_array(arr):
        raise TypeError(f"argsort: the positions sorting an array, not the expression {arr}")
    shape = shape_of(arr)
    if not isinstance(axis, int | np.integer) or not 0 <= axis < len(shape):
        raise ValueError(f"argsort: axis {axis!r} is not an axis of {arr}, of shape {shape}")
    return intern(ops.argsort, (arr,), int(axis))


def unroll(exprs: Any) -> Any:
    """The same function as an ordinary scalar graph: array inputs become variables ``x[0]``,
    ``x[1, 2]``, ..., sums become chains of additions (the oracle for rolled expressions).

    >>> x, i = array("x", 3), index("i", 2)
    >>> unroll(reduce("sum", x[i + 1] * x[i], i))
    x[1]*x[2] + x[0]*x[1]
    """
    return interp.evaluate(exprs, {}, symbolic=True)
