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
from fractions import Fraction
from typing import Any

import numpy as np

from symgrad.expr.gather import Gather, Number, Sum, Term, display_args
from symgrad.expr.node import Expr, name_order
from symgrad.expr.ops import ADD, ATOM, MUL, NEG, POW, call_template
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


def _leaf_prec(text: str) -> int:
    """A number's precedence: 1.5 \\cdot 10^{-20} binds as a product, -0.0 as a negation."""
    return NEG if text.startswith("-") else MUL if r"\cdot" in text else ATOM


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
    return text, _leaf_prec(text)


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


# ---- the readable form: each unit (a node printed as a whole) as pieces --------------------------
# A layout is (pieces, precedence); a piece is text or (unit, the least precedence it may have there
# without parentheses). Arithmetic units print their gathered reading (expr/gather.py), the others
# the op table's template.

_SHORT = 12  # a subexpression printed in at most this many characters is repeated, never named
_COPY_LIMIT = 32  # a shared reading up to this size merges into each user (gather.Gather.copy_limit)
_HALF = Fraction(1, 2)


def _coefficient(c: Number, latex: bool) -> tuple[str | None, str | None]:
    """A positive coefficient as (numerator, denominator) texts: 2 -> ('2', None),
    0.5 -> ('0.5', None) (a float's value stays that float), 1/3 -> (None, '3'), 1 -> (None, None)."""
    if c == 1:
        return None, None
    if isinstance(c, int):
        return (str(c) if c < 10**16 else _number(float(c), latex)), None
    f = float(c)
    if f == 1:  # (a product of rounded constants within half an ulp of 1: 3 * 0.333..., printed as 1)
        return None, None
    if Fraction(f) == c or c.denominator > 10**6 or c.numerator > 10**12:
        return _number(f, latex), None
    return (str(c.numerator) if c.numerator != 1 else None), str(c.denominator)


def _power_text(e: Number, latex: bool) -> str:
    r"""An exponent (> 0): 2, (3/2) or \frac{3}{2}, 0.3."""
    if isinstance(e, int):
        return str(e) if e < 10**16 else _number(float(e), latex)
    if e.denominator <= 16 and e.numerator < 10**6:
        return rf"\frac{{{e.numerator}}}{{{e.denominator}}}" if latex else f"({e.numerator}/{e.denominator})"
    return _number(float(e), latex)


def _factor(base: Expr, e: Number, latex: bool, min_prec: int) -> tuple[list, int]:
    """base**e (e > 0) as pieces; e == 1 hands ``min_prec`` on to the base itself."""
    if e == 1:
        return [(base, min_prec)], ATOM
    if e == _HALF:
        return ([r"\sqrt{", (base, 0), "}"] if latex else ["sqrt(", (base, 0), ")"]), ATOM
    text = _power_text(e, latex)
    return ([(base, POW + 1), "^{", text, "}"] if latex else [(base, POW + 1), "**", text]), POW


def _product(items: list, latex: bool, min_prec: int) -> tuple[list, int]:
    r"""Factors (number texts, or (base, exponent)) joined by * (\cdot); one alone keeps its own form."""
    if not items:
        return ["1"], ATOM
    if len(items) == 1:
        one = items[0]
        return ([one], _leaf_prec(one)) if isinstance(one, str) else _factor(*one, latex, min_prec)
    pieces: list = []
    for k, item in enumerate(items):
        if k:
            pieces.append(r" \cdot " if latex else "*")
        pieces += [item] if isinstance(item, str) else _wrapped(*_factor(*item, latex, MUL), MUL, latex)
    return pieces, MUL


def _wrapped(pieces: list, prec: int, min_prec: int, latex: bool) -> list:
    if prec >= min_prec:
        return pieces
    return [r"\left(" if latex else "(", *pieces, r"\right)" if latex else ")"]


def _base_order(item: tuple[Expr, Number]) -> tuple:
    """Factors' order: variables by name, then calls by name and argument (cos(x)*cos(y)*tan(x*y)),
    then sums (the canonical order of commutative arguments, refined)."""
    b = item[0]
    return b.order_key[0], b.op.name, tuple(a.order_key for a in b.args), b.order_key


