"""The reference interpreter: evaluates the DAG with the op table's NumPy implementations.

It is the yardstick every compiled backend is tested against.  Values may be
floats, complex numbers or NumPy arrays (evaluated elementwise); domain errors
give nan/inf as in NumPy, never exceptions.
"""

from __future__ import annotations

from numbers import Complex
from typing import Any

import numpy as np

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


def _bindings(bindings: Any) -> dict[str, Any]:
    if not isinstance(bindings, dict):
        raise TypeError(f"evaluate(): bindings must be a dict of variable -> value, got {type(bindings).__name__}")
    out = {}
    for key, value in bindings.items():
        if isinstance(key, Expr) and key.op.name == "var":
            key = key.payload
        elif not isinstance(key, str):
            raise TypeError(f"evaluate(): binding keys must be variables or their names, got {key!r}")
        out[key] = _bind(value, key)
    return out


def run(order: list[Expr], values: dict[str, Any], keep: set[Expr]) -> dict[Expr, Any]:
    """Evaluate ``order`` (a topological order) given variable values by name.

    Returns the values of the nodes in ``keep``; others are freed after their last use,
    so a long graph over large arrays needs memory for its live values only.
    """
    last_use: dict[Expr, int] = {}
    for i, node in enumerate(order):
        for a in node.args:
            last_use[a] = i
    vals: dict[Expr, Any] = {}
    with np.errstate(all="ignore"):
        for i, node in enumerate(order):
            op = node.op
            if op.name == "var":
                if node.payload not in values:
                    known = ", ".join(sorted(values)) or "none"
                    raise ValueError(f"no value given for variable {node.payload!r} (values given for: {known})")
                vals[node] = values[node.payload]
            elif op.name == "const":
                vals[node] = np.float64(node.payload)
            else:
                vals[node] = op.impl(*(vals[a] for a in node.args))
                for a in node.args:
                    if last_use[a] == i and a not in keep:
                        vals.pop(a, None)
    return {n: vals[n] for n in keep}


def _result(value: Any, shape: tuple) -> Any:
    value = np.asarray(value)
    if shape:
        return np.array(np.broadcast_to(value, shape))
    return value.item()


def evaluate(exprs: Any, bindings: dict) -> Any:
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
    """
    values = _bindings(bindings)
    roots = as_expr_list(exprs)
    shape = np.broadcast_shapes(*(np.shape(v) for v in values.values()))
    got = run(topo_order(roots), values, set(roots))
    flat = [_result(got[r], shape) for r in roots]
    if isinstance(exprs, np.ndarray):
        return np.array(flat).reshape(exprs.shape + shape)
    return _like(exprs, flat)
