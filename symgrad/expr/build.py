"""Constructors: argument checks, constant folding, local rewrites, canonical order.

Every node is made by ``apply``.  The rewrites are a table (``RULES``): each
rule looks at one node's arguments and may return a simpler equal node.  They
are local and exact, except the documented identities x*0 = 0, x-x = 0, 0/x = 0
(as in SymPy and CasADi), c1*(c2*x) = (c1*c2)*x where c1*c2 is a normal float
(which may round differently in the last bit; it keeps repeated derivatives such
as 6*x readable).  The
``where`` rules keep conditional zeros as nodes (CasADi's trick) so a nan in an
untaken branch never reaches a gradient. A rule keeps the branch each point takes:
derivatives differentiate that branch (where(x == 0, 0, x) is not x: at 0 its
derivative is the 0 branch's, and a sum of such pieces counts on it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from numbers import Real
from typing import Any

import numpy as np

from symgrad.expr import ops
from symgrad.expr.node import Expr, intern

_VAR, _CONST = ops.OPS["var"], ops.OPS["const"]


def Var(name: str) -> Expr:
    """The variable called ``name``; the same name always gives the same node.

    >>> import symgrad as sg
    >>> sg.Var("x") is sg.Var("x")
    True
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a variable name must be a non-empty str, got {type(name).__name__} {name!r}")
    if not name.isprintable():  # also lone surrogates (undecodable bytes), which no file can hold
        raise ValueError(f"a variable name must be printable text, got {name[:80]!r}")
    return intern(_VAR, (), name)


def const(value: Any) -> Expr:
    """The constant node for a real number (kept exactly: 0.0 and -0.0 differ).

    >>> import symgrad as sg
    >>> sg.const(2.5) + 1
    3.5
    """
    if isinstance(value, Expr):
        if value.op is _CONST:
            return value
        raise TypeError(f"const() needs a number, got the expression {value}")
    if isinstance(value, (str, bytes)) or not isinstance(value, Real):
        kind = "complex numbers are not supported as constants" if isinstance(value, complex) else \
            f"expected a real number, got {type(value).__name__} {value!r}"
        raise TypeError(f"const(): {kind}")
    return intern(_CONST, (), float(value))


def symbols(names: str) -> Any:
    """Variables from a string of names separated by spaces or commas.

    Like SymPy: one name gives a variable, several give a tuple. Each is a name as formulas write
    them (an identifier: ``x1``, ``theta``, ``α``); ``sg.Var`` takes any string.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> x * y
    x*y
    >>> sg.symbols("1x")
    Traceback (most recent call last):
    ...
    ValueError: symbols(): '1x' is not a name (letters, digits, _); sg.Var('1x') takes any
    """
    parts = names.replace(",", " ").split() if isinstance(names, str) else None
    if not parts:
        raise ValueError(f"symbols() needs a string of variable names, got {names!r}")
    for n in parts:  # (a formula could not name it: "1x" reads as 1*x)
        if not n.isidentifier():
            raise ValueError(f"symbols(): {n!r} is not a name (letters, digits, _); sg.Var({n!r}) takes any")
    out = tuple(Var(n) for n in parts)
    return out[0] if len(out) == 1 else out


def vector(name: str, n: int) -> np.ndarray:
    """A NumPy object array of ``n`` variables named ``name[0]`` ... ``name[n-1]``.

    >>> import symgrad as sg
    >>> v = sg.vector("v", 3)
    >>> v.sum()
    v[0] + v[1] + v[2]
    """
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"vector(): n must be a non-negative int, got {n!r}")
    out = np.empty(int(n), dtype=object)
    for i in range(int(n)):
        out[i] = Var(f"{name}[{i}]")
    return out


def _as_expr(value: Any, op: ops.Op) -> Expr:
    if type(value) is float:
        return intern(_CONST, (), value)
    if isinstance(value, Expr):
        return value
    if isinstance(value, Real | np.bool_):
        return intern(_CONST, (), float(value))
    hint = f": use sg.Var({value!r}) for a variable" if isinstance(value, str) else ""
    raise TypeError(f"{op.name}(): expected an expression or a real number, got "
                    f"{type(value).__name__} {value!r}{hint}")


