"""Printing: infix, let-form (shared subexpressions named once), LaTeX.

One token emitter walks the graph with an explicit stack; the op table's
templates say what to print, so the plain and LaTeX forms share all logic.
Output stays linear in the DAG size: past ``INLINE_LIMIT`` tree nodes, shared
subexpressions are named instead of repeated.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np

from symgrad.expr.node import Expr, name_order
from symgrad.expr.ops import ATOM, MUL, NEG, POW, call_template
from symgrad.expr.traverse import as_expr_list, topo_order

INLINE_LIMIT = 256  # tree size up to which str() repeats shared subexpressions


def _number(v: float, latex: bool) -> str:
    if math.isnan(v):
        return r"\mathrm{NaN}" if latex else "nan"
    if math.isinf(v):
        return ("-" if v < 0 else "") + (r"\infty" if latex else "inf")
    if v.is_integer() and abs(v) < 1e16 and (v != 0 or math.copysign(1, v) > 0):
        return str(int(v))
    text = repr(v)
    if latex and "e" in text:
        mant, ex = text.split("e")
        return rf"{mant} \cdot 10^{{{int(ex)}}}"
    return text


_GREEK = set("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma "
             "tau upsilon phi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega".split())


# Inside \text{}: TeX's special characters escaped as text-mode commands.
_TEX_SPECIAL = {c: "\\" + c for c in "#$%&_{}"} | {"\\": r"\textbackslash{}", "^": r"\^{}", "~": r"\~{}"}


def _latex_name(name: str) -> str:
    m = re.fullmatch(r"([A-Za-z]+)(?:_?\[?(\d+)\]?|_([A-Za-z0-9]+))?", name)
    if m is None:  # any other name (p['W'][0, 1], x#3): as text, TeX's special characters escaped
        return rf"\text{{{''.join(_TEX_SPECIAL.get(c, c) for c in name)}}}"
    base, sub = m.group(1), m.group(2) or m.group(3)
    base = "\\" + base if base in _GREEK else (base if len(base) == 1 else rf"\mathrm{{{base}}}")
    return f"{base}_{{{sub}}}" if sub else base


def _leaf(node: Expr, latex: bool) -> tuple[str, int]:
    name = node.op.name
    if name == "var" or name == "index" or name == "array":
        label = node.payload if name == "var" else node.payload[0]
        return (_latex_name(label) if latex else label), ATOM
    if name == "table":  # a small one by its values, a large one by its shape
        shape, values = node.payload
        return (str(np.array(values).reshape(shape).tolist()) if len(values) <= 8 else f"table{shape}"), ATOM
    v = node.payload
    text = _number(v, latex)
    return text, NEG if math.copysign(1, v) < 0 else MUL if r"\cdot" in text else ATOM


def _template(node: Expr, latex: bool) -> tuple[tuple, int]:
    op = node.op
    tpl = op.latex if latex else op.template
    if tpl is None:
        tpl = call_template(rf"\operatorname{{{op.name}}}\left(", op.arity, r"\right)") if latex else \
            call_template(op.name + "(", op.arity, ")")
    if callable(tpl):  # rolled rows: any number of arguments (x[i, j]), index ranges (sum(..., i=0..8))
        tpl = tpl(node)
    prec = op.latex_prec if latex and op.latex_prec is not None else op.prec
    if latex and any(isinstance(p, str) and "^{" in p for p in tpl):
        return tpl, min(prec, POW)  # a superscript (e^{x}) as a power's base needs parentheses
    return tpl, prec


def _display_args(node: Expr) -> tuple[Expr, ...]:
    """Argument order for reading: x + 1 rather than 1 + x, x + y + z rather than z + x + y."""
    a = node.args
    if node.op.commutative and len(a) == 2:
        if (node.op.name == "add" and a[0].op.name == "const") or (
            a[1].op is node.op and a[0].op is not node.op and a[0].op.name != "const"
        ):
            return (a[1], a[0])
    return a


def _emit(root: Expr, names: dict[Expr, str], latex: bool) -> str:
    out: list[str] = []
    stack: list[Any] = [(root, 0, True)]
    open_, close = (r"\left(", r"\right)") if latex else ("(", ")")
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        node, min_prec, is_root = item
        if node in names and not is_root:
            out.append(names[node])
            continue
        if not node.args:
            text, prec = _leaf(node, latex)
            out.append(f"{open_}{text}{close}" if prec < min_prec else text)
            continue
        tpl, prec = _template(node, latex)
        args = _display_args(node)
        pieces = [p if isinstance(p, str) else (args[p[0]], p[1], False) for p in tpl]
        if prec < min_prec:
            pieces = [open_, *pieces, close]
        stack.extend(reversed(pieces))
    return "".join(out)


def _shared(roots: list[Expr], order: list[Expr]) -> list[Expr]:
    """Non-leaf nodes used more than once (by other nodes or as outputs), in topological order."""
    uses: dict[Expr, int] = {}
    for node in order:
        for a in node.args:
            uses[a] = uses.get(a, 0) + 1
    for r in roots:
        uses[r] = uses.get(r, 0) + 1
    return [n for n in order if n.args and uses.get(n, 0) > 1 and n.op.name != "load" and not _address(n)]


_ADDRESS_OPS = {"index", "const", "add", "sub", "mul", "neg", "mod", "floor_divide"}


def _address(n: Expr) -> bool:
    """Index arithmetic (``j - 1``): short, clearer written out than named (as are loads, x[j - 1])."""
    return bool(n.free) and all(m.op.name in _ADDRESS_OPS for m in topo_order([n]))


def _tree_size(order: list[Expr], cap: int) -> dict[Expr, int]:
    size: dict[Expr, int] = {}
    for n in order:
        size[n] = min(cap, 1 + sum(size[a] for a in n.args))
    return size


def _fresh_prefix(order: list[Expr]) -> str:
    taken = {n.payload for n in order if n.op.name == "var"}
    prefix = "t"
    while any(re.fullmatch(re.escape(prefix) + r"\d+", v) for v in taken):
        prefix = "_" + prefix
    return prefix


def _index_names(order: list[Expr], latex: bool) -> dict[Expr, str]:
    """Short names for the index symbols derivatives create (``x#12``): j, k, l, ... unused elsewhere."""
    made = sorted((n for n in order if n.op.name == "index" and "#" in n.payload[0]),
                  key=lambda n: name_order(n.payload[0]))
    taken = {n.payload if n.op.name == "var" else n.payload[0] for n in order
             if n.op.name in ("var", "index", "array")}
    free = (name for k in itertools.count() for name in (c + (str(k) if k else "") for c in "jklmnqsuw")
            if name not in taken)
    return {n: _latex_name(name) if latex else name for n, name in zip(made, free)}


def _let_form(labels: list[str], roots: list[Expr], latex: bool, inline: bool) -> str:
    order = topo_order(roots)
    root_set = set(roots)
    named = [] if inline else [n for n in _shared(roots, order) if n not in root_set or len(roots) > 1]
    arrays = [n for n in order if n.op.array_valued and n.args and n not in root_set]  # computed arrays: named
    if arrays:
        named = [n for n in order if n in set(named).union(arrays)]
    prefix = _fresh_prefix(order)
    tex = prefix.replace("_", r"\_")  # (t0 taken by a variable: _t1 as \_t_{1})
    names = {n: (f"{tex}_{{{i}}}" if latex else f"{prefix}{i}") for i, n in enumerate(named, 1)}
    if latex:  # an array's name gets subscripts of its own when loaded: t_{1} as {t_{1}}_{k}
        names |= {n: "{" + names[n] + "}" for n in arrays}
    names |= _index_names(order, latex)
    eq = " = "
    lines = [f"{names[n]}{eq}{_emit(n, names, latex)}" for n in named]
    for label, r in zip(labels, roots):
        label = _latex_name(label) if latex and label else label
        body = names.get(r) or _emit(r, names, latex)
        lines.append(f"{label}{eq}{body}" if label else body)
    return (r" \\" + "\n").join(lines) if latex else "\n".join(lines)


def to_str(e: Expr) -> str:
    """Readable infix for one expression; the let-form when repeating would blow up.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> to_str(y + sg.cos(x))
    'y + cos(x)'
    """
    order = topo_order([e])
    return _let_form([""], [e], False, inline=_tree_size(order, INLINE_LIMIT + 1)[e] <= INLINE_LIMIT)


def _labelled(exprs: Any) -> tuple[list[str], list[Expr]]:
    if isinstance(exprs, dict):
        return [str(k) for k in exprs], as_expr_list(exprs)
    roots = as_expr_list(exprs)
    if isinstance(exprs, Expr):
        return [""], roots
    return [f"out[{i}]" for i in range(len(roots))], roots


def format(exprs: Any) -> str:
    """Print expressions with every shared subexpression named once (a let-form).

    ``exprs`` is an expression, a sequence or array of them, or a dict of labels.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> s = sg.sin(x * y)
    >>> print(sg.format({"f": s * s + s}))
    t1 = sin(x*y)
    f = t1*t1 + t1
    """
    labels, roots = _labelled(exprs)
    return _let_form(labels, roots, False, inline=False)


def latex(exprs: Any) -> str:
    """LaTeX for an expression (or a let-form block for several / shared ones).

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.latex(sg.sin(x) / y)
    '\\\\frac{\\\\sin\\\\left(x\\\\right)}{y}'
    """
    labels, roots = _labelled(exprs)
    small = len(roots) == 1 and _tree_size(topo_order(roots), INLINE_LIMIT + 1)[roots[0]] <= INLINE_LIMIT
    return _let_form(labels, roots, True, inline=small)
