"""Graphviz DOT pictures of expression DAGs: every node once, shared ones filled, outputs marked.

Render with ``dot -Tsvg graph.dot > graph.svg`` (or paste into any Graphviz viewer).
"""

from __future__ import annotations

from typing import Any

from symgrad.expr.node import Expr
from symgrad.expr.printing import _labelled, _number
from symgrad.expr.traverse import topo_order

SHARED_FILL = "lightgoldenrod1"


def quote(text: str) -> str:
    """A DOT string literal for ``text``.

    >>> quote('say "hi"')
    '"say \\\\"hi\\\\""'
    """
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def node_label(node: Expr) -> str:
    """What a node shows: the variable's name, the constant's value, or the op's name.

    >>> import symgrad as sg
    >>> node_label(sg.sin(sg.Var("x"))), node_label(sg.const(0.5))
    ('sin', '0.5')
    """
    if node.op.name == "var":
        return node.payload
    if node.op.name == "const":
        return _number(node.payload, latex=False)
    return node.op.name


def to_dot(exprs: Any, name: str = "symgrad") -> str:
    """Graphviz DOT text for the DAG of ``exprs`` (an expression, a list, an array or a dict of them).

    Each node appears once; a node used by more than one other (or output) is filled, so
    the sharing a tree printout hides is visible. Edges run from arguments to their user,
    numbered for ops whose argument order matters; outputs get a box with their label.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> s = sg.sin(x * y)
    >>> print(sg.to_dot({"f": s * s + s}))
    digraph "symgrad" {
      rankdir=BT;
      node [shape=ellipse, fontname="Helvetica"];
      n0 [label="x", shape=box];
      n1 [label="y", shape=box];
      n2 [label="mul"];
      n3 [label="sin", style=filled, fillcolor=lightgoldenrod1];
      n4 [label="mul"];
      n5 [label="add"];
      n0 -> n2;
      n1 -> n2;
      n2 -> n3;
      n3 -> n4;
      n3 -> n4;
      n4 -> n5;
      n3 -> n5;
      out0 [label="f", shape=house];
      n5 -> out0;
    }
    """
    labels, roots = _labelled(exprs)
    order = topo_order(roots)
    index = {node: k for k, node in enumerate(order)}
    uses: dict[Expr, int] = {}
    for node in [*(a for n in order for a in n.args), *roots]:
        uses[node] = uses.get(node, 0) + 1
    lines = [f"digraph {quote(name)} {{", "  rankdir=BT;", '  node [shape=ellipse, fontname="Helvetica"];']
    for k, node in enumerate(order):
        fill = f", style=filled, fillcolor={SHARED_FILL}" if uses.get(node, 0) > 1 and node.args else ""
        shape = ", shape=box" if node.op.name == "var" else ", shape=plaintext" if node.op.name == "const" else ""
        lines.append(f"  n{k} [label={quote(node_label(node))}{shape}{fill}];")
    for k, node in enumerate(order):
        ordered = len(node.args) > 1 and not node.op.commutative
        for i, a in enumerate(node.args):
            lines.append(f"  n{index[a]} -> n{k}" + (f" [label={i}]" if ordered else "") + ";")
    for i, (label, root) in enumerate(zip(labels, roots)):
        lines.append(f"  out{i} [label={quote(label or 'out')}, shape=house];")
        lines.append(f"  n{index[root]} -> out{i};")
    lines.append("}")
    return "\n".join(lines)