def apply(op: ops.Op, args: tuple, payload: Any = None) -> Expr:
    """Build the node ``op(*args)``: fold constants, apply local rules, intern.

    >>> import symgrad as sg
    >>> from symgrad.expr import ops, printing
    >>> x = sg.Var("x")
    >>> apply(ops.mul, (x, 1))
    x
    """
    if op.arity == 0:
        return Var(payload) if op is _VAR else const(payload) if op is _CONST else intern(op, (), payload)
    if len(args) != op.arity and op.arity >= 0:  # arity -1: any number (rolled loads and tensors)
        raise TypeError(f"{op.name}() takes {op.arity} argument(s), got {len(args)}")
    args = tuple(a if type(a) is Expr else _as_expr(a, op) for a in args)
    if op.kind == "scalar" and any(a.op.array_valued for a in args):  # (an array goes elementwise, or loads)
        culprit = next(a for a in args if a.op.array_valued)
        raise TypeError(f"{op.name}() of the whole array {str(culprit)[:60]}: scalar ops take its elements "
                        "(sg.sin(x) of a traced array applies elementwise; sg.load / x[i] reads one)")
    special = n_const = 0
    for a in args:
        if a.op in _LOOKED_AT:
            special = 1
            n_const += a.op is _CONST
    if n_const == len(args):
        if op.fold is not None:  # (Python's float +, -, * are IEEE's, as NumPy's: no errstate to enter, 3 us)
            return intern(_CONST, (), op.fold(*(a.payload for a in args)))
        with np.errstate(all="ignore"):
            return const(float(op.impl(*(np.float64(a.payload) for a in args))))
    if op.commutative and args[1].order_key < args[0].order_key:
        args = (args[1], args[0])
    if special or (len(args) > 1 and args[-2] is args[-1]):
        for rule in RULES.get(op.name, ()):
            out = rule(*args)
            if out is not None:
                return out
    return intern(op, args, payload)


# ---- local rewrite rules ---------------------------------------------------------------------

def _is(e: Expr, v: float) -> bool:
    return e.op is _CONST and e.payload == v


def _normal(v: float) -> bool:
    """Whether ``v`` is a normal float: a product of constants folded into it rounds once, as the two
    products would (2**550 * (2**550 * x) is not inf * x, nor 2**-600 * (2**-600 * x) 0 * x)."""
    return 2.2250738585072014e-308 <= abs(v) <= 1.7976931348623157e308


def _neg_const(e: Expr) -> bool:
    return e.op is _CONST and e.payload < 0


def _of(e: Expr, name: str) -> bool:
    return e.op.name == name


def _zero_where(e: Expr) -> int | None:
    """For where(c, p, 0) -> 1, where(c, 0, q) -> 2, else None: the live branch."""
    if e.op.name == "where":
        if _is(e.args[2], 0.0):
            return 1
        if _is(e.args[1], 0.0):
            return 2
    return None


def _push_into_where(w: Expr, f: Callable[[Expr], Expr]) -> Expr | None:
    """f(where(c, p, 0)) -> where(c, f(p), 0): the masked value is never formed."""
    side = _zero_where(w)
    if side is None:
        return None
    branches = [w.args[1], w.args[2]]
    branches[side - 1] = f(branches[side - 1])
    return ops.where(w.args[0], *branches)


def _merge_wheres(op: ops.Op) -> Callable:
    """where(c, p, 0) op where(c, 0, q) -> where(c, p op 0, 0 op q) when it adds no node."""
    def rule(a: Expr, b: Expr) -> Expr | None:
        if _zero_where(a) and _zero_where(b) and a.args[0] is b.args[0]:
            return ops.where(a.args[0], op(a.args[1], b.args[1]), op(a.args[2], b.args[2]))
        return None
    return rule


def _hoist_zeros(name: str) -> Callable:
    """A reduction over i of where(c, p, 0), c not varying over i -> where(c, the reduction of p, 0)
    (sums, max and min alike): the conditional zero stays outside, where the rule for * keeps a nan
    partial of an untaken branch out (the adjoint of a reshaped where is such a sum)."""
    def rule(body: Expr, i: Expr) -> Expr | None:
        chain, inner = [], body  # the conditional zeros around the body, outermost first
        while (side := _zero_where(inner)) is not None:
            chain.append(inner)
            inner = inner.args[side]
        if all(i in w.args[0].free for w in chain):
            return None
        for w in reversed(chain):
            if i in w.args[0].free:
                inner = _push_into_where(w, lambda p, inner=inner: inner)
        out = apply(ops.OPS[name], (inner, i))
        for w in reversed(chain):
            if i not in w.args[0].free:
                out = _push_into_where(w, lambda p, out=out: out)
        return out
    return rule


def _nested_where(c: Expr, a: Expr, b: Expr) -> Expr | None:
    """where(c1, where(c2, p, 0), 0) -> where(c1 and c2, p, 0), either branch live at either level:
    an adjoint passing through many masks (a where in a long unrolled loop) stays one level deep, where
    a tower would make each later product recurse down it. Only for 0/1 comparisons over no index
    (the rolled rules match a mask by its condition)."""
    outer = 1 if _is(b, 0.0) else 2 if _is(a, 0.0) else None
    inner = (a, b)[outer - 1] if outer else None
    side = _zero_where(inner) if inner is not None else None
    if side is None:
        return None
    c2 = inner.args[0]
    if c.op.name not in ops.COMPARISONS or c2.op.name not in ops.COMPARISONS or c.free or c2.free:
        return None
    both = (c if outer == 1 else ops.eq(c, 0.0)) * (c2 if side == 1 else ops.eq(c2, 0.0))
    return ops.where(ops.ne(both, 0.0), inner.args[side], 0.0)


def _mul_where(a: Expr, b: Expr) -> Expr | None:
    if a.op is not ops.where and b.op is not ops.where:  # (most products: no lambda made, 0.5 us)
        return None
    out = _push_into_where(b, lambda p: a * p)
    return out if out is not None else _push_into_where(a, lambda p: p * b)


