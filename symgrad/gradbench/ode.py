"""GradBench's ``ode``: s steps of RK4 on y0' = x0, yi' = xi y(i-1), y(0) = 0, to t = 2 (``primal``),
and the gradient of the last y (``gradient``)."""

from __future__ import annotations

import functools

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def ode(J, x, s: int):
    """y(2) by ``s`` RK4 steps, written against ``J.np`` and ``J.lax.scan``.

    >>> ode(SG, np.ones(2), 4).round(6).tolist()
    [2.0, 2.0]
    """
    h = 2.0 / s

    def rate(y):
        return x * J.np.concatenate([J.np.ones(1), y[:-1]])

    def rk4_step(y, _):
        k1 = rate(y)
        k2 = rate(y + h / 2 * k1)
        k3 = rate(y + h / 2 * k2)
        k4 = rate(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    y, _ = J.lax.scan(rk4_step, J.np.zeros(x.shape), None, length=s)
    return y


@functools.cache
def compiled(s: int, gradient: bool):
    """y(2), or the gradient of its last element, for ``s`` steps."""
    if gradient:
        return sg.jit(sg.grad(lambda x: ode(SG, x, s)[-1]))
    return sg.jit(lambda x: ode(SG, x, s))


def define() -> dict[str, Function]:
    """``primal`` and ``gradient``.

    >>> define()["gradient"].compute(np.ones(2), 4).round(6).tolist()
    [2.0, 2.0]
    """
    def prepare(raw: dict) -> tuple[np.ndarray, int]:
        return np.asarray(raw["x"], dtype=float), int(raw["s"])

    return {"primal": Function(prepare, lambda x, s: compiled(s, False)(x), np.ndarray.tolist),
            "gradient": Function(prepare, lambda x, s: compiled(s, True)(x), np.ndarray.tolist)}
