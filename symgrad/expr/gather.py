"""A reading of a DAG as sums of monomials, for printing only: no node is built.

Each arithmetic node (+, -, *, /, unary -, constant powers, sqrt, finite constants) is read as a
sum of terms ``coeff * prod(base ** exponent)`` over *bases*, the nodes that are not arithmetic
(variables, sin(...), ...) or that stay whole (a sum under a product, a large shared node). So
``1/(x**2 + 1)*1/sqrt(y)*2*x`` reads as one term, 2 * x * (x**2 + 1)**-1 * y**(-1/2), and
``a*b + b*a`` as 2*a*b. Coefficients and exponents are exact (ints and Fractions), so the printed
numbers are the graph's: 0.5 stays 0.5.

Why it stays linear on 10**6-deep graphs: the nodes are read once each, in topological order (no
recursion); a node with one user hands its reading over to that user (merged small into large,
with a lazy sign and exponent factor, so a - (b - (c - ...)) is not quadratic); a node with several
users is copied into each only while its reading is small (``Gather.copy_limit``), else it stays
a base of its own, which the let-form names.

Readings extend the formula's domain as SymPy's do (x/x reads as 1, sqrt(y)**2 as y), never the
other way: where the graph's value is finite, the reading's is the same (up to rounding).
"""

from __future__ import annotations

import math
import sys
from collections import deque
from fractions import Fraction

from symgrad.expr.node import Expr

Number = int | Fraction

_SUMS = {"add", "sub", "neg"}
_PRODUCTS = {"mul", "div", "sqrt"}
_BITS = 256  # a coefficient past this many bits is rounded to the nearest float (0.1**50 stays short)
_POWER_LIMIT = 64  # (k*x)**n distributes k**n only up to this n


class Term:
    """``coeff * prod(base ** (exponent * mult))``: ``mult`` lets a division or power scale the
    exponents lazily (a / (b / (c / ...)) stays linear)."""

    __slots__ = ("coeff", "factors", "mult")

    def __init__(self, coeff: Number, factors: dict[Expr, Number], mult: Number = 1) -> None:
        self.coeff, self.factors, self.mult = coeff, factors, mult

    def exponents(self) -> dict[Expr, Number]:
        """The factors with ``mult`` applied (and ``mult`` reset to 1)."""
        if self.mult != 1:
            self.factors = {b: tidy(e * self.mult) for b, e in self.factors.items()}
            self.mult = 1
        return self.factors


class Sum:
    """``sign * sum(terms)``; ``collected``: like terms gathered, zeros dropped, sign applied."""

    __slots__ = ("terms", "sign", "collected")

    def __init__(self, terms: deque[Term], sign: int = 1) -> None:
        self.terms, self.sign, self.collected = terms, sign, False

    def size(self) -> int:
        return sum(1 + len(t.factors) for t in self.terms)


def tidy(v: Number) -> Number:
    """An int where the value is whole; one of too many bits rounded to a float's value (so a chain
    of 10**6 products by 3 does not grow a million-bit number)."""
    if isinstance(v, Fraction):
        if v.denominator != 1:
            return v if max(v.numerator.bit_length(), v.denominator.bit_length()) <= _BITS else _rounded(v)
        v = v.numerator
    return v if v.bit_length() <= _BITS else _rounded(v)


def _rounded(v: Number) -> Number:
    """The float nearest ``v`` (past the float range: the largest or smallest one, as a bound)."""
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if f == 0 or not math.isfinite(f):
        f = (sys.float_info.max if f else 5e-324) * (1 if v > 0 else -1)
    return int(f) if f.is_integer() else Fraction(f)


def display_args(node: Expr) -> tuple[Expr, ...]:
    """Argument order for reading: x + 1 rather than 1 + x, x + y + z rather than z + x + y."""
    a = node.args
    if node.op.commutative and len(a) == 2:
        if (node.op.name == "add" and a[0].op.name == "const") or (
            a[1].op is node.op and a[0].op is not node.op and a[0].op.name != "const"
        ):
            return (a[1], a[0])
    return a


def exact(v: float) -> Number | None:
    """A constant's exact value, or None for those that stay bases (nan, inf, -0.0)."""
    v = float(v)
    if not math.isfinite(v) or (v == 0 and math.copysign(1.0, v) < 0):
        return None
    return int(v) if v.is_integer() else Fraction(v)


