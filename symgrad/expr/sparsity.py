"""Sparse Jacobians and Hessians: only the structurally nonzero entries, never an n-by-n array.

The pattern comes from the graph: the variables each node depends on through a
differentiable argument (a comparison's or ``floor``'s argument does not count), sets
shared between a node and its one active argument so a chain costs nothing. Columns
that share no row get one colour (greedy colouring), and one forward-mode sweep per
colour gives all their entries at once (Curtis, Powell and Reid): a tridiagonal
Hessian of any size takes three sweeps over the gradient's graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.expr.build import Var, apply, const
from symgrad.expr.diff import _check_wrt, _reverse, _scalar, jvp
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.rolled import index, substitute_indices, table, tidy, value_range
from symgrad.expr.traverse import as_expr_list, substitute, topo_order

if TYPE_CHECKING:
    import scipy.sparse

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
    [-2*x[0], 1, -2*x[1], 1]
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


def rolled_pattern(outputs: list[Expr], inputs: list[Expr]) -> scipy.sparse.csr_matrix:
    """The Jacobian pattern of rolled ``outputs`` (arrays or scalars, raveled and stacked) with respect
    to ``inputs`` (arrays and scalar variables, raveled and stacked): True where an output element
    depends on an input element through differentiable arguments. Found from the addresses (affine,
    periodic, table), vectorised: each array's dependencies are a sparse matrix, an array read at
    addresses a selection of the rows of its own (time and memory in proportion to the nonzeros).
    Never misses a nonzero; may hold structural zeros (both branches of a ``where``).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 5), sg.index("i", 4)
    >>> rolled_pattern([sg.tensor(x[i] * x[i + 1], i)], [x]).toarray().astype(int)
    array([[1, 1, 0, 0, 0],
           [0, 1, 1, 0, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 0, 1, 1]])
    """
    import scipy.sparse  # (here: importing SciPy's sparse costs 70 ms at symgrad's import)

    sizes = [int(np.prod(v.shape)) if v.op.name == "array" else 1 for v in inputs]
    starts = np.cumsum([0, *sizes])
    n = int(starts[-1])
    deps: dict[Expr, scipy.sparse.csr_matrix] = {}
    for v, start, size in zip(inputs, starts, sizes):
        deps[v] = scipy.sparse.csr_matrix((np.ones(size, dtype=bool), (np.arange(size), start + np.arange(size))),
                                          shape=(size, n))
    for node in topo_order(outputs):
        if node in deps or not node.op.array_valued:
            continue
        rule = PATTERNS.get(node.op.name)
        if rule is None:
            raise NotImplementedError(f"the sparsity of {node.op.name} arrays (rolled) is not found yet")
        deps[node] = rule(node, deps, n)
    rows = [deps[o] if o.op.array_valued else _body_deps(o, (), deps, n) for o in outputs]
    return scipy.sparse.vstack(rows, format="csr") if rows else scipy.sparse.csr_matrix((0, n), dtype=bool)


def _constant_deps(node: Expr, deps: dict, n: int) -> scipy.sparse.csr_matrix:
    """An array no input reaches (a table, an input not among ``inputs``)."""
    import scipy.sparse

    return scipy.sparse.csr_matrix((int(np.prod(node.shape)), n), dtype=bool)


def _tensor_deps(node: Expr, deps: dict, n: int) -> scipy.sparse.csr_matrix:
    return _body_deps(node.args[0], node.args[1:], deps, n)


def _scatter_deps(node: Expr, deps: dict, n: int) -> scipy.sparse.csr_matrix:
    """Each element: the body's dependencies at the positions its addresses send there."""
    import scipy.sparse

    shape, k = node.payload
    over = node.args[1 + k:]
    grid = _Grid(over)
    at = np.ravel_multi_index(tuple(np.broadcast_to(_indexed(a, grid), grid.shape).ravel()
                                    for a in node.args[1:1 + k]), shape)
    spread = scipy.sparse.csr_matrix((np.ones(at.size, dtype=bool), (at, np.arange(at.size))),
                                     shape=(int(np.prod(shape)), at.size))
    return as_bool(spread @ _body_deps(node.args[0], over, deps, n))


