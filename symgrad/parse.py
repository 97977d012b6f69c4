"""Parse a formula string such as ``"x*y + sin(x)"`` into an expression.

symgrad reads formulas itself (a tokenizer and an operator-precedence parser with explicit
stacks), so nothing is ever evaluated by Python: no code runs, any length and nesting
parse without recursion, and numbers are floats from the start (``10**400`` is ``inf``,
``1/0`` is ``inf``, ``(-1)**0.5`` is ``nan``, as NumPy computes them; no bignum arithmetic).
The grammar is Python's for arithmetic: ``+ - * / // % **`` with Python's precedence
(``-x**2`` is ``-(x**2)``, ``**`` groups to the right), one comparison ``< <= > >= == !=``
per operand, calls of symgrad's functions, numbers, and names (variables, or the
constants ``pi``, ``e``, ``inf``, ``nan``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from symgrad.expr.build import Var, apply, const
from symgrad.expr.node import Expr
from symgrad.expr.ops import FUNCTIONS, OPS, Op
from symgrad.expr.traverse import substitute
from symgrad.util.callmodule import make_callable

_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}
_TOKENS = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)
  | (?P<name>[^\W\d]\w*)
  | (?P<op>\*\*|//|<=|>=|==|!=|[-+*/%<>(),^])
""", re.VERBOSE)
# Binary operators: (precedence, right-associative, op). Unary minus/plus bind at 4.
_BINARY: dict[str, tuple[int, bool, Op]] = {
    **{c: (1, False, OPS[n]) for c, n in (("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge"),
                                          ("==", "eq"), ("!=", "ne"))},
    "+": (2, False, OPS["add"]), "-": (2, False, OPS["sub"]),
    "*": (3, False, OPS["mul"]), "/": (3, False, OPS["div"]), "//": (3, False, OPS["floor_divide"]),
    "%": (3, False, OPS["mod"]), "**": (5, True, OPS["pow"]),
}
_NEG = OPS["neg"]
_UNARY_PRECEDENCE = 4
QUOTED = 80  # characters of the input an error message quotes


class ParseError(ValueError):
    """A formula string that is not a valid symgrad expression.

    >>> import symgrad as sg
    >>> try:
    ...     sg.parse("sin(x, y)")
    ... except sg.ParseError as e:
    ...     print(e)
    formula 'sin(x, y)': sin takes 1 argument, got 2 (column 1)
    """


