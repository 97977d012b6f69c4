"""Gradient checks: symbolic gradients against finite differences.

The numerical side is a fourth-order central difference (points x ± h, x ± 2h),
evaluated in one vectorized interpreter pass.  A variable whose stencil crosses a
kink (abs, max, floor, a ``where`` condition, ...) is reported as not
differentiable there, not as a failure, and ``stop_gradient(e)`` is held at its
value at the point, which is what its zero derivative means: the op table's ``branch`` column says
which smooth piece each kink op is on, and a change of piece is a kink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.expr.diff import _check_wrt, _scalar, grad
from symgrad.expr.interp import _bindings, run
from symgrad.expr.node import Expr
from symgrad.expr.traverse import as_expr_list, substitute, topo_order

_STENCIL = np.array([1.0, -1.0, 2.0, -2.0])  # steps, in units of h, after the centre point


class GradientCheckError(AssertionError):
    """Raised by :meth:`GradCheckReport.raise_if_failed` when gradients disagree."""


@dataclass
class GradCheckReport:
    """The outcome of :func:`check_grad`, one entry per variable.

    ``status`` is "ok", "FAIL", "kink" (not differentiable at the point) or
    "nonfinite" (the function or its gradient is not finite there).
    """

    names: list[str]
    value: float
    grad: np.ndarray
    numeric: np.ndarray
    error: np.ndarray
    status: list[str]

    @property
    def ok(self) -> bool:
        """True when no variable failed."""
        return "FAIL" not in self.status

    def __bool__(self) -> bool:
        return self.ok

    def raise_if_failed(self) -> GradCheckReport:
        """Raise :class:`GradientCheckError` listing the variables whose gradients disagree."""
        if not self.ok:
            raise GradientCheckError(f"gradient check failed:\n{self}")
        return self

    def __str__(self) -> str:
        width = max(8, *(len(n) for n in self.names)) if self.names else 8
        lines = [f"{'variable':<{width}}  {'symbolic':>22}  {'numeric':>22}  {'abs error':>9}  status"]
        for i, name in enumerate(self.names):
            lines.append(f"{name:<{width}}  {self.grad[i]:>22.15g}  {self.numeric[i]:>22.15g}  "
                         f"{self.error[i]:>9.2e}  {self.status[i]}")
        lines.append(f"{'result':<{width}}  {'ok' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def _point(wrt: list[Expr], point: Any) -> dict[str, Any]:
    if isinstance(point, dict):
        values, _ = _bindings(point)
        missing = [v.payload for v in wrt if v.payload not in values]
        if missing:
            raise ValueError(f"check_grad: the point gives no value for {', '.join(map(repr, missing))}")
        return values
    flat = np.asarray(point, dtype=float).ravel()
    if flat.size != len(wrt):
        names = ", ".join(v.payload for v in wrt)
        raise ValueError(f"check_grad: the point has {flat.size} values but wrt has {len(wrt)} "
                         f"variables ({names})")
    return {v.payload: np.float64(x) for v, x in zip(wrt, flat)}


def _frozen(f: Expr, centre: dict[str, float]) -> Expr:
    """f with each stop_gradient(e) replaced by e's value at the point: what its gradient means."""
    stops = [n for n in topo_order([f]) if n.op.name == "stop_gradient"]
    if not stops:
        return f
    values = run(topo_order(stops), centre, set(stops))
    return substitute(f, {n: float(np.real(values[n])) for n in stops})


def check_grad(f: Any, *args: Any, grad_exprs: Any = None, h: float | None = None, rtol: float = 1e-6,
               atol: float = 1e-8, raise_on_failure: bool = False) -> GradCheckReport:
    """Compare the gradient of ``f`` with finite differences: ``check_grad(expr, wrt, point)`` for an
    expression, ``check_grad(fn, *args)`` for a Python function of floats and arrays.

    For a function, the gradient with respect to every argument comes from tracing ``fn``;
    the finite differences call ``fn`` itself on NumPy floats, so a tracing error shows up as
    a failure. Kinks are found on the traced expression, as for expressions.

    >>> import numpy as np, symgrad as sg
    >>> sg.check_grad(lambda x, y: np.sum(np.sin(x) * y), np.array([0.5, 1.0]), 2.0).status
    ['ok', 'ok', 'ok']
    """
    if callable(f) and not isinstance(f, Expr):
        return _check_function(f, args, h, rtol, atol, raise_on_failure)
    wrt, point = args
    return _check_expr(f, wrt, point, grad_exprs=grad_exprs, h=h, rtol=rtol, atol=atol,
                       raise_on_failure=raise_on_failure)


