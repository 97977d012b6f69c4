"""Ranges of values: what each node may hold where the inputs are finite, by a table of rules (one per
op that keeps or narrows a range). Reverse mode asks it whether a partial may be nan or inf
(``may_fail``), to guard only those products (diff._Masks): a sigmoid's ``1 / (1 + exp(-z))``, whose
denominator is at least 1, is finite even where ``exp`` overflows; the 0 or 1 of a comparison is finite
whatever it compares; a ``where`` is as finite as its branches. Overflow of ``+`` and ``*`` counts as
finite (as the op table's ``finite`` says); that of ``exp``, ``/`` and ``**`` does not (x**3 of 1e200 is
inf; x / (1 + exp(z)) is never past x).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from symgrad.expr.node import Expr
from symgrad.expr.ops import COMPARISONS
from symgrad.expr.traverse import topo_order

_INF = math.inf


class Range(NamedTuple):
    """Values in ``[lo, hi]`` (bounds; an infinite bound is no bound), ``inf``: +-inf may occur (at
    the infinite bound's side), ``nan``: nan may occur."""

    lo: float
    hi: float
    inf: bool = False
    nan: bool = False

    @property
    def bad(self) -> bool:
        return self.inf or self.nan

    def may_be(self, v: float) -> bool:
        """Whether the value ``v`` (0, +inf, -inf) may occur."""
        if math.isinf(v):
            return self.inf and (self.hi if v > 0 else self.lo) == v
        return self.lo <= v <= self.hi


_ANY = Range(-_INF, _INF)  # a finite input
_UNKNOWN = Range(-_INF, _INF, True, True)


def _out(lo: float, hi: float) -> tuple[float, float]:
    """Bounds widened by an ulp each way: a compiled exp or tanh may round the other way."""
    return (math.nextafter(lo, -_INF) if math.isfinite(lo) else lo,
            math.nextafter(hi, _INF) if math.isfinite(hi) else hi)


def _span(values: list[float]) -> tuple[float, float]:
    """The bounds of endpoint products or quotients (0 * inf counted as 0: its nan is flagged apart)."""
    values = [0.0 if math.isnan(v) else v for v in values]
    return _out(min(values), max(values))


def _add(a: Range, b: Range) -> Range:
    opposite = a.may_be(_INF) and b.may_be(-_INF) or a.may_be(-_INF) and b.may_be(_INF)
    lo, hi = a.lo + b.lo, a.hi + b.hi
    return Range(*_out(-_INF if math.isnan(lo) else lo, _INF if math.isnan(hi) else hi),
                 a.inf or b.inf, a.nan or b.nan or opposite)


def _neg(a: Range) -> Range:
    return Range(-a.hi, -a.lo, a.inf, a.nan)


def _mul(a: Range, b: Range) -> Range:
    zero_inf = a.inf and b.may_be(0.0) or b.inf and a.may_be(0.0)
    lo, hi = _span([a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi])
    return Range(lo, hi, a.inf or b.inf, a.nan or b.nan or zero_inf)


def _div(a: Range, b: Range) -> Range:
    nan = a.nan or b.nan or a.may_be(0.0) and b.may_be(0.0) or a.inf and b.inf
    if b.may_be(0.0):
        return Range(-_INF, _INF, True, nan)
    with np.errstate(all="ignore"):
        lo, hi = _span([float(np.divide(p, q)) for p in (a.lo, a.hi) for q in (b.lo, b.hi)])
        least, most = min(abs(b.lo), abs(b.hi)), max(abs(a.lo), abs(a.hi))
        # (by 1/2 or more: at most doubled, an overflow counted as a product's is, not)
        overflow = least < 0.5 and (math.isinf(most) or math.isinf(most / least))
    return Range(lo, hi, a.inf or overflow, nan)


def _pow(a: Range, b: Range) -> Range:
    if b.lo != b.hi or b.bad:  # (a power other than a constant one)
        return _UNKNOWN
    p = b.lo
    if p == 0.0:
        return Range(1.0, 1.0)
    whole, low = float(p).is_integer(), a.may_be(0.0)
    nan = a.nan or (not whole and a.lo < 0.0)
    inf = a.inf or p < 0.0 and low
    if p < 0.0 and low:
        return Range(-_INF, _INF, inf, nan)
    even = whole and p % 2 == 0
    ends = [abs(a.lo), abs(a.hi)] if even else [a.lo, a.hi] if whole else [max(a.lo, 0.0), a.hi]
    with np.errstate(all="ignore"):
        values = [float(np.power(v, p)) for v in ends] + ([0.0] if even and low else [])
    lo, hi = _span(values)
    overflow = (p > 1.0 or p < 0.0) and (math.isinf(lo) or math.isinf(hi))  # (x**2 of 1e200; x**0.5 never)
    return Range(lo, hi, inf or overflow, nan)


def _monotone(f: Callable[[float], float], overflow: bool = False) -> Callable[[Range], Range]:
    """An increasing function of its range's bounds (exp: +inf where the bound overflows)."""
    def rule(a: Range) -> Range:
        with np.errstate(all="ignore"):
            lo, hi = float(f(a.lo)), float(f(a.hi))
        return Range(*_out(lo, hi), a.inf or overflow and math.isinf(hi), a.nan)
    return rule


def _log(a: Range) -> Range:
    if a.lo < 0.0:
        return Range(-_INF, _INF if a.hi == _INF else math.log(a.hi) if a.hi > 0 else -_INF, True, True)
    with np.errstate(all="ignore"):
        lo, hi = float(np.log(a.lo)), float(np.log(a.hi))
    return Range(*_out(lo, hi), a.inf or a.lo == 0.0, a.nan)


def _sqrt(a: Range) -> Range:
    with np.errstate(all="ignore"):
        return Range(*_out(float(np.sqrt(max(a.lo, 0.0))), float(np.sqrt(a.hi))), a.inf, a.nan or a.lo < 0.0)


def _bounded(lo: float, hi: float, nan_at_inf: bool = False) -> Callable[[Range], Range]:
    """A function whose values lie in [lo, hi] (sin and cos: nan at +-inf)."""
    return lambda a: Range(lo, hi, False, a.nan or nan_at_inf and a.inf)


def _abs(a: Range) -> Range:
    lo = 0.0 if a.may_be(0.0) else min(abs(a.lo), abs(a.hi))
    return Range(lo, max(abs(a.lo), abs(a.hi)), a.inf, a.nan)


def _either(a: Range, b: Range) -> Range:
    return Range(min(a.lo, b.lo), max(a.hi, b.hi), a.inf or b.inf, a.nan or b.nan)


def _extreme(pick: Callable) -> Callable[[Range, Range], Range]:
    return lambda a, b: Range(pick(a.lo, b.lo), pick(a.hi, b.hi), a.inf or b.inf, a.nan or b.nan)


def _by_constant(rule: Callable[[Range, float], Range]) -> Callable[[Range, Range], Range]:
    """floor_divide and mod by a nonzero constant (index arithmetic: ``k // 4``, ``k % 4``)."""
    def ranged(a: Range, b: Range) -> Range:
        if b.lo != b.hi or b.bad or b.lo == 0.0:
            return _UNKNOWN
        return rule(a, b.lo)
    return ranged


def _floor_divide(a: Range, c: float) -> Range:
    with np.errstate(all="ignore"):  # (the bounds as floor(v / c): floor_divide(inf, c) is nan)
        ends = [float(np.floor(v / c)) for v in (a.lo, a.hi)]
    return Range(*_span(ends), abs(c) < 1.0, a.nan or a.inf)


def _mod(a: Range, c: float) -> Range:
    return Range(*((0.0, c) if c > 0 else (c, 0.0)), False, a.nan or a.inf)


_COMPARISON = Range(0.0, 1.0)  # (nan compares false: never nan)

# op name -> the range of its value from its arguments'. An op not here with a true ``finite`` in the
# op table is finite where its arguments are (any value); other ops may give anything.
RULES: dict[str, Callable[..., Range]] = {
    "add": _add, "sub": lambda a, b: _add(a, _neg(b)), "neg": _neg, "mul": _mul, "div": _div, "pow": _pow,
    "exp": _monotone(np.exp, overflow=True), "expm1": _monotone(np.expm1, overflow=True), "log": _log,
    "sqrt": _sqrt, "tanh": _bounded(-1.0, 1.0), "sigmoid": _bounded(0.0, 1.0), "erf": _bounded(-1.0, 1.0),
    "atan": _bounded(-math.pi / 2 - 1e-15, math.pi / 2 + 1e-15),
    "sin": _bounded(-1.0, 1.0, nan_at_inf=True), "cos": _bounded(-1.0, 1.0, nan_at_inf=True),
    "abs": _abs, "sign": lambda a: Range(-1.0, 1.0, False, a.nan),
    "floor": _monotone(np.floor), "ceil": _monotone(np.ceil),
    "maximum": _extreme(max), "minimum": _extreme(min), "relu": lambda a: _extreme(max)(a, Range(0.0, 0.0)),
    **{c: (lambda a, b: _COMPARISON) for c in COMPARISONS},
    "where": lambda c, a, b: _either(a, b),
    "floor_divide": _by_constant(_floor_divide), "mod": _by_constant(_mod),
}


def _own(n: Expr, args: list[Range]) -> Range:
    """The range of a node from those of its arguments (the array of a load or scatter only)."""
    name = n.op.name
    if name == "const":
        v = float(n.payload)
        return Range(_INF, -_INF, False, True) if math.isnan(v) else Range(v, v, math.isinf(v))  # (nan: no value)
    if name == "index":
        return Range(0.0, float(n.payload[1] - 1))
    if name == "table":
        values = np.asarray(n.payload[1], dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)):
            return _ANY
        return Range(float(values.min()), float(values.max()))
    if name in ("load", "tensor", "max", "min"):
        return args[0]
    if name in ("sum", "scatter", "cumsum"):  # (sums of the body's values: any value)
        return Range(-_INF, _INF, args[0].inf, args[0].nan or args[0].inf)
    if name == "mul" and n.args[0] is n.args[1]:  # (a square: never below 0; its overflow counted as a product's)
        return _pow(args[0], Range(2.0, 2.0))._replace(inf=args[0].inf)
    if name in RULES:
        return RULES[name](*args)
    if n.op.finite and not any(a.bad for a in args):
        return _ANY
    return _UNKNOWN


