"""sg.vmap against a Python loop over the rows, traced rolled (large batches: one extra index) and
element by element (small ones: one call per row); composed with grad, jacobian and itself."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.trace import limits

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
RNG = np.random.default_rng(7)


def loss(w, x, y):
    return (np.tanh(x @ w) - y) ** 2


def per_example_gradient(w, X, y):
    t = np.tanh(X @ w)
    return (2 * (t - y) * (1 - t ** 2))[:, None] * X


def _loop(fn, in_axes, args):
    n = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    rows = [fn(*(a if ax is None else np.take(a, r, axis=ax) for a, ax in zip(args, in_axes))) for r in range(n)]
    return np.stack(rows)


@pytest.mark.parametrize("n", [5, 150])  # element by element / rolled
def test_vmap_equals_a_loop_and_composes_with_grad(n):
    w, X, y = RNG.normal(size=3), RNG.normal(size=(n, 3)), RNG.normal(size=n)
    f = sg.vmap(loss, in_axes=(None, 0, 0), backend="python")
    np.testing.assert_allclose(f(w, X, y), _loop(loss, (None, 0, 0), (w, X, y)), rtol=1e-13)
    assert f._last.indexed == (n > limits.ROLLED_MIN)
    per = sg.vmap(sg.grad(loss), in_axes=(None, 0, 0), backend="python")
    np.testing.assert_allclose(per(w, X, y), per_example_gradient(w, X, y), rtol=1e-12, atol=1e-14)
    total = sg.value_and_grad(lambda w, X, y: np.sum(sg.vmap(loss, (None, 0, 0))(w, X, y)), backend="python")
    value, g = total(w, X, y)
    assert value == pytest.approx(_loop(loss, (None, 0, 0), (w, X, y)).sum(), rel=1e-12)
    np.testing.assert_allclose(g, per_example_gradient(w, X, y).sum(0), rtol=1e-11, atol=1e-13)


def test_vmap_per_example_gradients_on_compiled_backends():
    w, X, y = RNG.normal(size=4), RNG.normal(size=(300, 4)), RNG.normal(size=300)
    want = per_example_gradient(w, X, y)
    for backend in ("numba", "vm"):
        per = sg.vmap(sg.grad(loss), in_axes=(None, 0, 0), backend=backend)
        np.testing.assert_allclose(per(w, X, y), want, rtol=1e-12, atol=1e-14)


FUNCTIONS = {
    "rosenbrock_rows": lambda v: np.sum(100 * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2),
    "elementwise": lambda v: np.sin(v) * v[0] + np.maximum(v, 0.1),
    "slices": lambda v: v[::-2] * v[1::2][::-1] + v[-1],
    "softmax": lambda v: np.exp(v - np.max(v)) / np.sum(np.exp(v - np.max(v))),
    "matrix": lambda v: np.tanh(v.reshape(2, -1) @ v.reshape(-1, 2)).ravel(),
}


@settings(max_examples=40, **SETTINGS)
@given(name=st.sampled_from(sorted(FUNCTIONS)), rows=st.sampled_from([3, 40]), cols=st.sampled_from([2, 4, 6]),
       in_axis=st.sampled_from([0, 1, -1]), out_axis=st.sampled_from([0, -1]))
def test_vmap_over_axes_equals_a_loop(name, rows, cols, in_axis, out_axis):
    fn = FUNCTIONS[name]
    A = RNG.normal(size=(rows, cols) if in_axis == 0 else (cols, rows))
    got = sg.vmap(fn, in_axes=in_axis, out_axes=out_axis, backend="python")(A)
    want = _loop(fn, (in_axis,), (A,))
    np.testing.assert_allclose(got, np.moveaxis(want, 0, out_axis) if want.ndim > 1 else want, rtol=1e-12)


def test_nested_vmap_and_jacobian_of_vmap():
    A = RNG.normal(size=(7, 20, 3))
    f = sg.vmap(sg.vmap(lambda v: np.sum(np.sin(v) * v)), backend="python")
    np.testing.assert_allclose(f(A), np.sum(np.sin(A) * A, axis=-1), rtol=1e-13)
    assert f._last.indexed
    g = lambda x: np.tanh(x) * x[0]  # noqa: E731
    J = sg.jacobian(sg.vmap(g), backend="python")(A[0])
    x = A[0]
    want = np.zeros((20, 3, 20, 3))
    for r in range(20):
        want[r, :, r, :] = np.diag(1 - np.tanh(x[r]) ** 2) * x[r, 0]
        want[r, :, r, 0] += np.tanh(x[r])
    np.testing.assert_allclose(J, want, rtol=1e-12, atol=1e-15)


def test_out_axes_none_keywords_and_tuples():
    w, X = RNG.normal(size=3), RNG.normal(size=(90, 3))
    small = sg.vmap(lambda w, x: (np.dot(w, x), w * 2.0), in_axes=(None, 0), out_axes=(0, None), backend="python")
    np.testing.assert_allclose(small(w, X[:4])[1], w * 2.0)  # element by element: one call per row
    with pytest.raises(ValueError, match="out_axes entry is None"):
        sg.vmap(lambda w, x: x * 2.0, in_axes=(None, 0), out_axes=None, backend="python")(w, X[:4])
    f = sg.vmap(lambda w, x: (np.dot(w, x), w * 2.0), in_axes=(None, 0), out_axes=(0, None), backend="python")
    out, same = f(w, X)
    np.testing.assert_allclose(out, X @ w, rtol=1e-13, atol=1e-15)  # (a row may cancel to near 0)
    np.testing.assert_allclose(same, w * 2.0)
    k = sg.vmap(lambda x, scale: x * scale, in_axes=(0,), backend="python")  # keywords map along 0
    np.testing.assert_allclose(k(X, scale=np.arange(90.0)), X * np.arange(90.0)[:, None])
    d = sg.vmap(lambda p: p["a"] * p["b"], in_axes=(0,), backend="python")  # a container maps every leaf
    np.testing.assert_allclose(d({"a": X, "b": X}), X * X)


def test_vmap_traces_once_per_shape():
    f = sg.vmap(lambda x: np.sum(x ** 2), backend="python")
    f(RNG.normal(size=(80, 3)))
    f(RNG.normal(size=(80, 3)))
    assert len(f._traces) == 1
    f(RNG.normal(size=(81, 3)))
    assert len(f._traces) == 2


@pytest.mark.parametrize("call, message", [
    (lambda A: sg.vmap(np.sin, in_axes=(0, 0))(A), "one entry per positional argument"),
    (lambda A: sg.vmap(lambda a, b: a + b)(A, A[:5]), "different sizes"),
    (lambda A: sg.vmap(np.sin, in_axes=None)(A), "maps no argument"),
    (lambda A: sg.vmap(lambda a: a, in_axes=3)(A), r"axis 3 of an argument of shape \(80, 3\)"),
    (lambda A: sg.vmap(lambda a: a, in_axes=((0,),))(A), "does not match the argument's structure"),
    (lambda A: sg.vmap(lambda a: a, out_axes=None)(A), "out_axes entry is None"),
    (lambda A: sg.vmap(lambda a: a, out_axes=5)(A), "out_axes 5 is out of range"),
    (lambda A: sg.vmap(lambda a: a)(2.0), "rank 0"),
])
def test_vmap_errors_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call(RNG.normal(size=(80, 3)))


def test_grad_inside_a_rolled_trace():
    """A transform called inside another's rolled trace traces its function on rolled arrays too."""
    x = np.linspace(0.0, 1.0, 100)
    g = sg.grad(lambda x: np.sum(np.sin(x) * x), backend="python")
    h = sg.grad(lambda x: np.sum(g(x) ** 2), backend="python")
    d = np.sin(x) + x * np.cos(x)
    np.testing.assert_allclose(h(x), 2 * d * (2 * np.cos(x) - x * np.sin(x)), rtol=1e-12, atol=1e-15)
    assert h._last.indexed


