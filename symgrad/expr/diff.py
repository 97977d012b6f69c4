"""Derivatives as expression graphs: reverse mode (grad, jacobian, hessian) and forward mode (jvp).

Reverse mode visits each node of an output's graph once, in reverse topological
order, and adds ``adjoint * partial`` into each argument's adjoint: O(nodes + edges)
work, and a gradient graph a small constant times the function's size.  The
partials come from the op table; hash-consing shares every node it can.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import custom, gathers, ops, rolled
from symgrad.expr.build import _as_expr, _zero_where, apply, const
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.ranges import may_fail
from symgrad.expr.traverse import _like, as_expr_list, object_array, topo_order
from symgrad.util.progress import CHUNK, progress

_ZERO = const(0.0)
_ONE = const(1.0)
_INF = const(math.inf)


def _check_wrt(wrt: Any) -> list[Expr]:
    flat = [wrt] if isinstance(wrt, Expr) else list(object_array(wrt).ravel())
    seen: set[Expr] = set()
    for v in flat:
        if isinstance(v, str):
            raise TypeError(f"wrt: got the string {v!r} where a variable is expected; use sg.Var({v!r})")
        if not isinstance(v, Expr) or v.op.name not in ("var", "array"):
            raise TypeError(f"wrt: differentiate with respect to variables (or sg.array inputs) only, got {v!r}")
        if v in seen:
            raise ValueError(f"wrt lists the variable {v.payload!r} more than once")
        seen.add(v)
    return flat


def _active(order: list[Expr], wrt: list[Expr]) -> set[Expr]:
    """Nodes that depend on some variable of ``wrt`` (the only ones with nonzero derivatives)."""
    active = set(wrt)
    for node in order:
        if any(a in active for a in node.args):
            active.add(node)
    return active


def _partial(node: Expr, i: int) -> Expr | None:
    """d node / d node.args[i] from the op table (or by the op's row of ``PARTIALS``); None when it is
    identically zero."""
    own = PARTIALS.get(node.op.name)
    if own is not None:
        return own(node, i)
    rule = node.op.partials[i]
    if rule is None:
        return None
    p = _as_expr(rule(*node.args, node), node.op)
    return None if p is _ZERO else p


class _Trees:
    """Trees of ``maximum`` (or of ``minimum``) nodes whose inner nodes have one use in the graph
    ``order``: each is one max / min of its leaves, its derivative shared evenly among the leaves
    equal to it (as a max reduction's, JAX's and autograd's), not 1/2, 1/4, 1/4 down the tree by
    how it was nested (np.max of an element-traced array is NumPy's pairwise reduce). Forward and
    reverse mode read the same trees: the uses are counted over the whole graph of a transform."""

    def __init__(self, order: list[Expr]) -> None:
        self.order: list[Expr] = order
        self.uses: Counter | None = None

    def shares(self, node: Expr) -> list[tuple[Expr, Expr]] | None:
        """(leaf, d node / d leaf) for a tree of three leaves or more rooted at ``node``, else None."""
        if node.op.name not in ("maximum", "minimum") or not any(a.op is node.op for a in node.args):
            return None
        leaves, stack = [], [node.args[1], node.args[0]]
        while stack:
            a = stack.pop()
            if a.op is node.op and self._used_once(a):
                stack += (a.args[1], a.args[0])
            else:
                leaves.append(a)
        if len(leaves) < 3:
            return None
        hits = [ops.eq(leaf, node) for leaf in leaves]
        count = hits[0]
        for h in hits[1:]:
            count = count + h
        return [(leaf, h / count) for leaf, h in zip(leaves, hits)]

    def reduction(self, node: Expr) -> tuple[Expr, tuple]:
        """A max (min) reduction's body and indices, through the max reductions of the same kind it
        reduces that have no other use: max(max(x[i, j], j), i) is one max over (i, j), its ties
        shared evenly among all its elements (np.max over several axes)."""
        body, indices = node.args[0], (node.args[1],)
        while body.op is node.op and self._used_once(body):
            body, indices = body.args[0], (*indices, body.args[1])
        return body, indices

    def _used_once(self, e: Expr) -> bool:
        if self.uses is None:  # counted when the first candidate comes
            self.uses = Counter(a for n in self.order for a in n.args)
        return self.uses[e] == 1


class _Masks:
    """Which adjoints may be 0 where a partial is nan or inf. A value masked by ``where`` (its branch
    not taken), or an array's entry nobody reads, gets an adjoint of 0 there, while the partials of
    what computed it may be nan (sqrt's at a negative, log's at 0): 0 * nan would bring the nan the
    mask kept out of the value into the gradient. Such a product is guarded, 0 where ``g == 0`` and
    ``p`` is not finite, where the adjoint ``g`` came through a mask and ``p`` may be non-finite (its
    range, ranges.py: a sigmoid's partials are finite); nowhere else. A graph
    without a ``where``, a table (a gather that may leave entries unread) or a scan (whose rows a
    step may never read, or read into a carry a later step drops) masks nothing."""

    def __init__(self, order: list[Expr]) -> None:
        self.masking = any(n.op.name in MASKING for n in order)
        self.masked: set[Expr] = set()  # nodes whose adjoint came through a where's branch or an array
        self.ranges: dict = {}  # (ranges.range_of's memo)

    def may_fail(self, e: Expr) -> bool:
        return may_fail(e, self.ranges)

    def product(self, node: Expr, g: Expr, p: Expr) -> Expr:
        """``g * p``, the contribution of ``node``'s adjoint ``g`` through the partial ``p``; guarded
        where ``g`` may be a mask's 0 and ``p`` nan."""
        if self.masking and node in self.masked and p.op.name != "const" and self.may_fail(p):
            g = _materialised(g)
            # (also where g * p folded to where(c, g' * p, 0): g' may be another mask's 0)
            # (only where p is not finite: at a 0 of g where p is, g * p's derivatives are its own)
            product = g if p is _ONE else g * p
            return ops.where(ops.eq(g, 0.0), ops.where(ops.lt(ops.abs(p), _INF), product, 0.0), product)
        return g if p is _ONE else g * p


# The largest adjoint (elements) that a guarded product stores to read it (see _materialised).
MATERIALISED_MAX = 10**7


def _materialised(g: Expr) -> Expr:
    """``g``, an adjoint varying over indices, read from the array of its values: a guarded product
    tests it and multiplies it, and the next one tests and multiplies that, so left inline each level
    would compute every level below it again (an LSTM's gradient: 4000 lines a loop body, most of
    them the same tests); stored, each level reads one number."""
    side = _zero_where(g)
    if side is None or not g.free:
        return _stored(g)
    # (a mask's where stays one, of its stored condition and branch: a product with it is a where of the
    # product, as with it inline, whose tangent is 0 where masked; stored whole, forward mode made 0 * inf =
    # nan there, the Hessian-vector product of sum(x[1:] * where(x > 0.1, sqrt(x), 0)[:-1]) at a 0 of x)
    branches = [const(0.0), const(0.0)]
    branches[side - 1] = _stored(g.args[side])
    return ops.where(_stored(g.args[0]), *branches)


def _stored(g: Expr) -> Expr:
    """``g`` read from the array of its values (where it varies over indices and is not a read already)."""
    if not g.free or g.op.name in ("load", "const", "index", "var"):
        return g
    indices = sorted(g.free, key=lambda i: i.payload)  # (name, size): the same order in every process
    if np.prod([i.payload[1] for i in indices], dtype=float) > MATERIALISED_MAX:
        return g
    return apply(ops.load, (rolled.tensor(g, *indices), *indices))


@paused_gc()
def _reverse(outputs: list[Expr], wrt: list[Expr]) -> list[list[Expr]]:
    """Rows d outputs[k] / d wrt[j], one reverse sweep per output."""
    order = topo_order(outputs)
    active = _active(order, wrt)
    trees = _Trees(order)
    rows = []
    with progress(len(order) * len(outputs), "gradient") as update:  # at most: sweeps share nodes
        for out in outputs:
            sweep = (order if len(outputs) == 1 else topo_order([out])) if out in active else []
            rows.append(custom.plain(_sweep(out, sweep, wrt, active, update, trees=trees), reverse_only=True))
    return rows


def _sweep(out: Expr, order: list[Expr], wrt: list[Expr], active: set[Expr], update: Any,
           outer: tuple = (), trees: _Trees | None = None) -> list[Expr]:
    """One reverse sweep over ``order`` (``out``'s graph, arguments first): d out / d wrt[j].

    Rolled nodes: an argument that does not vary over an index its user varies over gets the sum
    of the contributions over that index; a reduction hands its adjoint to its body; a load hands
    ``(load, adjoint)`` to its array, whose adjoint (an array: for a tensor, its body's adjoint)
    is gathered from those sites once all of them are known (gathers.gather).

    ``outer``: the indices ``out`` varies over (a Jacobian's rows); adjoints vary over them too,
    never summed, and each derivative comes back as a tensor over them."""
    trees = trees or _Trees(order)
    masks = _Masks(order)
    adj: dict[Expr, Expr] = {out: _ONE} if order else {}
    sites: dict[Expr, list] = {}  # array node -> [(load node, adjoint of the load)]
    tidied = gathers.Memo()  # (the gathers' rolled.tidy results: adjoints share most of their parts)
    for k, node in enumerate(reversed(order)):
        if not k % CHUNK:
            update(min(CHUNK, len(order) - k))
        name = node.op.name
        if node.op.array_valued:
            masks.masked.update(node.args)  # (an array's adjoint is 0 at every entry nobody reads)
            _array_adjoint(node, sites.pop(node, []), adj, outer, tidied, sites, active)
            continue
        g = adj.get(node) if name == "var" else adj.pop(node, None)
        if g is None:
            continue
        if name == "load":
            sites.setdefault(node.args[0], []).append((node, g))
            continue
        scope = (node.free.union(node.args[1:]) if node.op.binds else node.free).difference(outer)
        if name == "where" or node in masks.masked:
            masks.masked.update(node.args)
        shares = trees.shares(node)
        if shares is not None:
            for leaf, p in shares:
                if leaf in active:
                    _accumulate(adj, leaf, masks.product(node, g, p), scope)
            continue
        if name in _TIES:
            body, indices = trees.reduction(node)
            if body in active:
                _accumulate(adj, body, masks.product(node, g, _tie_share(node, body, indices)),
                            node.free.union(indices).difference(outer))
            continue
        rule = COTANGENTS.get(name)
        cts = rule(node, g) if rule is not None else None
        if cts is not None:  # (a rule no partials give: clipping the cotangent)
            for arg, c in zip(node.args, cts):
                if c is not None and arg in active:
                    _accumulate(adj, arg, c, scope)
            continue
        for i, arg in enumerate(node.args):
            if arg not in active:
                continue
            p = _ONE if name == "sum" else _partial(node, i)
            if p is not None:
                _accumulate(adj, arg, masks.product(node, g, p), scope)
    if not outer:
        return [adj.get(v, rolled.zeros_like(v) if v.op.name == "array" else _ZERO) for v in wrt]
    return [adj[v] if v.op.name == "array" and v in adj else rolled.tensor(adj.get(v, 0.0), *outer)
            if v.op.name == "var" else rolled.tensor(0.0, *outer, *rolled.fresh_indices(v)) for v in wrt]


def _accumulate(adj: dict, arg: Expr, contrib: Expr, scope: frozenset) -> None:
    """Add ``contrib`` to ``arg``'s adjoint, summed over the indices of ``scope`` (where its user, or
    the body of a reduction, varies, a Jacobian's rows left out) that ``arg`` does not vary over:
    it is the same value at each."""
    for index in rolled.by_name(scope - arg.free):
        contrib = rolled.reduce("sum", contrib, index)
    adj[arg] = contrib if arg not in adj else adj[arg] + contrib


def _array_adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
                   active: set) -> None:
    """An array-valued node's adjoint, from the sites that read it, by its op's row of ``ADJOINTS`` (an op
    with no row, a table: constants, nothing)."""
    rule = ADJOINTS.get(node.op.name)
    if rule is not None and sites:
        rule(node, sites, adj, outer, tidied, all_sites, active)


def _input_adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
                   active: set) -> None:
    """An input array's adjoint is a tensor over fresh indices, the sites' adjoints gathered into it."""
    adj[node] = gathers.gather_adjoint(node, sites, outer, tidied)


def _tensor_adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
                    active: set) -> None:
    """A tensor's adjoint goes to its body at its indices."""
    _accumulate(adj, node.args[0], gathers.gather(node, sites, node.args[1:], outer, tidied),
                frozenset(node.args[1:]))


def _scatter_adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
                     active: set) -> None:
    """A scatter's adjoint goes to its body at its addresses: its body at I went to position address(I)."""
    k = node.payload[1]
    _accumulate(adj, node.args[0], gathers.gather(node, sites, node.args[1:1 + k], outer, tidied),
                frozenset(node.args[1 + k:]))


