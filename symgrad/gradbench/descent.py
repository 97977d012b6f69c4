"""GradBench's gradient descent for ``particle`` and ``saddle`` (cpp/gradbench/gd.hpp there),
step for step: the same step-size rule and stopping tests, so that every tool stops where the
reference does. Written on ``symgrad.numpy``: it runs inside traced functions too (nested AD)."""

from __future__ import annotations

from collections.abc import Callable

import symgrad as sg
import symgrad.numpy as jnp


def norm(v):
    return jnp.sqrt(jnp.sum(v * v))


def argmin(f: Callable, gradient: Callable, x):
    """The x where descent from ``x`` stops: the gradient or the step under 1e-5; the step size
    halves after a step that does not lower f and doubles after 10 that do.

    >>> argmin(lambda x: jnp.sum((x - 3.0) ** 2), lambda x: 2 * (x - 3.0), jnp.zeros(1)).round(3).tolist()
    [3.0]
    """
    fx, gx = f(x), gradient(x)
    lowered, eta = 0, 1e-5
    while True:
        if norm(gx) <= 1e-5:
            return x
        if lowered == 10:
            eta, lowered = eta * 2, 0
            continue
        step = x - eta * gx
        if norm(x - step) <= 1e-5:
            return x
        f_step = f(step)
        if f_step < fx:
            x, fx, gx = step, f_step, gradient(step)
            lowered += 1
        else:
            eta, lowered = eta / 2, 0


def argmax(f: Callable, gradient: Callable, x):
    """``argmin()`` of -f.

    >>> argmax(lambda x: -jnp.sum(x * x), lambda x: -2 * x, jnp.ones(1)).round(3).tolist()
    [0.0]
    """
    return argmin(lambda y: -f(y), lambda y: -gradient(y), x)


def reverse(f: Callable, argnums: int = 0) -> Callable:
    """The gradient of a scalar ``f`` by reverse mode (``sg.grad``)."""
    return sg.grad(f, argnums=argnums)


def forward(f: Callable, argnums: int = 0) -> Callable:
    """The gradient of a scalar ``f`` by forward mode (``sg.jacfwd``: one JVP a coordinate)."""
    return sg.jacfwd(f, argnums=argnums)


MODES = {"f": forward, "r": reverse}
