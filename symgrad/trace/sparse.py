"""Sparse Jacobians and Hessians of functions of large arrays, without an element-by-element trace.

``sg.jacobian(fn, sparse=True)`` and ``sg.hessian(fn, sparse=True)`` of a function traced onto
rolled arrays: the pattern is the dependencies of the rolled outputs (a Hessian's: of the rolled
gradient) on the differentiated argument, found from their addresses
(``expr.sparsity.rolled_pattern``, vectorised, in proportion to the nonzeros); its columns are
coloured (``compile.sparse_loops``) where the entries are not bands (``_Direct``: where they are,
one kernel evaluates each band's formula at every row); one compiled product per colour, a Jacobian-vector product
(forward mode) or a Hessian-vector product (forward over reverse) with the seed that is 1 on that
colour's columns, gives every entry of those columns at once, read back into CSR order. The
chained Rosenbrock function at a million variables: three products. A Jacobian's dense rows (a
constraint on the sum of all variables) would give every column its own colour: each is one
reverse sweep (a vector-Jacobian product) instead, the other rows coloured without them. A pattern
with ``DENSE_FRACTION`` of its entries or more (``np.sum(v) ** 2``'s) is computed as the dense matrix
(``_Dense``) and returned in CSR with that pattern: colouring it costs a sum over rows of their
nonzeros squared (n**3 when dense: 80 s at n = 3000) and each colour is a product, for no saving.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import scipy.sparse

from symgrad.compile import sparse_loops
from symgrad.compile.function import compile
from symgrad.compile.sparse_loops import Assembly, colour_columns
from symgrad.expr import diff as symbolic
from symgrad.expr import rolled
from symgrad.expr.build import Var
from symgrad.expr.custom import plain
from symgrad.expr.node import Expr
from symgrad.expr.rolled import tensor
from symgrad.expr.row_pieces import row_pieces
from symgrad.expr.sparsity import band_entries, bands, index_values, rolled_pattern
from symgrad.expr.traverse import object_array, topo_order
from symgrad.trace.errors import traced
from symgrad.trace.record import Trace
from symgrad.trace.signature import tangent_of
from symgrad.util import pytree
from symgrad.util.progress import phase

DENSE_ROW = 64  # a Jacobian row with more nonzeros (and 16x the median) is a reverse sweep of its own
# A pattern with this share of its entries nonzero is computed dense. Measured (a k x k block in n = 2000,
# warm caches): at 9 % nonzero the colour products' first call took 3.3 s, the dense one 1.2 s, later
# calls even (0.07 s); at 25 %, 5.7 s against 1.1 s and 1.5 s against 0.12 s a call. At 25 % the dense
# array (8 bytes an entry) is under 3x the CSR result's own memory (12 bytes a nonzero).
DENSE_FRACTION = 0.25


class RolledSparse:
    """The sparse Jacobian or Hessian of ``owner``'s function (an ``sg.jacobian`` / ``sg.hessian`` with
    ``sparse=True``) at arguments of one signature: the function traced once, rolled (its gradient with
    it, for a Hessian); the pattern, colours and product kernels made from that trace's formulas; each
    call one product per colour.

    >>> import numpy as np, symgrad as sg
    >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
    >>> H = h(np.linspace(0.0, 1.0, 4000))
    >>> H.shape, H.nnz
    ((4000, 4000), 11997)
    """

    def __init__(self, owner: Any, args: tuple, kwargs: dict) -> None:
        sparse_loops.prefetch()  # (built while this traces)
        self.argnum, self.hessian = owner.argnums_spec, owner.transform == "hessian"
        # The one trace: of the gradient (a Hessian's rows) or of the function itself (a Jacobian's).
        how = type(owner)(owner.fn, "grad" if self.hessian else "jit", argnums=self.argnum,
                          static_argnums=tuple(owner.static_argnums), static_argnames=tuple(owner.static_argnames),
                          backend=owner.backend)
        self.trace = trace = traced(lambda: Trace(how, args, kwargs, indexed=True))
        if trace.guards:  # (another branch has other entries: the element path traces each branch it meets)
            raise NotImplementedError("Python if / while on traced values: the pattern is the branch's")
        roots = plain(list(trace.derivatives if self.hessian else trace.flat))
        inputs = trace.inputs
        wrt = 0 if self.hessian else len(pytree.flatten(args[:self.argnum])[0])  # (jit's inputs: every leaf)
        vector = wrt < len(inputs) and inputs[wrt].op.name == "array" and \
            int(np.prod(inputs[wrt].shape)) == np.size(args[self.argnum])
        self.formula = (roots, inputs[wrt] if vector else None)
        self.backend, self.out_shape = owner.backend, [shape for _, shape in trace.outputs]
        self.direct = _Direct.made(trace, *self.formula, self.hessian, owner.backend) \
            if len(roots) == 1 and vector else None
        self.dense = None
        if self.direct is not None:  # (its pattern: where its formulas are read)
            self.pattern = self.direct.pattern
            return
        with phase("sparse pattern"):
            pattern = rolled_pattern(roots, inputs)
        pattern = _columns_of(pattern, inputs, wrt, np.size(args[self.argnum]))
        self.pattern = (pattern + pattern.T).tocsr() if self.hessian else pattern.tocsr()
        self.pattern.sort_indices()
        self.dense = _Dense.made(owner, self.pattern, len(self.out_shape))
        if self.dense is None:
            self._coloured(roots, inputs[wrt])

    def _coloured(self, roots: list[Expr], x: Expr) -> None:
        """The colours, and the kernels of the products that give the entries where their formulas are not
        bands: the derivative along a seed (forward mode: a Hessian-vector product of the traced gradient, a
        Jacobian-vector product of the traced outputs), and a reverse sweep for each dense Jacobian row."""
        counts = np.diff(self.pattern.indptr)
        dense = np.zeros(counts.size, dtype=bool) if self.hessian or self.out_shape == [()] else \
            counts > max(DENSE_ROW, 16 * np.median(counts, overwrite_input=False) if counts.size else 0)
        self.dense_rows = np.flatnonzero(dense)
        with phase(f"colouring {self.pattern.nnz:,} nonzeros"):
            self.colour = colour_columns(scipy.sparse.diags((~dense).astype(float)) @ self.pattern
                                         if dense.any() else self.pattern)
        self.colours = int(self.colour.max(initial=-1)) + 1
        self.seeds = np.stack([(self.colour == k).astype(float) for k in range(self.colours)]) \
            if self.colours else np.zeros((0, self.colour.size))
        rows = np.repeat(np.arange(self.pattern.shape[0]), np.diff(self.pattern.indptr))
        self.at = self.colour[self.pattern.indices] * self.pattern.shape[0] + rows  # (in the products, raveled)
        t, seed = self.trace, tangent_of(x)
        self.product = compile(object_array(symbolic.jvp(roots, [x], [seed])).reshape(-1), t.inputs,
                               [*t.params, *t.constants, seed], self.backend) if self.colours else None
        self.reverse = None
        if dense.any():  # (a row of all the columns: one reverse sweep, not a colour a column)
            cts = [rolled.array(f"ct{k}", r.shape) if r.op.array_valued else Var(f"ct{k}")
                   for k, r in enumerate(roots)]
            total = sum(np.sum(ct * r) if r.op.array_valued else ct * r for ct, r in zip(cts, roots))
            self.reverse = compile(symbolic.grad(total, [x]), t.inputs, [*t.params, *t.constants, *cts],
                                   self.backend)

    def ready(self, backend: str | None = None) -> RolledSparse:
        """Wait until the kernels computing the entries run on their final compiled kernels, or on
        ``backend``'s (they start on the loop VM or the C compiler's: Compiled.ready)."""
        if self.dense is not None:
            return self
        kernel = self.direct.compiled if self.direct is not None else self.product
        if kernel is not None:
            kernel.ready(backend)
        return self

    def explain(self) -> str:
        """One line: the matrix's size and nonzeros, and how each call computes them.

        >>> import numpy as np, symgrad as sg
        >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
        >>> _ = h(np.ones(4000))
        >>> print(h.explain().splitlines()[-1].strip())
        rolled sparse Hessian (4000, 4000), 11997 nonzeros: 3 band formulas at every row, one kernel
        """
        kind = "Hessian" if self.hessian else "Jacobian"
        if self.dense is not None:
            rows, columns = self.pattern.shape
            return (f"pattern dense ({self.pattern.nnz:,} of {rows * columns:,} entries): computed as a dense "
                    f"{kind}, returned in CSR")
        if self.direct is not None:
            count = len(self.direct.compiled.program.roots) if self.direct.compiled is not None else 0
            on = "at every row" if self.direct.pieces == 1 else f"on {self.direct.pieces} pieces of the rows"
            how = f"{count} band formulas {on}, one kernel"
        else:
            how = f"{self.colours} colour products, one batched kernel" + (
                f", {len(self.dense_rows)} dense rows by reverse sweeps" if len(self.dense_rows) else "")
        return f"rolled sparse {kind} {self.pattern.shape}, {self.pattern.nnz} nonzeros: {how}"

    def bands(self) -> dict[str, Expr]:
        """The matrix's entries as one formula per band (sparsity.bands)."""
        roots, x = self.formula
        if len(roots) != 1 or x is None:
            raise NotImplementedError("bands: the derivative of one rolled vector with respect to one vector")
        return bands(roots[0], x, "H" if self.hessian else "J")

    def _rows(self, kernel: Any, args: tuple, kwargs: dict, vectors: np.ndarray) -> np.ndarray:
        """``kernel`` at these arguments with each of ``vectors`` (seeds, cotangents) after the parameters:
        one batched call, its rows in parallel."""
        x, p = self.trace.vectors(args, kwargs, None)
        n = len(vectors)
        return kernel.batch(np.broadcast_to(x, (n, x.size)), np.hstack([np.broadcast_to(p, (n, p.size)), vectors]))

    def __call__(self, args: tuple, kwargs: dict) -> scipy.sparse.csr_matrix:
        data = self.dense(args, kwargs) if self.dense is not None else \
            self.direct(args, kwargs) if self.direct is not None else self._coloured_data(args, kwargs)
        # (the structure copied: a caller's eliminate_zeros() on one result must not change the next)
        return scipy.sparse.csr_matrix((data, self.pattern.indices.copy(), self.pattern.indptr.copy()),
                                       shape=self.pattern.shape)

    def _coloured_data(self, args: tuple, kwargs: dict) -> np.ndarray:
        products = self._rows(self.product, args, kwargs, self.seeds) if self.colours else \
            np.zeros((0, self.pattern.shape[0]))
        data = np.take(products, self.at)
        if len(self.dense_rows):
            units = np.zeros((len(self.dense_rows), self.pattern.shape[0]))
            units[np.arange(len(self.dense_rows)), self.dense_rows] = 1.0
            for r, row in zip(self.dense_rows, self._rows(self.reverse, args, kwargs, units)):
                lo, hi = self.pattern.indptr[r], self.pattern.indptr[r + 1]
                data[lo:hi] = row[self.pattern.indices[lo:hi]]
        return data


