"""sg.logsumexp / sg.softmax / sg.log_softmax: SciPy's values at any magnitude, the textbook derivatives,
on NumPy arrays and traced arrays (rolled, element by element, loop VM) alike; the gamma family (gammaln,
digamma, polygamma, multigammaln) against SciPy on every backend, to third derivatives."""

import numpy as np
import pytest
import scipy.special as ss

import symgrad as sg
from symgrad.trace import limits

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 1), False), (-1, True)])
def test_values_match_scipy_at_large_magnitudes(axis, keepdims):
    a = RNG.normal(size=(6, 7)) * 400
    b = RNG.uniform(0.5, 2.0, size=(6, 7))
    np.testing.assert_allclose(sg.logsumexp(a, axis=axis, keepdims=keepdims),
                               ss.logsumexp(a, axis=axis, keepdims=keepdims), rtol=1e-14)
    np.testing.assert_allclose(sg.logsumexp(a, axis=axis, b=b, keepdims=keepdims),
                               ss.logsumexp(a, axis=axis, b=b, keepdims=keepdims), rtol=1e-14)
    if axis is not None and not isinstance(axis, tuple):
        np.testing.assert_allclose(sg.softmax(a, axis=axis), ss.softmax(a, axis=axis), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(sg.log_softmax(a, axis=axis), ss.log_softmax(a, axis=axis), rtol=1e-12)


def test_signs_and_empty_mass():
    assert sg.logsumexp([1.0, 2.0], b=[1, -1], return_sign=True) == pytest.approx(
        ss.logsumexp([1.0, 2.0], b=[1, -1], return_sign=True), rel=1e-15)
    assert sg.logsumexp(np.array([-np.inf, -np.inf])) == -np.inf
    np.testing.assert_array_equal(sg.softmax(np.array([-np.inf, 0.0])), [0.0, 1.0])


def _loss(W, X, y):
    Z = X @ W
    return (-np.sum(sg.log_softmax(Z, axis=1)[np.arange(y.shape[0]), y]) + np.sum(sg.logsumexp(Z * 3.0, axis=0))
            + np.sum(sg.softmax(Z)[:, 0] ** 2))


def test_a_classifier_loss_traced_rolled_element_by_element_and_on_the_vm():
    X, W, y = RNG.normal(size=(20, 10)) * 20, RNG.normal(size=(10, 5)), RNG.integers(0, 5, size=20)
    value, g = sg.value_and_grad(_loss, backend="python")(W, X, y)
    assert value == pytest.approx(_loss(W, X, y), rel=1e-12)
    assert sg.value_and_grad(_loss, backend="python").trace(W, X, y).indexed
    v_vm, g_vm = sg.value_and_grad(_loss, backend="vm")(W, X, y)
    np.testing.assert_allclose(g_vm, g, rtol=1e-12, atol=1e-12)
    saved, limits.ROLLED_MIN = limits.ROLLED_MIN, 10**9
    try:
        _, g_el = sg.value_and_grad(_loss, backend="python")(W, X, y)
    finally:
        limits.ROLLED_MIN = saved
    np.testing.assert_allclose(g_el, g, rtol=1e-12, atol=1e-12)
    D, h = RNG.normal(size=W.shape), 1e-6
    fd = (_loss(W + h * D, X, y) - _loss(W - h * D, X, y)) / (2 * h)
    assert np.sum(g * D) == pytest.approx(fd, rel=1e-6)


def test_the_gradient_of_logsumexp_is_the_softmax_even_at_ties():
    x = np.array([2.0, 2.0, -1.0, 2.0] * 20)
    np.testing.assert_allclose(sg.grad(sg.logsumexp)(x), ss.softmax(x), rtol=1e-14)
    np.testing.assert_allclose(sg.grad(lambda v: sg.log_softmax(v)[3])(x), np.eye(80)[3] - ss.softmax(x),
                               rtol=1e-12)


@pytest.mark.parametrize("n", [5, 100])  # element by element, rolled
@pytest.mark.parametrize("name", ["expit", "log_expit", "logit", "erf", "erfc", "ndtr", "entr", "xlogy",
                                  "xlog1py"])
def test_scipy_special_ufuncs_on_traced_arrays(name, n):
    f = getattr(ss, name)
    x = np.linspace(0.05, 0.95, n)
    fn = (lambda v: np.sum(f(v, v + 1.0))) if f.nin == 2 else (lambda v: np.sum(f(v)))
    assert sg.jit(fn)(x) == pytest.approx(fn(x), rel=1e-13)
    h = 1e-6
    np.testing.assert_allclose(sg.grad(fn)(x), [(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in np.eye(n)],
                               rtol=1e-6, atol=1e-8)


def test_scipys_python_functions_on_traced_arrays_name_the_traced_namesake():
    """scipy.special.logsumexp assigns through masks: given traced arrays it failed deep inside SciPy (a raw
    IndexError after the element trace too); the error now names the function, the line and the
    replacement (symgrad.scipy.special.logsumexp), which gives SciPy's value and the softmax."""
    x = np.random.default_rng(3).normal(size=200)
    with pytest.raises(sg.TracingError, match=r"scipy.special.logsumexp computes on numbers.*_logsumexp.py:\d+.*"
                                              r"use symgrad.scipy.special.logsumexp"):
        sg.grad(lambda x: ss.logsumexp(x))(x)
    from symgrad.ports.scipy.special import logsumexp
    value, grad = sg.value_and_grad(lambda x: logsumexp(x))(x)
    assert value == pytest.approx(ss.logsumexp(x), rel=1e-14)
    np.testing.assert_allclose(grad, ss.softmax(x), rtol=1e-13)


def test_compiled_gamma_family_matches_scipy():
    """compile/special.py's gammaln, digamma and polygamma (Numba has only lgamma) against SciPy at 10**4
    points from -30 to 1e6 and at the poles; the tolerance grows with the conditioning |x f'(x) / f(x)|
    near roots and poles, where SciPy and an exact value differ as much."""
    from symgrad.compile import special

    rng = np.random.default_rng(4)
    xs = np.concatenate([rng.uniform(-30, 30, 4000), rng.uniform(0, 3, 2000), np.exp(rng.uniform(-20, 14, 3000)),
                         -np.exp(rng.uniform(-20, 3, 1000))])
    cases = [("gammaln", special.gammaln, ss.gammaln, ss.psi), ("digamma", special.digamma, ss.psi,
                                                               lambda x: ss.polygamma(1, x))]
    cases += [(f"polygamma {n}", lambda x, n=n: special.polygamma(float(n), x), lambda x, n=n: ss.polygamma(n, x),
               lambda x, n=n: ss.polygamma(n + 1, x)) for n in (1, 2, 3, 6)]
    with np.errstate(all="ignore"):
        for name, ours, ref, slope in cases:
            got, want = np.array([ours(x) for x in xs]), ref(xs)
            tol = 1e-13 * (np.abs(want) + np.abs(xs * slope(xs))) + 1e-15
            assert np.all(np.abs(got - want) <= tol), (name, xs[~(np.abs(got - want) <= tol)][:5])
    edges = [0.0, -0.0, -1.0, -2.0, np.inf, -np.inf, np.nan]
    for n in (0.0, 1.0, 2.0, 3.0, np.inf, 171.0, 0.5, -1.0):
        with np.errstate(all="ignore"):
            want = ss.polygamma(n, np.array(edges)) if n != 0.0 else ss.psi(np.array(edges))
        got = [special.polygamma(n, x) for x in edges]
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}")
        # (the sign of a zero too: psi_2(inf) is -0.0, and x // psi_2(inf) is -inf: found by random graphs)
        zeros = np.asarray(want) == 0.0
        np.testing.assert_array_equal(np.signbit(got)[zeros], np.signbit(want)[zeros], err_msg=f"n={n}")
    np.testing.assert_array_equal([special.gammaln(x) for x in edges], ss.gammaln(np.array(edges)))


@pytest.mark.parametrize("n", [12, 3000])  # element by element, and rolled
def test_likelihoods_through_gammaln_to_third_order_on_every_backend(n):
    """A negative binomial log-likelihood in its dispersion r: gradient digamma, Hessian polygamma(1, .)
    (diagonal), the Hessian's own derivative polygamma(2, .), on the interpreter, the VM and Numba; SciPy's
    own ufuncs (scipy.special.gammaln, psi) trace as the same ops."""
    rng = np.random.default_rng(5)
    k, r = rng.poisson(3.0, size=n).astype(float), np.exp(rng.normal(size=n))

    def loglik(r, k):
        return np.sum(sg.gammaln(k + r) - ss.gammaln(r) - sg.gammaln(k + 1.0) + r * np.log(0.5))

    want = [np.sum(ss.gammaln(k + r) - ss.gammaln(r) - ss.gammaln(k + 1.0) + r * np.log(0.5)),
            ss.psi(k + r) - ss.psi(r) + np.log(0.5), ss.polygamma(1, k + r) - ss.polygamma(1, r),
            ss.polygamma(2, k + r) - ss.polygamma(2, r)]
    v = np.ones(n)
    for backend in ("python", "vm", "numba"):
        value, grad = sg.value_and_grad(loglik, backend=backend)(r, k)
        assert value == pytest.approx(want[0], rel=1e-13)
        np.testing.assert_allclose(grad, want[1], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(sg.hvp(loglik, backend=backend)(r, k, v), want[2], rtol=1e-12, atol=1e-13)
    third = sg.grad(lambda r, k: np.sum(sg.hvp(loglik)(r, k, v)), backend="vm")(r, k)
    np.testing.assert_allclose(third, want[3], rtol=1e-11, atol=1e-12)


def test_digamma_polygamma_and_multigammaln_follow_scipy():
    x = np.exp(np.random.default_rng(6).normal(size=70)) + 0.5
    g = sg.grad(lambda x: np.sum(sg.digamma(x) * sg.polygamma(1, x)))(x)
    np.testing.assert_allclose(g, ss.polygamma(1, x) ** 2 + ss.psi(x) * ss.polygamma(2, x), rtol=1e-12)
    from symgrad.ports.scipy.special import multigammaln, psi
    value, grad = sg.value_and_grad(lambda a: np.sum(multigammaln(a, 3)))(x + 1.0)
    assert value == pytest.approx(np.sum(ss.multigammaln(x + 1.0, 3)), rel=1e-13)
    np.testing.assert_allclose(grad, ss.psi(x + 1.0) + ss.psi(x + 0.5) + ss.psi(x), rtol=1e-12)
    assert psi(2.0) == pytest.approx(ss.psi(2.0), rel=1e-15)
    with pytest.raises(ValueError, match="whole number"):
        sg.polygamma(1.5, x)
    with pytest.raises(sg.TracingError, match="order n is traced"):
        sg.grad(lambda x: np.sum(sg.polygamma(x[0], x)))(x)
    with pytest.raises(sg.TracingError, match="scipy.special.polygamma computes on numbers.*"
                                              "use symgrad.scipy.special.polygamma"):
        sg.grad(lambda x: np.sum(ss.polygamma(1, x)))(x)


def test_polygamma_below_zero_reflects_to_three_positive_points():
    """psi_n at negative x summed its terms 1/(x + j)**(n+1) up from x one by one: polygamma(1, -1e15 - 0.5)
    never returned (SciPy's does not either). Reflected, against mpmath: also where SciPy's sum loses six
    digits (psi_10(-3.5)) and next to 0 and to the poles (1 - f exact there)."""
    import mpmath

    from symgrad.compile import special

    mpmath.mp.dps = 30
    xs = [-3.5, -0.5, -1e-9, -1 + 1e-9, -2.9999999, -7.25, -29.9, -1000.5]
    for n in (1, 2, 3, 10):
        for x in xs:
            want = float(mpmath.polygamma(n, x))
            assert special.polygamma(float(n), x) == pytest.approx(want, rel=5e-13), (n, x)
    x = mpmath.mpf(-1e15 - 0.25)  # (mpmath's sum takes as long: psi_1(x) = pi**2 / sin(pi x)**2 - psi_1(1 - x))
    want = float(mpmath.pi ** 2 / mpmath.sin(mpmath.pi * x) ** 2 - mpmath.polygamma(1, 1 - x))
    assert special.polygamma(1.0, -1e15 - 0.25) == pytest.approx(want, rel=1e-14)