def _mul_masked_sum(a: Expr, b: Expr) -> Expr | None:
    """x * (where(c1, p, 0) + where(c2, q, 0)) -> where(c1, x*p, 0) + where(c2, x*q, 0), up to
    ``MASKED_TERMS`` terms: an adjoint gathered from several masked sites times a nan partial (sqrt's
    where its branch is not taken) stays 0 where every mask is off."""
    if a.op is not ops.add and b.op is not ops.add or _distributing.depth:  # (x * p inside another
        return None  # distribution: left a product, or the terms multiply)
    for total, x in ((b, a), (a, b)):
        terms = _masked_terms(total) if total.op is ops.add else None
        if terms is not None:
            _distributing.depth += 1
            try:
                out = _push_into_where(terms[0], lambda p, x=x: x * p)
                for t in terms[1:]:
                    out = out + _push_into_where(t, lambda p, x=x: x * p)
            finally:
                _distributing.depth -= 1
            return out
    return None


def _masked_terms(total: Expr) -> list[Expr] | None:
    """The terms of the sum ``total`` if there are at most ``MASKED_TERMS``, each a conditional zero; else
    None, as soon as a term is not one (a product's rules ask this of every sum it meets)."""
    terms, stack = [], [total]
    while stack:
        node = stack.pop()
        if node.op is ops.add:
            stack += node.args
        elif _zero_where(node) is None:
            return None
        else:
            terms.append(node)
        if len(terms) + len(stack) > MASKED_TERMS:
            return None
    return terms


class _Distributing(threading.local):
    depth = 0  # the products being distributed over masked sums (one level: nested ones multiply the work)


_distributing = _Distributing()


MASKED_TERMS = 4


# The rules only fire when an argument is one of these ops, or two arguments are one node;
# a rule that looks at another kind of argument must add its op here.
_LOOKED_AT = {_CONST, ops.neg, ops.sub, ops.where, ops.stop_gradient, ops.add}

RULES: dict[str, tuple[Callable[..., Expr | None], ...]] = {
    "add": (
        lambda a, b: b if _is(a, 0.0) else None,
        lambda a, b: apply(ops.mul, (2.0, a)) if a is b else None,  # (not 2.0 * a: a float operand of user code)
        lambda a, b: ops.sub(b, -a.payload) if _neg_const(a) else None,
        lambda a, b: ops.sub(a, b.args[0]) if _of(b, "neg") else None,
        lambda a, b: ops.sub(b, a.args[0]) if _of(a, "neg") else None,
        _merge_wheres(ops.add),
    ),
    "sub": (
        lambda a, b: a if _is(b, 0.0) else None,
        lambda a, b: ops.neg(b) if _is(a, 0.0) else None,
        lambda a, b: intern(_CONST, (), 0.0) if a is b else None,
        lambda a, b: ops.add(a, -b.payload) if _neg_const(b) else None,
        lambda a, b: ops.add(a, b.args[0]) if _of(b, "neg") else None,
        _merge_wheres(ops.sub),
    ),
    "mul": (
        lambda a, b: a if _is(a, 0.0) else None,
        lambda a, b: b if _is(a, 1.0) else None,
        lambda a, b: ops.neg(b) if _is(a, -1.0) else None,
        lambda a, b: apply(ops.mul, (a.payload * b.args[0].payload, b.args[1]))
        if a.op is _CONST and _of(b, "mul") and b.args[0].op is _CONST
        and _normal(a.payload * b.args[0].payload) else None,
        lambda a, b: ops.neg(a.args[0] * b) if _of(a, "neg") else None,
        lambda a, b: ops.neg(a * b.args[0]) if _of(b, "neg") else None,
        _mul_where,
        _mul_masked_sum,
    ),
    "div": (
        lambda a, b: a if _is(b, 1.0) else None,
        lambda a, b: a if _is(a, 0.0) else None,
        lambda a, b: ops.neg(a.args[0] / b) if _of(a, "neg") else None,
        lambda a, b: ops.neg(a / b.args[0]) if _of(b, "neg") else None,
    ),
    "neg": (
        lambda a: a.args[0] if _of(a, "neg") else None,
        lambda a: ops.sub(a.args[1], a.args[0]) if _of(a, "sub") else None,
        lambda a: _push_into_where(a, ops.neg),
    ),
    "pow": (
        lambda a, b: a if _is(b, 1.0) else None,
        lambda a, b: intern(_CONST, (), 1.0) if _is(b, 0.0) or _is(a, 1.0) else None,
    ),
    "where": (
        lambda c, a, b: a if a is b else None,
        lambda c, a, b: (a if c.payload != 0 else b) if c.op is _CONST else None,
        lambda c, a, b: ops.where(c, a.args[1], b) if _of(a, "where") and a.args[0] is c else None,
        lambda c, a, b: ops.where(c, a, b.args[2]) if _of(b, "where") and b.args[0] is c else None,
        _nested_where,
    ),
    "stop_gradient": (lambda a: a if _of(a, "stop_gradient") else None,),
    **{name: (_hoist_zeros(name),) for name in ("sum", "max", "min")},
}


# ---- public functions, operators and methods, all generated from the op table -------------------