def _term(t: Term, latex: bool, min_prec: int, unsigned: bool = False) -> tuple[list, int]:
    """One monomial as a person writes it: -2*x/(sqrt(y)*(x**2 + 1)), numbers first, like bases once
    (their exponents added), bases in the canonical order (variables by name first)."""
    negative = t.coeff < 0 and not unsigned
    num_c, den_c = _coefficient(abs(t.coeff), latex)
    bases = t.exponents().items()
    bases = sorted(bases, key=_base_order) if len(bases) > 1 else bases
    num = ([num_c] if num_c else []) + [(b, e) for b, e in bases if e > 0]
    den = ([den_c] if den_c else []) + [(b, -e) for b, e in bases if e < 0]
    inner = MUL if negative else min_prec
    if not den:
        pieces, prec = _product(num, latex, inner)
    elif latex:
        pieces = [r"\frac{", *_product(num, latex, 0)[0], "}{", *_product(den, latex, 0)[0], "}"]
        prec = MUL
    else:
        top, top_prec = _product(num, latex, MUL)
        bottom, bottom_prec = _product(den, latex, MUL + 1)
        pieces = [*_wrapped(top, top_prec, MUL, latex), "/", *_wrapped(bottom, bottom_prec, MUL + 1, latex)]
        prec = MUL
    if not negative:
        return pieces, prec
    # -2*x reads as (-2)*x, the same value: a product needs no parentheses after its minus
    return ["-", *_wrapped(pieces, prec, MUL, latex)], (MUL if prec == MUL else NEG)


def _sum(s: Sum, latex: bool) -> tuple[list, int]:
    """Terms in the order they first appear, a number last (x + 1), a positive one first (1 - x, not -x + 1)."""
    terms = list(s.terms)
    if not terms:
        return ["0"], ATOM
    if len(terms) == 1:
        return _term(terms[0], latex, 0)
    terms.sort(key=lambda t: not t.factors)
    if terms[0].coeff < 0:
        first = next((k for k, t in enumerate(terms) if t.coeff > 0), 0)
        terms.insert(0, terms.pop(first))
    pieces, prec = _term(terms[0], latex, ADD)
    pieces = _wrapped(pieces, prec, ADD, latex)
    for t in terms[1:]:
        minus = t.coeff < 0
        more, prec = _term(t, latex, ADD + 1 if minus else ADD, unsigned=True)
        pieces += [" - " if minus else " + ", *_wrapped(more, prec, ADD + 1 if minus else ADD, latex)]
    return pieces, ADD


def _layouts(roots: list[Expr], gather: Gather, latex: bool) -> dict[Expr, tuple[list, int]]:
    """The layout of every unit that prints, from the roots down (an explicit stack)."""
    lay: dict[Expr, tuple[list, int]] = {}
    stack = list(roots)
    while stack:
        u = stack.pop()
        if u in lay:
            continue
        if u in gather.forms:
            pieces, prec = _sum(gather.reading(u), latex)
        elif not u.args:
            text, prec = _leaf(u, latex)
            pieces = [text]
        else:
            tpl, prec = _template(u, latex)
            args = display_args(u)
            pieces = [p if isinstance(p, str) else (args[p[0]], p[1]) for p in tpl]
        pieces = [p if isinstance(p, str) else (gather.alias(p[0]), p[1]) for p in pieces]
        lay[u] = (pieces, prec)
        stack.extend(p[0] for p in pieces if not isinstance(p, str))
    return lay


def _emit(root: Expr, lay: dict[Expr, tuple[list, int]], names: dict[Expr, str], latex: bool) -> str:
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
        pieces, prec = lay[node]
        pieces = [p if isinstance(p, str) else (p[0], p[1], False) for p in pieces]
        if prec < min_prec:
            pieces = [open_, *pieces, close]
        stack.extend(reversed(pieces))
    return "".join(out)


