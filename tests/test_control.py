"""while_loop / fori_loop / cond / switch (sg.* and symgrad.lax): the values of the Python loop or branch
they stand for, derivatives against finite differences in every mode, and named mistakes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad import lax


def _fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def _particle(w, max_steps=200):
    """A falling particle pushed by w, stopped when it crosses 0 (GradBench's particle, in one dimension)."""
    def body(s):
        x, v = s
        return x + 0.1 * v, v - 0.1 * w * (1.0 + x * x)

    return sg.while_loop(lambda s: s[0] > 0.0, body, (1.0, 0.5), max_steps=max_steps)[0]


def _particle_python(w):
    x, v = 1.0, 0.5
    while x > 0.0:
        x, v = x + 0.1 * v, v - 0.1 * w * (1.0 + x * x)
    return x


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 4.0))
def test_a_traced_condition_is_a_bounded_loop_differentiable_in_every_mode(w):
    assert _particle(w) == pytest.approx(_particle_python(w), rel=1e-12, abs=1e-14)
    assert sg.jit(_particle)(w) == pytest.approx(_particle_python(w), rel=1e-12, abs=1e-14)
    g = sg.grad(_particle)(w)
    assert g == pytest.approx(_fd(_particle_python, w), rel=1e-5, abs=1e-7)
    assert sg.jvp(_particle, (w,), (1.0,))[1] == pytest.approx(g, rel=1e-12, abs=1e-14)


def test_the_bound_stops_the_loop_and_a_missing_bound_is_named():
    assert _particle(0.01, max_steps=3) == pytest.approx(1.0 + 0.1 * 0.5 * 3 - 0.1 * 0.1 * 0.01 * 6, rel=1e-2)
    unbounded = sg.grad(lambda w: sg.while_loop(lambda s: s > 0, lambda s: s - w, 1.0))  # decided by values
    assert unbounded(0.3) == -4.0 and unbounded(0.15) == -7.0
    with pytest.raises(sg.TracingError, match="max_steps=N"):  # no values: called on a symbol
        sg.grad(lambda w: sg.while_loop(lambda s: s > 0, lambda s: s - w, 1.0))(sg.Var("w"))
    with pytest.raises(ValueError, match="non-negative integer"):
        sg.while_loop(lambda s: s > 0, lambda s: s - 1, 1.0, max_steps=-1)
    with pytest.raises(TypeError, match="keep its shape"):
        sg.grad(lambda w: np.sum(sg.while_loop(lambda s: s[0] > 0, lambda s: s[:1] - w, np.ones(2) * w,
                                                max_steps=3)))(0.3)


def test_a_condition_python_decides_runs_in_python():
    assert sg.while_loop(lambda v: v[0] < 10, lambda v: (v[0] + 1, v[1] * 2.0), (0, 1.0)) == (10, 1024.0)

    def f(x):  # a counter in the carry: the loop unrolls, the body sees x traced
        return sg.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, np.sin(s[1])), (0, x))[1]

    assert sg.grad(f)(0.7) == pytest.approx(_fd(f, 0.7), rel=1e-8)


@pytest.mark.parametrize("n", [5, 100])  # element by element (a Python loop: x[i] of an object array), rolled
def test_fori_loop(n):
    x = np.linspace(0.1, 1.0, n)

    def f(x):
        return sg.fori_loop(0, n, lambda i, s: s * 0.9 + x[i] ** 2, 0.0)

    want = sum(x[i] ** 2 * 0.9 ** (n - 1 - i) for i in range(n))
    assert f(x) == pytest.approx(want, rel=1e-13)
    assert sg.jit(f)(x) == pytest.approx(want, rel=1e-13)
    np.testing.assert_allclose(sg.grad(f)(x), [2 * x[i] * 0.9 ** (n - 1 - i) for i in range(n)], rtol=1e-12)
    shaped = sg.grad(lambda x: sg.fori_loop(1, 3, lambda i, s: s + np.sum(x[:i] ** 2), 0.0))(x)  # i as a size
    np.testing.assert_allclose(shaped[:3], [4 * x[0], 2 * x[1], 0.0], rtol=1e-15)
    with pytest.raises(TypeError, match="must be an integer"):
        sg.fori_loop(0, 2.5, lambda i, s: s, 0.0)


@pytest.mark.parametrize("n", [4, 100])
def test_cond_and_switch(n):
    x = np.linspace(-1.0, 2.0, n)

    def f(x):
        return np.sum(sg.cond(np.sum(x) > 0, lambda a: a ** 2, lambda a: -a, x))

    np.testing.assert_allclose(sg.grad(f)(x), 2 * x, rtol=1e-15)
    np.testing.assert_allclose(sg.grad(f)(-x), -np.ones(n), rtol=1e-15)
    assert sg.cond(False, lambda a: a + 1, lambda a: a - 1, 1.0) == 0.0
    branches = [lambda a: a, lambda a: 2.0 * a, lambda a: a ** 2]
    for k in (-1.0, 0.0, 1.0, 2.0, 7.0):
        want = 2.0 if k == 1.0 else 2.0 * 3.0 if k >= 2 else 1.0
        assert sg.grad(lambda a, k: sg.switch(k, branches, a))(3.0, k) == want
        assert sg.switch(int(k), branches, 3.0) == branches[int(np.clip(k, 0, 2))](3.0)
    with pytest.raises(TypeError, match="structures"):
        sg.grad(lambda a: sg.cond(a > 0, lambda a: (a, a), lambda a: a, a))(1.0)


