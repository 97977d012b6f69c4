"""np.sort and what builds on it (np.argsort, np.partition, np.median, np.quantile, np.percentile) on
traced arrays: values against NumPy (nan last, ties, infinities), first and second derivatives against
central differences, on arrays traced element by element (the sorting network) and rolled (the argsort
node), on every backend; the network checked by the 0-1 principle; forward mode, vmap and saving."""

import itertools

import numpy as np
import pytest
from backends import central_differences as _fd
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr.sorting import network

RNG = np.random.default_rng(41)
METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "inverted_cdf", "averaged_inverted_cdf",
           "closest_observation", "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased",
           "normal_unbiased"]


def _distinct(shape):
    """Values apart by more than the difference step (no tie moves under it), shuffled, within -3 .. 3
    (cubes of larger ones make finite differences round past the tolerance)."""
    n = int(np.prod(shape))
    step = min(0.37, 6.0 / n)
    return (RNG.permutation(n) * step + RNG.uniform(-0.1, 0.1, n) * step - n * step / 2).reshape(shape)


@pytest.mark.parametrize("n", range(1, 13))
def test_the_network_sorts_every_zero_one_input(n):
    """Batcher's network with its comparators past n dropped sorts n values: by the 0-1 principle, it is
    enough that it sorts each of the 2**n sequences of zeros and ones."""
    pairs = network(n)
    for bits in itertools.product((0, 1), repeat=n):
        row = list(bits)
        for i, j in pairs:
            if row[i] > row[j]:
                row[i], row[j] = row[j], row[i]
        assert row == sorted(bits)


@pytest.mark.parametrize("n", [13, 17, 31, 33, 63])
def test_the_network_sorts_random_rows(n):
    for _ in range(200):
        row = list(RNG.integers(0, 6, n))
        want = sorted(row)
        for i, j in network(n):
            if row[i] > row[j]:
                row[i], row[j] = row[j], row[i]
        assert row == want


