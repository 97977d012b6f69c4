"""The plan: rolled outputs rewritten for loops, before they are scheduled (schedule.py) and emitted
(loops.py, the compiled loops; loop_vm.py, the loop VM): what to materialise, which contractions
are BLAS products, which sums down columns add row by row. Both backends run the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from symgrad.expr.build import apply
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.rolled import by_name, costly, reduce, scatter, tensor, value_range
from symgrad.expr.traverse import scalar_graph, topo_order

REDUCTIONS = ("sum", "max", "min")

BLAS_MIN = 4096  # multiply-adds from which a contraction calls BLAS (a call costs about a microsecond)


COLUMN_MIN = 8  # sums down columns this long or longer are added row by row (see _by_rows)


def plan(outputs: list[Expr]) -> tuple[list[Expr], set[Expr]]:
    """The outputs rewritten for loops, and the tensors that are matrix products.

    A transcendental value inside nested loops that two expressions use is materialised (a
    softmax's exponentials, otherwise computed again in each loop that reads them). A large enough
    contraction ``sum(a*b, c)`` over one or two other indices becomes a product computed by BLAS
    (``np.dot``), its operands materialised unless they are arrays read as they are (or
    transposed). An expression that is the whole body of a tensor is read from the tensor
    wherever else it occurs, not computed again (the derivative of ``tanh(u)`` at every element
    uses ``tanh(u)``, which the forward tensor holds)."""
    order = topo_order(outputs)
    users: dict[Expr, int] = {}
    for node in order:
        for a in set(node.args):
            users[a] = users.get(a, 0) + 1
    axes = _axes(order)
    shared = {n for n in order if len(n.free) >= 2 and users.get(n, 0) >= 2 and costly(n) and not _address(n)}
    shared |= _recomputed(order) | _scattered_sums(order)
    outputs, _ = _rewrite(outputs, lambda node, new: _materialised(new, axes(node)) if node in shared else None)
    order = topo_order(outputs)
    axes, bodies, products = _axes(order), _bodies(order), set()

    def contract(node: Expr, new: Expr) -> Expr | None:
        product = _product(new, bodies[node].args[1:] if node in bodies else axes(node)) \
            if new.op.name == "sum" else None
        if product is not None:
            products.add(product)
            return apply(OPS["load"], (product, *product.args[1:]))
        return _materialised(new, bodies[node].args[1:]) if node in bodies else None

    outputs, _ = _rewrite(outputs, contract)
    bodies = _bodies(topo_order(outputs))  # the operands' tensors made for BLAS, read elsewhere too
    outputs, renamed = _rewrite(outputs, lambda node, new: _materialised(new, bodies[node].args[1:])
                                if node in bodies else None)
    products = {renamed.get(p, p) for p in products}
    outputs, renamed = _rewrite(outputs, lambda node, new: None if node in products or new in products
                                else _by_rows(new))  # (a product whose operands were rebuilt stays one)
    return outputs, {renamed.get(p, p) for p in products}


RECOMPUTED_MAX = 10**7  # elements of the largest tensor a recomputed reduction is stored in


def _recomputed(order: list[Expr]) -> set[Expr]:
    """The reductions (and gathers through a table) that loops would compute again for indices
    they do not vary over, to be materialised: a reduction is computed in the loop of its innermost
    index, so each iteration of a loop outside that one over another index repeats it (k-means'
    gradient: the min over the clusters of a point, inside the sum over points of a tensor over
    clusters, cost clusters x points x clusters; GMM's lower triangles, read through a table of
    positions in each point's product). The loops around a node: its tensor's (or scatter's)
    indices in order, then the reductions it sits in, innermost last."""
    found: set[Expr] = set()
    seen: set[tuple] = set()
    stack = [(n.args[0], tuple(n.args[1 + (n.payload[1] if n.op.name == "scatter" else 0):]))
             for n in order if n.op.name in ("tensor", "scatter")]
    stack += [(n, ()) for n in order if n.op.name in REDUCTIONS and not n.free]
    while stack:
        node, loops = stack.pop()
        if (node, loops) in seen or node.op.array_valued:
            continue
        seen.add((node, loops))
        gather = node.op.name == "load" and any(a.op.name == "load" and a.args[0].op.name == "table"
                                                for a in node.args[1:])
        if node.op.name in REDUCTIONS or gather:
            depth = max((k for k, i in enumerate(loops) if i in node.free), default=0)
            if any(i not in node.free for i in loops[:depth]) and not _address(node) and \
                    math.prod(i.payload[1] for i in node.free) <= RECOMPUTED_MAX:
                found.add(node)
            if not gather:
                stack.append((node.args[0], (*loops, node.args[1])))
            continue
        stack += [(a, loops) for a in node.args]
    return found


def _scattered_sums(order: list[Expr]) -> set[Expr]:
    """Sums down COLUMN_MIN or more rows that a scatter adds (a gradient reaching a parameter
    through a table, GMM's lower triangle): stored as a tensor first, which _by_rows may then
    add row by row, where inside the scatter's loop each element sums its column alone."""
    return {n for s in order if s.op.name == "scatter" for n in loop_body(s)
            if n.op.name == "sum" and n.free and n.args[1].payload[1] >= COLUMN_MIN and not _address(n)}


def _address(n: Expr) -> bool:
    """Whether ``n`` is index arithmetic (``(6*j + k) % 6``: loads' addresses read it, never an array)."""
    try:
        value_range(n)
    except TypeError:
        return False
    return True


def _by_rows(t: Expr) -> Expr | None:
    """A tensor of sums down columns, ``t[j] = sum(A[i, j], i)``, as a scatter adding row after row
    (``t[j] += A[i, j]``, j innermost), or None: summed down a column, each element waits on the
    addition before (a chain of ``COLUMN_MIN`` or more), across a row they are independent and
    contiguous. Each element adds the same terms in the same order. Not where a load reads along
    ``i`` as its last axis and varies over ``j`` too (a row sum: contiguous already); a load
    over ``i`` alone is one value per row."""
    if t.op.name != "tensor" or t.args[0].op.name != "sum":
        return None
    (body, i), js = t.args[0].args, t.args[1:]
    if i.payload[1] < COLUMN_MIN or any(n.op.name in REDUCTIONS for n in loop_body(t.args[0])):
        return None
    loads = [n for n in loop_body(t.args[0]) if n.op.name == "load" and n.args[0].op.name != "table"]
    if any(i in n.args[-1].free and not n.free.isdisjoint(js) for n in loads) or not any(
            js[-1] in n.args[-1].free and any(i in a.free for a in n.args[1:-1]) for n in loads):
        return None
    return scatter(body, js, (i, *js), t.shape)


def _rewrite(outputs: list[Expr], replace: Callable) -> tuple[list[Expr], dict]:
    """The graph rebuilt bottom up, ``replace(node, node rebuilt)`` giving what its users read
    instead (or None: the rebuilt node); and the map from old nodes to new."""
    new: dict[Expr, Expr] = {}
    for node in topo_order(outputs):
        args = tuple(new.get(a, a) for a in node.args)
        if any(a is not b for a, b in zip(args, node.args)):  # (a tensor of a load of a tensor is that tensor)
            new[node] = tensor(*args) if node.op.name == "tensor" else apply(node.op, args, node.payload)
        out = replace(node, new.get(node, node))
        if out is not None:
            new[node] = out
    return [new.get(r, r) for r in outputs], new


def _materialised(e: Expr, axes: tuple) -> Expr:
    """``e`` read from the tensor of it over ``axes``."""
    return apply(OPS["load"], (tensor(e, *axes), *axes))


def _bodies(order: list[Expr]) -> dict[Expr, Expr]:
    """Each tensor's body (not a mere load) -> the first tensor over exactly its indices."""
    bodies: dict[Expr, Expr] = {}
    for t in order:
        b = t.args[0] if t.op.name == "tensor" else None
        if b is not None and b.args and b.op.name != "load" and b.free == set(t.args[1:]):
            bodies.setdefault(b, t)
    return bodies


def _axes(order: list[Expr]) -> Callable[[Expr], tuple]:
    """A node's indices in the order of the first tensor around it (else by name): the layout a
    tensor of it gets, so the tensors around read it in order."""
    found: dict[Expr, tuple] = {}
    for t in order:
        if t.op.name == "tensor":
            for n in loop_body(t):
                if n.free and n.free <= set(t.args[1:]):
                    found.setdefault(n, tuple(i for i in t.args[1:] if i in n.free))
    return lambda node: found.get(node) or tuple(by_name(node.free))


def _product(s: Expr, axes: tuple) -> Expr | None:
    """``s`` = sum(a*b, c) as the tensor of a matrix (or matrix-vector) product over ``axes``, or None."""
    body, c = s.args
    if body.op.name != "mul" or not 1 <= len(axes) <= 2 or any(c not in f.free for f in body.args):
        return None
    factors = sorted(body.args, key=lambda f: next((k for k, i in enumerate(axes) if i in f.free), 2))
    own = [f.free - {c} for f in factors]
    if own[0] != {axes[0]} or own[1] != set(axes[1:]):
        return None
    if math.prod(i.payload[1] for i in (*axes, c)) < BLAS_MIN:
        return None
    operands = [_operand(f, (axes[0], c)) for f in factors[:1]] + [_operand(factors[1], (c, *axes[1:]))]
    return tensor(reduce("sum", operands[0] * operands[1], c), *axes)


def _operand(f: Expr, axes: tuple) -> Expr:
    """``f`` as a load of an array over ``axes`` (in either order): itself if it is one, else a load
    from the tensor of it (materialised once, so BLAS can read it)."""
    if f.op.name == "load" and f.payload is None and f.args[0].op.name != "table" and \
            len(f.args) == len(axes) + 1 and set(f.args[1:]) == set(axes) and len(set(f.args[1:])) == len(axes) \
            and all(i.payload[1] == n for i, n in zip(f.args[1:], f.args[0].shape)):  # (all of it, not a part)
        return f
    return apply(OPS["load"], (tensor(f, *axes), *axes))


def loop_body(node: Expr) -> set:
    """The scalar nodes a tensor's, scatter's or reduction's loop computes: its body's graph, not
    descending into the arrays it reads. A reduction may ride in another loop only if none of
    this is another reduction and no array's loop needs it (it is complete after the loop only)."""
    return scalar_graph(node.args[0])
