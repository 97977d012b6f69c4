"""GradBench's ``hello``: ``square`` (x * x) and ``double``, its derivative."""

from __future__ import annotations

import symgrad as sg
from symgrad.gradbench.protocol import Function


def square(x: float) -> float:
    """x * x.

    >>> square(3.0)
    9.0
    """
    return x * x


def scalar(raw: float) -> tuple[float]:
    return (float(raw),)


def define() -> dict[str, Function]:
    """``square`` and ``double``, compiled here (the eval's inputs are numbers).

    >>> define()["double"].compute(3.0)
    6.0
    """
    value, derivative = sg.jit(square), sg.jit(sg.grad(square))
    value(1.0), derivative(1.0)
    return {"square": Function(scalar, value, float), "double": Function(scalar, derivative, float)}
