"""GradBench's ``saddle``: min over x of max over y of (x1^2 + x2^2) - (y1^2 + y2^2), both by
gradient descent from the same start: nested AD, in the four mode pairs ff, fr, rf, rr."""

from __future__ import annotations

import numpy as np

import symgrad.numpy as jnp
from symgrad.gradbench.descent import MODES, argmax, argmin
from symgrad.gradbench.protocol import Function


def saddle_objective(x, y):
    """(x1^2 + x2^2) - (y1^2 + y2^2).

    >>> float(saddle_objective(np.ones(2), np.zeros(2)))
    2.0
    """
    return (x[0] ** 2 + x[1] ** 2) - (y[0] ** 2 + y[1] ** 2)


def saddle(outer: str, inner: str):
    """The function for one mode pair: start -> (x, y), x by argmin of the inner max (whose
    gradient differentiates through the inner descent), y by argmax at that x."""
    inner_gradient = MODES[inner](saddle_objective, 1)
    final_gradient = MODES[outer](saddle_objective, 1)

    def best(x, start):
        return argmax(lambda y: saddle_objective(x, y), lambda y: inner_gradient(x, y), start)

    def worst_case(x, start):
        return saddle_objective(x, best(x, start))

    outer_gradient = MODES[outer](worst_case, 0)

    def run(start):
        x = argmin(lambda x: worst_case(x, start), lambda x: outer_gradient(x, start), start)
        y = argmax(lambda y: saddle_objective(x, y), lambda y: final_gradient(x, y), start)
        return np.concatenate([x, y])

    return run


def start(raw: dict) -> tuple:
    return (jnp.asarray(raw["start"], dtype=float),)


def define() -> dict[str, Function]:
    """``ff``, ``fr``, ``rf``, ``rr``: the same result by each mode pair.

    >>> sorted(define())
    ['ff', 'fr', 'rf', 'rr']
    """
    return {outer + inner: Function(start, saddle(outer, inner), np.ndarray.tolist)
            for outer in "fr" for inner in "fr"}
