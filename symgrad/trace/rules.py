"""The transforms as data: one ``Transform`` record each, and its rule deriving the flat outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.expr import diff as symbolic
from symgrad.expr import ndarrays, ops
from symgrad.expr.node import Expr
from symgrad.expr.sparsity import sparse_hessian, sparse_jacobian
from symgrad.trace.signature import F64, is_rolled

if TYPE_CHECKING:
    from symgrad.trace.record import Outputs, Trace

def _result_dtype(t: Trace) -> Any:
    """The dtype of fn's results: NumPy's promotion of the float arrays it was given (float32 arrays
    alone: float32, as JAX's); None for float64."""
    dtype = np.result_type(*t.floats) if t.floats else None
    return None if dtype is None or dtype == F64 else dtype


def _output_dtype(t: Trace, exprs: list) -> Any:
    """NumPy's dtype of one of jit's results where it is not a float: bool for comparisons, int64 for
    integer arithmetic on integer arguments or on positions (np.argsort's) (computed in float64: exact
    below 2**53, checked) in a function where no float met a traced value (``n * 1.0`` is ``n`` in the
    graph, a float in NumPy)."""
    bodies = [e.args[0] if e.op.name == "tensor" else e for e in exprs if isinstance(e, Expr)]
    if not bodies or len(bodies) < len(exprs):
        return None
    if all(b.op.name in ops.COMPARISONS for b in bodies):
        return np.dtype(bool)
    if not t.floats_met and all(ndarrays.integer_valued(b, t.ints) for b in bodies):
        return np.dtype(np.int64)
    return None


def _jit(t: Trace, c: Outputs) -> tuple:
    blocks = [(shape, _output_dtype(t, exprs) or _result_dtype(t)) for exprs, shape in t.outputs]
    return c.outs, None, blocks, c.Out


def _grad(t: Trace, c: Outputs) -> tuple:
    g = symbolic.grad(c.outs[0], t.inputs)
    return [*g, *c.aux], g, c.wrt_blocks + c.aux_blocks, t.with_aux(c.W, len(c.wrt_blocks))


def _value_and_grad(t: Trace, c: Outputs) -> tuple:
    g = symbolic.grad(c.outs[0], t.inputs)
    n = 1 + len(c.wrt_blocks)
    value_aux = lambda p: ((p[0], t.aux_from(p[n:])) if t.owner.has_aux else p[0], c.W(p[1:n]))  # noqa: E731
    return [c.outs[0], *g, *c.aux], g, [((), _result_dtype(t)), *c.wrt_blocks, *c.aux_blocks], value_aux


def _hvp(t: Trace, c: Outputs) -> tuple:
    hv = symbolic.jvp(symbolic.grad(c.outs[0], t.inputs), t.inputs, t.extra)
    return hv, hv, c.wrt_blocks, c.W


def _jvp(t: Trace, c: Outputs) -> tuple:
    tangents = symbolic.jvp(c.outs, t.inputs, t.extra) if c.outs else []
    blocks, n = [(s, None) for s in c.shapes], len(c.shapes)
    return [*c.outs, *tangents, *c.aux], tangents, blocks * 2 + c.aux_blocks, t.with_aux(
        lambda p: (c.Out(p[:n]), c.Out(p[n:2 * n])), 2 * n)


def _vjp(t: Trace, c: Outputs) -> tuple:
    total = sum((np.sum(ct * e) if is_rolled(e) else ct * e for ct, e in zip(t.extra, c.outs)), 0.0)
    g = symbolic.grad(total, t.inputs) if t.inputs else []
    n = len(c.shapes)
    return [*c.outs, *g, *c.aux], g, [(s, None) for s in c.shapes] + c.wrt_blocks + c.aux_blocks, \
        t.with_aux(lambda p: (c.Out(p[:n]), c.W(p[n:])), n + len(c.wrt_blocks))


def _jacobian(t: Trace, c: Outputs) -> tuple:
    if t.indexed:  # one row per output block: an array built of scalars has one per scalar, stacked
        rows = []
        for exprs, shape in t.outputs:
            per = [(symbolic.jacobian if o.op.array_valued else symbolic.grad)(o, t.inputs) for o in exprs]
            rows.append([per[0][b] if len(per) == 1 else _stacked([p[b] for p in per], shape + sb)
                         for b, sb in enumerate(t.wrt_shapes)])
        return t.rolled_matrix(rows, c.shapes, c.Out, c)
    if c.sparse:
        J = sparse_jacobian(c.outs, t.inputs)
        return J, J, None, None
    J = symbolic.jacobian(c.outs, t.inputs) if c.outs and t.inputs else np.empty(
        (len(c.outs), len(t.inputs)), dtype=object)
    return t.matrix(J, c.shapes, c.Out, c.aux, c.aux_blocks)


def _stacked(entries: list, shape: tuple) -> Any:
    """The rows of one Jacobian block (one per scalar of the output) as the block: rolled arrays
    stacked into one of ``shape``; scalars (of a scalar input) as they are, in order."""
    if all(is_rolled(e) for e in entries):
        return np.reshape(np.stack(entries), shape)
    return list(entries)


def _hessian(t: Trace, c: Outputs) -> tuple:
    if t.indexed:
        return t.rolled_matrix(symbolic.hessian(c.outs[0], t.inputs), t.wrt_shapes, c.W, c)
    if c.sparse:
        H = sparse_hessian(c.outs[0], t.inputs)
        return H, H, None, None
    H = symbolic.hessian(c.outs[0], t.inputs) if t.inputs else np.empty((0, 0), dtype=object)
    return t.matrix(H, t.wrt_shapes, c.W, c.aux, c.aux_blocks)


@dataclass(frozen=True)
class Transform:
    """One function transform as data: what it differentiates and how its result is made.

    >>> TRANSFORMS["hvp"].extra, TRANSFORMS["jacobian"].scalar_out
    ('v', False)
    """

    derive: Any  # (Trace, Outputs) -> (flat expressions, derivatives, result blocks, blocks -> result)
    wrt: str = "argnums"  # the differentiated arguments: "argnums", every traced one ("all"), "positional"
    scalar_out: bool = False  # fn must return one scalar
    extra: str | None = None  # the name of the vector it takes besides fn's arguments
    extra_like: str | None = None  # shaped like "wrt" (tangents) or like the "output" (cotangents)
    rolled: bool = True  # large array arguments trace as rolled arrays
    sparse: bool = False  # takes sparse=True
    summable: bool = False  # has Function.sum over data rows
    label: str = ""  # how formulas() names the derivatives ({v}: an input, {i}: an output, {u}: a row's input)


TRANSFORMS: dict[str, Transform] = {
    "jit": Transform(_jit, wrt="all"),
    "grad": Transform(_grad, scalar_out=True, summable=True, label="df/d{v}"),
    "value_and_grad": Transform(_value_and_grad, scalar_out=True, summable=True, label="df/d{v}"),
    "hvp": Transform(_hvp, scalar_out=True, extra="v", extra_like="wrt", label="(H·Δ)[{v}]"),
    "jvp": Transform(_jvp, wrt="positional", extra="tangents", extra_like="wrt", label="Δf[{i}]"),
    "vjp": Transform(_vjp, wrt="positional", extra="cotangent", extra_like="output", label="df/d{v}"),
    "jacobian": Transform(_jacobian, sparse=True, label="df[{i}]/d{v}"),
    "hessian": Transform(_hessian, scalar_out=True, sparse=True, label="d2f/d{u}d{v}"),
}