def _exponent(node: Expr) -> Number | None:
    """The constant exponent of a power node read as a monomial (None: the power is a base)."""
    if node.op.name == "sqrt":
        return Fraction(1, 2)
    if node.op.name == "pow" and node.args[1].op.name == "const":
        return exact(node.args[1].payload)
    return None


def is_arithmetic(node: Expr) -> bool:
    """Whether ``node`` is read as a sum of monomials (else it is a base)."""
    name = node.op.name
    if name == "const":
        return exact(node.payload) is not None
    return name in _SUMS or name in _PRODUCTS or (name == "pow" and _exponent(node) is not None)


def _times(a: Term, b: Term) -> Term:
    """a * b, into the one with more factors."""
    if len(a.factors) < len(b.factors):
        a, b = b, a
    ratio = 1 if b.mult == a.mult else -1 if b.mult == -a.mult else tidy(Fraction(b.mult) / a.mult)
    f = a.factors
    for base, e in b.factors.items():
        v = tidy(f.get(base, 0) + e * ratio)
        if v:
            f[base] = v
        else:  # x * x**-1: 1 (where the graph is finite, as SymPy)
            del f[base]
    a.coeff = tidy(a.coeff * b.coeff)
    return a


def _concat(a: Sum, b: Sum) -> Sum:
    """a + b, into the longer (b's terms after a's)."""
    if len(a.terms) >= len(b.terms):
        flip = a.sign != b.sign
        for t in b.terms:
            t.coeff = -t.coeff if flip else t.coeff
            a.terms.append(t)
        a.collected = False
        return a
    flip = a.sign != b.sign
    for t in reversed(a.terms):
        t.coeff = -t.coeff if flip else t.coeff
        b.terms.appendleft(t)
    b.collected = False
    return b


def _copy(t: Term, sign: int) -> Term:
    return Term(t.coeff * sign, dict(t.exponents()))


