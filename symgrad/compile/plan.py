"""The plan: rolled outputs rewritten for loops, before they are scheduled (schedule.py) and emitted
(loop_source.py, the compiled loops; loop_vm.py, the loop VM): what to materialise, which contractions
are BLAS products, which sums down columns add row by row. Both backends run the same plan.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

from symgrad.expr.build import apply, const
from symgrad.expr.ndarrays import element
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.ranges import may_fail
from symgrad.expr.rolled import by_name, costly, index, reduce, scatter, substitute_indices, tensor, value_range
from symgrad.expr.traverse import rewrite, scalar_graph, topo_order

REDUCTIONS = ("sum", "max", "min")

_ZERO = const(0.0)

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
    finite: dict = {}
    outputs = _last_carries(outputs)
    outputs, _ = _rewrite(outputs, lambda node, new: _summed(new, finite))
    bodies = _bodies(topo_order(outputs))  # (costly ones first: what _read_once computes again reads them)
    outputs, _ = _rewrite(outputs, lambda node, new: _materialised(new, bodies[node].args[1:])
                          if node in bodies and costly(node) else None)
    inline = _read_once(outputs)
    outputs, _ = _rewrite(outputs, lambda node, new: substitute_indices(
        new.args[0].args[0], dict(zip(new.args[0].args[1:], new.args[1:]))) if node in inline else None)
    order = topo_order(outputs)
    users = _users(order)
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


def _last_carries(outputs: list[Expr]) -> list[Expr]:
    """A scan run forward of which only the last carry is read, run reversed over its rows reversed (the
    same steps in the same order, the same bits): its last carry is then row 0, and the compiled loops keep
    two rows (``Schedule.last_only``) where they kept every carry (a simulation's steps x state)."""
    order, kept = topo_order(outputs), set(outputs)
    last = read_at_row(order, {n: n.payload[0] for n in order if n.op.name == "scan" and not n.payload[1]
                               and n not in kept})
    if not last:
        return outputs
    reversed_scans: dict[Expr, Expr] = {}

    def replace(node: Expr, new: Expr) -> Expr | None:
        if node.op.name != "load" or node.args[0] not in last:
            return None
        s = new.args[0]
        if s not in reversed_scans:
            length, _, step = s.payload
            k = 1 + len(step.xs)
            rows = [_rows_reversed(x) for x in s.args[1:k]]
            reversed_scans[s] = apply(OPS["scan"], (s.args[0], *rows, *s.args[k:]), (length, True, step))
        return apply(OPS["load"], (reversed_scans[s], _ZERO, *new.args[2:]), new.payload)

    return _rewrite(outputs, replace)[0]


def read_at_row(order: list[Expr], rows: dict[Expr, int]) -> set[Expr]:
    """Of the arrays ``rows`` maps to a row, those that ``order`` reads only by loads of that row (a scan's
    last carry)."""
    found = dict(rows)
    for n in order:
        for k, a in enumerate(n.args):
            if a in found and not (k == 0 and n.op.name == "load" and n.args[1].op.name == "const"
                                   and n.args[1].payload == found[a]):
                del found[a]
    return set(found)


def _rows_reversed(x: Expr) -> Expr:
    """The array ``x`` with its rows in reverse order."""
    at = tuple(index(f"rev#{d}", n) for d, n in enumerate(x.shape))
    return tensor(element(x, (apply(OPS["sub"], (const(x.shape[0] - 1), at[0])), *at[1:])), *at)


def _users(order: list[Expr]) -> dict[Expr, int]:
    """How many nodes use each node as an argument."""
    users: dict[Expr, int] = {}
    for node in order:
        for a in set(node.args):
            users[a] = users.get(a, 0) + 1
    return users


READ_AGAIN_MAX = 8  # arithmetic ops of a tensor's body computed again in a second loop, not stored and read


def _read_once(outputs: list[Expr]) -> set[Expr]:
    """The loads ``t[i, j]`` to compute in place of reading them: of a tensor ``t`` that is no output,
    whose body is cheap arithmetic over its indices, read only element by element in loops over
    exactly its indices (another tensor's, a reduction's over them), which would otherwise store
    each element and read it back (a gradient that is the sum of two adjoints' tensors: lse's, the
    softmax and the max's ties). Where two loops read it (lse's softmax, summed and in the
    gradient), only a body of a few operations (READ_AGAIN_MAX) is computed twice. Not a tensor of
    exponentials or other costly values, which another tensor may compute too (renamed, the copy
    would not be found and read from that one)."""
    order = topo_order(outputs)
    users, kept = _users(order), set(outputs)
    sites: dict[Expr, set] = {}  # a tensor -> the loops reading it as it is (their innermost node)
    loads: dict[Expr, set] = {}  # a tensor -> its loads read so
    bad: set[Expr] = set()
    seen: set[tuple] = set()
    stack = [(root, body, frozenset(loops)) for root, body, loops in _loop_roots(order)]
    while stack:
        loop, node, loops = stack.pop()
        if (loop, node, loops) in seen or node.op.array_valued:
            continue
        seen.add((loop, node, loops))
        t = node.args[0] if node.op.name == "load" else None
        if t is not None and t.op.name == "tensor":
            if node.payload is None and len(node.args) - 1 == len(loops) == len(set(node.args[1:]) & loops):
                sites.setdefault(t, set()).add((loop, loops))
                loads.setdefault(t, set()).add(node)
            else:
                bad.add(t)
        if node.op.name in REDUCTIONS:
            loop, loops = node, loops | {node.args[1]}
        stack += [(loop, a, loops) for a in node.args]
    found = set()
    for t, read in loads.items():
        body, own = loop_body(t), set(t.args[1:])
        arithmetic = sum(1 for m in body if m.args and m.op.name != "load" and m.free & own)
        if t not in kept and t not in bad and users[t] == len(read) and not any(
                costly(m) and m.free & own for m in body) and \
                (len(sites[t]) == 1 or len(sites[t]) == 2 and arithmetic <= READ_AGAIN_MAX):
            found |= read
    return found


def _summed(s: Expr, finite: dict) -> Expr | None:
    """A sum rewritten by _interchanged, else by _factored, or None (one pass over the graph for both)."""
    out = _interchanged(s, finite)
    return _factored(s, finite) if out is None else out


def _interchanged(s: Expr, finite: dict) -> Expr | None:
    """``sum(sum(a*b, i), n)``, ``a`` not varying over ``n``, as ``sum(a * sum(b, n), i)``, or None:
    the sum over ``n`` once for each ``i``, not of a product for each ``n`` (GMM's gradient for the
    means: over the points n, L[k]^T times each point's adjoint, is L[k]^T times their sum). Also
    through a negation and a guard ``where(m, 0, .)`` (diff._Masks), ``m`` not varying over ``i``:
    ``where(m, 0, sum(a*b, i))`` is ``sum(a * where(m, 0, b), i)`` where ``a`` is finite."""
    if s.op.name != "sum":
        return None
    body, n = s.args
    guard = negated = None
    if body.op.name == "where" and body.args[1] is _ZERO:
        guard, body = body.args[0], body.args[2]
    if body.op.name == "neg":
        negated, body = True, body.args[0]
    if body.op.name != "sum" or body.args[0].op.name != "mul":
        return None
    (a, b), i = body.args[0].args, body.args[1]
    a, b = (b, a) if n in a.free else (a, b)
    if n in a.free or n not in b.free or guard is not None and (i in guard.free or may_fail(a, finite)):
        return None
    inner = reduce("sum", b if guard is None else apply(OPS["where"], (guard, _ZERO, b)), n)
    out = reduce("sum", a * inner, i)
    return -out if negated else out


def _factored(s: Expr, finite: dict) -> Expr | None:
    """``sum(a * b, i)``, ``a`` an array read not varying over ``i`` (finite where the inputs are), as
    ``a * sum(b, i)``, or None: one product for each element outside the sum, not one per term. k-means'
    Hessian diagonal, each centroid's tangent times its points' weights, multiplied points x clusters x
    dimensions; the sum of the weights over the points is then stored once per cluster (_recomputed).
    As _interchanged's, exact where the inputs are finite (an inf one may give inf for nan)."""
    if s.op.name != "sum" or s.args[0].op.name != "mul":
        return None
    body, i = s.args
    factors, stack = [], [body]
    while stack:
        node = stack.pop()
        if node.op.name == "mul":
            stack += node.args
        else:
            factors.append(node)
    outer = [f for f in factors if i not in f.free]
    if not any(f.free for f in outer) or len(outer) == len(factors) or any(may_fail(f, finite) for f in outer):
        return None
    return functools.reduce(operator.mul, outer) * reduce("sum", functools.reduce(
        operator.mul, [f for f in factors if i in f.free]), i)


RECOMPUTED_MAX = 10**7  # elements of the largest tensor a recomputed reduction is stored in


def _recomputed(order: list[Expr]) -> set[Expr]:
    """The reductions (and gathers through a table, and wheres of a mask read from an array) that
    loops would compute again for indices they do not vary over, to be materialised: a reduction is
    computed in the loop of its innermost index, so each iteration of a loop outside that one over
    another index repeats it (k-means' gradient: the min over the clusters of a point, inside the
    sum over points of a tensor over clusters, cost clusters x points x clusters; GMM's lower
    triangles, read through a table of positions in each point's product, or masked in,
    ``where(mask[k, i, j], l[k, i, j], 0)``). The loops around a node: its tensor's (or scatter's)
    indices in order, then the reductions it sits in, innermost last."""
    found: set[Expr] = set()
    seen: set[tuple] = set()
    stack = [(body, loops) for _, body, loops in _loop_roots(order)]
    while stack:
        node, loops = stack.pop()
        if (node, loops) in seen or node.op.array_valued:
            continue
        seen.add((node, loops))
        gather = node.op.name == "load" and any(a.op.name == "load" and a.args[0].op.name == "table"
                                                for a in node.args[1:])
        masked = node.op.name == "where" and node.args[0].op.name == "load"
        if node.op.name in REDUCTIONS or gather or masked:
            depth = max((k for k, i in enumerate(loops) if i in node.free), default=0)
            if any(i not in node.free for i in loops[:depth]) and not _address(node) and \
                    math.prod(i.payload[1] for i in node.free) <= RECOMPUTED_MAX:
                found.add(node)
        if node.op.name in REDUCTIONS:
            stack.append((node.args[0], (*loops, node.args[1])))
        elif not gather:
            stack += [(a, loops) for a in node.args]
    return found


def _loop_roots(order: list[Expr]) -> list[tuple[Expr, Expr, tuple]]:
    """Where loop nests start, as (root, what its loops compute, their indices): each tensor's or
    scatter's body inside the loops over its indices, each scalar reduction (its loop inside it)."""
    roots = [(n, n.args[0], tuple(n.args[1 + (n.payload[1] if n.op.name == "scatter" else 0):]))
             for n in order if n.op.name in ("tensor", "scatter")]
    return roots + [(n, n, ()) for n in order if n.op.name in REDUCTIONS and not n.free]


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
    contiguous. Each element adds the same terms in the same order. Where some load reads ``j``'s last
    index as its last axis and some load strides along ``i`` (reads it at an earlier axis, not the last:
    k-means' Hessian diagonal, ``sum(2 * w[i, k] * v[k, l], i)`` over (k, l), read w's column again for
    each l, 7.6 of its 13.6 ms). Not where a load reads along ``i`` as its last axis and varies over
    ``j`` too (a row sum: contiguous already); a load over ``i`` alone is one value per row."""
    if t.op.name != "tensor" or t.args[0].op.name != "sum":
        return None
    (body, i), js = t.args[0].args, t.args[1:]
    if i.payload[1] < COLUMN_MIN or any(n.op.name in REDUCTIONS for n in loop_body(t.args[0])):
        return None
    loads = [n for n in loop_body(t.args[0]) if n.op.name == "load" and n.args[0].op.name != "table"]
    if any(i in n.args[-1].free and not n.free.isdisjoint(js) for n in loads) or not any(
            js[-1] in n.args[-1].free for n in loads) or not any(
            i not in n.args[-1].free and any(i in a.free for a in n.args[1:-1]) for n in loads):
        return None
    return scatter(body, js, (i, *js), t.shape)


def _rewrite(outputs: list[Expr], replace: Callable) -> tuple[list[Expr], dict]:
    """The graph rebuilt bottom up, ``replace(node, node rebuilt)`` giving what its users read
    instead (or None: the rebuilt node); and the map from old nodes to new."""
    def rule(node: Expr, args: tuple) -> Expr:
        rebuilt = node
        if any(a is not b for a, b in zip(args, node.args)):  # (a tensor of a load of a tensor is that tensor)
            rebuilt = tensor(*args) if node.op.name == "tensor" else apply(node.op, args, node.payload)
        out = replace(node, rebuilt)
        return rebuilt if out is None else out

    new = rewrite(outputs, rule)
    return [new[r] for r in outputs], new


def _materialised(e: Expr, axes: tuple) -> Expr:
    """``e`` read from the tensor of it over ``axes``."""
    return apply(OPS["load"], (tensor(e, *axes), *axes))


def _bodies(order: list[Expr]) -> dict[Expr, Expr]:
    """Each tensor's body (not a mere load, nor index arithmetic, which addresses read as it is) ->
    the first tensor over exactly its indices."""
    bodies: dict[Expr, Expr] = {}
    for t in order:
        b = t.args[0] if t.op.name == "tensor" else None
        if b is not None and b.args and b.op.name != "load" and b.free == set(t.args[1:]) and not _address(b):
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
    """``s`` = sum(a*b, c) as the tensor of a matrix (or matrix-vector) product over ``axes``, or None.
    An index of ``axes`` that both factors vary over is a batch: one product for each of its values
    (GMM's ``einsum("kij,nkj->nki")``), the batch axis first in the product and its operands. A
    guarded product ``where(m, 0, a*b)`` (see diff._Masks), ``m`` varying over indices both factors
    vary over, is ``where(m, 0, a) * where(m, 0, b)``: the same numbers, 0 where masked (nan never
    multiplied in)."""
    body, c = s.args
    factors = _factors(body)
    if factors is None or any(c not in f.free for f in factors):
        return None
    batch = tuple(i for i in axes if all(i in f.free for f in factors))
    rest = tuple(i for i in axes if i not in set(batch))
    if len(batch) > 1 or not 1 <= len(rest) <= 2:
        return None
    factors = sorted(factors, key=lambda f: next((k for k, i in enumerate(rest) if i in f.free), 2))
    own = [f.free - {c, *batch} for f in factors]
    if own[0] != {rest[0]} or own[1] != set(rest[1:]):
        return None
    if math.prod(i.payload[1] for i in (*axes, c)) < BLAS_MIN:
        return None
    a, b = _operand(factors[0], batch, (rest[0], c)), _operand(factors[1], batch, (c, *rest[1:]))
    return tensor(reduce("sum", a * b, c), *batch, *rest)


def _factors(body: Expr) -> tuple[Expr, ...] | None:
    """The two factors of a product's body, ``a*b`` or a guarded ``where(m, 0, a*b)`` (or
    ``where(m, a*b, 0)``), or None."""
    if body.op.name == "mul":
        return body.args
    if body.op.name != "where" or not any(a is _ZERO for a in body.args[1:]):
        return None
    mask, product = body.args[0], body.args[2 if body.args[1] is _ZERO else 1]
    if product.op.name != "mul" or not mask.free <= product.args[0].free & product.args[1].free:
        return None
    return tuple(apply(OPS["where"], (mask, *((_ZERO, f) if body.args[1] is _ZERO else (f, _ZERO))))
                 for f in product.args)


def _operand(f: Expr, batch: tuple, axes: tuple) -> Expr:
    """``f`` as a load of an array over ``batch`` then ``axes`` (these in either order): itself if it
    is one, else a load from the tensor of it (materialised once, so BLAS can read it)."""
    indices = (*batch, *axes)
    own, shape = read_as_matrix(f) if f.op.name == "load" and f.payload is None else ((), ())
    if own and f.args[0].op.name != "table" and (not batch or len(own) == len(f.args) - 1) and \
            len(own) == len(indices) and all(i is b for i, b in zip(own, batch)) and \
            set(own) == set(indices) and len(set(own)) == len(indices) \
            and all(i.payload[1] == n for i, n in zip(own, shape)):  # (all of it, not a part)
        return f
    indices = (*batch, *_layout(f, axes))
    return apply(OPS["load"], (tensor(f, *indices), *indices))


def read_as_matrix(load: Expr) -> tuple[tuple, tuple]:
    """A product operand's indices and its array's shape without the axes of one element it reads
    (at 0: a scan's carries of one number each, ``R[t, j, 0]``): the matrix or vector BLAS reads.

    >>> from symgrad.expr.rolled import array, index
    >>> R, t = array("R", (3, 1)), index("t", 3)
    >>> read_as_matrix(R[t, 0])
    ((t,), (3,))
    """
    kept = [(i, n) for i, n in zip(load.args[1:], load.args[0].shape) if n != 1 or i.op.name != "const"]
    return tuple(i for i, _ in kept), tuple(n for _, n in kept)


def _layout(f: Expr, axes: tuple) -> tuple:
    """``axes`` in the order of the first array ``f`` reads over both (BLAS takes either order, and
    the tensor of ``f`` is filled fastest reading along its arrays' rows), else as they are."""
    for n in sorted(scalar_graph(f), key=lambda n: n.op.name != "load"):
        if n.op.name != "load" or n.args[0].op.name == "table":
            continue
        at = [next((k for k, a in enumerate(n.args[1:]) if i in a.free), None) for i in axes]
        if None not in at:
            return tuple(i for _, i in sorted(zip(at, axes), key=lambda p: p[0]))
    return axes


def loop_body(node: Expr) -> set:
    """The scalar nodes a tensor's, scatter's or reduction's loop computes: its body's graph, not
    descending into the arrays it reads. A reduction may ride in another loop only if none of
    this is another reduction and no array's loop needs it (it is complete after the loop only)."""
    return scalar_graph(node.args[0])