def _cumsum_adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
                    active: set) -> None:
    """Running sums hand their array the reversed running sums of theirs, read at every element (over a
    Jacobian's rows too: those are leading axes)."""
    at, (axis, reverse) = rolled.fresh_indices(node), node.payload
    back = rolled.cumsum(rolled.tensor(gathers.gather(node, sites, at, outer, tidied), *outer, *at),
                         axis + len(outer), not reverse)
    every = rolled.fresh_indices(node)
    all_sites.setdefault(node.args[0], []).append((apply(ops.load, (node.args[0], *every)),
                                                   apply(ops.load, (back, *outer, *every))))


# The ops through which an adjoint may come masked (see _Masks); modules defining such an op add its name.
MASKING = {"where", "table"}
# Reverse mode of the array-valued ops, by name: (node, the sites reading it, the adjoints, a Jacobian's
# row indices, the tidy memo, every array's sites, the active nodes) -> None. A row gives the node's
# arguments their adjoints (as adjoints of scalars, or as more sites of an array). Modules defining an
# op add its row here (scans.py: scan), as they do their batching rule (batching.RULES).
ADJOINTS: dict[str, Callable] = {"array": _input_adjoint, "tensor": _tensor_adjoint, "scatter": _scatter_adjoint,
                                 "cumsum": _cumsum_adjoint}