CASES = {  # name -> (function of the array, shapes): small shapes trace element by element, large ones rolled
    "sort": (lambda a: np.sort(a), [(7,), (70,)]),
    "sort axis 0": (lambda a: np.sort(a, axis=0), [(3, 4), (9, 8)]),
    "sort axis None": (lambda a: np.sort(a, axis=None), [(3, 4), (9, 8)]),
    "median": (lambda a: np.median(a), [(7,), (70,)]),
    "median even": (lambda a: np.median(a, axis=1), [(3, 4), (9, 8)]),
    "median axes": (lambda a: np.median(a, axis=(0, 2), keepdims=True), [(2, 3, 4), (4, 5, 4)]),
    "quantile": (lambda a: np.quantile(a, 0.3), [(7,), (70,)]),
    "quantiles": (lambda a: np.quantile(a, [[0.1, 0.5], [0.75, 1.0]], axis=0), [(5, 3), (9, 8)]),
    "percentile": (lambda a: np.percentile(a, [12.5, 90], axis=-1, keepdims=True), [(3, 5), (9, 8)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_against_numpy(name):
    f, shapes = CASES[name]
    for shape in shapes:
        x = _distinct(shape)
        w = RNG.uniform(0.5, 1.5, np.shape(f(x)))
        loss = lambda a, w=w: np.sum(f(a) ** 3 * w)  # noqa: E731
        fd = _fd(loss, x)
        for backend in ["python", "vm"]:
            np.testing.assert_array_equal(sg.jit(f, backend=backend)(x), f(x))
            g = sg.grad(loss, backend=backend)(x)
            # (the differences' rounding: eps |f| / h, f up to 1e5 here)
            atol = 1e-6 + 1e-9 * abs(loss(x))
            np.testing.assert_allclose(g, fd, rtol=1e-6, atol=atol, err_msg=f"{name} {shape} {backend}")


@pytest.mark.parametrize("shape", [(6,), (66,)])
def test_partition_puts_the_kth_in_place(shape):
    """NumPy leaves the order on either side of kth to its algorithm: checked are the kth element, the sides
    and the values (symgrad's is the sorted order, one such order)."""
    x = _distinct(shape)
    for backend in ["python", "vm"]:
        p = sg.jit(lambda a: np.partition(a, [1, 4]), backend=backend)(x)
        assert p[1] == np.partition(x, 1)[1] and p[4] == np.partition(x, 4)[4]
        assert p[:1].max() <= p[1] <= p[2:].min() and p[:4].max() <= p[4] <= p[5:].min()
        np.testing.assert_array_equal(np.sort(p), np.sort(x))


@pytest.mark.parametrize("shape", [(9,), (72,)])
def test_compiled_loops_and_kernels(shape):
    x = _distinct(shape)
    f = lambda a: np.sum(np.sort(a) * np.arange(a.size)) + np.median(a) ** 2 + np.quantile(a, 0.6)  # noqa: E731
    v, g = sg.value_and_grad(f, backend="numba")(x)
    np.testing.assert_allclose(v, f(x), rtol=1e-14)
    np.testing.assert_allclose(g, _fd(f, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(6,), (70,)])
def test_hessians_against_differences_of_the_gradient(shape):
    x = _distinct(shape)
    f = lambda a: np.sum(np.sort(a) ** 3 * np.linspace(-1, 1, a.size)) + np.median(a * a) ** 2  # noqa: E731
    for backend in ["python", "vm"]:
        H = sg.hessian(f, backend=backend)(x)
        grad = sg.grad(f, backend=backend)
        ref = np.array([_fd(lambda z, k=k, grad=grad: grad(z)[k], x) for k in range(x.size)])
        np.testing.assert_allclose(H, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size", [5, 70])
def test_nan_goes_last_and_infinities_sort(size):
    x = _distinct((size,))
    x[1], x[3], x[4] = np.nan, np.inf, -np.inf
    for backend in ["python", "vm"]:
        np.testing.assert_array_equal(sg.jit(np.sort, backend=backend)(x), np.sort(x))
        assert np.isnan(sg.jit(np.median, backend=backend)(x))
        assert np.isnan(sg.jit(lambda a: np.quantile(a, 0.2), backend=backend)(x))
        g = sg.grad(lambda a: np.sort(a)[0] * 2.0 + np.sort(a)[1], backend=backend)(x)
        assert g[4] == 2.0 and g[np.argsort(x)[1]] == 1.0


@pytest.mark.parametrize("size", [6, 70])
def test_ties_follow_the_stable_order(size):
    x = np.round(RNG.uniform(0, 3, size))
    w = RNG.uniform(0.5, 1.5, size)
    for backend in ["python", "vm"]:
        g = sg.grad(lambda a: np.sum(np.sort(a) * w), backend=backend)(x)
        # a stable sort's: the k-th sorted entry is x[argsort(x, stable)[k]], on both paths alike
        np.testing.assert_array_equal(g[np.argsort(x, kind="stable")], w)


@pytest.mark.parametrize("method", METHODS)
def test_every_quantile_method_matches_numpy(method):
    for shape in [(7,), (66,)]:
        x = _distinct(shape)
        q = np.array([0.0, 0.05, 0.33, 0.5, 0.9, 1.0])
        w = RNG.uniform(0.5, 1.5, q.size)
        f = lambda a, q=q: np.quantile(a, q, method=method)  # noqa: E731
        loss = lambda a, f=f, w=w: np.sum(f(a) * w)  # noqa: E731
        np.testing.assert_allclose(sg.jit(f, backend="python")(x), f(x), rtol=1e-14, atol=1e-14)
        g = sg.grad(loss, backend="python")(x)
        np.testing.assert_allclose(g, _fd(loss, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [5, 70])
def test_argsort_indexes_the_array(size):
    x = _distinct((size,))
    y = RNG.normal(size=size)
    f = lambda a, b: np.sum(b[np.argsort(a)] * a[np.argsort(a)] * np.arange(size))  # noqa: E731
    for backend in ["python", "vm"]:
        np.testing.assert_array_equal(sg.jit(lambda a: np.argsort(a) * 1.0, backend=backend)(x), np.argsort(x))
        np.testing.assert_allclose(sg.jit(f, backend=backend)(x, y), f(x, y), rtol=1e-14)
        g = sg.grad(f, argnums=(0, 1), backend=backend)(x, y)
        np.testing.assert_allclose(g[0], _fd(lambda a: f(a, y), x), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(g[1], _fd(lambda b: f(x, b), y), rtol=1e-6, atol=1e-6)


def test_forward_mode_and_vmap():
    x, v = _distinct((70,)), RNG.normal(size=70)
    f = lambda a: np.sort(a) ** 2  # noqa: E731
    _, t = sg.jvp(f, (x,), (v,))
    np.testing.assert_allclose(t, 2 * np.sort(x) * v[np.argsort(x)], rtol=1e-14)
    xs = _distinct((5, 70))
    batched = sg.vmap(lambda a: np.median(a) + np.sort(a)[3])(xs)
    np.testing.assert_allclose(batched, np.median(xs, axis=1) + np.sort(xs, axis=1)[:, 3], rtol=1e-15)


def test_saved_and_loaded():
    x = sg.array("x", (4, 5))
    e = np.sort(x, axis=0) * 2.0
    back = sg.loads(sg.dumps(e))
    assert back is e
    value = RNG.normal(size=(4, 5))
    np.testing.assert_array_equal(sg.evaluate(back, {x: value}), np.sort(value, axis=0) * 2.0)
    assert "argsort(x, axis=0)" in str(e)
    v = sg.array("v", 5)
    g = sg.grad(np.median(v), [v])  # (its adjoint scatters a constant at one address: a scatter binding nothing)
    assert all(a is b for a, b in zip(sg.loads(sg.dumps(g)), g))


def test_refusals_name_their_cause():
    x = _distinct((6,))
    with pytest.raises(sg.TracingError, match="quantiles must be numbers known"):
        sg.grad(lambda a: np.quantile(a, a[0] * 0 + 0.5))(x)
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        sg.grad(lambda a: np.quantile(a, 1.5))(x)
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        sg.grad(lambda a: np.percentile(a, -1))(x)
    with pytest.raises(ValueError, match="kth"):
        sg.grad(lambda a: np.sum(np.partition(a, 9)))(x)
    with pytest.raises(np.exceptions.AxisError):
        sg.grad(lambda a: np.sum(np.sort(a, axis=1)))(x)
    with pytest.raises(ValueError, match="not a valid method"):
        sg.grad(lambda a: np.quantile(a, 0.5, method="fancy"))(x)
    with pytest.raises(sg.TracingError, match="weights"):
        sg.grad(lambda a: np.quantile(a, 0.5, method="inverted_cdf", weights=np.ones(6)))(x)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.5, 3.0, np.inf, -np.inf, np.nan]), min_size=1, max_size=12),
       st.booleans())
def test_random_rows_with_ties_and_specials_sort_as_numpy(values, rolled):
    x = np.array(values * (70 // len(values) + 1) if rolled else values)
    for backend in ["python", "vm"]:
        np.testing.assert_array_equal(sg.jit(np.sort, backend=backend)(x), np.sort(x))
        np.testing.assert_array_equal(sg.jit(np.median, backend=backend)(x), np.median(x))


@pytest.mark.parametrize("size", [6, 70])
def test_positions_are_integers_and_index_on_both_paths(size):
    x = _distinct((size,))
    idx = sg.jit(np.argsort)(x)
    assert idx.dtype == np.int64 and np.array_equal(idx, np.argsort(x))
    assert sg.jit(lambda a: np.argsort(a) * 1.0)(x).dtype == np.float64
    np.testing.assert_array_equal(sg.jit(lambda a: a.argsort() + 0)(x), np.argsort(x))
    np.testing.assert_array_equal(sg.jit(lambda a: a[np.argsort(a)[1]])(x), np.sort(x)[1])
    g = sg.grad(lambda a: a[np.argsort(a)[1]] ** 2)(x)
    np.testing.assert_array_equal(g, np.where(np.arange(size) == np.argsort(x)[1], 2 * np.sort(x)[1], 0.0))


def test_quantiles_at_infinities_and_empty_axes_are_numpys():
    for x in (np.array([1.0, 1.5, np.inf]), np.array([-np.inf, 1.0, 2.0]), np.r_[np.arange(70.0), np.inf]):
        q = [0.0, 0.25, 0.5, 1.0]
        with np.errstate(invalid="ignore"):
            want = np.quantile(x, q)
        np.testing.assert_array_equal(sg.jit(lambda a, q=q: np.quantile(a, q))(x), want)
    for shape in [(3, 4), (8, 10)]:
        a = _distinct(shape)
        np.testing.assert_array_equal(sg.jit(lambda v: np.median(v, axis=()))(a), a)
        np.testing.assert_array_equal(sg.jit(lambda v: np.quantile(v, [0.5], axis=()))(a), a[None])


def test_nan_ignoring_medians_and_in_place_sorts_say_what_to_write():
    x = _distinct((70,))
    with pytest.raises(sg.TracingError, match="np.nanmedian's sorted entries depend on how many are nan"):
        sg.jit(np.nanmedian)(x)
    b = sg.array("b", 70)
    with pytest.raises(TypeError, match="in place"):
        b.sort()


@pytest.mark.parametrize("shape", [(3, 4), (9, 8)])
def test_take_along_axis_with_traced_positions(shape):
    x, y = _distinct(shape), RNG.normal(size=shape)
    w = np.arange(x.size, dtype=float).reshape(shape)
    for axis in (0, 1, -1):
        f = lambda a, b, axis=axis: np.take_along_axis(b, np.argsort(a, axis=axis), axis=axis)  # noqa: E731
        np.testing.assert_array_equal(sg.jit(f)(x, y), f(x, y))
        g = sg.grad(lambda a, b, f=f: np.sum(f(a, b) * w), argnums=1)(x, y)
        want = np.zeros(shape)
        np.put_along_axis(want, np.argsort(x, axis=axis), w, axis=axis)
        np.testing.assert_array_equal(g, want)
    first = lambda a: np.take_along_axis(a, np.argsort(a, axis=1)[:, :1], axis=1)  # noqa: E731
    np.testing.assert_array_equal(sg.jit(first)(x), np.sort(x, axis=1)[:, :1])
    fixed = np.argsort(y, axis=0)
    np.testing.assert_array_equal(sg.jit(lambda a: np.take_along_axis(a, fixed, axis=0))(x),
                                  np.take_along_axis(x, fixed, axis=0))
