"""GradBench's ``det``: the determinant by expansion by minors (cmpad's ``det_by_minor``) and its
gradient."""

from __future__ import annotations

import functools
import itertools

import numpy as np

import symgrad as sg
from symgrad.gradbench.protocol import Function


def det_by_minors(A):
    """det(A) expanded along the first row of each minor. A minor is known by the columns it keeps
    (its rows are the last ones), so each is computed once, from the smaller ones: 2^ell minors,
    not ell! products.

    >>> float(det_by_minors(np.array([[1.0, 2.0], [3.0, 4.0]])))
    -2.0
    """
    ell = A.shape[0]
    minors = {(j,): A[ell - 1, j] for j in range(ell)}
    for size in range(2, ell + 1):
        row = ell - size
        minors = {cols: functools.reduce(lambda acc, t: acc + t, (
            (1 - 2 * (i % 2)) * A[row, j] * minors[cols[:i] + cols[i + 1:]] for i, j in enumerate(cols)))
            for cols in itertools.combinations(range(ell), size)}
    return minors[tuple(range(ell))]


@functools.cache
def compiled(ell: int, gradient: bool):
    f = sg.grad(det_by_minors) if gradient else det_by_minors
    return sg.jit(f)


def define() -> dict[str, Function]:
    """``primal`` and ``gradient`` (row-major, as A).

    >>> define()["gradient"].compute(np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[4.0, -3.0], [-2.0, 1.0]]
    """
    def prepare(raw: dict) -> tuple[np.ndarray]:
        ell = int(raw["ell"])
        return (np.asarray(raw["A"], dtype=float).reshape(ell, ell),)

    return {"primal": Function(prepare, lambda A: compiled(len(A), False)(A), float),
            "gradient": Function(prepare, lambda A: compiled(len(A), True)(A), lambda g: np.ravel(g).tolist())}
