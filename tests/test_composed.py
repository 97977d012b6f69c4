"""NumPy functions written with the rolled primitives (symgrad/expr/composed.py): each traced rolled, its
value NumPy's, its gradient equal to the element-by-element trace's (NumPy's own code on expressions) and
to central differences, on the interpreter and the loop VM."""

import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.trace import limits

RNG = np.random.default_rng(0)
X = RNG.normal(size=120)
M = lambda x, *shape: x[:int(np.prod(shape))].reshape(shape)  # noqa: E731

CASES = {
    "zeros_like ones_like full_like": lambda x: np.sum(np.zeros_like(x) + x * np.ones_like(x)
                                                       + np.full_like(x, 2.0) * x + np.full_like(x, x[0]) * x),
    "shape ndim size copy round": lambda x: np.sum(np.copy(x) ** 2) * np.shape(x)[0] + np.ndim(x) + np.size(x)
    + np.sum(np.round(x, 1) * x),
    "flip": lambda x: np.sum(np.flip(x) * x) + np.sum(np.flip(M(x, 10, 12), 1)[0] * x[:12])
    + np.sum(np.flipud(M(x, 10, 12))[0] * x[:12]),
    "roll": lambda x: np.sum(np.roll(x, 3) * x) + np.sum(np.roll(M(x, 10, 12), 5)[0] * x[:12])
    + np.sum(np.roll(M(x, 10, 12), (1, -2), axis=(0, 1))[:, 0] * x[:10]),
    "diff": lambda x: np.sum(np.diff(x) ** 2) + np.sum(np.diff(M(x, 10, 12), n=2, axis=0) ** 2)
    + np.sum(np.diff(x, prepend=0.5, append=[1.0]) ** 3),
    "tile repeat take": lambda x: np.sum(np.tile(x[:7], 3) * x[:21]) + np.sum(np.tile(M(x, 2, 3), (2, 2, 1)) ** 2)
    + np.sum(np.repeat(x[:10], 2) * x[:20]) + np.sum(np.repeat(M(x, 3, 4), [1, 2, 3], axis=0) ** 2)
    + np.sum(np.take(x, [1, 5, 5, 2]) ** 2) + np.sum(np.take(M(x, 10, 12), [0, 3], axis=1) ** 2),
    "append concatenate": lambda x: np.sum(np.append(x, 1.0) ** 2)
    + np.sum(np.append(M(x, 10, 12), np.ones((10, 1)), axis=1) ** 3) + np.sum(np.concatenate([x, [1.0, 2.0]]) ** 2)
    + np.sum(np.concatenate([M(x, 10, 12), M(x, 10, 12)], axis=None)),
    "triu tril trace": lambda x: np.sum(np.triu(M(x, 10, 10)) ** 2) + np.sum(np.tril(M(x, 10, 10), -1) * 3)
    + np.trace(M(x, 10, 10)) + np.trace(M(x, 10, 10), offset=2) + np.trace(M(x, 10, 10), offset=-3) ** 2
    + np.sum(np.trace(M(x, 2, 6, 10), axis1=1, axis2=2)),
    "diag diagonal diagflat": lambda x: np.sum(np.diag(M(x, 10, 10)) ** 2) + np.sum(np.diag(M(x, 10, 12), -2) ** 3)
    + np.sum(np.diag(x[:9]) @ x[10:19]) + np.sum(np.diag(x[:5], 2) ** 2 * np.arange(7))
    + np.sum(np.sin(np.diagflat(M(x, 2, 3), -1))) + np.sum(np.diagonal(M(x, 2, 6, 10), 1, 1, 2) ** 2),
    "vdot cross kron": lambda x: np.vdot(x, x[::-1]) + np.sum(np.cross(M(x, 20, 3), x[60:].reshape(20, 3)) ** 2)
    + np.sum(np.kron(x[:8], x[8:16]) ** 2) + np.sum(np.kron(M(x, 2, 3), x[6:18].reshape(3, 4)) ** 2),
    "cumprod": lambda x: np.sum(np.cumprod(x[:10] * 0.5 + 1)) + np.sum(np.cumprod(M(x, 10, 12) * 0.3 + 1, axis=1)),
    "accumulate": lambda x: np.sum(np.maximum.accumulate(x) * x) + np.sum(np.multiply.accumulate(x[:8] * 0.5 + 1))
    + np.sum(np.minimum.accumulate(M(x, 10, 12), axis=0) ** 2),
}


def _element(fn, x):
    saved, limits.ROLLED_MIN = limits.ROLLED_MIN, 10**9
    try:
        return sg.value_and_grad(fn, backend="python")(x)
    finally:
        limits.ROLLED_MIN = saved