def test_function_sum_is_a_rolled_sum_over_the_rows(monkeypatch):
    """Function.sum over data rows is value_and_grad of np.sum(vmap(fn)): rolled (one extra index) for
    large data, the per-row kernel where fn has no rolled form; the same numbers either way."""
    w, X, y = RNG.normal(size=3), RNG.normal(size=(500, 3)), RNG.normal(size=500)
    vg = sg.value_and_grad(loss, backend="python")
    value, g = vg.sum(w, X, y)
    assert value == pytest.approx(_loop(loss, (None, 0, 0), (w, X, y)).sum(), rel=1e-12)
    np.testing.assert_allclose(g, per_example_gradient(w, X, y).sum(0), rtol=1e-11)
    summed = next(iter(vg._sums.values()))
    assert summed._last.indexed and not vg._traces  # rolled; fn was never traced for one row
    stepwise = lambda w, x, y: (np.sum(np.linalg.solve(np.eye(3), x * w)) - y) ** 2  # noqa: E731 (no rolled form)
    vg2 = sg.value_and_grad(stepwise, backend="python")
    value2, g2 = vg2.sum(w, X, y)
    assert value2 == pytest.approx(np.sum((X @ w - y) ** 2), rel=1e-12)
    np.testing.assert_allclose(g2, (2 * (X @ w - y)) @ X, rtol=1e-11)
    assert len(vg2._traces) == 1  # the per-row kernel