class _Dense:
    """The entries of a dense pattern read from the dense matrix (``sg.jacobian`` / ``sg.hessian`` of the
    same function without ``sparse=True``), in the pattern's CSR order."""

    def __init__(self, owner: Any, pattern: scipy.sparse.csr_matrix) -> None:
        self.function = type(owner)(owner.fn, owner.transform, argnums=owner.argnums_spec,
                                    static_argnums=tuple(owner.static_argnums),
                                    static_argnames=tuple(owner.static_argnames), backend=owner.backend)
        self.shape = pattern.shape
        full = pattern.nnz == self.shape[0] * self.shape[1]  # (then CSR order is C order: no gather)
        self.at = None if full else np.repeat(np.arange(self.shape[0]), np.diff(pattern.indptr)) * self.shape[1] \
            + pattern.indices

    @classmethod
    def made(cls, owner: Any, pattern: scipy.sparse.csr_matrix, outputs: int) -> _Dense | None:
        """The dense evaluation where ``DENSE_FRACTION`` of the entries or more are nonzero, else None."""
        rows, columns = pattern.shape
        if outputs != 1 or pattern.nnz < DENSE_FRACTION * rows * columns:
            return None
        return cls(owner, pattern)

    def __call__(self, args: tuple, kwargs: dict) -> np.ndarray:
        leaves = pytree.flatten(self.function(*args, **kwargs))[0]
        matrix = np.asarray(leaves[0], dtype=float).reshape(-1)
        return matrix if self.at is None else np.take(matrix, self.at)