@pytest.mark.parametrize("name", CASES)
def test_rolled_numpy_functions_agree_with_numpy_the_element_trace_and_finite_differences(name):
    fn = CASES[name]
    F = sg.value_and_grad(fn, backend="python")
    F._fallback = False  # no element-by-element fallback: the rolled form must exist
    value, grad = F(X)
    assert F.trace(X).indexed
    assert value == pytest.approx(fn(X), rel=1e-12, abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        want_value, want = _element(fn, X)
    assert value == pytest.approx(want_value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(grad, want, rtol=1e-11, atol=1e-11)
    vm_value, vm_grad = sg.value_and_grad(fn, backend="vm")(X)
    assert vm_value == pytest.approx(value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(vm_grad, grad, rtol=1e-12, atol=1e-12)
    d, h = RNG.normal(size=X.shape), 1e-6
    fd = (fn(X + h * d) - fn(X - h * d)) / (2 * h)
    assert np.sum(grad * d) == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_what_has_no_rolled_form_says_why():
    x = sg.array("x", 70)
    with pytest.raises(sg.TracingError, match=r"np.where\(condition, x, y\)"):
        np.where(x > 0)
    with pytest.raises(sg.TracingError, match="vectors on the last axis"):
        np.cross(x[:6].reshape(2, 3), x[6:12].reshape(2, 3), axis=0)


@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_numpys_own_array_making_sees_the_elements_of_rolled_arrays():
    """np.array([x, x]), np.r_, np.asarray and len() in traced code: NumPy's shapes and numbers (np.array of
    two rolled arrays was an object array of two entries, so np.mean(np.sum(np.array([x, x]))) gave a
    hundredth of NumPy's value)."""
    cases = [lambda x: np.mean(np.sum(np.array([x, x]))),
             lambda x: np.sum(np.array([x, 2 * x]).T[0] * np.arange(2)),
             lambda x: np.sum(np.r_[x, x] ** 2) + np.sum(np.c_[x, x][:, 1]),
             lambda x: np.sum(np.asarray(x) ** 2), lambda x: np.sum(x) * len(x),
             lambda x: np.sum([v ** 2 for v in x[:5]])]
    for fn in cases:
        value, grad = sg.value_and_grad(fn)(X)
        assert value == pytest.approx(fn(X), rel=1e-12)
        d, h = RNG.normal(size=X.shape), 1e-6
        assert np.sum(grad * d) == pytest.approx((fn(X + h * d) - fn(X - h * d)) / (2 * h), rel=1e-6, abs=1e-6)
    with pytest.raises(sg.TracingError, match="cannot convert the symbolic expression"):
        sg.grad(lambda x: np.sum(np.asarray(x, dtype=float)))(X)
    with pytest.raises(TypeError, match="len\\(\\) of a scalar expression"):
        len(np.sum(sg.array("x", 3)))


def test_broadcast_to_is_rolled_and_refuses_the_shapes_numpy_refuses():
    """np.broadcast_to traced whole (it fell back to element tracing), values and gradient against NumPy's;
    a shape of floats, bools or negative sizes, or one the array cannot broadcast to, raises as NumPy does."""
    x = np.random.default_rng(2).normal(size=100)

    def f(x):
        return np.sum(np.sin(np.broadcast_to(x[:70], (3, 70))) * np.arange(210.0).reshape(3, 70)) + np.sum(
            np.broadcast_to(x[5], (4,)))

    g = sg.value_and_grad(f, backend="vm")
    value, grad = g(x)
    assert "rolled" in g.explain() and value == pytest.approx(f(x), rel=1e-13)
    want = np.zeros(100)
    want[:70] = np.cos(x[:70]) * np.arange(210.0).reshape(3, 70).sum(0)
    want[5] += 4.0
    np.testing.assert_allclose(grad, want, rtol=1e-12)
    for shape, error in [((1.5, 70), TypeError), ((True, 70), TypeError), ((-1, 70), ValueError),
                         ((70, 2), ValueError), ((2, 71), ValueError)]:
        with pytest.raises(error):
            np.broadcast_to(np.ones(70), shape)
        with pytest.raises((error, sg.TracingError)) as got:
            sg.jit(lambda x, shape=shape: np.sum(np.broadcast_to(x[:70], shape)), backend="vm")(x)
        assert "shape" in str(got.value) or "integer" in str(got.value) or "broadcast" in str(got.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (an empty result: traced element by element, as NumPy makes it)
        empty = sg.jit(lambda x: np.broadcast_to(x[:70].reshape(70, 1), (70, 0)), backend="vm")(x)
    assert np.shape(empty) == (70, 0)
