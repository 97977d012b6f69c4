"""The reference interpreter: evaluates the DAG with the op table's NumPy implementations.

It is the yardstick every compiled backend is tested against.  Values may be
floats, complex numbers or NumPy arrays (evaluated elementwise); domain errors
give nan/inf as in NumPy, never exceptions.
"""

from __future__ import annotations

import contextvars
import math
from numbers import Complex
from typing import Any

import numpy as np

from symgrad.expr import custom, ops
from symgrad.expr.build import Var, apply
from symgrad.expr.functions import elementwise
from symgrad.expr.node import Expr
from symgrad.expr.traverse import _like, as_expr_list, topo_order


def _bind(value: Any, name: str) -> Any:
    if isinstance(value, Expr):
        raise TypeError(f"evaluate(): the value for {name!r} is an expression ({value}); "
                        "use sg.substitute to replace variables by expressions")
    if isinstance(value, Complex) and not isinstance(value, np.ndarray):
        return np.complex128(value) if isinstance(value, complex | np.complexfloating) else np.float64(value)
    try:
        arr = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - re-raised with the variable's name
        raise TypeError(f"evaluate(): cannot use {type(value).__name__} as the value of {name!r}") from err
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"evaluate(): the value of {name!r} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)


def _bindings(bindings: Any) -> tuple[dict[str, Any], set[str]]:
    """Values by name, and the names bound by an array node (values of arrays, not batches of points)."""
    if not isinstance(bindings, dict):
        raise TypeError(f"evaluate(): bindings must be a dict of variable -> value, got {type(bindings).__name__}")
    out, arrays = {}, set()
    for key, value in bindings.items():
        if isinstance(key, Expr) and key.op.name == "array":
            key = key.payload[0]
            arrays.add(key)
        elif isinstance(key, Expr) and key.op.name == "var":
            key = key.payload
        elif not isinstance(key, str):
            raise TypeError(f"evaluate(): binding keys must be variables or their names, got {key!r}")
        out[key] = _bind(value, key)
    return out, arrays