class Gather:
    """The readings of every arithmetic node of ``order`` (a topological order of ``roots``).

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> g = Gather([x * y + y * x], sg.expr.traverse.topo_order([x * y + y * x]))
    >>> [(t.coeff, t.factors) for t in g.reading(x * y + y * x).terms]
    [(2, {x: 1, y: 1})]
    """

    def __init__(self, roots: list[Expr], order: list[Expr], copy_limit: float = 32) -> None:
        self.copy_limit = copy_limit
        self.uses: dict[Expr, int] = {}
        for node in order:
            for a in node.args:
                self.uses[a] = self.uses.get(a, 0) + 1
        for r in roots:
            self.uses[r] = self.uses.get(r, 0) + 1
        self.forms: dict[Expr, Sum] = {}
        self._small: dict[Expr, bool] = {}
        for node in order:
            if is_arithmetic(node):
                self.forms[node] = self._read(node)

    # ---- the one-node readings -------------------------------------------------------------
    def _read(self, node: Expr) -> Sum:
        name, args = node.op.name, node.args
        if name == "const":
            return Sum(deque([Term(exact(node.payload), {})]))
        if name == "neg":
            s = self._sum(args[0])
            s.sign = -s.sign
            return s
        if name in ("add", "sub"):
            first, second = display_args(node)
            a, b = self._sum(first), self._sum(second)
            if name == "sub":
                b.sign = -b.sign
            return _concat(a, b)
        if name == "mul":
            return Sum(deque([_times(self._term(args[0]), self._term(args[1]))]))
        if name == "div":
            return Sum(deque([_times(self._term(args[0]), self._inverse(args[1]))]))
        return Sum(deque([self._power(args[0], _exponent(node))]))

    def _inverse(self, b: Expr) -> Term:
        one = self._single(b)
        if one is None or one[0].coeff == 0:  # (x/0 keeps its 0 as a base: it prints as x/0)
            return Term(1, {b: -1})
        t = self._own(b)
        t.coeff, t.mult = tidy(Fraction(1) / t.coeff), -t.mult
        return t

    def _power(self, a: Expr, c: Number) -> Term:
        one = self._single(a)
        if one is not None:
            t, sign = one
            k = t.coeff * sign
            if _may_raise(t, k, c):
                t = self._own(a)
                if isinstance(c, int):  # (else the coefficient is 1)
                    t.coeff = tidy(Fraction(t.coeff) ** c)
                t.mult = tidy(t.mult * c)
                return t
        return Term(1, {a: c})

    # ---- reading an argument, in a sum or in a product ----------------------------------------
    def _transparent(self, node: Expr) -> bool:
        """Whether ``node``'s reading merges into its users' (else it is a base of its own)."""
        s = self.forms.get(node)  # (every arithmetic argument is read before its users)
        if s is None:
            return False
        if self.uses[node] <= 1:
            return True
        return self._fits(node, s)

    def _sum(self, node: Expr) -> Sum:
        """``node``'s reading, owned by the caller to merge into a sum."""
        if not self._transparent(node):
            return Sum(deque([Term(1, {node: 1})]))
        if self.uses.get(node, 0) <= 1:
            return self.forms.pop(node)
        s = self.forms[node]
        return Sum(deque(_copy(t, s.sign) for t in s.terms))

    def _single(self, node: Expr) -> tuple[Term, int] | None:
        """``node``'s one term and sign, when it reads as one (not owned: see ``_own``)."""
        if not self._transparent(node):
            return None
        s = self.forms[node]
        if len(s.terms) > 1:
            self.collect(s)
        return (s.terms[0], s.sign) if len(s.terms) == 1 else (Term(0, {}), 1) if not s.terms else None

    def _own(self, node: Expr) -> Term:
        """``node``'s one term, to change: taken when ``node`` has one user, else copied."""
        s = self.forms[node]
        if not s.terms:
            return Term(0, {})
        if self.uses.get(node, 0) <= 1:
            del self.forms[node]
            t = s.terms[0]
            t.coeff *= s.sign
            return t
        return _copy(s.terms[0], s.sign)

    def _term(self, node: Expr) -> Term:
        """``node`` as one factor of a product: its term, or itself as a base (a sum, ...)."""
        return Term(1, {node: 1}) if self._single(node) is None else self._own(node)

    # ---- gathering ---------------------------------------------------------------------------
    def collect(self, s: Sum) -> Sum:
        """Gather like terms of ``s`` in place (first appearance first), expanding a number times a
        small sum (2*(x + 1) -> 2*x + 2, as SymPy), and dropping zeros."""
        if s.collected:  # (a reading handed on, then negated)
            if s.sign != 1:
                for t in s.terms:
                    t.coeff = -t.coeff
                s.sign = 1
            return s
        groups: dict[frozenset, Term] = {}
        for t in s.terms:
            t.coeff *= s.sign
            for u in self._expanded(t):
                key = frozenset(u.exponents().items())
                seen = groups.get(key)
                if seen is None:
                    groups[key] = u
                else:
                    seen.coeff = tidy(seen.coeff + u.coeff)
        s.terms = deque(t for t in groups.values() if t.coeff != 0)
        s.sign, s.collected = 1, True
        return s

    def _expanded(self, t: Term) -> list[Term]:
        f = t.exponents()
        if len(f) == 1:
            (base, e), = f.items()
            inner = self.forms.get(base)
            # only a sum already gathered (read under a product), and small: no walk down, no swell
            if e == 1 and inner is not None and inner.collected and self._fits(base, inner):
                k = t.coeff * inner.sign
                return [Term(tidy(u.coeff * k), dict(u.factors)) for u in inner.terms]
        return [t]

    def _fits(self, node: Expr, s: Sum) -> bool:
        small = self._small.get(node)
        if small is None:
            small = self._small[node] = s.size() <= self.copy_limit
        return small

    def reading(self, node: Expr) -> Sum:
        """The gathered reading of an arithmetic ``node`` that stayed whole (a root, a base)."""
        return self.collect(self.forms[node])

    def alias(self, node: Expr) -> Expr:
        """What ``node`` prints as when it reads as one base to the power 1 (x - y + y: x)."""
        while node in self.forms:
            s = self.reading(node)
            if len(s.terms) != 1 or s.terms[0].coeff != 1 or len(s.terms[0].factors) != 1:
                break
            (base, e), = s.terms[0].factors.items()
            if e != 1:
                break
            node = base
        return node


def _may_raise(t: Term, k: Number, c: Number) -> bool:
    """Whether (k * prod(b**e)) ** c may be written k**c * prod(b**(e*c)): for whole c (k**c kept
    short), and for a lone fractional power (sqrt(y)**3 = y**(3/2)); not (x**2)**0.5, which is |x|."""
    if isinstance(c, int):
        return k in (1, -1) or (k != 0 and abs(c) <= _POWER_LIMIT) or (k == 0 and c > 0)
    if k != 1 or len(t.factors) != 1:
        return False
    (e,) = t.factors.values()
    return not isinstance(tidy(e * t.mult), int)