def _cumsum_deps(node: Expr, deps: dict, n: int) -> scipy.sparse.csr_matrix:
    """Each element: those before it along the axis (after, reversed)."""
    import scipy.sparse

    (axis, reverse), shape = node.payload, node.shape
    before = scipy.sparse.tril(np.ones((shape[axis],) * 2, dtype=bool))
    outer, inner = (scipy.sparse.identity(int(np.prod(part)), dtype=bool)
                    for part in (shape[:axis], shape[axis + 1:]))
    chain = scipy.sparse.kron(scipy.sparse.kron(outer, before.T if reverse else before), inner)
    return as_bool(chain @ deps[node.args[0]])


# The dependencies of each element of an array-valued node on the inputs' elements, by op name:
# (node, the dependencies of the arrays it reads, the number of input elements) -> a boolean sparse
# matrix, a row per element (C order). Modules defining an op add its row (scans.py: scan).
PATTERNS: dict[str, Callable] = {"array": _constant_deps, "table": _constant_deps, "tensor": _tensor_deps,
                                 "scatter": _scatter_deps, "cumsum": _cumsum_deps}


class _Grid:
    """The index symbols of a loop nest as broadcastable aranges, the nest's own first; ``known``: the
    values of index expressions over it found so far (the addresses read share their parts)."""

    def __init__(self, indices: tuple) -> None:
        self.indices, self.known = tuple(indices), {}
        self.axes = {i: k for k, i in enumerate(self.indices)}
        self.shape = tuple(i.payload[1] for i in self.indices)

    def arange(self, i: Expr) -> np.ndarray:
        shape = [1] * len(self.indices)
        shape[self.axes[i]] = i.payload[1]
        return np.arange(i.payload[1]).reshape(shape)


class _Widened:
    """Some points of a grid (``kept``: their flat numbers in it) times the ranges of more indices: where
    a leaf under a where's branch reads through a reduction's index, only the rows taking the branch
    are widened (a concatenation's last row summing all of x: n points, not n * n)."""

    def __init__(self, grid: _Grid, kept: np.ndarray, more: list[Expr]) -> None:
        self.more, self.kept, self.known = list(more), kept, {}
        self.shape = (kept.size, *(i.payload[1] for i in self.more))
        values = np.unravel_index(kept, grid.shape) if grid.indices else ()
        self.values = dict(zip(grid.indices, values))

    def arange(self, i: Expr) -> np.ndarray:
        shape = [1] * len(self.shape)
        if i in self.values:
            shape[0] = self.kept.size
            return self.values[i].reshape(shape)
        shape[1 + next(k for k, m in enumerate(self.more) if m is i)] = i.payload[1]  # (list.index: ==)
        return np.arange(i.payload[1]).reshape(shape)

    def rows(self) -> np.ndarray:
        """Each point's row of the grid it widens."""
        return np.broadcast_to(self.kept.reshape((-1, *(1 for _ in self.more))), self.shape).ravel()


_INTEGER = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "mod": np.mod, "floor_divide": np.floor_divide}


def _indexed(e: Expr, grid: _Grid) -> np.ndarray:
    """The integer values of the index expression ``e`` over ``grid`` (broadcastable to it)."""
    values = grid.known
    order = topo_order([e], values)
    if any(node.op.name == "as_index" for node in order):  # (its indices may be bound nowhere in the grid)
        raise NotImplementedError("the sparsity of an address read from an array is not found yet")
    for node in order:
        name = node.op.name
        if name == "index":
            values[node] = grid.arange(node)
        elif name == "const":
            values[node] = int(node.payload)
        elif name == "neg":
            values[node] = -values[node.args[0]]
        elif name in _INTEGER:
            values[node] = _INTEGER[name](values[node.args[0]], values[node.args[1]])
        elif name == "load" and node.args[0].op.name == "table":
            table = np.array(node.args[0].payload[1], dtype=np.int64).reshape(node.args[0].payload[0])
            values[node] = table[tuple(np.clip(values[a], 0, size - 1)  # (guarded: discarded outside)
                                       for a, size in zip(node.args[1:], table.shape))]
        elif name == "table":
            values[node] = None
        else:
            raise NotImplementedError(f"the sparsity of an address through {name} is not found yet")
    return values[e]


