"""Parse a formula string such as ``"x*y + sin(x)"`` into an expression.

Python's own parser reads the text; a whitelist of syntax nodes is checked
before anything is evaluated, so only arithmetic, comparisons, numbers, names
and calls of symgrad's functions get through.
"""

from __future__ import annotations

import ast
import math

from symgrad.expr.build import FUNCS, Var, const
from symgrad.expr.node import Expr

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant, ast.Compare,
            ast.Load, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd,
            ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Mod, ast.FloorDiv)
_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}


class ParseError(ValueError):
    """A formula string that is not a valid symgrad expression."""


class _Names(dict):
    def __missing__(self, name: str) -> Expr:
        return Var(name)


def parse(text: str) -> Expr:
    """Turn a formula string into an expression; unknown names become variables.

    Functions are symgrad's (``sin``, ``exp``, ``where``, ...); ``pi`` and ``e`` are
    constants; ``^`` is not power (write ``**``).

    >>> import symgrad as sg
    >>> sg.parse("x*y + sin(x)")
    x*y + sin(x)
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() needs a str, got {type(text).__name__}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ParseError(f"syntax error in formula {text!r}: {err.msg} (column {err.offset})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            what = type(node).__name__
            hint = " (use ** for powers)" if isinstance(node, ast.BitXor) else ""
            raise ParseError(f"formula {text!r}: {what} is not allowed in a formula{hint}")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCS or node.keywords:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ParseError(f"formula {text!r}: unknown function {name!r}")
        if isinstance(node, ast.Compare) and len(node.ops) > 1:
            raise ParseError(f"formula {text!r}: chained comparisons are not supported")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or
                                               not isinstance(node.value, int | float)):
            raise ParseError(f"formula {text!r}: {node.value!r} is not a number")
    names = _Names({**FUNCS, **{k: const(v) for k, v in _CONSTANTS.items()}})
    out = eval(compile(tree, "<formula>", "eval"), {"__builtins__": {}}, names)  # noqa: S307 - whitelisted
    return out if isinstance(out, Expr) else const(out)