def _check_function(fn: Any, args: tuple, h: float | None, rtol: float, atol: float,
                    raise_on_failure: bool) -> GradCheckReport:
    from symgrad.trace import Function  # the function-level API builds on this module's users

    args = tuple(np.asarray(a, dtype=float) for a in args)
    t = Function(fn, "grad", tuple(range(len(args))), backend="python").trace(*args)
    out = t.outputs[0][0][0]
    point = {v.payload: float(x) for v, x in zip(t.inputs, np.concatenate([a.ravel() for a in args]))}
    expr_report = _check_expr(out, t.inputs, point, h=h, rtol=rtol, atol=atol)
    flat = np.concatenate([a.ravel() for a in args]) if args else np.zeros(0)
    cuts = np.cumsum([0, *(a.size for a in args)])

    def call(x: np.ndarray) -> float:
        pieces = (x[lo:hi].reshape(a.shape) if a.ndim else x[lo] for lo, hi, a in zip(cuts, cuts[1:], args))
        return float(fn(*pieces))

    value = call(flat)
    num = np.empty(flat.size)
    for i in range(flat.size):
        step = h or np.finfo(float).eps ** 0.2 * max(1.0, abs(flat[i]))
        f_at = [call(flat + s * step * np.eye(1, flat.size, i).ravel()) for s in _STENCIL]
        num[i] = (8 * (f_at[0] - f_at[1]) - (f_at[2] - f_at[3])) / (12 * step)
    sym = expr_report.grad
    with np.errstate(all="ignore"):
        err = np.abs(sym - num)
        tol = atol * max(1.0, abs(value)) + rtol * np.maximum(np.abs(sym), np.abs(num))
    status = [s if s in ("kink", "nonfinite") else "ok" if err[i] <= tol[i] else "FAIL"
              for i, s in enumerate(expr_report.status)]
    report = GradCheckReport(expr_report.names, value, sym, num, err, status)
    return report.raise_if_failed() if raise_on_failure else report


def _check_expr(f: Expr, wrt: Any, point: Any, *, grad_exprs: Any = None, h: float | None = None,
                rtol: float = 1e-6, atol: float = 1e-8, raise_on_failure: bool = False) -> GradCheckReport:
    """Compare the gradient of ``f`` (symbolic, or ``grad_exprs`` if given) with finite differences.

    ``point`` is a sequence in ``wrt`` order or a dict of values (which may also bind
    variables outside ``wrt``).  A component passes when
    ``|symbolic - numeric| <= atol * max(1, |f|) + rtol * max(|symbolic|, |numeric|)``.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> sg.check_grad(x * y + sg.sin(x), [x, y], [2.0, 3.0]).ok
    True
    """
    wrt = _check_wrt(wrt)
    f = _scalar(f, "check_grad")
    values = _point(wrt, point)
    g = as_expr_list(grad(f, wrt) if grad_exprs is None else grad_exprs)
    if len(g) != len(wrt):
        raise ValueError(f"check_grad: grad_exprs has {len(g)} entries for {len(wrt)} variables")

    n = len(wrt)
    centre = {k: np.asarray(v, dtype=float).item() for k, v in values.items()}
    steps = {v.payload: h or np.finfo(float).eps ** 0.2 * max(1.0, abs(centre[v.payload])) for v in wrt}
    # Column 0 is the point itself; then, per variable, the four stencil points.
    batch = {k: np.full(1 + 4 * n, v) for k, v in centre.items()}
    with np.errstate(all="ignore"):  # an infinite point: nan differences, quietly
        for i, v in enumerate(wrt):
            batch[v.payload][1 + 4 * i: 5 + 4 * i] += _STENCIL * steps[v.payload]

    fd = _frozen(f, centre)
    kinks = [node for node in topo_order([fd]) if node.op.branch is not None]
    keep = {fd, *(a for k in kinks for a in k.args)}
    got = run(topo_order([fd, *g]), batch, keep | set(g))
    fx = np.broadcast_to(got[fd], (1 + 4 * n,))
    value = float(fx[0])
    sym = np.array([np.broadcast_to(got[e], fx.shape)[0] for e in g], dtype=float)
    num = np.empty(n)
    with np.errstate(all="ignore"):
        for i, v in enumerate(wrt):
            fp, fm, fp2, fm2 = fx[1 + 4 * i: 5 + 4 * i]
            num[i] = (8 * (fp - fm) - (fp2 - fm2)) / (12 * steps[v.payload])
        branch = [np.broadcast_to(k.op.branch(*(got[a] for a in k.args)), fx.shape) for k in kinks]
        err = np.abs(sym - num)
        tol = atol * max(1.0, abs(value)) + rtol * np.maximum(np.abs(sym), np.abs(num))
    status = []
    for i in range(n):
        cols = [0, *range(1 + 4 * i, 5 + 4 * i)]
        if any(np.unique(b[cols]).size > 1 for b in branch):
            status.append("kink")
        elif not (np.isfinite(value) and np.isfinite(sym[i]) and np.all(np.isfinite(fx[cols]))):
            status.append("FAIL" if np.isfinite(value) and np.isfinite(num[i]) else "nonfinite")
        else:
            status.append("ok" if err[i] <= tol[i] else "FAIL")
    report = GradCheckReport([v.payload for v in wrt], value, sym, num, err, status)
    return report.raise_if_failed() if raise_on_failure else report
