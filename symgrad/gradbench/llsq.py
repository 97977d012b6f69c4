"""GradBench's ``llsq``: 1/2 sum_i (sign(t_i) - sum_j x_j t_i^j)^2 with t_i = -1 + 2i/(n-1)."""

from __future__ import annotations

import functools

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def llsq(J, x, n: int):
    """The objective for ``n`` points t_i, written against ``J.np``.

    >>> float(llsq(SG, np.zeros(3), 3))
    1.0
    """
    m = x.shape[0]

    def squared_residual(i):
        t = -1.0 + 2.0 * i / (n - 1)
        powers = J.np.cumprod(J.np.concatenate([J.np.ones(1), J.np.full(m - 1, t)]))  # t^0 .. t^(m-1)
        return (J.np.sign(t) - J.np.sum(x * powers)) ** 2

    return J.np.sum(J.vmap(squared_residual)(np.arange(n))) / 2.0


@functools.cache
def compiled(n: int, gradient: bool):
    """The objective (or its gradient) for this ``n``, traced once per ``n``."""
    f = functools.partial(lambda x, n: llsq(SG, x, n), n=n)
    return sg.jit(sg.grad(f) if gradient else f)


def define() -> dict[str, Function]:
    """``primal`` and ``gradient``.

    >>> define()["gradient"].compute(np.zeros(2), 2).tolist()
    [0.0, -2.0]
    """
    def prepare(raw: dict) -> tuple[np.ndarray, int]:
        return np.asarray(raw["x"], dtype=float), int(raw["n"])

    return {"primal": Function(prepare, lambda x, n: compiled(n, False)(x), float),
            "gradient": Function(prepare, lambda x, n: compiled(n, True)(x), np.ndarray.tolist)}
