"""Gradient checks: symbolic gradients against finite differences.

The numerical side is fourth-order central differences at steps h and h/2 (points x ± h/2, x ± h,
x ± 2h), extrapolated, evaluated in one vectorized interpreter pass.  A variable whose stencil crosses a
kink (abs, max, floor, a ``where`` condition, ...) is reported as not
differentiable there, not as a failure, and ``stop_gradient(e)`` is held at its
value at the point, which is what its zero derivative means: the op table's ``branch`` column says
which smooth piece each kink op is on, and a change of piece is a kink.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.expr.diff import _check_wrt, _scalar, grad
from symgrad.expr.interp import _bindings, run
from symgrad.expr.node import Expr
from symgrad.expr.traverse import as_expr_list, substitute, topo_order
from symgrad.trace import api
from symgrad.util import pytree

_STENCIL = np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5])  # steps, in units of h, after the centre point
_K = len(_STENCIL)


def _difference(f: Any, h: Any) -> Any:
    """The derivative from ``f`` at the points x + _STENCIL * h: fourth-order central differences at steps
    h and h / 2, extrapolated (Richardson: their h**4 errors, 16 to 1, cancel). One alone missed a steep
    composition's slope, exp(3 tanh(exp(3 tanh(...)))), by 4e-4 relative; the extrapolation by 4e-7.

    >>> x = 0.3 + np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5]) * 1e-3
    >>> bool(abs(_difference(np.exp(5 * x), 1e-3) - 5 * np.exp(1.5)) < 1e-9)
    True
    """
    fp, fm, fp2, fm2, fh, fmh = f
    coarse = (8 * (fp - fm) - (fp2 - fm2)) / (12 * h)
    fine = (8 * (fh - fmh) - (fp - fm)) / (6 * h)
    return fine + (fine - coarse) / 15


class GradientCheckError(AssertionError):
    """Raised by ``GradCheckReport.raise_if_failed`` when gradients disagree."""


@dataclass
class GradCheckReport:
    """The outcome of ``check_grad``, one entry per variable.

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
        """Raise ``GradientCheckError`` listing the variables whose gradients disagree."""
        if not self.ok:
            raise GradientCheckError(f"gradient check failed:\n{self}")
        return self

    def __str__(self) -> str:
        width = max(8, *(len(n) for n in self.names)) if self.names else 8
        lines = [f"{'variable':<{width}}  {'symbolic':>22}  {'numeric':>22}  {'abs error':>9}  status"]
        for i, name in enumerate(self.names):
            lines.append(f"{name:<{width}}  {self.grad[i]:>22.15g}  {self.numeric[i]:>22.15g}  "
                         f"{self.error[i]:>9.2e}  {self.status[i]}")
        checked = any(status in ("ok", "FAIL") for status in self.status)
        verdict = "FAILED" if not self.ok else "ok" if checked or not self.status else "nothing checked"
        lines.append(f"{'result':<{width}}  {verdict}")
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


ELEMENTS_MAX = 64  # differentiated entries checked one by one; beyond, random directions
DIRECTIONS = 3  # the random directions checked beyond ELEMENTS_MAX


def check_grad(f: Any, *args: Any, argnums: int | Sequence[int] | None = None, order: int = 1,
               grad_exprs: Any = None, h: float | None = None, rtol: float = 1e-6, atol: float = 1e-8,
               raise_on_failure: bool = False) -> GradCheckReport:
    """Compare the gradient of ``f`` with finite differences: ``check_grad(expr, wrt, point)`` for an
    expression, ``check_grad(fn, *args)`` for a Python function (JAX's ``check_grads``).

    For a function, the gradient with respect to the arguments ``argnums`` (by default every
    argument of floats: numbers, arrays and pytrees of them; the others are data) comes from tracing
    ``fn``; the finite differences call ``fn`` itself on NumPy floats, so a tracing error shows up
    as a failure. Up to 64 differentiated entries are checked one by one, more along 3 random
    directions. ``order=2`` also checks the gradient of the gradient (along a random direction), and
    so on. An entry whose stencil crosses a kink (the slopes on its two sides differ) is "kink".

    >>> import numpy as np, symgrad as sg
    >>> sg.check_grad(lambda x, y: np.sum(np.sin(x) * y), np.array([0.5, 1.0]), 2.0).status
    ['ok', 'ok', 'ok']
    >>> sg.check_grad(lambda p: np.sum(p["W"] ** 3), {"W": np.ones(100)}, order=2).status
    ['ok', 'ok', 'ok', 'ok', 'ok', 'ok']
    """
    if callable(f) and not isinstance(f, Expr):
        if grad_exprs is not None:
            raise TypeError("check_grad: grad_exprs is for expressions; a function's gradient is traced")
        return _check_function(f, args, argnums, order, h, rtol, atol, raise_on_failure)
    if argnums is not None or order != 1:
        raise TypeError("check_grad: argnums and order are for Python functions; an expression takes wrt")
    wrt, point = args
    return _check_expr(f, wrt, point, grad_exprs=grad_exprs, h=h, rtol=rtol, atol=atol,
                       raise_on_failure=raise_on_failure)


