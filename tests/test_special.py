"""sg.logsumexp / sg.softmax / sg.log_softmax: SciPy's values at any magnitude, the textbook derivatives,
on NumPy arrays and traced arrays (rolled, element by element, loop VM) alike."""

import numpy as np
import pytest
import scipy.special as ss

import symgrad as sg
from symgrad import trace

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
    saved, trace.ROLLED_MIN = trace.ROLLED_MIN, 10**9
    try:
        _, g_el = sg.value_and_grad(_loss, backend="python")(W, X, y)
    finally:
        trace.ROLLED_MIN = saved
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
    from symgrad.scipy.special import logsumexp
    value, grad = sg.value_and_grad(lambda x: logsumexp(x))(x)
    assert value == pytest.approx(ss.logsumexp(x), rel=1e-14)
    np.testing.assert_allclose(grad, ss.softmax(x), rtol=1e-13)