def test_the_lax_namespace():
    X = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(lax.map(lambda r: np.sum(r ** 2), X), np.sum(X ** 2, axis=1))
    np.testing.assert_allclose(sg.grad(lambda X: np.sum(lax.map(np.sin, X)))(X), np.cos(X), rtol=1e-15)
    np.testing.assert_allclose(lax.select(X > 2, X, -X), np.where(X > 2, X, -X))
    assert lax.scan is sg.scan and lax.while_loop is sg.while_loop and lax.stop_gradient is sg.stop_gradient


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_a_loop_counter_indexes_and_updates_arrays_in_one_scan(backend):
    """fori_loop's counter (a row of integers) and integer arithmetic on it ((i + 1) % n) gather and
    update rolled arrays: one scan node, not a Python loop of n steps."""
    n = 80
    x = np.random.default_rng(2).normal(size=n) * 0.1

    def h(x):
        return np.sum(sg.fori_loop(0, n, lambda i, y: y.at[i].set(y[i] * y[i] + y[(i + 1) % n]), x))

    def reference(x):
        y = x.copy()
        for i in range(n):
            y[i] = y[i] * y[i] + y[(i + 1) % n]
        return np.sum(y)

    F = sg.value_and_grad(h, backend=backend)
    value, g = F(x)
    assert value == pytest.approx(reference(x), rel=1e-13)
    eps = 1e-6
    np.testing.assert_allclose(g, [(reference(x + eps * e) - reference(x - eps * e)) / (2 * eps)
                                   for e in np.eye(n)], atol=1e-8)
    assert F._latest().indexed and sg.count_nodes(list(F._latest().flat)) < 100


def test_a_bounded_loop_reading_another_loops_result_differentiates_in_linear_size():
    """Newton's square root, then a fixed point that reads it (JAX's custom_vjp fixed-point example
    without its rule): each step's adjoint is a masked sum; distributing products over masked sums
    inside other distributions made the work double every two steps (N=16: 30 s)."""
    def fp(step, x0, n):
        _, x = sg.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-6, lambda c: (c[1], step(c[1])),
                             (x0, step(x0)), max_steps=n)
        return x

    def h(a, n):
        s = fp(lambda x: 0.5 * (x + a / x), a, n)
        return fp(lambda u: 1.0 + 0.25 * u * s, 1.0, n)

    sizes = []
    for n in (20, 40):
        g = sg.grad(h, static_argnums=1)
        fd = (h(2.0 + 1e-6, n) - h(2.0 - 1e-6, n)) / 2e-6
        assert g(2.0, n) == pytest.approx(fd, rel=1e-7)
        sizes.append(sg.count_nodes(g.derivatives))
    assert sizes[1] < 2.5 * sizes[0]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 7), st.integers(0, 2), st.booleans(), st.sampled_from(["add", "max", "mul", "pair"]),
       st.integers(0, 2**31 - 1))
def test_associative_scan_is_the_running_reduction(n, axis, reverse, how, seed):
    """lax.associative_scan against a Python loop of fn along the axis (from the end with reverse, as
    JAX's: the scan of the flipped elements, flipped), on pytrees; its gradient against differences."""
    rng = np.random.default_rng(seed)
    shape = [2, 3, 2]
    shape[axis] = n
    a, b = rng.normal(size=shape), rng.uniform(0.5, 1.5, size=shape)
    fn = {"add": np.add, "max": np.maximum, "mul": np.multiply,
          "pair": lambda p, q: (p[0] * q[1] + q[0], p[1] * q[1])}[how]
    elems = (a, b) if how == "pair" else a

    def loop(elems):
        leaves = [np.moveaxis(e, axis, 0) for e in (elems if how == "pair" else (elems,))]
        leaves = [e[::-1] for e in leaves] if reverse else leaves
        rows, out = [tuple(e[k] for e in leaves) for k in range(n)], []
        for row in rows:
            row = row if how == "pair" else row[0]
            out.append(row if not out else fn(out[-1], row))
        cols = [np.stack([o if how != "pair" else o[k] for o in out]) for k in range(2 if how == "pair" else 1)]
        cols = [c[::-1] for c in cols] if reverse else cols
        cols = [np.moveaxis(c, 0, axis) for c in cols]
        return tuple(cols) if how == "pair" else cols[0]

    got = lax.associative_scan(fn, elems, reverse=reverse, axis=axis)
    for g, w in zip(*(v if how == "pair" else (v,) for v in (got, loop(elems)))):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    total = lambda x: np.sum(np.sin(np.asarray(lax.associative_scan(  # noqa: E731
        fn, (x, b) if how == "pair" else x, reverse=reverse, axis=axis)[0 if how == "pair" else ...])))
    grad = sg.grad(total)(a)
    d = rng.normal(size=shape)
    fd = (total(a + 1e-6 * d) - total(a - 1e-6 * d)) / 2e-6
    assert np.sum(grad * d) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_lax_map_takes_batch_size_and_test_util_has_check_grads():
    xs = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(lax.map(lambda x: x + 1, xs, batch_size=3), xs + 1)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        lax.map(lambda x: x, xs, batch_size=0)
    from symgrad.test_util import check_grads
    check_grads(lambda x: np.sum(np.tanh(x) ** 3), (np.array([0.3, -0.7]),), order=2)
    with pytest.raises(AssertionError):
        check_grads(_wrong_sin, (0.5,), order=1)  # (a rule 10% off)


@sg.custom_jvp
def _wrong_sin(x):
    return np.sin(x)


@_wrong_sin.defjvp
def _wrong_sin_jvp(primals, tangents):
    return np.sin(primals[0]), 1.1 * np.cos(primals[0]) * tangents[0]