def range_of(e: Expr, memo: dict | None = None) -> Range:
    """The values ``e`` may take where its inputs are finite; ``memo`` keeps the nodes seen for the next
    call.

    >>> import symgrad as sg
    >>> z = sg.Var("z")
    >>> r = range_of(1 / (1 + sg.exp(-z)))  # (exp(-z) may overflow: 1 / inf is 0)
    >>> r.bad, round(r.lo, 9) + 0.0, round(r.hi, 9)
    (False, 0.0, 1.0)
    >>> range_of(sg.log(z)).bad, range_of(sg.where(z < 0, 1.0, 0.0)).bad
    (True, False)
    """
    memo = {} if memo is None else memo
    for n in topo_order([e], memo):
        args = n.args[:1] if n.op.name in ("load", "scatter") else n.args  # (addresses are never values)
        memo[n] = _own(n, [memo[a] for a in args])
    return memo[e]


def may_fail(e: Expr, memo: dict | None = None) -> bool:
    """Whether ``e`` may be nan or inf where the inputs are finite (sqrt, log, / ... inside it, unless
    the ranges of their arguments rule it out); ``memo`` remembers the nodes seen.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> may_fail(sg.sin(x) * x), may_fail(sg.log(x) + 1), may_fail(1 / (sg.exp(x) + 1))
    (False, True, False)
    """
    return range_of(e, memo).bad