# Scalar ops whose derivatives come by rules of their own, not the op table's partials, by name:
# (node, i) -> d node / d node.args[i] (None: zero); (node, its adjoint) -> its arguments' cotangents
# (None: from the partials). custom_jvp / custom_vjp nodes, whose rules are the user's (custom.py).
PARTIALS: dict[str, Callable] = {"custom": custom.partial}
COTANGENTS: dict[str, Callable] = {"custom": custom.cotangents}
# Forward mode of array-valued ops that are not linear in their first argument, by name: (node, the
# tangents so far) -> None, setting the node's tangent if any of its arguments has one (scans.py: scan).
TANGENTS: dict[str, Callable] = {}


def _tie_share(node: Expr, body: Expr, indices: tuple) -> Expr:
    """max / min of ``body`` over ``indices``: the adjoint goes to the elements equal to the result,
    split evenly."""
    hit = ops.where(body == node, 1.0, 0.0)
    fresh = {i: rolled.fresh_index(i) for i in indices}  # the count sums over its own indices: hit varies
    count = rolled.substitute_indices(hit, fresh)  # over them where it is used
    for k in fresh.values():
        count = rolled.reduce("sum", count, k)
    return hit / count


_TIES = ("max", "min")


def _scalar(f: Any, who: str) -> Expr:
    if isinstance(f, np.ndarray) and f.size == 1:
        f = f.reshape(())[()]
    if isinstance(f, np.ndarray | list | tuple):
        raise TypeError(f"{who}: expected one scalar expression, got a {type(f).__name__}; use sg.jacobian")
    return _as_expr(f, ops.OPS["var"])


