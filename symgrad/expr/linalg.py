"""Small dense linear algebra on symbolic arrays, unrolled into scalar expressions.

``np.linalg.solve``, ``inv``, ``det``, ``slogdet`` (LU with partial pivoting) and ``cholesky``
for matrices up to ``MAX_N`` (stacks of them too). Pivoting compares values, which are
symbolic: each step picks its pivot row with ``where`` on ``|a| >`` comparisons, so the
computed function is exactly Gaussian elimination with partial pivoting (as LAPACK's getrf)
and its derivative is that of the branch taken, which is the true derivative wherever the
matrix is nonsingular. ``cholesky`` assumes a symmetric positive definite matrix (it reads
the lower triangle, as NumPy does); where it is not, the result has nan (NumPy raises).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr.functions import FUNCS
from symgrad.expr.node import TracingError

MAX_N = 8  # beyond this the unrolled graph grows as n**3 per matrix: wait for array nodes
_where, _abs, _sqrt, _log, _sign = (FUNCS[n] for n in ("where", "abs", "sqrt", "log", "sign"))


def _square(a: Any, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=object)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError(f"{name}: expected square matrices (..., n, n), got shape {a.shape}")
    if a.shape[-1] > MAX_N:
        raise TracingError(f"{name} of a symbolic {a.shape[-1]}x{a.shape[-1]} matrix: up to {MAX_N}x{MAX_N} is "
                           "unrolled into scalar expressions; pass larger matrices as data (not differentiated)")
    return a


def _stacked(fn: Any, a: np.ndarray, *rest: np.ndarray) -> Any:
    """Apply ``fn`` to each matrix of a stack (leading axes), results stacked back."""
    lead = a.shape[:-2]
    if not lead:
        return fn(a, *rest)
    parts = [fn(a[i], *(r[i] for r in rest)) for i in np.ndindex(*lead)]
    if isinstance(parts[0], tuple):
        return tuple(_stack([p[k] for p in parts], lead) for k in range(len(parts[0])))
    return _stack(parts, lead)


def _stack(parts: list, lead: tuple) -> np.ndarray:
    out = np.empty(len(parts), dtype=object) if np.ndim(parts[0]) == 0 else None
    if out is not None:
        out[:] = parts
        return out.reshape(lead)
    return np.stack(parts).reshape(lead + np.shape(parts[0]))


def _lu(a: np.ndarray) -> tuple[np.ndarray, list, Any]:
    """Row-pivoted LU: (the combined L\\U matrix, each step's row order, the permutation's sign)."""
    n = a.shape[0]
    m = np.array(a, dtype=object)
    sign: Any = 1.0
    orders = []
    for k in range(n):
        # The pivot: the first row below k with the largest |a[r, k]| (as LAPACK's idamax).
        best, pick = m[k, k], [1.0] + [0.0] * (n - k - 1)
        for r in range(k + 1, n):
            bigger = _abs(m[r, k]) > _abs(best)
            best = _where(bigger, m[r, k], best)
            pick = [_where(bigger, 0.0, p) for p in pick[:r - k]] + [bigger] + pick[r - k + 1:]
        m = _swap(m, k, pick)
        sign = sign * _where(pick[0], 1.0, -1.0)
        orders.append(pick)
        for r in range(k + 1, n):
            m[r, k] = m[r, k] / m[k, k]
            for j in range(k + 1, n):
                m[r, j] = m[r, j] - m[r, k] * m[k, j]
    return m, orders, sign


def _swap(m: np.ndarray, k: int, pick: list) -> np.ndarray:
    """Swap row k with the picked one (``pick``: one-hot conditions over rows k..n-1), by selection."""
    m = np.array(m, dtype=object)
    old_k = m[k].copy()
    for i, r in enumerate(range(k + 1, m.shape[0]), start=1):
        m[k] = _where(pick[i], m[r], m[k])
        m[r] = _where(pick[i], old_k, m[r])
    return m


def _permute(b: np.ndarray, orders: list) -> np.ndarray:
    """Apply the row swaps of ``_lu`` to the rows of ``b``."""
    for k, pick in enumerate(orders):
        b = _swap(b, k, pick)
    return b


def _solve_one(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lu, orders, _ = _lu(a)
    n = a.shape[0]
    y = _permute(b, orders)
    for i in range(n):  # forward: L has a unit diagonal
        for j in range(i):
            y[i] = y[i] - lu[i, j] * y[j]
    for i in reversed(range(n)):  # backward
        for j in range(i + 1, n):
            y[i] = y[i] - lu[i, j] * y[j]
        y[i] = y[i] / lu[i, i]
    return y


def solve(a: Any, b: Any) -> np.ndarray:
    """``np.linalg.solve`` on symbolic arrays: ``b`` of shape (n,) or (n, k), stacks too."""
    a = _square(a, "np.linalg.solve")
    b = np.asarray(b, dtype=object)
    vector = b.ndim == a.ndim - 1
    bm = b[..., None] if vector else b
    if bm.shape[-2] != a.shape[-1]:
        raise ValueError(f"np.linalg.solve: a has shape {a.shape} but b has shape {b.shape}")
    bm = np.broadcast_to(bm, a.shape[:-2] + bm.shape[-2:])
    x = _stacked(_solve_one, a, bm)
    return x[..., 0] if vector else x


def inv(a: Any) -> np.ndarray:
    """``np.linalg.inv`` on symbolic arrays."""
    a = _square(a, "np.linalg.inv")
    eye = np.broadcast_to(np.eye(a.shape[-1]).astype(object), a.shape)
    return _stacked(_solve_one, a, eye)


def _det_one(a: np.ndarray) -> Any:
    lu, _, sign = _lu(a)
    out = sign
    for k in range(a.shape[0]):
        out = out * lu[k, k]
    return out


def det(a: Any) -> Any:
    """``np.linalg.det`` on symbolic arrays (a scalar expression for one matrix)."""
    return _stacked(_det_one, _square(a, "np.linalg.det"))


def _slogdet_one(a: np.ndarray) -> tuple[Any, Any]:
    lu, _, sign = _lu(a)
    diag = [lu[k, k] for k in range(a.shape[0])]
    for d in diag:
        sign = sign * _sign(d)
    return sign, sum((_log(_abs(d)) for d in diag), 0.0)


def slogdet(a: Any) -> Any:
    """``np.linalg.slogdet`` on symbolic arrays: (sign, log|det|), as NumPy's named tuple."""
    sign, logabs = _stacked(_slogdet_one, _square(a, "np.linalg.slogdet"))
    return np.linalg._linalg.SlogdetResult(sign, logabs) if hasattr(np.linalg, "_linalg") else (sign, logabs)


def _cholesky_one(a: np.ndarray) -> np.ndarray:
    n = a.shape[0]
    L = np.full((n, n), 0.0, dtype=object)
    for j in range(n):
        L[j, j] = _sqrt(a[j, j] - sum((L[j, k] * L[j, k] for k in range(j)), 0.0))
        for i in range(j + 1, n):
            L[i, j] = (a[i, j] - sum((L[i, k] * L[j, k] for k in range(j)), 0.0)) / L[j, j]
    return L


def cholesky(a: Any, upper: bool = False) -> np.ndarray:
    """``np.linalg.cholesky`` on symbolic arrays: lower L with a = L @ L.T (upper=True: L.T)."""
    L = _stacked(_cholesky_one, _square(a, "np.linalg.cholesky"))
    return np.swapaxes(L, -1, -2) if upper else L