def test_a_trace_without_rolled_form_says_so_once_and_explains():
    f = sg.jit(lambda x: np.prod(x), backend="python")
    message = r"np.prod over 200 elements.*test_vmap.py:\d+\): tracing its 200 array elements one by one"
    with pytest.warns(UserWarning, match=message) as record:
        f(np.ones(200))
        f(np.ones(201))
    assert len(record) == 1 and record[0].filename == __file__
    explained = f.explain().splitlines()
    assert explained[0] == "sg.jit(<lambda>)" and len(explained) == 3
    assert explained[1].startswith("  x: (200,) -> element by element, because np.prod")
    assert "test_vmap.py" in explained[1]
    g = sg.grad(lambda x: np.sum(x ** 2), backend="vm")
    assert g.explain() == "sg.grad(<lambda>): not traced yet (call it first)"
    g(np.ones(100))
    assert g.explain().splitlines()[1] == "  x: (100,) -> rolled (whole arrays: loops), 6 nodes, loops on vm"


def test_long_loop_programs_compile_in_pieces_under_auto(numba_tier, monkeypatch):
    from symgrad.compile import function, loop_vm, pieces, tiers

    # Even where the loop VM is not compiled yet (seconds), a long program runs on it first (minutes of Numba),
    # where no C compiler is (with one, Numba's kernels replace the C ones only where a timed call finds them
    # faster: on a loaded machine, not always)
    monkeypatch.setattr(tiers, "C_TIER", False)
    monkeypatch.setattr(loop_vm, "at_hand", lambda: False)
    monkeypatch.setattr(function, "numba_on_disk", lambda program: False)  # (as in a fresh cache)
    with pieces.sized(10, 4):  # (a kernel of more than 10 lines is long)
        vg = sg.value_and_grad(lambda x: np.sum(np.tanh(x[1:] * x[:-1])))
        x = RNG.normal(size=100)
        np.testing.assert_allclose(vg(x)[0], np.sum(np.tanh(x[1:] * x[:-1])), rtol=1e-13)
    assert vg.compiled._final is not None  # tiered: the VM's kernels while Numba compiles
    assert vg.compiled.ready().backend == "numba" and "def piece1(" in vg.compiled.source
    np.testing.assert_allclose(vg(x)[1][1:-1], (1 - np.tanh(x[1:-1] * x[:-2]) ** 2) * x[:-2] +
                               (1 - np.tanh(x[2:] * x[1:-1]) ** 2) * x[2:], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("n", [3, 100])  # element by element, rolled
def test_in_axes_as_a_pytree_prefix(n):
    rng = np.random.default_rng(n)
    p = {"w": rng.normal(size=2), "b": rng.normal(size=n)}
    X = rng.normal(size=(n, 2))
    axes = ({"w": None, "b": 0}, 0)
    want = X @ p["w"] + p["b"]
    np.testing.assert_allclose(sg.vmap(lambda p, x: np.dot(p["w"], x) + p["b"], in_axes=axes)(p, X), want,
                               rtol=1e-14)
    g = sg.vmap(sg.grad(lambda p, x: (np.dot(p["w"], x) + p["b"]) ** 2), in_axes=axes)(p, X)
    np.testing.assert_allclose(g["w"], 2 * want[:, None] * X, rtol=1e-13)
    np.testing.assert_allclose(g["b"], 2 * want, rtol=1e-13)
    with pytest.raises(ValueError, match="does not match the argument's structure"):
        sg.vmap(lambda p: p["w"], in_axes=({"z": 0},))(p)
    with pytest.raises(ValueError, match="must be an int or None"):
        sg.vmap(lambda p: p["w"], in_axes=({"w": "a", "b": 0},))(p)


def test_vmap_of_a_vjp_and_of_a_jvp_stay_rolled():
    """JAX's matrix-Jacobian products (vmap(vjp_fun)(M)): the cotangent rows are rolled, the primal a
    NumPy constant of the vmap's trace (it went element by element: 20 s at 120 x 70)."""
    import warnings

    rng = np.random.default_rng(0)
    inputs, W = rng.normal(size=(120, 70)), rng.normal(size=70)
    f = lambda W: 0.5 * (np.tanh(np.dot(inputs, W) / 2) + 1)  # noqa: E731
    s = f(W) * (1 - f(W))  # the sigmoid's derivative
    M, T = rng.normal(size=(4, 120)), rng.normal(size=(3, 70))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no element-by-element warning)
        _, vjp_fun = sg.vjp(f, W)
        (mjp,) = sg.vmap(vjp_fun)(M)
        jmp = sg.vmap(lambda t: sg.jvp(f, (W,), (t,))[1])(T)
    np.testing.assert_allclose(mjp, (M * s) @ inputs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jmp, (T @ inputs.T) * s, rtol=1e-12, atol=1e-14)