def _body_deps(body: Expr, own: tuple, deps: dict, n: int) -> scipy.sparse.csr_matrix:
    """The dependencies of each element of ``body`` over the indices ``own`` (rows in C order)."""
    import scipy.sparse  # (here: importing SciPy's sparse costs 70 ms at symgrad's import)

    grid = _Grid(own)
    found = scipy.sparse.csr_matrix((int(np.prod(grid.shape)), n), dtype=bool)
    everywhere = np.arange(int(np.prod(grid.shape)), dtype=np.int64)
    for leaf, conditions in _differentiable_leaves(body):
        kept = everywhere  # (a branch of a where on indices: only where it is taken; the nest's own first)
        for condition, holds in conditions:
            if condition.free <= frozenset(own):
                kept = kept[np.broadcast_to(_decided(condition, grid), grid.shape).ravel()[kept] == holds]
        wide = _Widened(grid, kept, sorted({i for a in (*leaf.args[1:], *(c for c, _ in conditions))
                                            for i in a.free} - set(own), key=lambda i: i.payload))
        rows = wide.rows()
        taken = np.ones(rows.size, dtype=bool)
        for condition, holds in conditions:
            if not condition.free <= frozenset(own):
                taken &= np.broadcast_to(_decided(condition, wide), wide.shape).ravel() == holds
        if leaf.op.name == "var":
            if leaf in deps:
                found = found + scipy.sparse.csr_matrix(
                    (np.ones(int(taken.sum()), dtype=bool), (rows[taken], np.zeros(int(taken.sum()), dtype=int))),
                    shape=(found.shape[0], 1)) @ deps[leaf]
            continue
        source = leaf.args[0]
        at = [np.broadcast_to(_indexed(a, wide), wide.shape).ravel() for a in leaf.args[1:]]
        for a, size in zip(at, source.shape):
            taken &= (0 <= a) & (a < size)  # (a guarded load outside its array: its value is discarded)
        flat = np.ravel_multi_index(tuple(a[taken] for a in at), source.shape) if at else np.zeros(
            int(taken.sum()), dtype=np.int64)
        pick = scipy.sparse.csr_matrix((np.ones(flat.size, dtype=bool), (rows[taken], flat)),
                                       shape=(found.shape[0], int(np.prod(source.shape))))
        found = found + pick @ deps[source]
    return as_bool(found)


_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}


def _decided(condition: Expr, grid: _Grid) -> np.ndarray:
    """Whether ``condition``, a comparison of index arithmetic, holds over ``grid``."""
    return _COMPARE[condition.op.name](*(_indexed(a, grid) for a in condition.args))


def _on_indices(condition: Expr) -> bool:
    """Whether ``condition`` compares index arithmetic only (decided by the indices, not values)."""
    if condition.op.name not in _COMPARE:
        return False
    try:
        return all(value_range(a) is not None for a in condition.args)
    except (TypeError, OverflowError):
        return False


def _differentiable_leaves(body: Expr) -> list[tuple[Expr, tuple]]:
    """The loads (of arrays, not tables) and variables ``body`` reaches through differentiable
    arguments (a where's condition, a comparison's arguments and an address are not), each with the
    conditions on indices of the wheres it sits in a branch of, and which branch: (condition, True)
    for the first. A reduction's index is renamed fresh in its body: it may have the name of an
    index of the loop around (a norm's sum over ``j, k`` inside a tensor over ``j, k``), and ranges
    over all its values there."""
    leaves, seen, stack = [], set(), [(body, ())]
    while stack:
        node, conditions = item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        name = node.op.name
        if name == "load":
            if node.args[0].op.name != "table":
                leaves.append(item)
        elif name == "var":
            leaves.append(item)
        elif name == "where" and _on_indices(node.args[0]):
            stack += [(node.args[1], (*conditions, (node.args[0], True))),
                      (node.args[2], (*conditions, (node.args[0], False)))]
        elif name in ("sum", "max", "min"):
            i = node.args[1]
            fresh = index(f"{i.payload[0]}~{len(seen)}", i.payload[1])
            stack.append((substitute_indices(node.args[0], {i: fresh}), conditions))
        elif node.op.kind == "rolled":
            stack.append((node.args[0], conditions))
        else:
            stack += [(a, conditions) for a, p in zip(node.args, node.op.partials) if p is not None]
    return leaves