def check_grads(f: Callable, args: Sequence, order: int, modes: Any = ("fwd", "rev"), atol: float | None = None,
                rtol: float | None = None, eps: float | None = None) -> None:
    """JAX's ``jax.test_util.check_grads``: raise ``GradientCheckError`` (an AssertionError) where a
    derivative of ``f`` at ``args`` up to ``order`` disagrees with finite differences. ``"rev"``:
    ``check_grad`` (a scalar ``f``'s gradient, entry by entry); ``"fwd"``: the JVP along a random
    direction, then the JVP of that JVP, ..., for results of any shape.

    >>> import numpy as np, symgrad as sg
    >>> sg.check_grads(lambda x: np.sum(np.tanh(x) ** 2), (np.array([0.3, -1.2]),), order=2)
    >>> sg.check_grads(lambda x: np.tanh(x) * x[::-1], (np.array([0.3, -1.2]),), order=2, modes=["fwd"])
    """
    rtol, atol = 1e-6 if rtol is None else rtol, 1e-8 if atol is None else atol
    if "fwd" in modes:
        _forward(f, tuple(args), order, 1e-5 if eps is None else eps, rtol, atol)
    if "rev" in modes:
        check_grad(f, *args, order=order, h=eps, rtol=rtol, atol=atol, raise_on_failure=True)


def _forward(f: Callable, args: tuple, order: int, eps: float, rtol: float, atol: float) -> None:
    """JVPs of ``f``, then of its JVP, ... along random directions against central differences."""
    flat, unravel = pytree.ravel_pytree(args)
    rng, g = np.random.default_rng(2), f
    for k in range(1, order + 1):
        d = rng.normal(size=flat.size)
        at = lambda x, g=g: pytree.ravel_pytree(g(*unravel(x)))[0]  # noqa: E731
        got = pytree.ravel_pytree(api.jvp(g, args, unravel(d), backend="python")[1])[0]
        fd = (at(flat + eps * d) - at(flat - eps * d)) / (2 * eps)
        if not np.allclose(got, fd, rtol=rtol, atol=atol):
            raise GradientCheckError(f"check_grads: forward mode, order {k}: the JVP {got} against central "
                                     f"differences {fd} (step {eps})")
        g = lambda *a, g=g, d=d: api.jvp(g, a, unravel(d), backend="python")[1]  # noqa: E731


def _floats(tree: Any) -> bool:
    """Whether every leaf of ``tree`` is a real floating number or array (what is differentiated)."""
    leaves = pytree.tree_leaves(tree)
    return bool(leaves) and all(isinstance(leaf, float) or np.issubdtype(np.asarray(leaf).dtype, np.floating)
                                for leaf in leaves)


