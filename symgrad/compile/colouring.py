"""Greedy column colouring of a sparse pattern (Curtis, Powell and Reid), compiled once per machine.

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
'''


@functools.cache
def _module():
    return cache.load("colouring_v1", _SOURCE)


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