def as_bool(m: scipy.sparse.spmatrix) -> scipy.sparse.csr_matrix:
    """``m`` as a boolean CSR matrix without explicit zeros.

    >>> as_bool(np.array([[0.0, 2.0], [0.0, 0.0]])).nnz
    1
    """
    import scipy.sparse  # (here: importing SciPy's sparse costs 70 ms at symgrad's import)

    m = scipy.sparse.csr_matrix(m, dtype=bool)
    m.eliminate_zeros()
    return m


def bands(rows: Expr, x: Expr, name: str = "J") -> dict[str, Expr]:
    """The derivative of the rolled vector ``rows`` (a tensor over one index ``i``) with respect to the
    vector ``x``, as one formula per band: entry ``(i, i + c)`` for each offset ``c`` at which an
    element reads ``x`` (the tensors it reads inlined), and entry ``(i, a(i))`` for each other
    address ``a``. A formula holds the conditions on ``i`` (wheres) under which the entry is there.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 5), sg.index("i", 4)
    >>> for label, e in bands(sg.tensor(x[i] ** 2 * x[i + 1], i), x).items():
    ...     print(label, "=", e)
    J[i, i] = 2*x[i]*x[i + 1]
    J[i, i + 1] = x[i]**2
    """
    out: dict[str, Expr] = {}
    for at, e, _ in band_entries(rows, x):
        label = f"{name}[{rows.args[1]}, {at}]"
        out[label if label not in out else f"{label} #{len(out)}"] = e  # (two tables print alike)
    return out


@paused_gc()
def band_entries(rows: Expr, x: Expr) -> list[tuple[Expr, Expr, np.ndarray]]:
    """``bands``' entries as (column address over ``i``, formula, the rows where a read of that
    column is in a branch taken): bands by offset, then the others."""
    if rows.op.name != "tensor" or len(rows.args) != 2 or x.op.name != "array" or len(x.shape) != 1:
        raise NotImplementedError("bands: a rolled vector's derivative with respect to a vector")
    body, i = _inlined(rows.args[0]), rows.args[1]
    left = next((a for a in topo_order([body]) if a.op.array_valued and a.op.name not in ("array", "table")), None)
    if left is not None:  # (a running sum, a scan: rows on other rows, no band formula)
        raise NotImplementedError(f"bands: an element reads {left.op.name} of arrays")
    grid, n = _Grid((i,)), rows.shape[0]
    live: dict[Expr, np.ndarray] = {}
    for read, conditions in _differentiable_leaves(body):
        if read.op.name != "load" or read.args[0] is not x:
            continue
        if read.args[1].free - {i}:
            raise NotImplementedError(f"bands: an element reads {read} inside a reduction: its row holds more "
                                      "than bands")
        taken = np.ones(n, dtype=bool)
        for condition, holds in conditions:
            if not condition.free - {i}:
                taken &= np.broadcast_to(_decided(condition, grid), (n,)) == holds
        live[read] = live[read] | taken if read in live else taken
    groups: dict[tuple, list[Expr]] = {}
    for read in sorted(live, key=str):
        at = np.broadcast_to(_indexed(read.args[1], grid), (n,)).astype(np.int64)
        offsets = at - np.arange(n)
        # (reads of one column written apart, x[2*i + 1] and x[table[i]]: one entry, by their values)
        band = offsets.min() == offsets.max()
        groups.setdefault((0, int(offsets[0]), "") if band else (1, 0, at.tobytes()), []).append(read)
    out = []
    order = lambda group: (group[0][:2], str(group[1][0].args[1]))  # noqa: E731
    for _, reads in sorted(groups.items(), key=order):
        s = Var("band#")
        partial = jvp(substitute(body, dict.fromkeys(reads, s)), [s], [const(1.0)])  # (at each i, not summed)
        taken = np.logical_or.reduce([live[r] for r in reads])
        out.append((reads[0].args[1], substitute(partial, {s: reads[0]}), taken))
    return out


