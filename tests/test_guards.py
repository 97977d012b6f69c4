"""Python control flow on traced values (symgrad/guards.py): decided by the call's values as JAX's grad
without jit runs it, the derivative that of the branch taken, and a later call whose values take another
branch traced again (never the old kernel)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg


def _fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def test_jax_control_flow_example_takes_each_branch_and_switches_back():
    def f(x):
        if x < 3:
            return 3.0 * x ** 2
        return -4 * x

    g = sg.grad(f)
    for x, want in [(2.0, 12.0), (4.0, -4.0), (1.0, 6.0), (5.0, -4.0), (2.5, 15.0)]:
        assert g(x) == want
    assert sg.jit(f)(4.0) == -16.0 and sg.jit(f)(1.0) == 3.0


def _particle(w):
    """GradBench's particle, in one dimension: a loop while the particle is above ground."""
    x, v = 1.0, 0.5
    while x > 0.0:
        x, v = x + 0.1 * v, v - 0.1 * w * (1.0 + x * x)
    return x


@pytest.mark.parametrize("w", [0.6, 1.0, 2.0, 3.5])
def test_a_while_loop_on_traced_values_first_and_second_derivatives(w):
    g = sg.grad(_particle)
    assert g(w) == pytest.approx(_fd(_particle, w), rel=1e-7)
    assert sg.grad(sg.grad(_particle))(w) == pytest.approx(_fd(lambda u: _fd(_particle, u, 1e-4), w, 1e-4),
                                                           rel=1e-4)
    assert sg.jvp(_particle, (w,), (1.0,))[1] == pytest.approx(g(w), rel=1e-12)


@pytest.mark.parametrize("n", [8, 100])  # element by element, rolled
def test_conditions_on_arrays(n):
    def f(v):
        total = 0.0
        if np.sum(v) > 0:
            total = np.sum(v ** 2)
        else:
            total = np.sum(np.sin(v))
        if v[0] > v[-1]:
            total = total * 2.0
        return total

    x = np.linspace(-1.0, 1.0, n)
    g = sg.grad(f)
    for shift, flip in [(0.1, False), (-0.1, False), (0.1, True), (-0.1, True)]:
        u = x[::-1] + shift if flip else x + shift
        want = (2 * u if np.sum(u) > 0 else np.cos(u)) * (2.0 if u[0] > u[-1] else 1.0)
        np.testing.assert_allclose(g(u), want, rtol=1e-13)


@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_vmap_rows_each_take_their_branch():
    def branchy(v):
        if v[0] > 0:
            return v[0] * v[1]
        return -v[1]

    rows = np.outer(np.where(np.arange(100) % 3, 1.0, -1.0), [1.0, 2.0])
    got = sg.vmap(sg.grad(branchy))(rows)
    np.testing.assert_array_equal(got, np.where(rows[:, :1] > 0, rows[:, ::-1], [[0.0, -1.0]]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2.0, 2.0), min_size=1, max_size=4), st.floats(-3.0, 3.0), st.floats(-3.0, 3.0))
def test_random_piecewise_functions_match_python_and_finite_differences(cuts, a, b):
    """Thresholds in Python ifs, a counter loop whose length depends on the value: the traced function is
    the Python function at every point, its derivative the branch's (away from the cuts)."""
    def f(x):
        y = x
        for c in cuts:
            y = np.sin(y) * 2.0 if y > c else y * y - c
        k = 0
        while y < 5.0 and k < 6:
            y, k = y + 1.3, k + 1
        return y * x

    g, F = sg.grad(f), sg.jit(f)
    for x in (a, b, a, b):  # (again: the guards of the last trace decide whether to reuse it)
        assert F(x) == pytest.approx(f(x), rel=1e-13, abs=1e-13)
        near = min([abs(x - c) for c in cuts] + [1.0])
        if near > 1e-3:
            assert g(x) == pytest.approx(_fd(f, x), rel=1e-5, abs=1e-5)


def _signed(w, x):
    if x[0] > 0:
        return np.sum(w * x)
    return 10.0 * np.sum(np.sin(w * x))


@pytest.mark.parametrize("n", [3, 300])  # element by element, rolled
def test_sum_over_rows_takes_each_rows_branch(n):
    rng = np.random.default_rng(n)
    w, X = rng.normal(size=n), rng.normal(size=(40, n))
    vg = sg.value_and_grad(_signed)
    value, grad = vg.sum(w, X)
    rows = [vg(w, x) for x in X]
    assert value == pytest.approx(sum(v for v, _ in rows), rel=1e-12)
    np.testing.assert_allclose(grad, sum(g for _, g in rows), rtol=1e-12)


def test_a_trace_refuses_arguments_that_take_another_branch():
    vg = sg.value_and_grad(_signed)
    w = np.ones(3)
    t = vg.trace(w, np.array([1.0, 2.0, 3.0]))
    assert t((w, np.array([2.0, 2.0, 3.0])), {})[0] == 7.0
    with pytest.raises(ValueError, match=r"x\[0\] > 0 is True"):
        t((w, np.array([-1.0, 2.0, 3.0])), {})


def test_each_branch_is_traced_once():
    g = sg.grad(lambda x: np.sum(x) if x[0] > 0 else -np.sum(x ** 2))
    for i in range(10):
        x = np.array([(-1.0) ** i, 2.0])
        np.testing.assert_array_equal(g(x), [1.0, 1.0] if i % 2 == 0 else -2 * x)
    assert len(g.explain().splitlines()) == 3  # the name, then one line per trace


def test_a_condition_on_captured_constants_is_decided_rolled():
    """The condition reads a NumPy constant the trace captured before it (a scatter's positions)."""
    def f(x):
        y = sg.numpy.asarray(x).at[np.array([0, 2, 0])].add(np.sin(x[:3]))
        return np.sum(y ** 2) if np.sum(y) > 0.5 else np.sum(np.cos(y))

    g = sg.grad(f)
    for x in (np.linspace(0.0, 1.0, 100), np.linspace(-1.0, 0.0, 100)):
        h = 1e-6 * np.eye(100)
        fd = [(f(x + e) - f(x - e)) / 2e-6 for e in h]
        np.testing.assert_allclose(g(x), fd, rtol=1e-6, atol=1e-8)
    assert "element by element" not in g.explain()


def test_a_loops_conditions_evaluate_each_node_once():
    """A while loop's conditions are decided as its graph grows: each step's condition evaluates the
    nodes that step added, not the whole graph again (300 steps: quadratic was 45,000+ evaluations;
    GradBench's particle traced 5x faster)."""
    from symgrad.expr import interp

    def fall(h):
        steps = 0.0
        while h > 0:
            h, steps = h - 0.01 * (1.0 + 0.001 * h * h), steps + 1.0
        return steps * h

    evaluated = []
    token = interp.OBSERVER.set(lambda node, value, operands: evaluated.append(node) or value)
    try:
        g = sg.grad(fall)(3.0)
    finally:
        interp.OBSERVER.reset(token)
    assert g == pytest.approx(_fd(fall, 3.0, 1e-7), rel=1e-3)
    assert len(evaluated) == len(set(evaluated)) < 10 * 300