def quoted(text: str) -> str:
    """``text`` for an error message: repr'd (control characters and bad bytes escaped), at most ~80 chars.

    >>> quoted("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (100 characters)"
    """
    if len(text) <= QUOTED:
        return repr(text)
    return f"{text[:QUOTED - 3] + '...'!r} ({len(text)} characters)"


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, text, column) for each token, then ("end", "", column)."""
    pos = 0
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if m is None:
            raise _error(text, f"unexpected character {text[pos]!r}", pos)
        if m.lastgroup != "space":
            yield m.lastgroup, m.group(), pos
        pos = m.end()
    yield "end", "", pos


def _error(text: str, what: str, column: int) -> ParseError:
    return ParseError(f"formula {quoted(text)}: {what} (column {column + 1})")


class _Frame:
    """One level of parentheses (or a call's argument list): its operators, comparisons, arguments."""

    def __init__(self, func: str | None, column: int) -> None:
        self.func, self.column = func, column
        self.ops: list[str] = []  # pending operators; unary ones as "u-" / "u+"
        self.compared = False
        self.args: list[Any] = []


def parse(text: str) -> Expr:
    """Turn a formula string into an expression; unknown names become variables.

    Functions are symgrad's (``sin``, ``exp``, ``where``, ...); ``pi``, ``e``, ``inf`` and
    ``nan`` are constants; ``^`` is not power (write ``**``). Errors are ``ParseError``
    naming the column.

    >>> import symgrad as sg
    >>> sg.parse("x*y + sin(x)")
    x*y + sin(x)
    >>> sg.parse("2**10**10 * x")
    inf*x
    >>> sg.parse("t1 = sin(x)\\nt1 * t1 + t1")  # a let-form, as shared subexpressions print
    sin(x)**2 + sin(x)
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() needs a str, got {type(text).__name__}")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and all(_LET.match(line) for line in lines[:-1]):
        return _let_form(lines)
    return _formula(text)


_LET = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)\Z")


def _let_form(lines: list[str]) -> Expr:
    """A let-form, as symgrad prints shared subexpressions (``t1 = sin(x)`` lines, then the formula
    using them): each name bound to its formula, read where later lines use it."""
    bound: dict[Expr, Expr] = {}
    for k, line in enumerate(lines[:-1], 1):
        name, formula = _LET.match(line).groups()
        try:
            bound[Var(name)] = substitute(_formula(formula), bound)
        except ParseError as e:
            raise ParseError(f"line {k}: {e}") from None
    try:
        return substitute(_formula(lines[-1]), bound)
    except ParseError as e:
        raise ParseError(f"line {len(lines)}: {e}") from None


def _formula(text: str) -> Expr:
    """One formula (no let-form lines)."""
    values: list[Any] = []
    frames = [_Frame(None, 0)]
    tokens = _tokens(text)
    expect_value = True
    for kind, tok, col in tokens:
        frame = frames[-1]
        if expect_value:
            if kind == "number":
                values.append(const(float(tok.replace("_", ""))))
                expect_value = False
                continue
            elif kind == "name":
                kind2, tok2, col2 = next(tokens)
                if tok2 == "(":
                    if tok not in FUNCTIONS:
                        raise _error(text, f"unknown function {tok!r}", col)
                    frames.append(_Frame(tok, col))
                    continue
                values.append(_name(text, tok, col))
                expect_value = False
                kind, tok, col = kind2, tok2, col2  # the token after the name: an operator
                frame = frames[-1]
            elif tok == "(":
                frames.append(_Frame(None, col))
                continue
            elif tok in ("-", "+"):
                frame.ops.append("u" + tok)
                continue
            elif tok == ")" and frame.func is not None and not frame.args and not frame.ops:
                _close(text, frames, values, empty=True)
                expect_value = False
                continue
            else:
                raise _error(text, "expected a number, a name or '('" + _got(kind, tok), col)
        if kind == "end":
            break
        if tok in _BINARY:
            prec, right, _ = _BINARY[tok]
            _reduce(frame, values, prec, right)
            if prec == 1:
                if frame.compared:
                    raise _error(text, "chained comparisons (a < b < c) are not supported", col)
                frame.compared = True
            frame.ops.append(tok)
            expect_value = True
        elif tok == ",":
            if frame.func is None:
                raise _error(text, "a comma outside a function's arguments", col)
            _reduce(frame, values, 0, False)
            frame.args.append(values.pop())
            frame.compared = False
            expect_value = True
        elif tok == ")":
            if len(frames) == 1:
                raise _error(text, "unmatched ')'", col)
            _close(text, frames, values)
        elif tok == "^":
            raise _error(text, "^ is not a power (use ** for powers)", col)
        else:
            raise _error(text, "expected an operator" + _got(kind, tok), col)
    if expect_value:
        raise _error(text, "the formula ends where a value is expected", len(text))
    if len(frames) > 1:
        raise _error(text, "'(' is never closed", frames[-1].column)
    _reduce(frames[0], values, 0, False)
    return values[0]


def _got(kind: str, tok: str) -> str:
    return ", got the end of the formula" if kind == "end" else f", got {tok[:20]!r}"


def _name(text: str, name: str, col: int) -> Expr:
    if name in FUNCTIONS:
        raise _error(text, f"{name} is a function: call it, as in {name}(x)", col)
    if name in _CONSTANTS:
        return const(_CONSTANTS[name])
    return Var(name)


def _reduce(frame: _Frame, values: list, prec: int, right: bool) -> None:
    """Apply the frame's pending operators that bind tighter than an operator of precedence ``prec``."""
    while frame.ops:
        op = frame.ops[-1]
        top = _UNARY_PRECEDENCE if op[0] == "u" else _BINARY[op][0]
        if top < prec or top == prec and right:
            return
        frame.ops.pop()
        if op == "u-":
            values.append(apply(_NEG, (values.pop(),)))
        elif op[0] != "u":  # unary plus changes nothing
            b, a = values.pop(), values.pop()
            values.append(apply(_BINARY[op][2], (a, b)))


def _close(text: str, frames: list[_Frame], values: list, empty: bool = False) -> None:
    """A ')': finish the parenthesised value, or call the function on its arguments."""
    frame = frames.pop()
    if not empty:
        _reduce(frame, values, 0, False)
        frame.args.append(values.pop())
    if frame.func is None:
        values.append(frame.args[0])
        return
    arity = OPS[frame.func].arity
    if len(frame.args) != arity:
        raise _error(text, f"{frame.func} takes {arity} argument{'s' * (arity > 1)}, got {len(frame.args)}",
                     frame.column)
    values.append(apply(OPS[frame.func], tuple(frame.args)))


make_callable(__name__, parse)  # sg.parse(text), and symgrad.parse.ParseError: see symgrad/callmodule.py