class _Direct:
    """The entries computed straight from their formulas (``sparsity.band_entries``: one per band or
    address, on each of the rows' pieces, ``row_pieces``): one compiled kernel evaluates every formula
    on its piece, and the values land at their positions in CSR order, found once. The primal is
    computed once a row for all its entries (the colours' products each computed it again: 14 for a
    bundle adjustment), and once for the rows of a piece that share it (an observation's two)."""

    def __init__(self, trace: Any, pieces: list, rows: int, columns: int, symmetric: bool, backend: str) -> None:
        at, takes, formulas, start = [], [], [], 0  # (start: the next formula's first value in the kernel's)
        for (piece, on), entries in pieces:
            j = piece.args[1]
            at_j = [np.broadcast_to(v, on.shape).astype(np.int64)
                    for v in index_values([address for address, _, _ in entries], (j,))]
            for k in np.argsort([c[0] for c in at_j], kind="stable"):  # (a row's order: the same in all, often)
                (_, e, live), column = entries[k], at_j[k]
                kept = np.flatnonzero(live & (column >= 0) & (column < columns))  # (elsewhere its formula is 0)
                at.append((on[kept], column[kept]))
                takes.append(start + kept)
                formulas.append(tensor(e, j))
                start += on.size
        row, column = (np.concatenate([np.zeros(0, np.int64), *(a[k] for a in at)]) for k in (0, 1))
        pattern = scipy.sparse.csr_matrix((np.ones(row.size, dtype=bool), (row, column)), shape=(rows, columns))
        if symmetric:  # (a Hessian's: its rows read both halves already; symmetric on paper, stored so)
            pattern = pattern + pattern.T
        self.pattern = scipy.sparse.csr_matrix(pattern, dtype=float)
        self.pattern.sort_indices()
        keys = np.repeat(np.arange(rows, dtype=np.int64), np.diff(self.pattern.indptr)) * columns + \
            self.pattern.indices
        takes = np.concatenate([np.zeros(0, np.int64), *takes])
        self.assembly = Assembly(np.searchsorted(keys, row * columns + column), takes, self.pattern.nnz)
        self.trace, self.nnz, self.pieces, self.local = trace, self.pattern.nnz, len(pieces), threading.local()
        self.compiled = compile(formulas, trace.inputs, [*trace.params, *trace.constants], backend) \
            if formulas else None

    @classmethod
    def made(cls, trace: Any, roots: list, x: Expr, symmetric: bool, backend: str) -> Any:
        """The direct evaluation, or None where the entries are not bands (a row reading the vector in
        a sum, a scatter adding into one element) or their formulas are too large."""
        try:
            pieces = [((piece, on), band_entries(piece, x)) for piece, on in row_pieces(roots[0])]
        except NotImplementedError:
            return None
        if len(topo_order([e for _, entries in pieces for _, e, _ in entries])) > DIRECT_MAX:
            return None
        return cls(trace, pieces, roots[0].shape[0], int(np.prod(x.shape)), symmetric, backend)

    def __call__(self, args: tuple, kwargs: dict) -> np.ndarray:
        if self.compiled is None:  # (no entry reads the vector: all zero)
            return np.zeros(self.nnz)
        values = getattr(self.local, "values", None)  # (the kernel's: one array a thread, kept: a fresh one
        if values is None:  # each call paid its pages' first writes, a third of bundle adjustment's time)
            values = self.local.values = np.empty(self.compiled._n_out)
        return self.assembly(self.compiled(*self.trace.vectors(args, kwargs, None), out=values))


DIRECT_MAX = 20_000  # nodes of the entries' formulas, past which each call is colour products instead


def _columns_of(pattern: scipy.sparse.csr_matrix, inputs: list, first: int, size: int) -> scipy.sparse.csr_matrix:
    """The columns of ``pattern`` (over all ``inputs``, raveled in order) that belong to input ``first``."""
    if first >= len(inputs) or int(np.prod(inputs[first].shape)) != size:  # (a leaf before it is no input)
        raise NotImplementedError("the differentiated argument is not where the traced inputs have it")
    start = sum(int(np.prod(v.shape)) if v.op.name == "array" else 1 for v in inputs[:first])
    return pattern[:, start:start + size]