def diff(f: Any, x: Expr, n: int = 1) -> Expr:
    """The derivative of ``f`` with respect to the variable ``x`` (``n`` times).

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.diff(x * y + sg.sin(x), x)
    y + cos(x)
    >>> sg.diff(x ** 3, x, 2)
    6*x
    """
    _check_wrt([x])
    f = _scalar(f, "diff")
    for _ in range(n):
        f = _reverse([f], [x])[0][0]
    return f


def grad(f: Any, wrt: Any) -> Any:
    """The gradient of a scalar ``f``: a list in ``wrt`` order (an array if ``wrt`` is one). With
    respect to an array (``sg.array``): an array expression shaped like it.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.grad(x * y + sg.sin(x), [x, y])
    [y + cos(x), x]
    >>> v, i = sg.array("v", 3), sg.index("i", 3)
    >>> sg.grad(sg.sum(v[i] ** 2, i), v).shape
    (3,)
    """
    flat = _check_wrt(wrt)
    row = _reverse([_scalar(f, "grad")], flat)[0]
    if isinstance(wrt, Expr) and wrt.op.name == "array":
        return row[0]
    return _like(wrt if not isinstance(wrt, Expr) else [wrt], row)


def _matrix(rows: list[list[Expr]], shape: tuple) -> np.ndarray:
    out = np.empty((len(rows), len(rows[0]) if rows else 0), dtype=object)
    for i, row in enumerate(rows):
        out[i, :] = row
    return out.reshape(shape)


