"""GradBench's ``kmeans``: the cost (sum of squared distances to the nearest centroid) and the
Newton direction ``dir``: the gradient over the Hessian's diagonal (the Hessian is diagonal)."""

from __future__ import annotations

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def kmeans_cost(J, points, centroids):
    """Sum over the points of the squared distance to the nearest centroid.

    >>> float(kmeans_cost(SG, np.array([[0.0], [3.0]]), np.array([[1.0]])))
    5.0
    """
    diff = points[:, None, :] - centroids[None, :, :]  # (n, k, d)
    return J.np.sum(J.np.min(J.np.sum(diff * diff, axis=2), axis=1))


def kmeans_cost_matmul(J, points, centroids):
    """The same cost with |p - c|^2 expanded as |p|^2 + |c|^2 - 2 p.c (one matrix product)."""
    sq = J.np.sum(points * points, axis=1)[:, None] + J.np.sum(centroids * centroids, axis=1)[None, :]
    return J.np.sum(J.np.min(sq - 2.0 * (points @ centroids.T), axis=1))


def kmeans_dir(J, cost, points, centroids):
    """Gradient divided by the Hessian's diagonal, the latter as H @ ones (the Hessian is diagonal)."""
    gradient = J.grad(lambda c: cost(J, points, c))
    g, h = J.jvp(gradient, (centroids,), (J.np.ones(centroids.shape),))
    return g / h


def matrices(raw: dict) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(raw["points"], dtype=float), np.asarray(raw["centroids"], dtype=float)


def define() -> dict[str, Function]:
    """``cost`` and ``dir``.

    >>> define()["dir"].compute(np.array([[0.0], [3.0]]), np.array([[1.0]])).tolist()
    [[-0.5]]
    """
    return {"cost": Function(matrices, sg.jit(lambda p, c: kmeans_cost(SG, p, c)), float),
            "dir": Function(matrices, sg.jit(lambda p, c: kmeans_dir(SG, kmeans_cost, p, c)),
                            np.ndarray.tolist)}
