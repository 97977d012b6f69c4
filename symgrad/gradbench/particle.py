"""GradBench's ``particle``: a charged particle fired past two charges (one at a height set by w)
by Euler steps, the force the gradient of the potential; w chosen by gradient descent so that it
lands at the origin. Nested AD, in the four mode pairs ff, fr, rf, rr."""

from __future__ import annotations

import symgrad.numpy as jnp
from symgrad.gradbench.descent import MODES, argmin
from symgrad.gradbench.protocol import Function

DT = 1e-1


def potential(x, w):
    """1/|x - (10, 10 - w)| + 1/|x - (10, 0)|.

    >>> float(potential(jnp.array([10.0, 5.0]), 0.0))
    0.4
    """
    return 1.0 / jnp.sqrt((x[0] - 10.0) ** 2 + (x[1] - (10.0 - w)) ** 2) \
        + 1.0 / jnp.sqrt((x[0] - 10.0) ** 2 + x[1] ** 2)


def landing(w, force_gradient):
    """The squared x at which the particle, from (0, 8) at (0.75, 0), crosses y = 0 (the last
    Euler step's line through it)."""
    x, xdot = jnp.array([0.0, 8.0]), jnp.array([0.75, 0.0])
    while True:
        xddot = -force_gradient(x, w)
        x_new = x + DT * xdot
        if x_new[1] <= 0.0:
            break
        x, xdot = x_new, xdot + DT * xddot
    x_final = x + (-x[1] / xdot[1]) * xdot
    return x_final[0] ** 2


def particle(outer: str, inner: str):
    """The function for one mode pair: w0 -> the w that descent settles on."""
    force_gradient = MODES[inner](potential, 0)

    def cost(w):
        return landing(w[0], force_gradient)

    cost_gradient = MODES[outer](cost, 0)
    return lambda w0: float(argmin(cost, cost_gradient, jnp.array([w0]))[0])


def start(raw: dict) -> tuple:
    return (float(raw["w"]),)


def define() -> dict[str, Function]:
    """``ff``, ``fr``, ``rf``, ``rr``: the same result by each mode pair.

    >>> sorted(define())
    ['ff', 'fr', 'rf', 'rr']
    """
    return {outer + inner: Function(start, particle(outer, inner), float) for outer in "fr" for inner in "fr"}