def jacobian(fs: Any, wrt: Any) -> Any:
    """The Jacobian d fs[i] / d wrt[j] as an object array of shape ``fs.shape + wrt.shape``.

    Of an array expression (``sg.tensor``): an array expression shaped ``fs.shape + x.shape`` for
    each array or variable ``x`` of ``wrt`` (a list of them, or one if ``wrt`` is one), rolled.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.jacobian([x * y, x + y], [x, y])
    array([[y, x],
           [1, 1]], dtype=object)
    >>> v, i = sg.array("v", 3), sg.index("i", 3)
    >>> sg.evaluate(sg.jacobian(sg.tensor(v[i] ** 2, i), v), {v: [1.0, 2.0, 3.0]})
    array([[2., 0., 0.],
           [0., 4., 0.],
           [0., 0., 6.]])
    """
    flat = _check_wrt(wrt)
    if isinstance(fs, Expr) and fs.op.array_valued:
        return _one_or_list(wrt, _array_row(fs, flat))
    outs = as_expr_list(fs)
    return _matrix(_reverse(outs, flat), object_array(fs).shape + object_array(wrt).shape)


@paused_gc()
def _array_row(y: Expr, wrt: list[Expr]) -> list[Expr]:
    """d y[I] / d wrt[j] for the array ``y``: tensors over (I, the element of wrt[j]), one sweep."""
    outer = rolled.fresh_indices(y)
    if y.op.name == "tensor":
        body = rolled.substitute_indices(y.args[0], dict(zip(y.args[1:], outer)))
    else:  # running sums, a scatter, an input: its element at I
        body = apply(ops.load, (y, *outer))
    order = topo_order([body])
    active = _active(order, wrt)
    with progress(len(order), "jacobian") as update:
        return _sweep(body, order if body in active else [], wrt, active, update, outer)


def _one_or_list(wrt: Any, row: list[Expr]) -> Any:
    return row[0] if isinstance(wrt, Expr) else list(row)