def test_vmap_over_a_numpy_array_inside_a_trace_traces_once():
    """GradBench's least squares: sg.vmap of a residual over np.arange(n) inside the loss traced one call
    per row (2101 nodes for 300 rows, 21 s to a first result at n = 16392); the mapped NumPy array is now
    a captured constant, its integer rows index, and the trace is one call: rolled, right. A function that
    needs its row as a Python int (a shape) still runs row by row."""
    rng = np.random.default_rng(3)
    n = 3000
    xs, ys, p = rng.normal(size=n), rng.normal(size=n), np.array([0.1, 1.3])

    def loss(p, xs, ys):
        return np.sum(sg.vmap(lambda i: ys[i] - (p[0] + p[1] * xs[i]) * (i % 3))(np.arange(xs.shape[0])) ** 2)

    F = sg.value_and_grad(loss)
    value, grad = F(p, xs, ys)
    m = np.arange(n) % 3
    r = ys - (p[0] + p[1] * xs) * m
    assert value == pytest.approx(np.sum(r ** 2), rel=1e-12)
    np.testing.assert_allclose(grad, [-2 * np.sum(r * m), -2 * np.sum(r * m * xs)], rtol=1e-11)
    assert "-> rolled" in F.explain()
    rows = sg.grad(lambda x: np.sum(sg.vmap(lambda k: np.sum(x[:k]) * np.ones(k)[0])(np.arange(1, 4))))
    np.testing.assert_allclose(rows(np.array([1.0, 2.0, 3.0])), [3.0, 2.0, 1.0])