class Rolled:
    """How rolled nodes evaluate: an array axis per index symbol (size 1 where a value does not vary),
    so a whole index range is computed at once. Symbols that no node varies over together share an
    axis (a gradient's tensors each bind fresh ones: a Hessian of running products has over 100, and
    NumPy allows 64 axes). ``symbolic``: elements are expressions (unroll), arrays are object arrays
    of variables ``x[0]``, ``x[1, 2]``, ..."""

    def __init__(self, order: list[Expr], values: dict[str, Any], symbolic: bool) -> None:
        self.axes = _shared_axes(order)
        self.ndim = max(self.axes.values(), default=-1) + 1
        if self.ndim > 64:
            raise ValueError(f"the interpreter gives the index symbols of a rolled graph that vary together array "
                             f"axes; this one needs {self.ndim} and NumPy allows 64: evaluate it compiled "
                             "(backend 'vm' or 'numba')")
        self.values, self.symbolic = values, symbolic

    def index(self, node: Expr) -> np.ndarray:
        shape = [1] * self.ndim
        shape[self.axes[node]] = node.payload[1]
        return np.arange(node.payload[1], dtype=float).reshape(shape)

    def array(self, node: Expr) -> np.ndarray:
        name, shape = node.payload
        if self.symbolic and name not in self.values:
            out = np.empty(shape, dtype=object)
            for k in np.ndindex(shape):
                out[k] = Var(f"{name}[{', '.join(map(str, k))}]")
            return out
        if name not in self.values:
            raise ValueError(f"no value given for the array {name!r} of shape {shape}")
        value = self.values[name]
        if value.shape != shape:
            raise ValueError(f"the value of the array {name!r} has shape {value.shape}, expected {shape}")
        return value

    def _full(self, v: Any, sizes: dict[int, int]) -> np.ndarray:
        v = np.asarray(v)
        v = v.reshape((1,) * (self.ndim - v.ndim) + v.shape)
        return np.broadcast_to(v, [sizes.get(k, d) for k, d in enumerate(v.shape)])

    def reduce(self, name: str, body: Any, i: Expr) -> np.ndarray:
        ax = self.axes[i]
        body = self._full(body, {ax: i.payload[1]})
        if body.dtype == object:
            return _OBJECT_REDUCE[name].reduce(body, axis=ax, keepdims=True)
        return _REDUCE[name](body, axis=ax, keepdims=True)

    def load(self, arr: np.ndarray, addresses: list, guarded: bool) -> Any:
        """arr at the addresses; a guarded load's may leave the array where its guard discards the
        value: clamped there. Others are in range by construction."""
        index = [np.asarray(a).astype(np.intp) for a in addresses]
        return arr[tuple(np.clip(a, 0, n - 1) for a, n in zip(index, arr.shape)) if guarded else tuple(index)]

    def scatter(self, node: Expr, args: list) -> np.ndarray:
        shape, k = node.payload
        bound = node.args[1 + k:]
        sizes = {self.axes[i]: i.payload[1] for i in bound}
        w = self._full(args[0], sizes)
        out = np.zeros(shape, dtype=w.dtype)
        if w.dtype == object:
            out[...] = 0.0
        addresses = tuple(self._full(a, sizes).astype(np.intp).ravel() for a in args[1:1 + k])
        np.add.at(out, addresses, w.ravel())
        return out

    def as_index(self, value: Any, n: Any) -> np.ndarray:
        """Values of an integer data array as indices on an axis of size n (negative: from the end)."""
        value = np.asarray(value)
        if self.symbolic:
            raise TypeError("unroll: a gather through an integer data array has no unrolled form (its addresses "
                            "are values)")
        if np.any(~((-n <= value) & (value < n)) | (value != np.floor(value))):
            raise IndexError("symgrad: an index read from a traced integer argument is out of bounds for the "
                             "axis it indexes")
        return np.mod(value, n)

    def cumsum(self, value: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
        if reverse:
            return np.flip(np.cumsum(np.flip(value, axis), axis), axis)
        return np.cumsum(value, axis)

    def argsort(self, value: np.ndarray, axis: int) -> np.ndarray:
        if self.symbolic:
            raise TypeError("unroll: np.sort / argsort of a rolled array has no unrolled form (the order depends "
                            "on the values)")
        return np.argsort(value, axis, kind="stable").astype(float)

    def scan(self, node: Expr, args: list) -> np.ndarray:
        """Every carry (the initial one first, last if reversed): the step's graph run once a step on
        the placeholders' values."""
        length, reverse, step = node.payload
        order = topo_order([step.body])
        init, rows, consts = args[0], args[1:1 + len(step.xs)], args[1 + len(step.xs):]
        values = {p.payload[0]: v for p, v in zip(step.consts, consts)}
        out = np.empty((length + 1, *init.shape), dtype=object if self.symbolic else init.dtype)
        out[length if reverse else 0] = carry = init
        for t in range(length - 1, -1, -1) if reverse else range(length):
            values[step.carry.payload[0]] = carry
            values.update((p.payload[0], v[t]) for p, v in zip(step.xs, rows))
            out[t if reverse else t + 1] = carry = run(order, values, {step.body}, self.symbolic)[step.body]
        return out

    def materialise(self, body: Any, indices: tuple) -> np.ndarray:
        axes = [self.axes[i] for i in indices]
        full = self._full(body, {ax: i.payload[1] for ax, i in zip(axes, indices)})
        out = np.moveaxis(full, axes, range(len(axes)))
        return np.array(out.reshape(out.shape[:len(axes)]))


def _shared_axes(order: list[Expr]) -> dict[Expr, int]:
    """An axis for each index symbol of ``order``, the fewest a greedy colouring finds: two symbols
    share one unless some node's arguments vary over both (a tensor's own indices, as its body's)."""
    together: dict[Expr, set] = {n: set() for n in order if n.op.name == "index"}
    for node in order:
        scope = set().union(*(a.free for a in node.args)) if node.args else ()
        if len(scope) > 1:
            for i in scope:
                together[i].update(scope)
    axes: dict[Expr, int] = {}
    for i in together:
        taken = {axes[j] for j in together[i] if j in axes}
        axes[i] = next(k for k in range(len(taken) + 1) if k not in taken)
    return axes


_ELEMENTWISE = {op: elementwise(op) for op in ops.FUNCTIONS.values()}


def _extreme(reduce: Any, positive: bool) -> Any:
    """np.max or np.min with IEEE 754-2019's order of zeros (-0 < +0), as the op table's maximum and
    the compiled loops' (NumPy's sign of a zero extreme depends on where the zeros lie)."""
    def extreme(body: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
        out = reduce(body, axis=axis, keepdims=keepdims)
        if not np.any(out == 0.0):
            return out
        other = np.any((body == 0.0) & (np.signbit(body) != positive), axis=axis, keepdims=keepdims)
        return np.where((out == 0.0) & other, 0.0 if positive else -0.0, out)  # (+0 for max, -0 for min)
    return extreme


_REDUCE = {"sum": np.sum, "max": _extreme(np.max, True), "min": _extreme(np.min, False)}
_OBJECT_REDUCE = {name: np.frompyfunc(lambda a, b, op=ops.OPS[op]: apply(op, (a, b)), 2, 1)
                  for name, op in (("sum", "add"), ("max", "maximum"), ("min", "minimum"))}


# Called as observe(node, value, operand values) with each value the interpreter computes, where set; the
# value it returns is kept. symgrad.fuzz scales its tolerances by the magnitude of the intermediate values
# (terms that cancel leave their rounding, not the result's) and moves the library functions' results by
# an ulp, as another implementation of them would (ties and branches that such a change flips).
OBSERVER: contextvars.ContextVar = contextvars.ContextVar("observer", default=None)


def run(order: list[Expr], values: dict[str, Any], keep: set[Expr], symbolic: bool = False,
        memo: dict[Expr, Any] | None = None) -> dict[Expr, Any]:
    """Evaluate ``order`` (a topological order) given variable values by name.

    Returns the values of the nodes in ``keep``; others are freed after their last use,
    so a long graph over large arrays needs memory for its live values only.
    ``symbolic``: variables stand for themselves and scalar ops build expressions (unroll).
    ``memo``: values known before (the arguments of ``order``'s first nodes), filled with every
    value computed and nothing freed: one graph evaluated a part at a time, as it grows.
    """
    last_use: dict[Expr, int] = {}
    for i, node in enumerate(order):
        for a in node.args:
            last_use[a] = i
    if memo is not None:
        last_use.clear()  # (kept: later parts read them)
    vals: dict[Expr, Any] = {} if memo is None else memo
    rolled = None  # how rolled nodes evaluate: made at the first one
    numeric: set[Expr] = set()  # symbolic: the nodes of index symbols and constants, kept as numbers
    observe = None if symbolic else OBSERVER.get()
    with np.errstate(all="ignore"):
        for i, node in enumerate(order):
            op = node.op
            if op.name == "var":
                if symbolic:
                    vals[node] = node
                    continue
                if node.payload not in values:
                    known = ", ".join(sorted(values)) or "none"
                    raise ValueError(f"no value given for variable {node.payload!r} (values given for: {known})")
                vals[node] = values[node.payload]
            elif op.name == "const":
                vals[node] = np.float64(node.payload)
                if symbolic:
                    numeric.add(node)
            elif op.evaluate is not None:
                rolled = rolled or Rolled(order, values, symbolic)
                vals[node] = op.evaluate(node, [vals[a] for a in node.args], rolled)
                if symbolic and (op.name in ("index", "table") or op.name == "load" and node.args[0] in numeric):
                    numeric.add(node)
            elif not symbolic:
                operands = [vals[a] for a in node.args]
                if rolled is not None:
                    _within_budget(node, operands)
                vals[node] = op.impl(*operands)
            elif all(a in numeric for a in node.args):
                vals[node] = op.impl(*(vals[a] for a in node.args))
                numeric.add(node)
            else:
                vals[node] = _ELEMENTWISE[op](*(vals[a] for a in node.args))
            if observe is not None:
                vals[node] = observe(node, vals[node], [vals[a] for a in node.args])
            for a in node.args:
                if last_use.get(a) == i and a not in keep:
                    vals.pop(a, None)
    return {n: vals[n] for n in keep}


VALUES_MAX = 2**27  # the most values (1 GiB of floats) one elementwise op of a rolled graph computes at once


def _within_budget(node: Expr, operands: list) -> None:
    """Refuse an op whose broadcast operands (an axis per index symbol) hold more than VALUES_MAX values:
    a Jacobian tested at every address is n**3 of them, which the compiled loops run without storing."""
    shapes = [np.shape(a) for a in operands]
    ndim = max(map(len, shapes), default=0)
    dims = [1] * ndim
    for shape in shapes:
        for k, d in enumerate(shape, ndim - len(shape)):
            dims[k] = max(dims[k], d)
    if math.prod(dims) > VALUES_MAX:
        raise ValueError(f"the interpreter would compute {math.prod(dims):,} values at once for {node.op.name} "
                         f"(an array axis per index symbol, sizes {[d for d in dims if d > 1]}): evaluate it "
                         "compiled (backend 'vm' or 'numba')")


def _brief(e: Expr) -> str:
    text = str(e)
    return text if len(text) <= 60 else text[:57] + "..."


def _result(value: Any, shape: tuple, root: Expr) -> Any:
    if root.op.array_valued:
        return np.array(value)
    if isinstance(value, np.ndarray) and value.dtype == object:  # symbolic: the expression itself
        return value.reshape(())[()]
    if isinstance(value, Expr):
        return value
    value = np.asarray(value)
    if value.ndim > len(shape):  # a rolled value: size-1 axes of the index symbols it was reduced over
        value = value.reshape(value.shape[value.ndim - len(shape):] if shape else ())
    if shape:
        return np.array(np.broadcast_to(value, shape))
    return value.item()


def evaluate(exprs: Any, bindings: dict, symbolic: bool = False, memo: dict | None = None) -> Any:
    """Evaluate expressions at given variable values (the reference interpreter).

    ``bindings`` maps variables or their names to floats, complex numbers or arrays
    (arrays broadcast and evaluate elementwise).  One expression gives a float (or an
    array), a list gives a list, an object array gives an array of results.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.evaluate(x * y + sg.sin(x), {x: 2, "y": 3})
    6.909297426825682
    >>> sg.evaluate([x + y, x * y], {x: 2, y: [1, 2]})
    [array([3., 4.]), array([2., 4.])]

    Rolled expressions take their arrays' values by the array or its name; an array-valued
    expression (a ``tensor``) gives an array. ``symbolic=True`` (what ``unroll`` uses) builds the
    scalar graph instead of numbers. ``memo`` (a dict, empty at first): the values of the nodes
    evaluated by earlier calls with it, at the same ``bindings``, are not computed again (a traced
    function's conditions, decided as its graph grows); graphs with rolled nodes are evaluated whole.
    """
    values, arrays = _bindings(bindings)
    roots = custom.plain(as_expr_list(exprs))
    order = topo_order(roots, memo)
    if memo is not None and any(n.op.evaluate is not None for n in order):
        memo, order = None, topo_order(roots)  # (a rolled node's axes are laid out over its whole graph)
    for r in roots:
        if r.free:
            raise ValueError(f"{_brief(r)} varies over the index {', '.join(sorted(map(str, r.free)))}: reduce it "
                             "(sg.sum / sg.max / sg.min) or make it an array (sg.tensor) before evaluating")
    arrays |= {n.payload[0] for n in order if n.op.name == "array"}
    shape = np.broadcast_shapes(*(np.shape(v) for k, v in values.items() if k not in arrays))
    got = run(order, values, set(roots), symbolic, memo)
    flat = [_result(got[r], shape, r) for r in roots]
    if isinstance(exprs, np.ndarray):
        return np.array(flat).reshape(exprs.shape + shape)
    return _like(exprs, flat)
