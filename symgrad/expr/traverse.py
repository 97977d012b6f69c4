"""Graph walks, all iterative: topological order, counts, substitution, flattening.

Every walk here uses an explicit stack, so a graph 10**6 deep is fine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from symgrad.expr.build import _as_expr, apply, const
from symgrad.expr.node import Expr, const_key, paused_gc
from symgrad.expr.ops import OPS


def object_array(values: Any) -> np.ndarray:
    """``values`` (an expression, a number, nested lists / tuples / arrays of them) as an object array
    whose entries are the expressions themselves: NumPy's own conversion would read a rolled array as
    the array of its elements (Expr.__array__, for NumPy code like ``np.array([x, y])``).

    >>> import symgrad as sg
    >>> object_array([sg.array("x", 3), sg.array("y", 3)]).shape
    (2,)
    """
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    if not isinstance(values, list | tuple):
        if not isinstance(values, Expr):
            return np.asarray(values, dtype=object)
        out = np.empty(1, dtype=object)
        out[0] = values  # (an entry set by index is stored as it is)
        return out.reshape(())
    parts = [object_array(v) for v in values]
    shape = parts[0].shape if parts else ()
    if any(p.shape != shape for p in parts):
        raise ValueError(f"nested sequences of different shapes: {sorted({p.shape for p in parts})}")
    out = np.empty((len(parts), *shape), dtype=object)
    for i, p in enumerate(parts):
        for at in np.ndindex(shape):
            out[(i, *at)] = p[at]
    return out


def as_expr_list(exprs: Any) -> list[Expr]:
    """Flatten an expression, a sequence or an object array into a list of expressions."""
    if isinstance(exprs, Expr):
        return [exprs]
    flat = object_array(exprs).ravel() if not isinstance(exprs, dict) else list(exprs.values())
    return [e if isinstance(e, Expr) else const(e) for e in flat]


def topo_order(roots: Iterable[Expr], known: Any = None) -> list[Expr]:
    """Every node reachable from ``roots``, each once, arguments before their users; nodes in
    ``known`` (a set or dict: done before) are left out and not walked into.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> [str(n) for n in topo_order([sg.sin(x * y)])], [str(n) for n in topo_order([sg.sin(x * y)], {x * y})]
    (['x', 'y', 'x*y', 'sin(x*y)'], ['sin(x*y)'])
    """
    seen: set[Expr] = set()
    order: list[Expr] = []
    for root in roots:
        if root in seen or known is not None and root in known:
            continue
        seen.add(root)
        stack = [(root, iter(root.args))]
        while stack:
            node, pending = stack[-1]
            for arg in pending:
                if arg not in seen and (known is None or arg not in known):
                    seen.add(arg)
                    stack.append((arg, iter(arg.args)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def rewrite(roots: list[Expr], rule: Callable[[Expr, tuple], Expr | None] | None = None, new: dict | None = None,
            known: Any = None) -> dict[Expr, Expr]:
    """The graph of ``roots`` rebuilt bottom up, each node once, without recursion: every pass that
    rebuilds a graph is this walk and a rule. A node's arguments are first replaced by what they became;
    then ``rule(node, args)`` gives what the node becomes, or None: the node itself where no argument
    changed, else the node rebuilt on the new arguments (``apply``: its rewrite rules run again).

    Returns ``new``: each node walked -> what it became (given ``new``, nodes already in it are kept
    and not walked into: a memo shared by several calls, or the substitutions to start from). Nodes in
    ``known`` (as for ``topo_order``) are left as they are.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> f = sg.sin(x) * y + x
    >>> new = rewrite([f], lambda node, args: sg.cos(args[0]) if node.op.name == "sin" else None)
    >>> new[f]
    x + y*cos(x)
    """
    new = {} if new is None else new
    for node in topo_order(roots, new if known is None else _Either(new, known)):
        args = tuple(new.get(a, a) for a in node.args)
        out = rule(node, args) if rule is not None else None
        if out is None:
            out = apply(node.op, args, node.payload) if any(a is not b for a, b in zip(args, node.args)) else node
        new[node] = out
    return new


class _Either:
    """Membership in either of two collections (``rewrite``'s memo and the nodes it must not walk into)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __contains__(self, node: Expr) -> bool:
        return node in self.a or node in self.b


def count_nodes(exprs: Any) -> int:
    """The number of distinct nodes in the DAG of ``exprs`` (shared nodes counted once).

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> count_nodes(sg.sin(x) * sg.sin(x) + 1)
    5
    """
    return len(topo_order(as_expr_list(exprs)))


def free_variables(exprs: Any) -> list[Expr]:
    """The variables that ``exprs`` depend on, sorted by name.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> free_variables(y * sg.sin(x))
    [x, y]
    """
    found = [n for n in topo_order(as_expr_list(exprs)) if n.op.name == "var"]
    return sorted(found, key=lambda v: v.payload)


@paused_gc()
def substitute(exprs: Any, mapping: dict) -> Any:
    """Replace nodes (usually variables) by expressions or numbers, rebuilding what uses them.

    Returns the same kind of container as given: one expression, a list, or an array.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> substitute(x * y + x, {x: 2})
    2*y + 2
    """
    roots = as_expr_list(exprs)
    # (rebuilt by apply with their payloads: loads keep "guarded", scatters their shape)
    new = rewrite(roots, new={k: _as_expr(v, OPS["var"]) for k, v in mapping.items()})
    return _like(exprs, [new[r] for r in roots])


def _like(template: Any, flat: list) -> Any:
    """Shape ``flat`` like ``template``: one item, a list, or an array."""
    if isinstance(template, Expr) or not isinstance(template, list | tuple) and np.ndim(template) == 0:
        return flat[0]
    if isinstance(template, np.ndarray):
        return object_array(list(flat)).reshape(template.shape)
    return list(flat)


def to_flat(exprs: Any) -> tuple[list[tuple], list[int]]:
    """The DAG as a flat list: (op name, payload, argument indices) per node, plus output indices.

    The order is a deterministic function of the structure, so the flat form is stable
    across processes; pickling and the structural hash both use it.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> to_flat(sg.sin(x))
    ([('var', 'x', ()), ('sin', None, (0,))], [1])
    """
    roots = as_expr_list(exprs)
    order = topo_order(roots)
    index = {n: i for i, n in enumerate(order)}
    nodes = [(n.op.name, n.payload, tuple(index[a] for a in n.args)) for n in order]
    return nodes, [index[r] for r in roots]


@paused_gc()
def from_flat(nodes: list[tuple], outputs: list[int]) -> list[Expr]:
    """Rebuild expressions from ``to_flat``'s form.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> from_flat(*to_flat(sg.sin(x)))[0] is sg.sin(x)
    True
    """
    built: list[Expr] = []
    for name, payload, args in nodes:
        built.append(apply(OPS[name], tuple(built[i] for i in args), payload))
    return [built[i] for i in outputs]


def structural_hash(exprs: Any) -> str:
    """A hex digest of the structure of ``exprs``, equal across processes (for caches).

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> structural_hash(x * y) == structural_hash(y * x)
    True
    """
    nodes, outputs = to_flat(exprs)
    h = hashlib.blake2b(digest_size=20)
    for name, payload, args in nodes:
        key = const_key(payload) if name == "const" else payload
        h.update(f"{name}|{key}|{args};".encode())
    h.update(repr(outputs).encode())
    return h.hexdigest()


def terms(e: Expr, signed: bool = False) -> list[Expr]:
    """The terms of a sum ``a + b + ...`` (its tree of additions); ``signed``: of subtractions too,
    ``a - b`` giving ``a`` and ``-b`` (a sum of negated terms is built as a chain of subtractions).

    >>> import symgrad as sg
    >>> x, y, z = sg.symbols("x y z")
    >>> sorted(map(str, terms(x + y * z + sg.sin(x)))), sorted(map(str, terms(-x - y, signed=True)))
    (['sin(x)', 'x', 'y*z'], ['-x', '-y'])
    """
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        if node.op.name == "add":
            stack += node.args
        elif signed and node.op.name == "sub":
            stack += [node.args[0], apply(OPS["neg"], (node.args[1],))]
        else:
            out.append(node)
    return out


def total(parts: list[Expr]) -> Expr:
    """``parts[0] + parts[1] + ...``, added in that order.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> e = total([x, y, x])
    >>> e.args, e  # ((x + y) + x: it prints gathered)
    ((x, x + y), 2*x + y)
    """
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def scalar_graph(root: Expr) -> set:
    """``root``'s graph, not descending into the arrays it reads.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> sorted(str(n) for n in scalar_graph(sg.sin(x[i]) * 2))
    ['2', '2*sin(x[i])', 'i', 'sin(x[i])', 'x[i]']
    """
    seen, stack = {root}, [root]
    while stack:
        for a in stack.pop().args:
            if a not in seen and not a.op.array_valued:
                seen.add(a)
                stack.append(a)
    return seen
