"""``sg.scan``: a Python step function traced once into a scan node (scans.py: the node, its
constructor ``make`` and its rules), and the Python loop it runs instead where the step cannot be
traced on placeholders.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np

from symgrad.expr import batching, functions, ndarrays, ops, reshaping, rolled, tracing
from symgrad.expr.build import apply, const
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.scans import carries, make, placeholder
from symgrad.expr.traverse import substitute, topo_order
from symgrad.util import pytree


def scan(f: Any, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False) -> tuple:
    """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each row ``x`` of ``xs`` (from the last row
    if ``reverse``), starting from ``init``; returns ``(last carry, ys stacked)``. ``init`` and
    ``xs`` are pytrees (tuples, lists, dicts of arrays and numbers), the carry ``f`` returns has
    ``init``'s structure and shapes, ``length`` counts the steps when ``xs`` is None.

    Inside a traced function (rolled arrays, or numbers and NumPy arrays as ``init`` and ``xs``),
    ``f`` is traced once and the loop is one node whatever its length (compiled as one loop around
    the step's loops); elsewhere (NumPy values outside a trace, or a step that reads arrays traced
    element by element, or whose init or xs holds some) it runs as a Python loop, with the same
    results (a rolled array among them read element by element). Zero steps give ``init``
    and empty ``ys`` (``f`` called once, on a row of zeros, for their shapes).

    >>> import numpy as np, symgrad as sg
    >>> def running(total, x):
    ...     return total + x, total * x
    >>> total, ys = sg.scan(running, 0.0, np.array([1.0, 2.0, 3.0]))
    >>> float(total), ys
    (6.0, array([0., 2., 9.]))
    >>> def loss(w, xs):
    ...     h, _ = sg.scan(lambda h, x: (np.tanh(w * h + x), None), np.zeros(2), xs)
    ...     return np.sum(h ** 2)
    >>> g = sg.grad(loss)(0.5, np.ones((4, 2)))
    >>> round(float(g), 6)
    0.705458
    """
    if length is not None and (not isinstance(length, int | np.integer) or isinstance(length, bool) or length < 0):
        raise ValueError(f"scan: length must be a non-negative integer, got {length!r}")
    init_leaves, init_tree = pytree.flatten(init)
    x_leaves, x_tree = pytree.flatten(xs)
    x_leaves = [ndarrays.repeated(v) for v in x_leaves]  # (np.full(n, s) of a traced s: one row, read whole)
    steps = {_shape(v)[0] if _shape(v) else None for v in x_leaves}
    steps |= {int(length)} if length is not None else set()
    if len(steps) != 1 or None in steps:
        raise ValueError(f"scan: each leaf of xs must have the same leading axis (the steps), and length (if "
                         f"given) that number; got shapes {[_shape(v) for v in x_leaves]}, length {length!r}")
    n = steps.pop()
    if n == 0:
        return _empty(f, init, init_tree, x_leaves, x_tree)
    if any(ndarrays.is_array(v) for v in init_leaves + x_leaves) and not all(
            map(_rollable_or_array, init_leaves + x_leaves)):  # beside an element trace's arrays: a loop,
        init_leaves, x_leaves = _elements(init_leaves), _elements(x_leaves)  # the rolled ones read by element
        init = pytree.unflatten(init_tree, init_leaves)
    arrays = any(ndarrays.is_array(v) for v in init_leaves + x_leaves)
    if arrays or tracing.active() and all(_rollable(v) for v in init_leaves + x_leaves):
        try:  # one node, whatever the length (a Python loop would add a step's nodes per step)
            return _rolled(f, init_leaves, init_tree, x_leaves, x_tree, n, reverse)
        except TracingError as e:  # the step reads values traced element by element: only the loop has them
            if arrays and not isinstance(e, ndarrays.ElementsMet):
                raise
            init_leaves, x_leaves = _elements(init_leaves), _elements(x_leaves)
            init = pytree.unflatten(init_tree, init_leaves)
    tracing.loop(n)  # (in an element trace, a long one: the function traced again, rolled, where it can be)
    return _loop(f, init, init_tree, x_leaves, x_tree, n, reverse)


def _rollable(v: Any) -> bool:
    """Whether a leaf of init or xs can be a rolled operand: a number, an array of numbers, a
    scalar expression (not an object array of an element trace)."""
    return isinstance(v, Expr | Real) or isinstance(v, np.ndarray) and v.dtype.kind in "biuf"


def _rollable_or_array(v: Any) -> bool:
    return ndarrays.is_array(v) or _rollable(v)


def _elements(leaves: list) -> list:
    return [functions.wrap(ndarrays.elements(v)) if ndarrays.is_array(v) else v for v in leaves]


def _empty(f: Any, init: Any, tree: Any, x_leaves: list, x_tree: Any) -> tuple:
    """No steps (``lax.scan`` of length 0): ``init`` and empty ``ys``, shaped by one call of the
    step on a row of zeros (which also checks the carry it returns)."""
    row = pytree.unflatten(x_tree, [np.zeros(_shape(v)[1:]) for v in x_leaves])
    new, y = _called(f, init, row)
    _check_carry(tree, new, [_shape(v) for v in pytree.flatten(init)[0]])
    y_leaves, y_tree = pytree.flatten(y)
    return init, pytree.unflatten(y_tree, [np.zeros((0, *_shape(v))) for v in y_leaves])


def _loop(f: Any, carry: Any, tree: Any, x_leaves: list, x_tree: Any, n: int, reverse: bool) -> tuple:
    """The scan as a Python loop (NumPy values, element traces)."""
    ys, shapes = [], [_shape(v) for v in pytree.flatten(carry)[0]]
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, y = _called(f, carry, pytree.unflatten(x_tree, [v[t] for v in x_leaves]))
        _check_carry(tree, carry, shapes)
        ys.append(y)
    if reverse:
        ys.reverse()
    y_leaves = [pytree.flatten(y)[0] for y in ys]
    stacked = [_stacked([row[k] for row in y_leaves]) for k in range(len(y_leaves[0]))]
    return carry, pytree.unflatten(pytree.flatten(ys[0])[1], stacked)


def _stacked(values: list) -> Any:
    if any(isinstance(v, Expr) or isinstance(v, np.ndarray) and v.dtype == object for v in values):
        out = np.empty((len(values), *np.shape(values[0])), dtype=object)
        for t, v in enumerate(values):
            out[t] = v
        return functions.wrap(out)  # (a SymArray: NumPy's comparisons and ufuncs on it build nodes)
    return np.array(values, dtype=float)


def _shape(v: Any) -> tuple:
    return v.shape if isinstance(v, Expr) else np.shape(v)


def _called(f: Any, carry: Any, x: Any) -> tuple:
    out = f(carry, x)
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError(f"scan: the step function must return a pair (carry, y), got {type(out).__name__}")
    return out


def _check_carry(tree: Any, carry: Any, shapes: list) -> list:
    """The carry's leaves, checked against init's structure and shapes (as ``lax.scan``: a carry
    that changed shape would broadcast silently, its derivative meaningless)."""
    leaves, got = pytree.flatten(carry)
    if got != tree or [_shape(v) for v in leaves] != shapes:
        raise TypeError(f"scan: the carry the step returns must have the structure and shapes of init: "
                        f"{pytree.unflatten(got, [_shape(v) for v in leaves])} returned, "
                        f"{pytree.unflatten(tree, shapes)} expected")
    return leaves


def _rolled(f: Any, init_leaves: list, tree: Any, x_leaves: list, x_tree: Any, n: int, reverse: bool) -> tuple:
    """The scan as one node: the step traced once on placeholders."""
    init_leaves = [_as_array(v) for v in init_leaves]
    shapes = [v.shape for v in init_leaves]
    sizes = [int(np.prod(s)) for s in shapes]
    cuts = np.cumsum([0, *sizes]).tolist()
    alone = len(shapes) == 1 and shapes[0] != ()  # one array: the carry as it is, not packed
    carry = placeholder(shapes[0] if alone else (cuts[-1],))
    stacks = [_as_array(v) for v in x_leaves]
    rows = [placeholder(v.shape[1:] or (1,)) for v in stacks]
    carry_tree = pytree.unflatten(tree, [carry] if alone else [_view(carry, a, s) for a, s in zip(cuts, shapes)])
    row_leaves = [p if s.ndim > 1 else p[0] for p, s in zip(rows, stacks)]
    x_row = pytree.unflatten(x_tree, row_leaves)
    # a row of integers (a fori_loop's counter, labels) may index arrays: a gather checked where it runs
    with tracing.integers(r for r, v in zip(row_leaves, x_leaves) if ndarrays.holds_integers(v)), \
            tracing.stepping():
        new, y = _called(f, carry_tree, x_row)
    new_leaves = [_as_array(v) for v in _check_carry(tree, new, shapes)]
    body = new_leaves[0] if alone else _packed(new_leaves)
    init = init_leaves[0] if alone else _packed(init_leaves)
    stacked = [(p, s if s.ndim > 1 else s.reshape((n, 1))) for p, s in zip(rows, stacks)]
    R = make(body, carry, init, stacked, [], reverse, n)
    last = R[0 if reverse else n]
    final = pytree.unflatten(tree, [last] if alone else [_view(last, a, s) for a, s in zip(cuts, shapes)])
    y_leaves, y_tree = pytree.flatten(y)
    if not y_leaves:
        return final, y
    t = rolled.fresh_index(rolled.index("t", n))
    mapped = {carry: (carries(R, reverse, after=False), 0)}
    mapped.update((p, (s, 0)) for p, (_, s) in zip(rows, stacked))
    after = carries(R, reverse, after=True)
    stored = {}
    for leaf, a, s in zip(new_leaves, cuts, shapes):  # the carry after: read from R, not computed again
        if leaf is carry or leaf.op.name in ("array", "table") or not _varies(leaf, carry, rows):
            continue
        stored[leaf] = after if alone else _view(after, a, s, steps=n) if s else after[:, a]
    mapped.update((leaf, (values, 0)) for leaf, values in stored.items())
    ys, layers = _layers(stored, [_as_array(v) for v in y_leaves])
    mapped.update(layers)
    out = batching.batch(ys, mapped, t)
    return final, pytree.unflatten(y_tree, [batching.place(e, axis, 0, n) for e, axis in out])


def _layers(stored: dict, ys: list[Expr]) -> tuple[list[Expr], dict]:
    """``ys`` reading the elements of the rows of carry leaves (``stored``: a leaf -> its value after
    every step) that stack layers' states (an LSTM's output is its last layer's) from placeholders,
    and those placeholders -> the rows of the stored values: read after the loop, not computed
    again from the carry before."""
    stacks = {leaf: values for leaf, values in stored.items()
              if len(leaf.shape) == 2 and leaf.shape[0] <= LAYERS and leaf.op.name == "tensor"}
    if not stacks:
        return ys, {}
    memo: dict = {}
    ys = [rolled.tidy(y, memo) for y in ys]  # (addresses in one form: s + 14 + 28 is s + 42)
    nodes = set(topo_order(ys))
    swap, mapped = {}, {}
    for leaf, values in stacks.items():
        indices = [n for n in nodes if n.op.name == "index" and n.payload[1] == leaf.shape[1]]
        for k in range(leaf.shape[0]):
            row = leaf[k]
            if row.op.name != "tensor":
                continue
            ph = placeholder(row.shape)
            for i in indices:  # the row's element at i, as ys compute it (hash-consed: found by identity)
                element = rolled.tidy(rolled.substitute_indices(row.args[0], {row.args[1]: i}), memo)
                if element in nodes:
                    swap[element] = apply(ops.load, (ph, i))
                    mapped[ph] = (values[:, k], 0)
    return ([substitute(y, swap) for y in ys] if swap else ys), mapped


LAYERS = 64  # rows of a carry leaf looked for in the outputs (each compared with them)


def _varies(e: Expr, carry: Expr, rows: list) -> bool:
    """Whether ``e`` depends on the step's placeholders."""
    marks = {carry, *rows}
    return any(node in marks for node in topo_order([e]))


def _as_array(v: Any) -> Expr:
    """A carry or stacked leaf as an expression (a NumPy array as a captured constant)."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, np.ndarray) and v.ndim:
        return ndarrays.operand(v)
    if isinstance(v, np.ndarray) and v.dtype == object:
        v = v[()]
    return v if isinstance(v, Expr) else const(float(v))


def _view(flat: Expr, start: int, shape: tuple, steps: int | None = None) -> Any:
    """A carry leaf of ``shape`` inside the packed vector ``flat`` (every step's, with ``steps``)."""
    size = int(np.prod(shape))
    if steps is not None:
        return flat[:, start:start + size].reshape((steps, *shape))
    return flat[start] if not shape else flat[start:start + size].reshape(shape)


def _packed(leaves: list[Expr]) -> Expr:
    """The carry leaves raveled into one vector."""
    parts = [v.reshape(-1) if v.op.array_valued else rolled.tensor(v, rolled.index("scan#one", 1)) for v in leaves]
    return parts[0] if len(parts) == 1 else reshaping.concatenate(parts)