def hessian(f: Any, wrt: Any) -> Any:
    """The Hessian of a scalar ``f``: an n-by-n object array.

    With respect to arrays (``sg.array``): blocks ``[[d2f/dxi dxj]]`` (a list of lists), each a
    rolled array shaped ``xi.shape + xj.shape``; one array given alone: its block.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.hessian(x ** 2 * y, [x, y])
    array([[2*y, 2*x],
           [2*x, 0]], dtype=object)
    >>> v, i = sg.array("v", 2), sg.index("i", 2)
    >>> sg.evaluate(sg.hessian(sg.sum(v[i] ** 3, i), v), {v: [1.0, 2.0]})
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    flat = _check_wrt(wrt)
    g = _reverse([_scalar(f, "hessian")], flat)[0]
    if any(v.op.name == "array" for v in flat):
        blocks = [_array_row(gi, flat) if gi.op.array_valued else _reverse([gi], flat)[0] for gi in g]
        return blocks[0][0] if isinstance(wrt, Expr) else blocks
    return _matrix(_reverse(g, flat), (len(flat), len(flat)))


@paused_gc()
def jvp(fs: Any, wrt: Any, tangents: Any) -> Any:
    """Forward mode: the directional derivatives sum_j d fs / d wrt[j] * tangents[j].

    Returns one expression for one ``fs``, else a list (or array) like ``fs``.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.jvp(x * y, [x, y], [1, 0])
    y
    """
    flat = _check_wrt(wrt)
    tans = as_expr_list(tangents)
    if len(tans) != len(flat):
        raise ValueError(f"jvp: {len(flat)} variables but {len(tans)} tangents")
    for v, t in zip(flat, tans):
        if v.shape != t.shape or v.op.array_valued != t.op.array_valued:
            raise ValueError(f"jvp: the tangent of {v} must be {'an array' if v.shape else 'a scalar'} of shape "
                             f"{v.shape}, got {t} of shape {t.shape}")
    outs = as_expr_list(fs)
    tangent: dict[Expr, Expr] = {v: t for v, t in zip(flat, tans) if t is not _ZERO}
    order = topo_order(outs)
    trees = _Trees(order)
    with progress(len(order), "forward mode") as update:
        for k, node in enumerate(order):
            if not k % CHUNK:
                update(min(CHUNK, len(order) - k))
            _tangent(node, tangent, trees)
    zero = lambda o: rolled.zeros_like(o) if o.op.array_valued else _ZERO  # noqa: E731
    return _like(fs, [tangent[o] if o in tangent else zero(o) for o in outs])


def _tangent(node: Expr, tangent: dict[Expr, Expr], trees: _Trees) -> None:
    """The tangent of ``node`` from its arguments' (none if they have none). Rolled nodes are
    linear in their first argument: the same node over its tangent (a load from the tangent
    array; a reduction, tensor or scatter of the body's tangent); max / min weight it by ties."""
    rule = TANGENTS.get(node.op.name)
    if rule is not None:
        rule(node, tangent)
        return
    if node.op.kind == "rolled":
        t = tangent.get(node.args[0]) if node.args else None
        if node.op.name in _TIES:
            body, indices = trees.reduction(node)
            if (t := tangent.get(body)) is not None:
                total = t * _tie_share(node, body, indices)
                for i in indices:
                    total = rolled.reduce("sum", total, i)
                tangent[node] = total
        elif t is not None:
            tangent[node] = apply(node.op, (t, *node.args[1:]), node.payload)
        return
    if not any(a in tangent for a in node.args):
        return
    pairs = trees.shares(node)
    if pairs is None:
        pairs = [(arg, _partial(node, i)) for i, arg in enumerate(node.args) if arg in tangent]
    total = None
    for arg, p in pairs:
        t = tangent.get(arg)
        if t is not None and p is not None:
            total = p * t if total is None else total + p * t
    if total is not None:
        tangent[node] = total
