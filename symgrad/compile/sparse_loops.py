"""Numba loops over sparse patterns, compiled once per machine: greedy column colouring (Curtis,
Powell and Reid) and the assembly of computed values into a pattern's order.

Two columns get different colours where some row has a nonzero in both; the columns of one colour
then add into one compressed product (a Jacobian-vector or Hessian-vector product with the seed
that is 1 on them) without sharing a row, so each entry is read back from it. A tridiagonal matrix
of any size takes three colours. Numba loops over the nonzeros (a million columns: 20 ms), loaded
through the symgrad cache like the loop VM.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse

from symgrad.compile import cache

_SOURCE = '''
import numba
import numpy as np


@numba.njit(nogil=True)
def colour(indptr, indices, tindptr, tindices, n):
    # columns in order; a column's rows (tindices), their columns (indices): the colours taken
    out = np.full(n, -1, np.int64)
    stamp = np.full(n + 1, -1, np.int64)
    for j in range(n):
        for p in range(tindptr[j], tindptr[j + 1]):
            r = tindices[p]
            for q in range(indptr[r], indptr[r + 1]):
                c = out[indices[q]]
                if c >= 0:
                    stamp[c] = j
        c = 0
        while stamp[c] == j:
            c += 1
        out[j] = c
    return out


@numba.njit(nogil=True)
def arrange(positions, sources, size):
    # a counting sort of sources by position (stable): starts[p]..starts[p + 1] are position p's
    starts = np.zeros(size + 1, positions.dtype)
    for p in positions:
        starts[p + 1] += 1
    for p in range(size):
        starts[p + 1] += starts[p]
    filled = starts[:-1].copy()
    order = np.empty(positions.size, sources.dtype)
    for t in range(positions.size):
        order[filled[positions[t]]] = sources[t]
        filled[positions[t]] += 1
    return order, starts


@numba.njit(nogil=True)
def assemble(values, order, starts):
    # entry p of the result: the sum of values[order[starts[p]:starts[p + 1]]], in that order
    n = starts.size - 1
    out = np.zeros(n)
    for p in range(n):
        lo, hi = starts[p], starts[p + 1]
        if lo < hi:
            total = values[order[lo]]
            for t in range(lo + 1, hi):
                total += values[order[t]]
            out[p] = total
    return out
'''


@functools.cache
def _module():
    return cache.load("sparse_loops_v1", _SOURCE)


def colour_columns(pattern: scipy.sparse.spmatrix) -> np.ndarray:
    """A colour for each column of ``pattern``: no row has nonzeros in two columns of one colour.

    >>> import scipy.sparse
    >>> colour_columns(scipy.sparse.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(5, 5))).tolist()
    [0, 1, 2, 0, 1]
    """
    rows = scipy.sparse.csr_matrix(pattern)
    columns = rows.tocsc()
    n = rows.shape[1]
    return _module().colour(rows.indptr.astype(np.int64), rows.indices.astype(np.int64),
                            columns.indptr.astype(np.int64), columns.indices.astype(np.int64), n)


class Assembly:
    """A result of ``size`` entries from computed values: ``values[sources[t]]`` goes to
    ``positions[t]``, the ones meeting at a position added in their order (what
    ``np.bincount(positions, values[sources], size)`` gives), in one pass over the result: the order
    found once, by a counting sort.

    >>> Assembly(np.array([2, 0, 2]), np.array([0, 1, 3]), 4)(np.array([1.0, 2.0, 9.0, 3.0])).tolist()
    [2.0, 0.0, 4.0, 0.0]
    """

    def __init__(self, positions: np.ndarray, sources: np.ndarray, size: int) -> None:
        small = max(positions.size, size, int(sources.max(initial=0)) + 1) < 2 ** 31  # (half the index traffic)
        kind = np.int32 if small else np.int64
        self.order, self.starts = _module().arrange(positions.astype(kind), sources.astype(kind), size)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        return _module().assemble(values, self.order, self.starts)
