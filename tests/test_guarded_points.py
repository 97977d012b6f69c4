"""Derivatives of every order at the points symgrad's guards protect, and 1e-8 away from them.

A guard keeps a value finite at a special point (0**0, 0 * log 0, sinc's 0/0, a masked branch's
nan partial). Differentiated as a constant there, it made every higher derivative through it 0
(d²/dx dy x**y at y = 0, sinc'' at 0). Here each guarded op, and each composition of two, is
differentiated to order 4 at its guarded point and at points 1e-8 to either side, on every
backend, against mpmath's numerical derivatives at 40 digits (and finite differences of the
first derivative, on both sides).
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
import scipy.special

import symgrad as sg

mpmath.mp.dps = 40
x, y = sg.symbols("x y")
NEAR = (0.0, 1e-8, -1e-8)  # offsets from the guarded point


def _msinc(t):
    return mpmath.sinc(mpmath.pi * t)


# Guarded ops of one variable: name -> (symgrad of an expression, mpmath of a number, the guarded point).
# Each is analytic around its point, so every derivative there is the limit of the nearby ones.
OUTER = {
    "sinc": (sg.sinc, lambda u, t: _msinc(u)),
    "x**u at u = 0": (lambda u: (4.0 + x) ** u, lambda u, t: (4 + t) ** u),
    "xlogy(u, 2 + x)": (lambda u: scipy.special.xlogy(u, 2.0 + x), lambda u, t: u * mpmath.log(2 + t)),
    "xlog1py(u, 1 + x)": (lambda u: scipy.special.xlog1py(u, 1.0 + x), lambda u, t: u * mpmath.log(2 + t)),
    "u**3 at u = 0": (lambda u: u ** 3.0, lambda u, t: u ** 3),
}
INNER = {  # each 0 at x = 0
    "x": (lambda: x, lambda t: t),
    "sin(x)": (lambda: sg.sin(x), mpmath.sin),
    "x*(1+x)": (lambda: x * (1.0 + x), lambda t: t * (1 + t)),
    "sinc(x)-1": (lambda: sg.sinc(x) - 1.0, lambda t: _msinc(t) - 1),
    "xlogy(x,3)": (lambda: scipy.special.xlogy(x, 3.0), lambda t: t * mpmath.log(3)),
}


def _cases():
    """(label, expression in x, mpmath function of t): every outer op of every inner function."""
    for (on, (f, mf)), (inn, (g, mg)) in itertools.product(OUTER.items(), INNER.items()):
        yield f"{on} of {inn}", f(g()), (lambda t, mf=mf, mg=mg: mf(mg(t), t))


CASES = list(_cases())


def _derivatives(e: sg.Expr, order: int) -> list:
    out = [e]
    for _ in range(order):
        out.append(sg.diff(out[-1], x))
    return out[1:]


def _reference(f, at: float, order: int) -> float:
    return float(mpmath.diff(f, mpmath.mpf(at), order))


def _close(got: float, want: float, label: str) -> None:
    assert math.isfinite(got) and abs(got - want) <= 1e-7 * max(1.0, abs(want)), (label, got, want)


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_every_order_of_every_guarded_composition_matches_mpmath(backend):
    """Orders 1-4 of 25 compositions, at the guarded point and 1e-8 to either side: one program per backend."""
    outputs = [d for _, e, _ in CASES for d in _derivatives(e, 4)]
    run = sg.compile(outputs, [x], backend=backend)
    for at in NEAR:
        got = np.asarray(run(np.array([at])), dtype=float).ravel()
        k = 0
        for label, _, f in CASES:
            for order in range(1, 5):
                _close(got[k], _reference(f, at, order), f"{label}, order {order} at {at}")
                k += 1


def test_first_derivatives_match_finite_differences_on_both_sides():
    """The derivatives' own derivative (orders 2 and 3) against one-sided differences of them."""
    h = 1e-6
    for label, e, _ in CASES:
        d1, d2, d3 = _derivatives(e, 3)
        for d, dd in ((d1, d2), (d2, d3)):
            at = lambda t, d=d: float(sg.evaluate(d, {x: t}))  # noqa: E731
            want = float(sg.evaluate(dd, {x: 0.0}))
            for side in (h, -h):
                fd = (at(side) - at(0.0)) / side
                assert abs(fd - want) <= 1e-4 * max(1.0, abs(want)), (label, side, fd, want)


def _mixed(e: sg.Expr, i: int, j: int) -> sg.Expr:
    for _ in range(i):
        e = sg.diff(e, x)
    for _ in range(j):
        e = sg.diff(e, y)
    return e


@pytest.mark.parametrize("point", [(4.0, 0.0), (4.0, 1e-8), (4.0, -1e-8), (0.5, 0.0)])
def test_every_mixed_partial_of_a_power_at_a_zero_exponent(point):
    """x**y at y = 0: all partials to order 4 (mixed ones both ways round: symmetric by construction)."""
    e = x ** y
    pairs = [(i, k - i) for k in range(1, 5) for i in range(k + 1)]
    outputs = [_mixed(e, i, j) for i, j in pairs] + [_mixed(_mixed(e, 0, j), i, 0) for i, j in pairs]
    for backend in ("python", "vm"):
        got = np.asarray(sg.compile(outputs, [x, y], backend=backend)(np.array(point)), dtype=float).ravel()
        for n, (i, j) in enumerate(pairs * 2):
            want = float(mpmath.diff(lambda a, b: a ** b, tuple(map(mpmath.mpf, point)), (i, j)))
            _close(got[n], want, f"d^{i}/dx d^{j}/dy x**y at {point} ({backend})")