def _names(fn: Any, args: tuple, argnums: tuple[int, ...]) -> list[str]:
    """A name per differentiated entry: the parameter's, its pytree path and the element's index."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i in argnums:
        base = params[i] if i < len(params) and not params[i].startswith("*") else f"arg{i}"
        leaves, treedef = pytree.flatten(args[i])
        for path, leaf in zip(pytree.paths(treedef), leaves):
            shape = np.shape(leaf)
            names += [f"{base}{path}" + (f"[{', '.join(map(str, k))}]" if shape else "")
                      for k in np.ndindex(shape)]
    return names


def _check_function(fn: Any, args: tuple, argnums: Any, order: int, h: float | None, rtol: float,
                    atol: float, raise_on_failure: bool) -> GradCheckReport:
    if argnums is None:
        argnums = tuple(i for i, a in enumerate(args) if _floats(a))
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    bad = [i for i in argnums if not (isinstance(i, int) and -len(args) <= i < len(args))]
    if bad or not argnums:
        raise ValueError(f"check_grad: argnums {argnums} does not name arguments of floats among the "
                         f"{len(args)} given")
    argnums = tuple(i % len(args) for i in argnums)
    args = tuple(pytree.tree_map(lambda leaf: np.asarray(leaf, dtype=float), a) if i in argnums else a
                 for i, a in enumerate(args))
    flat, unravel = pytree.ravel_pytree(tuple(args[i] for i in argnums))

    def call(x: np.ndarray) -> float:
        full = list(args)
        for i, part in zip(argnums, unravel(x)):
            full[i] = part
        return float(np.real(fn(*full)))

    G = api.grad(fn, argnums=argnums, backend="python")
    sym = pytree.ravel_pytree(G(*args))[0]
    if flat.size <= ELEMENTS_MAX:
        names, dirs = _names(fn, args, argnums), np.eye(flat.size)
    else:
        rng = np.random.default_rng(0)
        dirs = rng.normal(size=(DIRECTIONS, flat.size))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        names = [f"direction {k + 1}" for k in range(DIRECTIONS)]
    report = _along(call, flat, dirs, dirs @ sym, names, h, rtol, atol)
    if order > 1:
        u = unravel(np.random.default_rng(1).normal(size=flat.size))

        def along_u(*a: Any) -> Any:  # the gradient's component along u: its gradient is the Hessian times u
            g = G(*a)
            return sum(np.sum(gi * ui) for gi, ui in zip(pytree.tree_leaves(g), pytree.tree_leaves(u)))
        inner = _check_function(along_u, args, argnums, order - 1, h, rtol, atol, False)
        report = GradCheckReport(report.names + [f"order {order}: {n}" for n in inner.names], report.value,
                                 np.concatenate([report.grad, inner.grad]),
                                 np.concatenate([report.numeric, inner.numeric]),
                                 np.concatenate([report.error, inner.error]), report.status + inner.status)
    return report.raise_if_failed() if raise_on_failure else report


def _along(call: Any, x: np.ndarray, dirs: np.ndarray, sym: np.ndarray, names: list[str], h: float | None,
           rtol: float, atol: float) -> GradCheckReport:
    """Each directional derivative ``sym`` against central differences of ``call`` (``_difference``)."""
    value = call(x)
    num, status = np.empty(len(dirs)), []
    with np.errstate(all="ignore"):
        for k, d in enumerate(dirs):
            step = h or np.finfo(float).eps ** 0.2 * max(1.0, float(np.max(np.abs(x[d != 0]), initial=0.0)))
            around = [call(x + s * step * d) for s in _STENCIL]
            fp, fm, fp2, fm2 = around[:4]
            num[k] = _difference(around, step)
            # a kink: the one-sided slopes' gap does not double from steps h to 2h (for a smooth
            # function it is f'' h, then 2 f'' h), by more than the rounding of the values
            gap1, gap2 = (fp - 2 * value + fm) / step, (fp2 - 2 * value + fm2) / (2 * step)
            noise = 64 * np.finfo(float).eps * max(1.0, abs(value)) / step
            kink = abs(gap2 - 2 * gap1) > max(noise, 1e-3 * max(abs(sym[k]), abs(num[k])))
            tol = atol * max(1.0, abs(value)) + rtol * max(abs(sym[k]), abs(num[k]))
            finite = np.isfinite([value, sym[k], *around]).all()
            if not finite:
                status.append("FAIL" if np.isfinite(value) and np.isfinite(num[k]) else "nonfinite")
            else:
                status.append("kink" if kink else "ok" if abs(sym[k] - num[k]) <= tol else "FAIL")
    return GradCheckReport(names, value, np.asarray(sym, dtype=float), num, np.abs(sym - num), status)


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
    # Column 0 is the point itself; then, per variable, the stencil's points.
    batch = {k: np.full(1 + _K * n, v) for k, v in centre.items()}
    with np.errstate(all="ignore"):  # an infinite point: nan differences, quietly
        for i, v in enumerate(wrt):
            batch[v.payload][1 + _K * i: 1 + _K * (i + 1)] += _STENCIL * steps[v.payload]

    fd = _frozen(f, centre)
    kinks = [node for node in topo_order([fd]) if node.op.branch is not None]
    keep = {fd, *(a for k in kinks for a in k.args)}
    got = run(topo_order([fd, *g]), batch, keep | set(g))
    fx = np.broadcast_to(got[fd], (1 + _K * n,))
    value = float(fx[0])
    sym = np.array([np.broadcast_to(got[e], fx.shape)[0] for e in g], dtype=float)
    num = np.empty(n)
    with np.errstate(all="ignore"):
        for i, v in enumerate(wrt):
            num[i] = _difference(fx[1 + _K * i: 1 + _K * (i + 1)], steps[v.payload])
        branch = [np.broadcast_to(k.op.branch(*(got[a] for a in k.args)), fx.shape) for k in kinks]
        err = np.abs(sym - num)
        tol = atol * max(1.0, abs(value)) + rtol * np.maximum(np.abs(sym), np.abs(num))
    status = []
    for i in range(n):
        cols = [0, *range(1 + _K * i, 1 + _K * (i + 1))]
        if any(np.unique(b[cols]).size > 1 for b in branch):
            status.append("kink")
        elif not (np.isfinite(value) and np.isfinite(sym[i]) and np.all(np.isfinite(fx[cols]))):
            status.append("FAIL" if np.isfinite(value) and np.isfinite(num[i]) else "nonfinite")
        else:
            status.append("ok" if err[i] <= tol[i] else "FAIL")
    report = GradCheckReport([v.payload for v in wrt], value, sym, num, err, status)
    return report.raise_if_failed() if raise_on_failure else report
