"""Nodes whose derivatives a rule gives (``sg.custom_jvp`` / ``sg.custom_vjp``), not their graph.

A call of such a function is one node per scalar of its result, ``custom(value, x1, ..., xn)``:
``value`` the function's own graph (what every backend computes: ``plain`` replaces the node by
it before lowering), ``x1 .. xn`` the scalars it was called with. Its payload, a ``Rule``,
holds ``d node / d xj`` as graphs of placeholders ``p1 .. pn`` (the rule traced once, on them),
read at the arguments when a derivative needs them. Reverse and forward mode use them as they use
an op's partials, so derivatives of derivatives differentiate the rule (JAX's semantics); the
value's graph is never differentiated.
"""

from __future__ import annotations

import itertools

from symgrad.expr import ops
from symgrad.expr.build import apply
from symgrad.expr.node import Expr, Name, intern
from symgrad.expr.traverse import rewrite, substitute, topo_order

_count = itertools.count()
_made = False  # whether any custom node exists yet (plain() walks graphs only then)


def placeholder() -> Expr:
    """A new scalar placeholder (a variable no user name reaches) a rule is traced on."""
    return intern(ops.OPS["var"], (), Name(f"custom#{next(_count)}"))


class Rule:
    """``partials[j]``: d node / d argument j + 1 as a function of the placeholders ``inputs`` (None:
    zero); ``partials`` None: the function has no rule (differentiating it raises). A VJP whose
    cotangents are no linear function of the cotangent in (clipping it) has ``cotangent``
    ``(g, outs)`` instead: ``outs[j]`` argument j + 1's cotangent, a function of the inputs and of
    ``g``, the node's (reverse mode only). Compared by the identity of its parts, as a scan's step."""

    __slots__ = ("name", "inputs", "partials", "cotangent")

    def __init__(self, name: str, inputs: tuple, partials: tuple | None, cotangent: tuple | None = None) -> None:
        self.name, self.inputs, self.partials, self.cotangent = name, inputs, partials, cotangent

    def _parts(self) -> tuple:
        g, outs = self.cotangent or (None, ())
        return (*self.inputs, *(self.partials or ()), g, *outs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rule) or self.name != other.name or len(self.inputs) != len(other.inputs):
            return False
        mine, theirs = self._parts(), other._parts()
        return (self.partials is None) == (other.partials is None) and len(mine) == len(theirs) and all(
            a is b for a, b in zip(mine, theirs))

    def __hash__(self) -> int:
        return hash((self.name, *(0 if p is None else p.shash for p in self._parts())))

    def __repr__(self) -> str:  # (a node's payload hash reads it: the same in every process)
        parts = [p.shash for p in self._parts()[len(self.inputs):] if p is not None]
        return f"rule:{self.name}:{len(self.inputs)}:{hash(tuple(parts)) & 0xFFFFFFFF:08x}"


def make(name: str, value: Expr, args: list[Expr], inputs: list[Expr], partials: list | None,
         cotangent: tuple | None = None) -> Expr:
    """The node of one scalar result ``value`` of a call on ``args`` whose partials are ``partials``
    (graphs of ``inputs``, the placeholders standing for ``args``), or whose cotangent rule is
    ``cotangent`` (see Rule)."""
    global _made
    _made = True
    rule = Rule(name, tuple(inputs), None if partials is None else tuple(partials), cotangent)
    return apply(ops.custom, (value, *args), rule)


def partial(node: Expr, i: int) -> Expr | None:
    """d node / d node.args[i]: the rule's partial read at the node's arguments (none for the value)."""
    rule = node.payload
    if rule.cotangent is not None:
        raise TypeError(f"forward mode (jvp, hvp, jacfwd) through {rule.name}, whose bwd is not linear in the "
                        "cotangent: only reverse mode can use it")
    if rule.partials is None:
        raise TypeError(f"{rule.name} is a custom_jvp / custom_vjp function without a rule: define one "
                        f"with @{rule.name}.defjvp or {rule.name}.defvjp(fwd, bwd) to differentiate it")
    p = rule.partials[i - 1] if i else None
    return None if p is None else substitute(p, dict(zip(rule.inputs, node.args[1:])))


def cotangents(node: Expr, g: Expr) -> list[Expr | None] | None:
    """The cotangents of the node's arguments (None for the value) given ``g``, the node's; None where
    its rule has partials (reverse mode multiplies ``g`` by them)."""
    rule = node.payload
    if rule.cotangent is None:
        return None
    placeholder_g, outs = rule.cotangent
    values = substitute(list(outs), {**dict(zip(rule.inputs, node.args[1:])), placeholder_g: g})
    return [None, *values]


def plain(roots: list[Expr], reverse_only: bool = False) -> list[Expr]:
    """``roots`` with every custom node replaced by its value: what backends compute. ``reverse_only``:
    only the nodes of a rule that clips the cotangent, in a derivative's graph, where a derivative
    of it differentiates fwd as written (JAX's semantics), not the clipping again."""
    if not _made:
        return roots
    order = topo_order(roots)
    if not any(n.op is ops.custom for n in order):
        return roots
    dropped = lambda node, args: args[0] if node.op is ops.custom and (  # noqa: E731
        not reverse_only or node.payload.cotangent is not None) else None
    new = rewrite(roots, dropped)
    return [new[r] for r in roots]


def foreign(exprs: list[Expr], inputs: list[Expr]) -> Expr | None:
    """A variable or array ``exprs`` read besides the placeholders ``inputs`` (None if none)."""
    allowed = set(inputs)
    for node in topo_order(exprs):
        if node.op.name in ("var", "array") and node not in allowed:
            return node
    return None

