"""vmap's rewrite: a function of one example becomes the function of a batch through one extra index.

``fn`` is traced once on placeholders shaped like one example (``x`` of shape ``(d,)``); every
load of a placeholder ``x[j]`` then becomes a load of the batch ``X[b, j]`` (``b`` at the mapped
axis) for a new index ``b``. What comes to vary over ``b`` is lifted: a tensor or scatter whose
body now depends on ``b`` gains ``b`` as its leading axis (and its loads read it at ``b``); a
scalar result becomes the tensor over ``b``. Nothing else changes: reductions, gathers, BLAS
products and derivatives see ordinary rolled expressions, and the batch costs no more nodes
than one example (Halide's and TVM's view: a batch is one more loop, not a copy of the body).
"""

from __future__ import annotations

from collections.abc import Callable

from symgrad.expr import ops, rolled
from symgrad.expr.build import apply
from symgrad.expr.node import Expr
from symgrad.expr.traverse import topo_order


def batch(roots: list[Expr], mapped: dict[Expr, tuple[Expr, int]], b: Expr) -> list[tuple[Expr, int | None]]:
    """Each root for the whole batch: (expression, axis of the batch in it, or None if it does not vary).

    ``mapped`` takes each placeholder (an array, or a variable for a scalar example) to the batch it
    stands for and the axis the batch index ``b`` runs along there.

    >>> X, b = rolled.array("X", (4, 3)), rolled.index("b", 4)
    >>> x, j = rolled.array("x", 3), rolled.index("j", 3)
    >>> [(str(e), axis) for e, axis in batch([rolled.reduce("sum", x[j] ** 2, j)], {x: (X, 0)}, b)]
    [('tensor(sum(X[b, j]**2, j=0..2), b=0..3)', 0)]
    """
    lifted: dict[Expr, tuple[Expr, int]] = {}  # an array of one example -> (its batch, the batch axis)
    new: dict[Expr, Expr] = {}
    for node, (batched, axis) in mapped.items():
        if node.op.array_valued:
            lifted[node] = (batched, axis)
        else:
            new[node] = apply(ops.load, (batched, b))
    for node in topo_order(roots):
        if node in lifted or node in new:
            continue
        args = tuple(new.get(a, a) for a in node.args)
        rule = RULES.get(node.op.name)
        out = rule(node, args, [lifted.get(a) for a in node.args], b) if rule is not None else None
        if out is not None:
            lifted[node] = out
            continue
        for a in node.args[1:] if node.op.name == "load" else node.args:
            if a in lifted:
                raise TypeError(f"vmap: the batched array {a} is used whole by {node.op.name}; "
                                "only its elements can be read")
        if node.op.name == "load" and node.args[0] in lifted:  # the rewrite itself: x[j] -> X[b, j]
            whole, axis = lifted[node.args[0]]
            address = list(args[1:])
            address.insert(axis, b)
            new[node] = apply(ops.load, (whole, *address), node.payload)
        elif any(x is not y for x, y in zip(args, node.args)):
            new[node] = apply(node.op, args, node.payload)
    return [_root(new.get(r, r), lifted.get(r), b) for r in roots]


def _root(e: Expr, lifted: tuple[Expr, int] | None, b: Expr) -> tuple[Expr, int | None]:
    if lifted is not None:
        return lifted
    if not e.op.array_valued and b in e.free:
        return rolled.tensor(e, b), 0
    return e, None


def place(e: Expr, axis: int | None, out_axis: int, size: int) -> Expr:
    """The batched array ``e`` (batch along ``axis``; None: not batched, broadcast) with the batch
    moved to ``out_axis``.

    >>> X = rolled.array("X", (4, 3))
    >>> place(X, 0, 1, 4).shape, place(rolled.array("w", 3), None, 0, 5).shape
    ((3, 4), (5, 3))
    """
    shape = list(e.shape)
    if axis is None:
        shape.insert(out_axis, size)
    else:
        shape.insert(out_axis, shape.pop(axis))
    if axis == out_axis:
        return e
    out = rolled.fresh_indices(rolled.array("k", tuple(shape)))
    inner = list(out)
    b = inner.pop(out_axis)
    if axis is not None:
        inner.insert(axis, b)
    body = rolled.subscript(e, tuple(inner)) if e.op.array_valued else e
    return rolled.tensor(body, *out)


def _cumsum(node: Expr, args: tuple, lifted: list, b: Expr) -> tuple[Expr, int] | None:
    """Running sums of a batched array: along the same axis of each example."""
    if lifted[0] is None:
        return None
    whole, axis = lifted[0]
    along, reverse = node.payload
    return rolled.cumsum(whole, along + (axis <= along), reverse), axis


def _tensor(node: Expr, args: tuple, lifted: list, b: Expr) -> tuple[Expr, int] | None:
    """A tensor whose body came to vary over the batch: the batch its leading axis."""
    return (rolled.tensor(args[0], b, *args[1:]), 0) if b in args[0].free else None


def _scatter(node: Expr, args: tuple, lifted: list, b: Expr) -> tuple[Expr, int] | None:
    """A scatter whose body or addresses came to vary over the batch: the batch its leading axis."""
    if not any(b in a.free for a in args):
        return None
    shape, n = node.payload
    return rolled.scatter(args[0], (b, *args[1:1 + n]), (b, *args[1 + n:]), (b.payload[1], *shape)), 0


# The batching rules of array-valued ops, by name: (node, its arguments rebuilt, each argument's (batch, axis)
# or None, b) -> (the node over the batch, its batch axis), or None where nothing it reads varies over the
# batch. Modules defining an op add its row (scans.py: scan).
RULES: dict[str, Callable] = {"cumsum": _cumsum, "tensor": _tensor, "scatter": _scatter}