def index_values(e: Expr | list[Expr], indices: tuple) -> Any:
    """The integer values of the index arithmetic ``e`` over ``indices`` (axes in their order;
    broadcastable to the grid); of each of a list, their shared parts computed once.

    >>> import symgrad as sg
    >>> i = sg.index("i", 4)
    >>> index_values(2 * i + 1, (i,)).tolist(), [a.tolist() for a in index_values([i, i // 2], (i,))]
    ([1, 3, 5, 7], [[0, 1, 2, 3], [0, 0, 1, 1]])
    """
    grid = _Grid(indices)
    return [_indexed(a, grid) for a in e] if isinstance(e, list) else _indexed(e, grid)


_INLINED = ("tensor", "scatter")


def _inlined(body: Expr) -> Expr:
    """``body`` with the tensors it reads replaced by their formulas at the addresses read (and the
    scatters through a permutation by gathers: Halide's scatter-to-gather)."""
    while True:
        reads = [n for n in topo_order([body]) if n.op.name == "load" and n.args[0].op.name in _INLINED
                 or n.op.name in _UNROLLED and n.args[1].payload[1] <= UNROLLED_MAX]
        if not reads:
            return tidy(body)  # (an inlined read may leave its array where a where discards it: guarded)
        at = {n: dict(zip(n.args[0].args[1:], n.args[1:])) for n in reads if n.op.name == "load"
              and n.args[0].op.name == "tensor"}
        body = substitute(body, {n: _unrolled(n) if n.op.name in _UNROLLED else
                                 substitute_indices(n.args[0].args[0], at[n]) if n in at else _gathered(n)
                                 for n in reads})


_UNROLLED = {"sum": "add", "max": "maximum", "min": "minimum"}
UNROLLED_MAX = 16  # a reduction over at most this many values is written out (a dot of 3-vectors: 3 entries)


def _unrolled(reduction: Expr) -> Expr:
    """A reduction over a small index written out term by term: each term's reads then have
    addresses of the row alone (a rotation's ``sum(k[j] * p[j], j)``: three columns)."""
    from symgrad.expr import ops

    body, i = reduction.args
    terms = [substitute_indices(body, {i: const(float(v))}) for v in range(i.payload[1])]
    total = terms[0]
    for term in terms[1:]:
        total = apply(ops.OPS[_UNROLLED[reduction.op.name]], (total, term))
    return total


def _gathered(read: Expr) -> Expr:
    """A read of a scatter into a vector through distinct addresses: the element that lands there
    (its body at the indices whose address it is, tables of them), 0 where none does."""
    from symgrad.expr import ops

    scattered = read.args[0]
    k = scattered.payload[1]
    addresses, indices = scattered.args[1:1 + k], scattered.args[1 + k:]
    if k != 1:
        raise NotImplementedError("bands: a scatter into an array of several axes")
    shape = tuple(i.payload[1] for i in indices)
    lands = np.broadcast_to(_indexed(addresses[0], _Grid(indices)), shape).ravel()
    if np.unique(lands).size != lands.size:
        raise NotImplementedError("bands: a scatter adding several elements into one")
    inverse = np.full(scattered.shape[0], -1)
    inverse[lands] = np.arange(lands.size)
    at = lambda values: apply(ops.load, (table(values), read.args[1]))  # noqa: E731
    where = np.unravel_index(np.maximum(inverse, 0), shape) if shape else ()
    landed = substitute_indices(scattered.args[0], {i: at(w) for i, w in zip(indices, where)})
    return apply(ops.OPS["where"], (apply(ops.OPS["ge"], (at(inverse), const(0.0))), landed, const(0.0)))
