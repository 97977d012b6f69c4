"""Sparse Jacobians and Hessians: only the structurally nonzero entries, never an n-by-n array.

The pattern comes from the graph: the variables each node depends on through a
differentiable argument (a comparison's or ``floor``'s argument does not count), sets
shared between a node and its one active argument so a chain costs nothing. Columns
that share no row get one colour (greedy colouring), and one forward-mode sweep per
colour gives all their entries at once (Curtis, Powell and Reid): a tridiagonal
Hessian of any size takes three sweeps over the gradient's graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.expr.build import const
from symgrad.expr.diff import _check_wrt, _reverse, _scalar, jvp
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.traverse import as_expr_list, topo_order

_EMPTY: frozenset = frozenset()


@dataclass(frozen=True, eq=False)
class SparseExprs:
    """A sparse matrix of expressions in CSR form: row ``i`` holds ``exprs[indptr[i]:indptr[i+1]]``
    in columns ``indices[indptr[i]:indptr[i+1]]``. ``sg.compile`` turns it into a function
    returning ``scipy.sparse.csr_matrix`` with this fixed pattern.

    >>> import symgrad as sg
    >>> x = sg.vector("x", 3)
    >>> H = sg.hessian(sum(x[:-1] * x[1:]), x, sparse=True)
    >>> H.nnz, H.indices.tolist()
    (4, [1, 0, 2, 1])
    """

    exprs: list[Expr]
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        """The number of structurally nonzero entries."""
        return len(self.exprs)

    def to_dense(self) -> np.ndarray:
        """The matrix as a dense object array (for inspection of small ones)."""
        out = np.full(self.shape, const(0.0), dtype=object)
        for i in range(self.shape[0]):
            lo, hi = self.indptr[i], self.indptr[i + 1]
            out[i, self.indices[lo:hi]] = self.exprs[lo:hi]
        return out

    def __repr__(self) -> str:
        return f"<SparseExprs {self.shape[0]}x{self.shape[1]}, {self.nnz} nonzeros>"


def dependencies(outputs: list[Expr], wrt: list[Expr]) -> list[frozenset]:
    """For each output, the indices in ``wrt`` it depends on through differentiable arguments.

    >>> import symgrad as sg
    >>> x, y, z = sg.symbols("x y z")
    >>> dependencies([x * y, sg.floor(z) + x], [x, y, z])
    [frozenset({0, 1}), frozenset({0})]
    """
    deps: dict[Expr, frozenset] = {v: frozenset((i,)) for i, v in enumerate(wrt)}
    for node in topo_order(outputs):
        if node in deps:
            continue
        found = _EMPTY
        rolled = node.op.kind == "rolled"  # a rolled node depends on its first argument; the rest are indices
        for i, arg in enumerate(node.args):
            d = deps.get(arg, _EMPTY)
            if d and (i == 0 if rolled else node.op.partials[i] is not None) and not d <= found:
                found = d if found <= d else found | d
        deps[node] = found
    return [deps[o] for o in outputs]


def _colour_columns(rows: list[frozenset], n: int) -> np.ndarray:
    """Greedy colouring: two columns with a nonzero in the same row get different colours."""
    in_column: list[list[int]] = [[] for _ in range(n)]
    for i, cols in enumerate(rows):
        for j in cols:
            in_column[j].append(i)
    colour = np.full(n, -1, dtype=np.int64)
    for j in range(n):
        taken = {colour[k] for i in in_column[j] for k in rows[i]}
        c = 0
        while c in taken:
            c += 1
        colour[j] = c
    return colour


@paused_gc()
def _compressed(fs: list[Expr], wrt: list[Expr], rows: list[frozenset]) -> SparseExprs:
    """The entries d fs[i] / d wrt[j] for (i, j) in the pattern, one jvp per colour."""
    n = len(wrt)
    colour = _colour_columns(rows, n)
    one, zero = const(1.0), const(0.0)
    n_colours = int(colour.max(initial=-1)) + 1
    sweeps = [jvp(fs, wrt, [one if c == k else zero for c in colour]) for k in range(n_colours)]
    exprs, indices, indptr = [], [], [0]
    for i, cols in enumerate(rows):
        for j in sorted(cols):
            exprs.append(sweeps[colour[j]][i])
            indices.append(j)
        indptr.append(len(exprs))
    return SparseExprs(exprs, np.array(indices, dtype=np.int32), np.array(indptr, dtype=np.int32),
                       (len(fs), n))


def _scalar_wrt(wrt: Any, who: str) -> list[Expr]:
    flat = _check_wrt(wrt)
    for v in flat:
        if v.op.name == "array":
            raise TypeError(f"{who}(..., sparse=True) differentiates with respect to variables, not the array "
                            f"{v}: use the dense rolled sg.jacobian / sg.hessian, or sg.hvp")
    return flat


def sparse_jacobian(fs: Any, wrt: Any) -> SparseExprs:
    """The Jacobian d fs[i] / d wrt[j], structurally nonzero entries only.

    >>> import symgrad as sg
    >>> x = sg.vector("x", 3)
    >>> J = sparse_jacobian(x[1:] - x[:-1] ** 2, x)
    >>> J.exprs
    [-(2*x[0]), 1, -(2*x[1]), 1]
    """
    flat = _scalar_wrt(wrt, "jacobian")
    outs = as_expr_list(fs)
    return _compressed(outs, flat, dependencies(outs, flat))


def sparse_hessian(f: Any, wrt: Any) -> SparseExprs:
    """The Hessian of a scalar ``f``, structurally nonzero entries only (forward over reverse).

    >>> import symgrad as sg
    >>> x = sg.vector("x", 3)
    >>> sparse_hessian(x[0] * x[1] + x[2] ** 2, x).to_dense()
    array([[0, 1, 0],
           [1, 0, 0],
           [0, 0, 2]], dtype=object)
    """
    flat = _scalar_wrt(wrt, "hessian")
    g = _reverse([_scalar(f, "hessian")], flat)[0]
    return _compressed(g, flat, dependencies(g, flat))