def test_the_issue_reproducers():
    h = sg.hessian(lambda a, b: np.power(a, b), argnums=(0, 1))(4.0, 0.0)
    np.testing.assert_allclose(np.array(h, dtype=float), [[0.0, 0.25], [0.25, math.log(4.0) ** 2]], rtol=1e-14)
    assert sg.grad(sg.grad(np.sinc))(0.0) == pytest.approx(-math.pi ** 2 / 3, rel=1e-14)
    fourth = sg.grad(sg.grad(sg.grad(sg.grad(np.sinc))))
    assert fourth(0.0) == pytest.approx(math.pi ** 4 / 5, rel=1e-14)
    assert sg.grad(sg.grad(np.sinc))(1e-3) == pytest.approx(float(mpmath.diff(_msinc, mpmath.mpf(1e-3), 2)),
                                                            rel=1e-12)
    d2 = sg.diff(sg.diff(x ** y, x), y)
    assert "where" not in str(sg.diff(sg.sinc(x), x))  # sinc's derivative is a row of its own, not a guard
    assert float(sg.evaluate(d2, {x: 4.0, y: 0.0})) == 0.25


def test_xlogy_at_a_zero_first_argument():
    """d/dx xlogy(x, y) at x = 0 is log(y) (JAX's rule), not the guard's 0; SciPy's values everywhere."""
    g = sg.grad(lambda a, b: scipy.special.xlogy(a, b), argnums=(0, 1))
    np.testing.assert_allclose(g(0.0, 3.0), [math.log(3.0), 0.0], rtol=1e-15)
    np.testing.assert_allclose(sg.grad(lambda a: scipy.special.xlog1py(a, 2.0))(0.0), math.log1p(2.0), rtol=1e-15)
    xs = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0])
    ys = np.array([0.0, -1.0, np.inf, np.nan, -1.0, 3.0, 2.0])
    for fn in (scipy.special.xlogy, scipy.special.xlog1py):
        got = [float(sg.evaluate(fn(x, y), {x: a, y: b})) for a, b in zip(xs, ys)]
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, fn(xs, ys))


def test_a_masked_branch_keeps_the_derivatives_of_a_zero_adjoint():
    """The mask's guard (0 * nan where a branch is not taken) holds only where the partial is not finite:
    at y = 0 the adjoint of sqrt(x) * y is 0, but its derivative in y is not."""
    f = lambda a, b: np.where(a > 0.0, np.sqrt(a) * b, 0.0)  # noqa: E731
    for backend in ("python", "vm", "numba"):
        h = np.array(sg.hessian(f, argnums=(0, 1), backend=backend)(1.0, 0.0), dtype=float)
        np.testing.assert_allclose(h, [[0.0, 0.5], [0.5, 0.0]], rtol=1e-15)
        h = np.array(sg.hessian(f, argnums=(0, 1), backend=backend)(-1.0, 0.0), dtype=float)
        np.testing.assert_array_equal(h, np.zeros((2, 2)))  # (masked: no nan from sqrt's partials)


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_a_hessian_vector_product_through_a_masked_branch_is_the_hessians(backend):
    """The fuzzer's reproducer: at the zeros of x (64 elements, rolled) sqrt(x) is masked and its partials
    inf; the gradient's guard stored its mask's values, forward mode multiplied them by the tangent of
    sqrt's partial (0 * inf) and the interpreter's Hessian-vector product was nan at each zero's neighbour
    (the compiled loops, with the mask inline, and the Hessian were finite). Against the dense Hessian and
    central differences of the gradient."""
    def f(x):
        return np.sum(x[1:] * np.where(x > 0.1, np.sqrt(x), 0.0)[:-1])

    x = np.random.default_rng(5).uniform(-1.0, 2.0, 64)
    x[::8] = 0.0
    v = np.random.default_rng(6).normal(size=64)
    hv = sg.hvp(f, backend=backend)(x, v)
    H = sg.hessian(f, backend="python")(x)
    assert np.all(np.isfinite(hv))
    np.testing.assert_allclose(hv, H @ v, rtol=1e-12, atol=1e-12)
    g = sg.grad(f, backend="python")  # (a step across a zero stays masked: x < 0.1 either side)
    np.testing.assert_allclose(hv, (g(x + 1e-6 * v) - g(x - 1e-6 * v)) / 2e-6, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_guarded_points_inside_rolled_arrays(backend):
    """70 elements (the rolled path), zeros among them: sinc's Hessian diagonal and x**y's mixed block."""
    rng = np.random.default_rng(0)
    v = rng.uniform(-2.0, 2.0, 70)
    v[::7] = 0.0
    w = rng.uniform(0.5, 1.5, 70)
    hess = sg.hessian(lambda a: np.sum(np.sinc(a) * w), backend=backend)(v)
    want = [w[i] * float(mpmath.diff(_msinc, mpmath.mpf(v[i]), 2)) for i in range(70)]
    np.testing.assert_allclose(np.diag(hess), want, rtol=1e-10, atol=1e-12)
    assert np.count_nonzero(hess - np.diag(np.diag(hess))) == 0
    a = rng.uniform(0.5, 4.0, 70)
    b = np.where(np.arange(70) % 5 == 0, 0.0, rng.uniform(-1.0, 2.0, 70))
    block = sg.hessian(lambda p, q: np.sum(np.power(p, q)), argnums=(0, 1), backend=backend)(a, b)[0][1]
    np.testing.assert_allclose(np.diag(block), a ** (b - 1.0) * (1.0 + b * np.log(a)), rtol=1e-12)