def _to_name(units: list[Expr], lay: dict, roots: list[Expr], latex: bool) -> list[Expr]:
    """Units worth a name: printed more than once (after gathering: t1/t1/t1 is one use of t1**3),
    and longer than ``_SHORT`` characters (x**2 + 1 is repeated, as a person writes it)."""
    uses: dict[Expr, int] = dict.fromkeys(roots, 1) if len(roots) > 1 else {}
    for pieces, _ in lay.values():
        for p in pieces:
            if not isinstance(p, str):
                uses[p[0]] = uses.get(p[0], 0) + 1
    short, cap = (_SHORT * 2, _SHORT * 2 + 1) if latex else (_SHORT, _SHORT + 1)
    size: dict[Expr, int] = {}
    named: list[Expr] = []
    for u in units:  # (topological: a unit's size counts the names its parts got)
        n = sum(len(p) if isinstance(p, str) else size[p[0]] + 2 * (lay[p[0]][1] < p[1]) for p in lay[u][0])
        if u.args and uses.get(u, 0) > 1 and n > short and u.op.name != "load" and not _address(u):
            named.append(u)
            n = 3
        size[u] = min(n, cap)
    return named


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


def _let_form(labels: list[str], roots: list[Expr], latex: bool, inline: bool, order: list[Expr]) -> str:
    gather = Gather(roots, order, math.inf if inline else _COPY_LIMIT)
    shown = [gather.alias(r) for r in roots]
    lay = _layouts(shown, gather, latex)
    units = [n for n in order if n in lay]
    root_set = set(shown)
    named = [] if inline else _to_name(units, lay, shown, latex)
    arrays = [n for n in units if n.op.array_valued and n.args and n not in root_set]  # computed arrays: named
    if arrays:
        named = [n for n in units if n in set(named).union(arrays)]
    prefix = _fresh_prefix(order)
    tex = prefix.replace("_", r"\_")  # (t0 taken by a variable: _t1 as \_t_{1})
    names = {n: (f"{tex}_{{{i}}}" if latex else f"{prefix}{i}") for i, n in enumerate(named, 1)}
    if latex:  # an array's name gets subscripts of its own when loaded: t_{1} as {t_{1}}_{k}
        names |= {n: "{" + names[n] + "}" for n in arrays}
    names |= _index_names(order, latex)
    eq = " = "
    lines = [f"{names[n]}{eq}{_emit(n, lay, names, latex)}" for n in named]
    for label, r in zip(labels, shown):
        label = _latex_name(label) if latex and label else label
        body = names.get(r) or _emit(r, lay, names, latex)
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
    return _let_form([""], [e], False, _tree_size(order, INLINE_LIMIT + 1)[e] <= INLINE_LIMIT, order)


def _labelled(exprs: Any) -> tuple[list[str], list[Expr]]:
    if isinstance(exprs, dict):
        return [str(k) for k in exprs], as_expr_list(exprs)
    roots = as_expr_list(exprs)
    if isinstance(exprs, Expr):
        return [""], roots
    return [f"out[{i}]" for i in range(len(roots))], roots


def format(exprs: Any) -> str:
    """Print expressions as a person writes them, with each subexpression that prints more than once
    (and is not short) named once (a let-form).

    ``exprs`` is an expression, a sequence or array of them, or a dict of labels. Products are
    gathered into one fraction, like factors into powers and like terms into one (t*t is t**2);
    printing is a view: the graph is not changed.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> s = sg.sin(x * y + 0.5)
    >>> print(sg.format({"f": s * s + s, "g": s + 1}))
    t1 = sin(x*y + 0.5)
    f = t1**2 + t1
    g = t1 + 1
    >>> print(sg.format(sg.grad(sg.log(1 + x**2) / sg.sqrt(y), [x, y])))
    out[0] = 2*x/(sqrt(y)*(x**2 + 1))
    out[1] = -0.5*log(x**2 + 1)/y**(3/2)
    """
    labels, roots = _labelled(exprs)
    return _let_form(labels, roots, False, False, topo_order(roots))


def latex(exprs: Any) -> str:
    """LaTeX for an expression (or a let-form block for several / shared ones).

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.latex(sg.sin(x) / y)
    '\\\\frac{\\\\sin\\\\left(x\\\\right)}{y}'
    """
    labels, roots = _labelled(exprs)
    order = topo_order(roots)
    small = len(roots) == 1 and _tree_size(order, INLINE_LIMIT + 1)[roots[0]] <= INLINE_LIMIT
    return _let_form(labels, roots, True, small, order)
