"""Loops over sparse patterns, compiled once per machine: greedy column colouring (Curtis, Powell
and Reid) and the assembly of computed values into a pattern's order.

Two columns get different colours where some row has a nonzero in both; the columns of one colour
then add into one compressed product (a Jacobian-vector or Hessian-vector product with the seed
that is 1 on them) without sharing a row, so each entry is read back from it. A tridiagonal matrix
of any size takes three colours. Loops over the nonzeros (a million columns: 20 ms): in C where a
compiler is found (``c_backend``: built in 0.1 s, where Numba's compile took 2.6 s of a sparse
Hessian's first result on an empty cache), else Numba's, loaded through the symgrad cache like the
loop VM. Both add in the same order: the same bits.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from typing import Any

import numpy as np
import scipy.sparse

from symgrad.compile import c_backend, cache

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


# The same loops in C, for index arrays of 32 and 64 bits (half the index traffic where they fit).
_C_SOURCE = """
void sg_colour(const long long* indptr, const long long* indices, const long long* tindptr,
               const long long* tindices, long long n, long long* out, long long* stamp) {
    for (long long j = 0; j < n; ++j) {
        for (long long p = tindptr[j]; p < tindptr[j + 1]; ++p) {
            long long r = tindices[p];
            for (long long q = indptr[r]; q < indptr[r + 1]; ++q) {
                long long c = out[indices[q]];
                if (c >= 0) stamp[c] = j;
            }
        }
        long long c = 0;
        while (stamp[c] == j) ++c;
        out[j] = c;
    }
}
#define SPARSE_LOOPS(T, BITS)                                                                       \\
void sg_arrange##BITS(const T* positions, const T* sources, long long m, long long size, T* order,   \\
                      T* starts, T* filled) {                                                       \\
    for (long long p = 0; p <= size; ++p) starts[p] = 0;                                            \\
    for (long long t = 0; t < m; ++t) starts[positions[t] + 1] += 1;                                \\
    for (long long p = 0; p < size; ++p) starts[p + 1] += starts[p];                                \\
    for (long long p = 0; p < size; ++p) filled[p] = starts[p];                                     \\
    for (long long t = 0; t < m; ++t) order[filled[positions[t]]++] = sources[t];                   \\
}                                                                                                   \\
void sg_assemble##BITS(const double* values, const T* order, const T* starts, long long n,          \\
                       double* out) {                                                               \\
    for (long long p = 0; p < n; ++p) {                                                             \\
        T lo = starts[p], hi = starts[p + 1];                                                       \\
        double total = 0.0;                                                                         \\
        if (lo < hi) {                                                                              \\
            total = values[order[lo]];                                                              \\
            for (T t = lo + 1; t < hi; ++t) total += values[order[t]];                              \\
        }                                                                                           \\
        out[p] = total;                                                                             \\
    }                                                                                               \\
}
SPARSE_LOOPS(int, 32)
SPARSE_LOOPS(long long, 64)
"""


@functools.cache
def _module() -> Any:
    """The loops: C's where a compiler is found, else Numba's (same names, same arguments)."""
    library = _c_library()
    return cache.load("sparse_loops_v1", _SOURCE) if library is None else library


def prefetch() -> None:
    """Build the C loops on a thread of their own where neither this process nor the cache has them (once
    per machine: 0.08 s of gcc that a sparse Jacobian's first result otherwise waited for after its trace
    instead of during it).

    >>> prefetch()
    """
    if _module.cache_info().currsize == 0 and c_backend.available():
        threading.Thread(target=_built, name="symgrad-sparse-loops", daemon=True).start()


def _built() -> None:
    with contextlib.suppress(c_backend.CompilerError):  # (_c_library tries again, and falls back, when used)
        c_backend.build(_C_SOURCE, "sparse_loops")


def _c_library() -> Any:
    if not c_backend.available():
        return None
    try:
        lib = c_backend.load(_C_SOURCE, "sparse_loops")
    except c_backend.CompilerError:
        return None
    return _CLoops(lib) if hasattr(lib, "sg_assemble64") else None  # (no: a C++ compiler's names)


class _CLoops:
    """The C loops behind the Numba functions' signatures (each allocates its results as they do)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        for name in ("sg_colour", "sg_arrange32", "sg_arrange64", "sg_assemble32", "sg_assemble64"):
            getattr(lib, name).restype = None

    def colour(self, indptr: np.ndarray, indices: np.ndarray, tindptr: np.ndarray, tindices: np.ndarray,
               n: int) -> np.ndarray:
        out, stamp = np.full(n, -1, np.int64), np.full(n + 1, -1, np.int64)
        self.lib.sg_colour(*_pointers(indptr, indices, tindptr, tindices), ctypes.c_longlong(n),
                           *_pointers(out, stamp))
        return out

    def arrange(self, positions: np.ndarray, sources: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        kind = positions.dtype
        order, starts, filled = np.empty(positions.size, kind), np.empty(size + 1, kind), np.empty(size, kind)
        getattr(self.lib, f"sg_arrange{8 * kind.itemsize}")(
            *_pointers(positions, sources), ctypes.c_longlong(positions.size), ctypes.c_longlong(size),
            *_pointers(order, starts, filled))
        return order, starts

    def assemble(self, values: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
        out = np.empty(starts.size - 1)
        getattr(self.lib, f"sg_assemble{8 * order.dtype.itemsize}")(
            *_pointers(np.ascontiguousarray(values, dtype=np.float64), order, starts),
            ctypes.c_longlong(out.size), *_pointers(out))
        return out


def _pointers(*arrays: np.ndarray) -> list[ctypes.c_void_p]:
    return [ctypes.c_void_p(a.ctypes.data) for a in arrays]


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
    ``np.bincount(positions, values[sources], size)`` gives). Runs of ``RUN_MIN`` or more consecutive
    sources landing alone at evenly spaced positions (a band formula's values, each the k-th entry of
    its row) are strided copies; the others are added in one pass over their positions, the order found
    once, by a counting sort.

    >>> Assembly(np.array([2, 0, 2]), np.array([0, 1, 3]), 4)(np.array([1.0, 2.0, 9.0, 3.0])).tolist()
    [2.0, 0.0, 4.0, 0.0]
    """

    def __init__(self, positions: np.ndarray, sources: np.ndarray, size: int) -> None:
        small = max(positions.size, size, int(sources.max(initial=0)) + 1) < 2 ** 31  # (half the index traffic)
        kind = np.int32 if small else np.int64
        positions, sources = (np.ascontiguousarray(a, dtype=kind) for a in (positions, sources))
        inside = not positions.size or 0 <= positions.min() and positions.max() < size and 0 <= sources.min()
        if positions.size != sources.size or not inside:
            raise ValueError("symgrad: an assembly's positions and sources: as many, in 0 .. size - 1 and >= 0")
        self.size, self.reads = size, int(sources.max(initial=-1)) + 1
        self.runs, rest = _runs(positions, sources, size)
        self.at = np.unique(positions[rest])  # (the positions the runs leave: a result of their own)
        self.order, self.starts = _module().arrange(np.searchsorted(self.at, positions[rest]).astype(kind),
                                                    sources[rest], self.at.size)
        covered = sum(run[3] * run[4] for run in self.runs) + self.at.size
        self.fill = np.empty if covered == size else np.zeros

    def __call__(self, values: np.ndarray) -> np.ndarray:
        if values.ndim != 1 or values.size < self.reads:  # (the C loops check nothing)
            raise ValueError(f"symgrad: the assembly reads {self.reads} values, got an array of shape "
                             f"{values.shape}")
        out = self.fill(self.size)
        for position, step, source, count, width in self.runs:  # (width runs side by side: a transposed block)
            block = np.lib.stride_tricks.as_strided(out[position:], (count, width),
                                                    (out.itemsize * step, out.itemsize))
            block[...] = values[source:source + width * count].reshape(width, count).T
        if self.at.size:
            out[self.at] = _module().assemble(values, self.order, self.starts)
        return out

    def arranged(self) -> tuple[np.ndarray, np.ndarray]:
        """(order, starts) over all ``size`` positions: position p's values are
        ``values[order[starts[p]:starts[p + 1]]]``, added in that order (what an exported assembly writes).

        >>> Assembly(np.array([2, 0, 2]), np.array([0, 1, 3]), 4).arranged()[0].tolist()
        [1, 0, 3]
        """
        positions = [self.at[np.repeat(np.arange(self.at.size), np.diff(self.starts))]]
        sources = [self.order.astype(np.int64)]
        for position, step, source, count, width in self.runs:
            positions.append((position + np.arange(width)[:, None] + step * np.arange(count)).ravel())
            sources.append(source + np.arange(width * count))
        return _module().arrange(*(np.concatenate(a).astype(np.int64) for a in (positions, sources)), self.size)


RUN_MIN = 64  # values: a shorter run of evenly spaced positions is added with the others


def _runs(positions: np.ndarray, sources: np.ndarray, size: int) -> tuple[list, np.ndarray]:
    """The runs (first position, step, first source, length, width) of ``RUN_MIN`` or more values, each
    the only one at its position, with consecutive sources and positions a constant step apart (width
    such runs, one after another in sources and side by side in positions: one run); and the numbers of
    the values outside them."""
    m = positions.size
    if m < RUN_MIN:
        return [], np.arange(m)
    steps = np.diff(positions.astype(np.int64)), np.diff(sources.astype(np.int64))
    changes = np.flatnonzero((steps[0][1:] != steps[0][:-1]) | (steps[1][1:] != steps[1][:-1])) + 1
    edges = np.concatenate([[0], changes, [m - 1]])  # (steps edges[k] .. edges[k + 1] - 1 are alike)
    alone = np.bincount(positions, minlength=size) == 1
    runs, inside = [], np.zeros(m, dtype=bool)
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        first = a + bool(inside[a])  # (element a may end the run before: each value in one run)
        step = int(steps[0][a]) if a < m - 1 else 0
        if b - first + 1 >= RUN_MIN and step > 0 and steps[1][a] == 1 and alone[positions[first:b + 1]].all():
            run = (int(positions[first]), step, int(sources[first]), b - first + 1, 1)
            last = runs[-1] if runs else None
            beside = last is not None and last[1:4:2] == run[1:4:2] and last[4] < step and \
                run[0] == last[0] + last[4] and run[2] == last[2] + last[3] * last[4]
            runs[-1:] = [(*last[:4], last[4] + 1)] if beside else [*runs[-1:], run]
            inside[first:b + 1] = True
    return runs, np.flatnonzero(~inside)
