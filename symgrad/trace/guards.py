"""Python control flow on traced values (``if x > 0:``, ``while v[1] > 0:``), as JAX's ``grad``
without ``jit`` runs it: decided by the values of the call being traced, and checked at later calls.

A function is traced on symbolic arguments, but the call that traces it has numbers. While it runs,
the truth value of a traced condition is the condition evaluated at those numbers (the reference
interpreter, on the condition's graph); the trace follows that branch, and its derivatives are those
of the branch taken. Each condition so decided is a guard of the trace: before a later call uses the
compiled code, the guards are computed at the new arguments (one small compiled function), and any
that comes out otherwise traces the function again, for the new branches. A transform called inside
the trace (``sg.grad`` of ``sg.grad``) decides its conditions in terms of the outer call's arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from symgrad.expr import interp, ndarrays, node, tracing
from symgrad.expr.node import Expr
from symgrad.expr.tracing import context
from symgrad.expr.traverse import substitute


class Shadow:
    """The numbers behind one outermost trace: its symbolic inputs' values, the maps of the traces
    inside it (their inputs -> the outer expressions they stand for), and the guards decided so far.
    The trace's captured constants are read as they stand when a condition is decided."""

    def __init__(self, bindings: dict) -> None:
        self.bindings = bindings
        self.values: dict[Expr, object] = {}  # (each node's number, computed once: a loop's conditions share them)
        self.maps: list[dict] = []
        self.guards: list[tuple[Expr, bool]] = []

    def decide(self, condition: Expr) -> bool | None:
        for mapping in reversed(self.maps):  # (innermost first: to the outermost trace's inputs)
            condition = substitute(condition, mapping)
        if condition.op.name == "const":
            return condition.payload != 0.0
        try:
            value = interp.evaluate(condition, {**self.bindings, **tracing.captured()}, memo=self.values)
        except ValueError:  # it reads what has no number here (vmap's rows, an index symbol): undecidable
            return None
        if np.ndim(value):
            return None
        decided = bool(value != 0.0)
        self.guards.append((condition, decided))
        return decided



def _decide(condition: Expr) -> bool | None:
    shadow = context.shadow
    return None if shadow is None else shadow.decide(condition)


node.decide = _decide


@contextmanager
def deciding(bindings: dict | None, inner: dict | None) -> Iterator[Shadow | None]:
    """While a function is traced: its conditions decided by ``bindings`` (symbolic input -> value;
    None: no numbers, conditions stay undecidable) where this is the outermost trace, or, inside
    one, through ``inner`` (this trace's inputs -> the outer expressions or numbers they stand for)."""
    shadow = context.shadow
    if shadow is not None:
        if inner is None:
            yield None
            return
        shadow.maps.append(inner)
        try:
            yield None
        finally:
            shadow.maps.pop()
        return
    if bindings is None:
        yield None
        return
    context.shadow = Shadow(bindings)
    try:
        yield context.shadow
    finally:
        context.shadow = None


def bindings(syms: list, values: list) -> dict | None:
    """Each symbolic leaf (a variable, a rolled array, an object array of variables) -> its value;
    None where a value is not numbers (an expression: the trace is inside another)."""
    out: dict = {}
    for sym, value in zip(syms, values):
        if isinstance(value, Expr) or isinstance(value, np.ndarray) and value.dtype == object:
            return None
        if isinstance(sym, Expr):
            out[sym] = np.asarray(value, dtype=float)
        else:
            out.update(zip(np.asarray(sym, dtype=object).ravel(), np.asarray(value, dtype=float).ravel()))
    return out


def mapping(syms: list, values: list) -> dict:
    """Each symbolic leaf (element by element) -> the outer expression or number it stands for."""
    out: dict = {}
    for sym, value in zip(syms, values):
        if isinstance(sym, Expr) and sym.op.array_valued and not isinstance(value, Expr):
            out[sym] = ndarrays.operand(np.asarray(value, dtype=float))  # (a constant of the outer trace)
        elif isinstance(sym, Expr):
            out[sym] = value
        else:
            out.update(zip(np.asarray(sym, dtype=object).ravel(), np.asarray(value, dtype=object).ravel()))
    return out
