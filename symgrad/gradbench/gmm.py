"""GradBench's ``gmm``: the log posterior of a Gaussian mixture with a Wishart prior (ADBench's,
GradBench's fixes) and its gradient in (alpha, mu, q, l)."""

from __future__ import annotations

import functools
import math

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def log_multigamma(a: float, p: int) -> float:
    """log of the multivariate gamma function Gamma_p(a).

    >>> round(log_multigamma(2.0, 1), 12)
    0.0
    """
    return p * (p - 1) / 4 * math.log(math.pi) + sum(math.lgamma(a + (1 - j) / 2) for j in range(1, p + 1))


def logsumexp_rows(J, v):
    top = J.np.max(v, axis=-1, keepdims=True)
    return J.np.log(J.np.sum(J.np.exp(v - top), axis=-1)) + top[..., 0]


def gmm_objective(J, alpha, mu, q, ltri, x, m, gamma):
    """The log posterior; precision factors Q_k: exp(q_k) on the diagonal, l_k filling the strictly
    lower triangle column by column."""
    n, d = x.shape
    k = alpha.shape[0]
    cols, rows = np.triu_indices(d, 1)
    lower = J.np.zeros((k, d, d)).at[:, rows, cols].set(ltri)
    centred = x[:, None, :] - mu[None, :, :]  # (n, k, d)
    qdiag = J.np.exp(q)
    qx = qdiag[None, :, :] * centred + J.np.einsum("kij,nkj->nki", lower, centred)
    sum_q = J.np.sum(q, axis=1)
    beta = alpha[None, :] + sum_q[None, :] - 0.5 * J.np.sum(qx * qx, axis=2)  # (n, k)
    likelihood = -n * d * 0.5 * math.log(2 * math.pi) + J.np.sum(logsumexp_rows(J, beta)) \
        - n * logsumexp_rows(J, alpha)
    dof = d + m + 1
    frobenius = J.np.sum(qdiag * qdiag, axis=1) + J.np.sum(ltri * ltri, axis=1)
    prior = k * (dof * d * (math.log(gamma) - 0.5 * math.log(2)) - log_multigamma(0.5 * dof, d)) \
        - J.np.sum(0.5 * gamma * gamma * frobenius - m * sum_q)
    return likelihood + prior


@functools.cache
def compiled(m: int, gamma: float, gradient: bool):
    """The objective, or its gradient in (alpha, mu, q, l), for this prior."""
    def f(alpha, mu, q, ltri, x):
        return gmm_objective(SG, alpha, mu, q, ltri, x, m, gamma)

    return sg.jit(sg.grad(f, argnums=(0, 1, 2, 3)) if gradient else f)


def prepare(raw: dict) -> tuple:
    """(alpha, mu, q, l, x, m, gamma) from the eval's input."""
    d, k = raw["d"], raw["k"]
    arrays = [np.asarray(raw[name], dtype=float) for name in ("alpha", "mu", "q", "l", "x")]
    arrays[3] = arrays[3].reshape(k, d * (d - 1) // 2)  # d = 1: no off-diagonal entries
    return (*arrays, int(raw["m"]), float(raw["gamma"]))


def encode_gradient(parts) -> dict:
    return {name: np.asarray(part).tolist() for name, part in zip(("alpha", "mu", "q", "l"), parts, strict=True)}


def define() -> dict[str, Function]:
    """``objective`` and ``jacobian`` (the gradient, as GradBench names it).

    >>> raw = {"d": 2, "k": 1, "alpha": [0.0], "mu": [[0.0, 0.0]], "q": [[0.0, 0.0]], "l": [[0.0]],
    ...        "x": [[0.0, 0.0]], "m": 0, "gamma": 1.0}
    >>> f = define()["jacobian"]
    >>> f.encode(f.compute(*f.prepare(raw)))["q"]
    [[0.0, 0.0]]
    """
    def run(gradient):
        return lambda *args: compiled(args[5], args[6], gradient)(*args[:5])

    return {"objective": Function(prepare, run(False), float),
            "jacobian": Function(prepare, run(True), encode_gradient)}
