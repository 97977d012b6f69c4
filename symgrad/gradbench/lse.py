"""GradBench's ``lse``: log-sum-exp with the max shift (``primal``) and its gradient."""

from __future__ import annotations

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def lse(J, x):
    """log(sum(exp(x - max x))) + max x, written against ``J.np``.

    >>> round(float(lse(SG, np.zeros(4))), 6)
    1.386294
    """
    top = J.np.max(x)
    return J.np.log(J.np.sum(J.np.exp(x - top))) + top


def vector(raw: dict) -> tuple[np.ndarray]:
    return (np.asarray(raw["x"], dtype=float),)


def define() -> dict[str, Function]:
    """``primal`` and ``gradient`` of ``lse()``.

    >>> define()["gradient"].compute(np.zeros(2)).tolist()
    [0.5, 0.5]
    """
    return {"primal": Function(vector, sg.jit(lambda x: lse(SG, x)), float),
            "gradient": Function(vector, sg.jit(sg.grad(lambda x: lse(SG, x))), np.ndarray.tolist)}
