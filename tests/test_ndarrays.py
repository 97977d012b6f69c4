"""NumPy array code traced onto rolled expressions: values and gradients equal the element-by-element
trace (the oracle) and NumPy itself; constructs without a rolled form fall back to it."""

import numpy as np
import pytest
import symgrad.numpy as jnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr import reshaping, tracing
from symgrad.trace import api, limits

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _both(fn, args, argnums=0, monkeypatch=None):
    """(value, gradient) traced onto rolled arrays, and element by element (python backend both)."""
    got = sg.value_and_grad(fn, argnums=argnums, backend="python")(*args)
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    want = sg.value_and_grad(fn, argnums=argnums, backend="python")(*args)
    monkeypatch.undo()
    return got, want


def _rolled_inputs(fn, args, argnums=0):
    t = sg.value_and_grad(fn, argnums=argnums, backend="python").trace(*args)
    return [v.op.name for v in t.inputs]


PROGRAMS = {
    "rosenbrock": lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
    "steps": lambda x: np.sum(x[::3] * x[1::3]) + np.sum(np.sin(x[::-2])) + (x[-1] - x[3]) ** 2,
    "broadcast": lambda x: np.sum(np.tanh(x.reshape(8, 10) * x[:10] + x[:8, None]) ** 2),
    "axes": lambda x: np.sum(np.max(x.reshape(4, 5, 4), axis=1) * np.mean(x.reshape(4, 5, 4), axis=(0, 1),
                                                                          keepdims=True).sum(axis=0)),
    "matmul": lambda x: np.sum(np.exp(-(x.reshape(8, 10) @ x[:10].reshape(10, 1)) ** 2)) + x[:10] @ x[10:20],
    "transpose": lambda x: np.sum(x.reshape(8, 10).T[2:, ::2] * np.dot(x[:8], x.reshape(8, 10))[2:, None]),
    "where_clip": lambda x: np.sum(np.where(x > 0.1, np.clip(x, -0.5, 0.5), x ** 3) - np.maximum(x, 0.2) ** 2),
    "methods": lambda x: x.reshape(10, 8).T.sum(axis=1).max() + x.mean() * x.min() + x.ravel()[5],
    "stacking": lambda x: np.sum(np.concatenate([x[:30], np.sin(x[50:]) * 2.0]) ** 2
                                 * np.hstack([x[40:], x[:40]])[:60])
    + np.sum(np.stack([x[:10], x[10:20] ** 2], axis=1) @ np.vstack([x[20:30], x[30:40]]))
    + np.sum(np.expand_dims(x[:5], 1) * x[5:8]),
    "spread": lambda x: np.sum(np.var(x.reshape(8, 10), axis=1, ddof=1) * np.std(x.reshape(8, 10), axis=1))
    + np.var(x),
    "einsum_gathers": lambda x: np.einsum("ij,jk->", x[:12].reshape(3, 4), x[12:32].reshape(4, 5) ** 2)
    + np.sum(np.outer(x[:3], x[3:7]) * np.einsum("ij->ji", x[40:52].reshape(4, 3))) + np.inner(x[:9], x[9:18])
    + np.einsum("ii", x[:16].reshape(4, 4)) + np.sum(np.sin(x[np.array([[0, 5], [5, 79], [-1, 2]])]) ** 2)
    + np.sum(x.reshape(8, 10)[:, [9, 0, 0]][:3] * x.reshape(8, 10)[[1, 7, 3]].T[:3])
    + np.sum(np.tensordot(x[:24].reshape(2, 3, 4), x[24:48].reshape(3, 4, 2)) ** 2)
    + np.sum(np.tensordot(x[:12].reshape(3, 4), x[12:24].reshape(4, 3), axes=([1, 0], [0, 1]))),
    "split": lambda x: sum(np.sum(p ** 2 * (i + 1)) for i, p in enumerate(np.split(x, [10, 50])))
    + np.sum(np.array_split(x, 3)[2]) + np.sum(np.split(x.reshape(8, 10), 2, axis=1)[1] ** 3),
    "move_axes": lambda x: np.sum(np.moveaxis(x.reshape(4, 5, 4), 0, -1)[1]
                                  * np.swapaxes(x.reshape(4, 4, 5), 0, 2)[1])
    + np.sum(np.squeeze(x.reshape(1, 80, 1)) * x) + x.reshape(8, 10).swapaxes(0, 1)[3, 2]
    + np.sum(x.reshape(2, 1, 40).squeeze(1) ** 2),
    "pad": lambda x: np.sum(np.pad(x.reshape(8, 10), ((1, 2), (0, 3)), constant_values=0.5) ** 2
                            * np.pad(x.reshape(8, 10), ((2, 1), (3, 0)), mode="wrap"))
    + np.sum(np.pad(x, 2) * 3.0),
    "norm": lambda x: np.linalg.norm(x) + np.sum(np.linalg.norm(x.reshape(8, 10), axis=1)) + np.linalg.norm(x, 1)
    + np.linalg.norm(x, np.inf) + np.linalg.norm(x, 3) + np.linalg.norm(x.reshape(8, 10), keepdims=True)[0, 0],
    "batched_matmul": lambda x: np.sum(np.tanh(x[:60].reshape(5, 3, 4) @ x[60:76].reshape(4, 4)) ** 2)
    + np.sum(x[:24].reshape(2, 3, 4) @ x[24:48].reshape(2, 4, 3))
    + np.sum(x[:24].reshape(2, 1, 3, 4) @ x[24:72].reshape(4, 4, 3))
    + np.sum(x[:12] @ x[12:72].reshape(5, 12, 1)) + np.sum(np.matmul(x[:60].reshape(5, 3, 4), x[60:64])),
    "cumsum": lambda x: np.sum(np.cumsum(x) ** 2) * 1e-2 + np.sum(np.add.accumulate(x[::-1])[5:] * x[5:])
    + np.sum(np.cumsum(x.reshape(8, 10), axis=1)[:, 1::3] * np.cumsum(np.sin(x.reshape(8, 10)), axis=0)[:, ::4])
    + np.sum(x.reshape(4, 20).cumsum(-1).cumsum(0) ** 3) + np.sum(np.cumsum(x.reshape(2, 4, 10), axis=1) ** 2),
    "prod": lambda x: np.sum(np.prod(x.reshape(8, 10)[:, :4], axis=1))
    + np.sum(x.reshape(20, 4).prod(axis=1, keepdims=True) * x[:20, None]) + np.prod(x[:5]) + np.prod(x[7:8] * 2.0),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_numpy_programs_trace_rolled_and_equal_the_element_trace(name, monkeypatch):
    fn = PROGRAMS[name]
    x0 = np.sin(np.arange(80.0) * 1.3) * 0.9 + 0.05
    assert _rolled_inputs(fn, (x0,)) == ["array"]
    (value, gradient), (want_value, want_gradient) = _both(fn, (x0,), monkeypatch=monkeypatch)
    assert value == pytest.approx(fn(x0), rel=1e-12)
    assert value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-10, atol=1e-12)


@settings(max_examples=30, **SETTINGS)
@given(st.integers(64, 90), st.integers(-4, 4).filter(bool), st.integers(0, 5), st.data())
def test_random_slices_and_reductions_equal_numpy_and_the_element_trace(n, step, start, data):
    stop = data.draw(st.integers(-n, n))
    axis_sum = data.draw(st.sampled_from([None, 0]))

    def fn(x):
        s = x[start::step] if step > 0 else x[stop::step]
        if s.size == 0:
            s = x
        return np.sum(np.cos(s) * s, axis=axis_sum) + np.max(x[:-1:2] - x[1::2])

    x0 = np.cos(np.arange(n) * 0.7)
    got = sg.value_and_grad(fn, backend="python")(x0)
    assert got[0] == pytest.approx(fn(x0), rel=1e-12, abs=1e-12)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(limits, "ROLLED_MIN", 10**9)
        want = sg.value_and_grad(fn, backend="python")(x0)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)


def test_rosenbrock_from_numpy_code_is_ready_at_any_size_and_matches_by_hand(numba_tier):
    fn = PROGRAMS["rosenbrock"]
    for n in (100, 10**6):
        x0 = np.linspace(-1.0, 1.2, n)
        vg = sg.value_and_grad(fn)
        value, gradient = vg(x0)
        want = np.zeros(n)
        want[:-1] = -400 * x0[:-1] * (x0[1:] - x0[:-1] ** 2) - 2 * (1 - x0[:-1])
        want[1:] += 200 * (x0[1:] - x0[:-1] ** 2)
        assert value == pytest.approx(fn(x0), rel=1e-12)
        np.testing.assert_allclose(gradient, want, rtol=1e-12, atol=1e-9)
        t = vg.trace(x0)
        assert sg.count_nodes(t.derivatives) < 60 and t.compiled.ready().backend in ("c", "numba")


def test_data_arguments_are_parameter_arrays_and_new_values_do_not_retrace():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(2000, 5)), (rng.random(2000) > 0.5) * 1.0

    def loss(w, X, y):
        z = X @ w
        return np.mean(np.logaddexp(0.0, z) - y * z)

    w0 = rng.normal(size=5) * 0.3
    vg = sg.value_and_grad(loss)
    value, gradient = vg(w0, X, y)
    p = 1 / (1 + np.exp(-(X @ w0)))
    assert value == pytest.approx(loss(w0, X, y), rel=1e-12)
    np.testing.assert_allclose(gradient, X.T @ (p - y) / len(y), rtol=1e-10, atol=1e-14)
    t = vg.trace(w0, X, y)
    assert [v.op.name for v in t.params] == ["array", "array"] and [v.op.name for v in t.inputs] == ["array"]
    vg(w0, X * 2.0, y)
    assert len(vg._traces) == 1


@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_constructs_without_a_rolled_form_fall_back_to_the_element_trace():
    def fn(x):
        return np.linalg.det(x[:9].reshape(3, 3)) + np.sum(x)

    x0 = np.linspace(0.0, 1.0, 70) + np.eye(70)[0]
    value, gradient = sg.value_and_grad(fn, backend="vm")(x0)
    A = x0[:9].reshape(3, 3)
    assert value == pytest.approx(np.linalg.det(A) + np.sum(x0), rel=1e-12)
    want = np.ones(70)
    want[:9] += (np.linalg.det(A) * np.linalg.inv(A).T).ravel()
    np.testing.assert_allclose(gradient, want, rtol=1e-10)
    assert _rolled_inputs(fn, (x0,)) == ["var"] * 70


@settings(max_examples=40, **SETTINGS)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_cumsum_along_any_axis_equals_numpy_and_its_gradient_the_element_trace(shape, data):
    """Running sums are one sequential loop (not unrolled): NumPy's numbers, on the VM as in the
    interpreter, and the gradient (reversed running sums) equal to the element trace's."""
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]))
    flip = data.draw(st.booleans())
    rows = int(np.ceil(64 / np.prod(shape)))  # a leading axis: rolled from 64 elements on
    x0 = np.cos(np.arange(rows * np.prod(shape)) * 0.7).reshape(rows, *shape)
    w = np.sin(np.arange(x0.size) * 1.1)

    def fn(x):
        c = np.cumsum(np.tanh(x)[..., ::-1] if flip else np.tanh(x), axis=axis)
        return np.sum(c ** 2 * w.reshape(c.shape))

    assert _rolled_inputs(fn, (x0,)) == ["array"]
    got = {b: sg.value_and_grad(fn, backend=b)(x0) for b in ("python", "vm")}
    limits.ROLLED_MIN, saved = 10**9, limits.ROLLED_MIN
    try:
        want_value, want_gradient = sg.value_and_grad(fn, backend="python")(x0)
    finally:
        limits.ROLLED_MIN = saved
    for value, gradient in got.values():
        assert value == pytest.approx(fn(x0), rel=1e-12)
        assert value == pytest.approx(want_value, rel=1e-12)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-10, atol=1e-12)


def test_cumsum_compiles_to_a_loop_and_composes_with_every_transform():
    """Numba's loops (forward and reversed), Jacobians and Hessians (rolled), vmap, vjp: against
    the same functions written with NumPy by hand."""
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=(12, 9))
    fn = lambda x: np.sum(np.cumsum(np.sin(x), axis=0) ** 2) + np.sum(np.cumsum(x[:, ::-1], axis=1) * x)  # noqa: E731
    value, gradient = sg.value_and_grad(fn, backend="numba")(x0)
    s = np.cumsum(np.sin(x0), axis=0)
    # sum(C * x) with C = cumsum(x[:, ::-1], 1): x[r, m] is in C[r, c] for c >= n-1-m, whose x sum to C[r, m]
    by_hand = np.cos(x0) * np.cumsum((2 * s)[::-1], axis=0)[::-1] + 2 * np.cumsum(x0[:, ::-1], axis=1)
    assert value == pytest.approx(fn(x0), rel=1e-12)
    np.testing.assert_allclose(gradient, by_hand, rtol=1e-11)
    assert "in range(11, -1, -1):" in sg.value_and_grad(fn, backend="numba").trace(x0).source  # backwards
    square_sums = lambda x: np.sum(np.cumsum(x) ** 2)  # noqa: E731 - its gradient: cumsum backwards of 2 * cumsum
    v = np.linspace(-1.0, 1.0, 100)
    on_numba, on_vm = sg.value_and_grad(square_sums, backend="numba"), sg.value_and_grad(square_sums, backend="vm")
    np.testing.assert_array_equal(on_numba(v)[1], on_vm(v)[1])
    kernel = on_numba.trace(v).source.split("def point")[0]
    assert kernel.count("for ") == 3  # 2 * cumsum is computed in the backward loop, not stored first
    strided = lambda x: np.sum(np.cumsum(x)[::2] ** 2) + np.sum(np.cumsum(x) ** 3)  # noqa: E731
    # its adjoint array is 3 c**2 with a strided scatter added in: never recomputed in the backward loop
    by_numba = sg.value_and_grad(strided, backend="numba")(v)[1]
    np.testing.assert_array_equal(by_numba, sg.value_and_grad(strided, backend="vm")(v)[1])
    c = np.cumsum(v)
    adjoint = 3 * c ** 2 + np.where(np.arange(100) % 2 == 0, 2 * c, 0.0)
    np.testing.assert_allclose(by_numba, np.cumsum(adjoint[::-1])[::-1], rtol=1e-12)
    J = sg.jacobian(lambda x: np.cumsum(x ** 2, axis=1))(x0)
    assert sg.jacobian(lambda x: np.cumsum(x ** 2, axis=1)).trace(x0).indexed
    want = np.zeros((12, 9, 12, 9))
    for r in range(12):
        for c in range(9):
            want[r, c, r, :c + 1] = 2 * x0[r, :c + 1]
    np.testing.assert_allclose(J, want, rtol=1e-13)
    H = sg.hessian(lambda x: np.sum(np.cumsum(x) ** 2))(x0[:8])  # 72 elements: rolled
    L = np.tril(np.ones((72, 72)))
    np.testing.assert_allclose(H.reshape(72, 72), 2 * L.T @ L, rtol=1e-13)
    X = rng.normal(size=(30, 70))
    per_row = sg.vmap(sg.grad(lambda w, x: np.sum(np.cumsum(w * x) ** 2)), in_axes=(None, 0))(X[0], X)
    for w_row, x in zip(per_row, X):
        np.testing.assert_allclose(w_row, x * 2 * np.cumsum(np.cumsum(X[0] * x)[::-1])[::-1], rtol=1e-11)
    out, back = sg.vjp(lambda x: np.cumsum(x, axis=0), x0)
    np.testing.assert_allclose(out, np.cumsum(x0, axis=0), rtol=1e-14)
    np.testing.assert_allclose(back(np.ones_like(x0))[0], np.arange(12, 0, -1.0)[:, None] * np.ones((1, 9)))


def test_hvp_and_jit_on_rolled_arrays():
    fn = PROGRAMS["broadcast"]
    x0 = np.cos(np.arange(80.0))
    v = np.sin(np.arange(80.0))
    hv = sg.hvp(fn)(x0, v)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(limits, "ROLLED_MIN", 10**9)
        want = sg.hvp(fn, backend="python")(x0, v)
    np.testing.assert_allclose(hv, want, rtol=1e-10, atol=1e-12)
    f = sg.jit(lambda x: np.tanh(x[1:] - x[:-1]) * 2.0)
    np.testing.assert_allclose(f(x0), np.tanh(x0[1:] - x0[:-1]) * 2.0, rtol=1e-14)
    assert [v.op.name for v in f.trace(x0).inputs] == ["array"]


def test_jacobians_and_hessians_of_traced_array_code_are_rolled_and_equal_the_element_trace(monkeypatch):
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(100, 3)), (rng.random(100) > 0.5) * 1.0
    w = rng.normal(size=3)

    def logistic(w, X, y):
        z = X @ w
        return np.mean(np.logaddexp(0.0, z) - y * z)

    def chain(x, a):
        return np.tanh(x[1:] * x[:-1]) * a

    x0, a0 = np.linspace(0.0, 1.0, 70), 0.7
    got = [sg.hessian(logistic)(w, X, y), sg.jacobian(chain, argnums=(0, 1))(x0, a0)]
    assert sg.hessian(logistic).trace(w, X, y).params[0].op.name == "array"
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    want = [sg.hessian(logistic, backend="python")(w, X, y), sg.jacobian(chain, argnums=(0, 1),
                                                                         backend="python")(x0, a0)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
    p = 1 / (1 + np.exp(-(X @ w)))
    np.testing.assert_allclose(got[0], (X.T * (p * (1 - p))) @ X / len(y), rtol=1e-12, atol=1e-14)
    for g, v in zip(got[1], want[1]):
        np.testing.assert_allclose(g, v, rtol=1e-12, atol=1e-14)
    assert got[1][0].shape == (69, 70) and got[1][1].shape == (69,)


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_hessians_whose_stride_solutions_divide_by_a_negative_number_compile(backend, monkeypatch):
    """A soak's Hessian of std down the columns of a reshape: the Jacobian's stride solution reads
    x[m - 8*((k - m) // -8)], an index the loops refused (// by a negative constant), materialising it."""
    x = np.random.default_rng(5).normal(size=64)

    def f(x):
        v = np.std(x.reshape(8, -1), axis=0)
        return np.sum([v, v])

    got = sg.hessian(f, backend=backend)(x)
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    np.testing.assert_allclose(got, sg.hessian(f, backend="python")(x), rtol=1e-12, atol=1e-14)


def test_jacobian_gathers_compose_the_solutions_of_their_addresses(monkeypatch):
    """A soak's Hessian through rows summed by vmap, reshaped and transposed: the Jacobian's gather solved
    t[b - 2*i, i] for b = u + 2*i first, then i = v, and kept i in b's solution (ValueError: tensor: the
    body also varies over ...). Rolled, it equals the element trace and the Jacobian of the gradient."""
    x = np.random.default_rng(153479290).normal(size=(8, 8))

    def f(x):
        v = sg.vmap(lambda u: np.sum(u))(x).reshape(4, -1).T
        return np.sum(np.tanh(v) * v)

    got = sg.hessian(f, backend="vm")(x)
    s = np.sum(x, axis=1)  # f = sum_r tanh(s_r) s_r: d2f/ds2 = 2 sech^2 - 2 s tanh sech^2, each row of x
    d2 = 2 / np.cosh(s) ** 2 * (1 - s * np.tanh(s))
    want = np.einsum("r,rq,ab->raqb", d2, np.eye(8), np.ones((8, 8)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    np.testing.assert_allclose(sg.hessian(f, backend="python")(x), want, rtol=1e-12, atol=1e-14)


def test_indexing_a_traced_array_with_a_bool_or_a_float_is_an_error_not_a_guess():
    x = sg.array("x", 5)
    for key in (True, np.bool_(False), 1.0, 2.5):
        with pytest.raises(IndexError, match="only integers, slices"):
            x[key]
    assert x[np.int64(-1)] is x[4]


def test_jvp_and_vjp_of_array_code_trace_rolled(monkeypatch):
    x, v, ct = np.linspace(-1.0, 1.0, 100), np.cos(np.arange(100.0)), np.sin(np.arange(99.0))
    f = lambda x: np.tanh(x[1:] * x[:-1]) * 2.0  # noqa: E731
    out, tangent = sg.jvp(f, (x,), (v,), backend="python")
    out2, back = sg.vjp(f, x, backend="python")
    cotangent = back(ct)[0]
    assert api._applied(f, "jvp", False, "python")._last.indexed
    assert api._applied(f, "vjp", False, "python")._last.indexed
    t = np.tanh(x[1:] * x[:-1])
    np.testing.assert_allclose(out, 2 * t, rtol=1e-14)
    np.testing.assert_allclose(out2, 2 * t, rtol=1e-14)
    want_tangent = 2 * (1 - t ** 2) * (v[1:] * x[:-1] + x[1:] * v[:-1])
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-12, atol=1e-15)
    w = ct * 2 * (1 - t ** 2)
    want = np.zeros(100)
    want[1:] += w * x[:-1]
    want[:-1] += w * x[1:]
    np.testing.assert_allclose(cotangent, want, rtol=1e-12, atol=1e-15)


def test_numpy_constants_in_traced_code_are_captured_as_parameters(monkeypatch):
    """Closure arrays (and arrays made inside fn) meeting traced arrays: captured at trace time as
    parameter arrays (JAX's constants), in elementwise code, @, einsum, concatenate and vmap."""
    rng = np.random.default_rng(3)
    A, target = rng.normal(size=(80, 6)), np.linspace(0.0, 1.0, 80)

    def fn(x):
        y = x * np.arange(80.0) - target
        return (np.sum(y ** 2) + np.sum(np.tanh(A.T @ x)) + np.einsum("ij,i->", A, x)
                + np.sum(np.concatenate([x[:4], A[0]]) ** 2) + np.sum(A[:5, :2] @ np.ones(2) * x[:5]))

    x0 = np.cos(np.arange(80.0))
    assert _rolled_inputs(fn, (x0,)) == ["array"]
    (value, gradient), (want_value, want_gradient) = _both(fn, (x0,), monkeypatch=monkeypatch)
    assert value == pytest.approx(fn(x0), rel=1e-12) and value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-11, atol=1e-13)
    t = sg.value_and_grad(fn, backend="python").trace(x0)
    assert {c.shape for c in t.constants} >= {(80,), (80, 6)}  # target (and arange), A: parameters
    temporaries = sg.jit(lambda x: sum(np.sum(x * np.full(80, float(k))) for k in range(30)), backend="python")
    assert temporaries(x0) == pytest.approx(np.sum(x0) * sum(range(30)), rel=1e-12)  # each array its own
    per_row = sg.vmap(sg.grad(lambda w, a: np.sum((a * w - target[:6]) ** 2)), in_axes=(None, 0), backend="python")
    w = rng.normal(size=6)
    np.testing.assert_allclose(per_row(w, A), 2 * (A * w - target[:6]) * A, rtol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda x: np.sum(np.reshape(x, (8, 10), order="F")[0] * x[:10]),
    lambda x: np.sum(np.ravel(x.reshape(8, 10), order="F")[:10] * x[:10]),
    lambda x: np.prod(x[:5], initial=2.0) + np.sum(x),
    lambda x: np.mean(x, where=np.arange(80) % 3 == 0) + x.mean(where=np.arange(80) < 7),
])
@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_options_without_a_rolled_form_are_never_ignored(fn):
    """np.reshape(order="F"), np.prod(initial=...): no rolled form, so the element trace: NumPy's numbers."""
    x0 = np.cos(np.arange(80.0))
    assert sg.jit(fn, backend="python")(x0) == pytest.approx(fn(x0), rel=1e-13)
    assert _rolled_inputs(fn, (x0,)) == ["var"] * 80


@pytest.mark.parametrize("key", [(Ellipsis, slice(None, None, -1)), (0, Ellipsis), (Ellipsis, 1, None),
                                 (None, Ellipsis, 2), (Ellipsis,), (1, Ellipsis, 3), (Ellipsis, 1, 2, 3)])
def test_an_ellipsis_stands_for_the_axes_the_key_leaves_out(key):
    """x[..., ::-1] on a 3-D array reverses the last axis (it took one axis too many before)."""
    x, v = sg.array("x", (3, 4, 5)), np.arange(60.0).reshape(3, 4, 5)
    np.testing.assert_array_equal(sg.evaluate(x[key], {x: v}), v[key])


@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_a_python_loop_over_short_arrays_traces_element_by_element():
    """Thousands of loop nests of 8 iterations (a recurrence stepped in Python) run faster as
    straight-line code: the trace goes element by element; a few steps stay rolled."""
    def loss(W, xs, steps):
        h, total = np.zeros(8), 0.0
        for t in range(steps):
            h = np.tanh(W @ h + xs[t])
            total = total + np.sum(h) ** 2
        return total

    W, xs = np.cos(np.arange(64.0)).reshape(8, 8) * 0.4, np.sin(np.arange(80.0) * 0.3)
    for steps, kind in ((80, "var"), (3, "array")):
        fn = lambda W, xs, steps=steps: loss(W, xs, steps)  # noqa: E731
        assert set(_rolled_inputs(fn, (W, xs))) == {kind}
        value, gradient = sg.value_and_grad(fn, backend="python")(W, xs)
        assert value == pytest.approx(fn(W, xs), rel=1e-12)
        step = 1e-6 * np.eye(64)[5].reshape(8, 8)
        assert gradient[0, 5] == pytest.approx((fn(W + step, xs) - fn(W - step, xs)) / 2e-6, rel=1e-6)


@pytest.mark.parametrize("key", [
    lambda: (np.array([0, 2, 7]), np.array([1, 9, -1])),
    lambda: (np.arange(8)[:, None], np.array([[0, 3, 3]])),
    lambda: (np.arange(8), np.array([4, 1, 0, 9, 2, 2, 5, 7])),  # the cross-entropy pick z[np.arange(N), labels]
    lambda: (slice(None), np.array([[1, 2], [3, 9]])),
    lambda: ([5, 5, 0], 2),
    lambda: (Ellipsis, [0, 9]),
])
def test_several_index_arrays_gather_as_numpy_indexes(key, monkeypatch):
    """NumPy's advanced indexing with several index arrays (and integers beside them): broadcast
    together, values and gradients as the element trace's."""
    key = key()
    x0 = np.sin(np.arange(80.0) * 0.9)
    fn = lambda x: np.sum(np.tanh(x.reshape(8, 10)[key]) * np.arange(1.0, 1.0 + np.size(x0.reshape(8, 10)[key]))  # noqa: E731
                          .reshape(np.shape(x0.reshape(8, 10)[key])))
    assert _rolled_inputs(fn, (x0,)) == ["array"]
    (value, gradient), (want_value, want_gradient) = _both(fn, (x0,), monkeypatch=monkeypatch)
    assert value == pytest.approx(fn(x0), rel=1e-12) and value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12, atol=1e-14)


def test_index_arrays_apart_put_their_axes_first_as_numpy_does():
    A = sg.array("A", (2, 3, 4))
    v = np.arange(24.0).reshape(2, 3, 4)
    for key in [(0, slice(None), [1, 2]), ([1, 0], slice(None), [[3], [2]]), (1, [0, 2], slice(None)),
                ([0, 1], [2, 0], [3, 3])]:
        np.testing.assert_array_equal(sg.evaluate(A[key], {A: v}), v[key])
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1 with size 3"):
        A[[0, 1], [3, 0]]


def _cross_entropy(W, X, y):
    Z = X @ W
    m = np.max(Z, axis=1, keepdims=True)
    return np.mean(m[:, 0] + np.log(np.sum(np.exp(Z - m), axis=1)) - Z[np.arange(X.shape[0]), y])


def _cross_entropy_by_hand(W, X, y):
    Z = X @ W
    p = np.exp(Z - Z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return X.T @ (p - np.eye(W.shape[1])[y]) / len(y)


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_integer_arguments_index_like_numpy_and_new_labels_never_retrace(backend):
    """Labels passed in (z[np.arange(N), y], the way cross-entropy is written): a gather at
    addresses read from the argument, checked when run: out of bounds raises as NumPy does."""
    rng = np.random.default_rng(5)
    W, X = rng.normal(size=(6, 4)) * 0.3, rng.normal(size=(50, 6))
    vg = sg.value_and_grad(_cross_entropy, backend=backend)
    for y in (rng.integers(0, 4, 50), rng.integers(-4, 4, 50)):  # negative labels count from the end
        value, gradient = vg(W, X, y)
        assert value == pytest.approx(_cross_entropy(W, X, y), rel=1e-12)
        np.testing.assert_allclose(gradient, _cross_entropy_by_hand(W, X, y % 4), rtol=1e-10, atol=1e-14)
    assert len(vg._traces) == 1 and vg._last.indexed
    for bad in (4, -5):
        with pytest.raises(IndexError, match="out of bounds for the axis it indexes"):
            vg(W, X, np.where(np.arange(50) == 7, bad, 0))


def test_integer_arguments_index_under_every_transform():
    rng = np.random.default_rng(6)
    W, X, y = rng.normal(size=(5, 3)) * 0.3, rng.normal(size=(40, 5)), rng.integers(0, 3, 40)
    g = _cross_entropy_by_hand(W, X, y)
    v = rng.normal(size=W.shape)
    step = 1e-6
    hv = (sg.grad(_cross_entropy)(W + step * v, X, y) - sg.grad(_cross_entropy)(W - step * v, X, y)) / (2 * step)
    np.testing.assert_allclose(sg.hvp(_cross_entropy)(W, X, y, v), hv, rtol=1e-6, atol=1e-9)
    H = sg.hessian(_cross_entropy)(W, X, y).reshape(15, 15)
    np.testing.assert_allclose(H @ v.ravel(), hv.ravel(), rtol=1e-6, atol=1e-9)
    one = lambda W, x, t: np.log(np.sum(np.exp(x @ W))) - (x @ W)[t]  # noqa: E731 - one example, a label t
    per_example = sg.vmap(sg.grad(one), in_axes=(None, 0, 0))(W, X, y)
    np.testing.assert_allclose(per_example.sum(axis=0) / 40, g, rtol=1e-10)
    np.testing.assert_allclose(per_example[3], _cross_entropy_by_hand(W, X[3:4], y[3:4]), rtol=1e-10)
    total, gradient = sg.value_and_grad(one).sum(W, X, y)
    assert total == pytest.approx(40 * _cross_entropy(W, X, y), rel=1e-12)
    np.testing.assert_allclose(gradient, 40 * g, rtol=1e-10)
    tiny = sg.grad(_cross_entropy)(W, X[:2], y[:2])  # 10 + 2 elements: rolled all the same (labels index)
    np.testing.assert_allclose(tiny, _cross_entropy_by_hand(W, X[:2], y[:2]), rtol=1e-10)
    with pytest.raises(IndexError, match="must be an argument of an integer dtype itself"):
        sg.grad(_cross_entropy)(W, X, y * 1.0)
    shifted = sg.grad(lambda W, X, y: _cross_entropy(W, X, y - 1))(W, X, y)  # integers computed from integers
    np.testing.assert_allclose(shifted, _cross_entropy_by_hand(W, X, (y - 1) % 3), rtol=1e-10)


@settings(max_examples=60, **SETTINGS)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_random_advanced_indexing_equals_numpy(shape, data):
    """Keys mixing integer arrays (any shapes that broadcast), integers, full slices and an
    ellipsis: the rolled gather reads what NumPy's indexing reads."""
    v = np.arange(float(np.prod(shape))).reshape(shape)
    key = []
    for n in shape:
        kind = data.draw(st.sampled_from(["array", "int", "slice"]))
        if kind == "array":
            rows = data.draw(st.sampled_from([(2,), (1, 2), (2, 1), (3,)]))
            key.append(np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(rows)),
                                                   max_size=int(np.prod(rows))))).reshape(rows))
        else:
            key.append(data.draw(st.integers(-n, n - 1)) if kind == "int" else slice(None))
    if not any(isinstance(k, np.ndarray) for k in key):
        key[0] = np.array([0, -1])
    if data.draw(st.booleans()) and isinstance(key[-1], slice):
        key[-1] = Ellipsis
    try:
        want = v[tuple(key)]
    except IndexError:  # index arrays that do not broadcast together
        return
    x = sg.array("x", tuple(shape))
    got = x[tuple(key)]
    np.testing.assert_array_equal(sg.evaluate(got, {x: v}), want)


def test_an_integer_argument_indexes_at_any_size_without_retracing():
    """x[k] with k an int argument (JAX's dynamic index): rolled even for 3 elements, new k reuse
    the trace, negative k counts from the end, out of bounds raises."""
    f = sg.grad(lambda x, k: x[k] ** 2 + np.sum(x))
    x0 = np.arange(3.0)
    np.testing.assert_array_equal(f(x0, 1), [1.0, 3.0, 1.0])
    np.testing.assert_array_equal(f(x0, -1), [1.0, 1.0, 5.0])
    assert len(f._traces) == 1 and f._last.indexed
    with pytest.raises(IndexError, match="out of bounds for the axis it indexes"):
        f(x0, 3)


def test_a_python_loop_indexing_with_an_integer_argument_stays_rolled():
    """An element trace cannot gather through a traced integer: with one, the loop stays rolled."""
    def loss(W, xs, k):
        h, total = np.zeros(8), 0.0
        for t in range(80):
            h = np.tanh(W @ h + xs[t])
            total = total + h[k] ** 2
        return total

    W, xs = np.cos(np.arange(64.0)).reshape(8, 8) * 0.4, np.sin(np.arange(80.0) * 0.3)
    vg = sg.value_and_grad(loss, backend="vm")
    value, gradient = vg(W, xs, 3)
    on_interpreter = sg.value_and_grad(loss, backend="python")(W, xs, 3)  # (over 64 index symbols: axes shared)
    assert on_interpreter[0] == pytest.approx(value, rel=1e-13)
    np.testing.assert_allclose(on_interpreter[1], gradient, rtol=1e-12)
    assert value == pytest.approx(loss(W, xs, 3), rel=1e-12) and vg._last.indexed
    step = 1e-6 * np.eye(64)[9].reshape(8, 8)
    assert gradient[1, 1] == pytest.approx((loss(W + step, xs, 3) - loss(W - step, xs, 3)) / 2e-6, rel=1e-6)


def test_a_gather_through_integers_prints_and_typesets():
    y, z = sg.array("y", 3), sg.array("z", (3, 4))
    with tracing.integers([y]):
        picked = z[np.arange(3), y]
    assert "as_index(y[" in str(picked)
    assert r"\operatorname{as\_index}\left(y_{" in sg.latex(np.sum(picked))
    np.testing.assert_array_equal(sg.evaluate(picked, {y: [1.0, -4.0, 3.0], z: np.arange(12.0).reshape(3, 4)}),
                                  [1.0, 4.0, 11.0])
    with pytest.raises(IndexError, match="out of bounds for the axis it indexes"):
        sg.evaluate(picked, {y: [1.0, 4.0, 3.0], z: np.zeros((3, 4))})


def _bundle(cams, X, w, obs, feats):
    """GradBench's bundle adjustment, ported from JAX: cameras and points gathered by the columns of an
    integer argument (obs[:, 0] raised 'arrays used as indices must be of integer type')."""
    def project(cam, x):
        p = x - cam[3:6]
        return p[:2] / p[2] * cam[6]
    residual = sg.vmap(project)(cams[obs[:, 0]], X[obs[:, 1]]) - feats
    return np.sum(residual ** 2 * w[:, None])


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_columns_of_an_integer_argument_index_rolled(backend):
    rng = np.random.default_rng(0)
    cams, X, w = rng.normal(size=(10, 11)), rng.normal(size=(100, 3)), rng.normal(size=300)
    obs = np.stack([rng.integers(0, 10, 300), rng.integers(-100, 100, 300)], axis=1)
    feats = rng.normal(size=(300, 2))
    numpy = lambda cams, X: _bundle(cams, X, w, obs, feats)  # noqa: E731 - sg.vmap runs NumPy on arrays too
    vg = sg.value_and_grad(_bundle, argnums=(0, 1), backend=backend)
    value, (g_cams, g_X) = vg(cams, X, w, obs, feats)
    assert value == pytest.approx(numpy(cams, X), rel=1e-12) and vg._last.indexed
    for a, at, g in ((0, (3, 4), g_cams), (1, (7, 2), g_X)):
        args = [cams, X]
        step = np.zeros_like(args[a])
        step[at] = 1e-6
        plus, minus = list(args), list(args)
        plus[a], minus[a] = args[a] + step, args[a] - step
        assert g[at] == pytest.approx((numpy(*plus) - numpy(*minus)) / 2e-6, rel=1e-6)
    with pytest.raises(IndexError, match="out of bounds for the axis it indexes"):
        vg(cams, X, w, obs * 10, feats)


def _skinned(theta, corr):
    """A few points built from traced scalars (element by element), gathered by an integer argument of
    correspondences (GradBench's hand tracking, through symgrad.numpy as ported: NumPy's own array of
    traced values cannot be indexed by one, its IndexError names no cause)."""
    pts = jnp.stack([jnp.array([np.sin(theta[0]), np.cos(theta[1])]), jnp.array([theta[2] * 2, theta[3]]),
                     jnp.array([theta[4], theta[5] ** 2])])
    return pts[corr]


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_arrays_of_traced_scalars_gather_by_integer_arguments(backend):
    rng = np.random.default_rng(1)
    theta, corr = rng.normal(size=6), rng.integers(-3, 3, 100)
    f = lambda theta, corr: np.sum(np.tanh(_skinned(theta, corr)) * theta[0])  # noqa: E731
    vg = sg.value_and_grad(f, backend=backend)
    value, gradient = vg(theta, corr)
    assert value == pytest.approx(f(theta, corr), rel=1e-12)
    fd = [(f(theta + e, corr) - f(theta - e, corr)) / 2e-6 for e in np.eye(6) * 1e-6]
    np.testing.assert_allclose(gradient, fd, rtol=1e-6)
    J = sg.jacfwd(lambda t, c: _skinned(t, c).ravel(), backend=backend)(theta, corr)
    fd = np.stack([(_skinned(theta + e, corr) - _skinned(theta - e, corr)).ravel() / 2e-6
                   for e in np.eye(6) * 1e-6], axis=1)
    assert J.shape == (200, 6)
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-9)
    k_th = sg.grad(lambda theta, k: _skinned(theta, k)[1] * theta[3], backend=backend)  # a traced scalar index
    np.testing.assert_allclose(k_th(theta, 2), [0, 0, 0, theta[5] ** 2, 0, 2 * theta[3] * theta[5]], atol=1e-15)
    np.testing.assert_allclose(k_th(theta, 1), [0, 0, 0, 2 * theta[3], 0, 0], atol=1e-15)


@settings(max_examples=30, **SETTINGS)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_arrays_of_traced_scalars_gathered_by_traced_integers_equal_numpy(shape, data):
    """symgrad.numpy's arrays of traced scalars (any shape) indexed by an integer argument on their first
    axis (and by constant integers or slices after it): NumPy's values, and the gradient of a weighted sum."""
    n = int(np.prod(shape))
    idx = np.array(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=64, max_size=64)))
    rest = tuple(data.draw(st.sampled_from([slice(None), 0, -1])) for _ in shape[1:])
    weights = np.cos(np.arange(64.0))

    def f(theta, idx):
        pts = jnp.array([np.sin(theta[k]) * theta[(k + 1) % n] for k in range(n)]).reshape(shape)
        return np.sum(np.sum(pts[(idx, *rest)].reshape(64, -1), axis=1) * weights)

    theta = np.linspace(0.2, 1.4, n)
    value, grad = sg.value_and_grad(f, backend="python")(theta, idx)
    assert value == pytest.approx(f(theta, idx), rel=1e-12, abs=1e-12)
    fd = [(f(theta + e, idx) - f(theta - e, idx)) / 2e-6 for e in np.eye(n) * 1e-6]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
    on_vm = sg.value_and_grad(f, backend="vm")(theta, idx)  # (the loop VM against the interpreter)
    assert on_vm[0] == pytest.approx(value, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(on_vm[1], grad, rtol=1e-12, atol=1e-14)


def test_a_concatenation_closed_by_a_list_of_traced_scalars_rolls():
    """``np.concatenate([defects, [np.sum(x ** 2) - 1, 2 * x[0]]])``, how constraint vectors end: the list of
    traced scalars is a rolled array of them (it raised on float() and the whole function went element by
    element: a sparse Jacobian at n = 5000 took 227 s). Values, the Jacobian against central differences."""
    import warnings

    def c(x):
        return np.concatenate([x[1:] - x[:-1] ** 2, [np.sum(x ** 2) - 1.0, x[0] * 2]])

    x = np.cos(np.arange(300.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no fallback to element-by-element tracing)
        f, jac = sg.jit(c, backend="vm"), sg.jacobian(c, backend="vm")
        np.testing.assert_allclose(f(x), c(x), rtol=1e-13, atol=1e-13)
        J = jac(x)
    assert "rolled" in f.explain()
    step, eye = 1e-6, np.eye(300)
    fd = np.stack([(c(x + step * eye[k]) - c(x - step * eye[k])) / (2 * step) for k in range(300)], axis=1)
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-6)


def test_a_concatenation_of_many_computed_parts_reads_them_and_differentiates_alike():
    """Past INLINED_PARTS parts a concatenation reads its computed parts instead of inlining their
    formulas (a constraint vector of 12 parts): values and gradients on every backend against the
    interpreter and central differences."""
    def f(x, w):
        q, v = x[:40], x[40:]
        parts = [q[1:] - q[:-1] * v[1:], np.sin(v[1:]) * q[:-1], np.exp(-q[:3] ** 2), v[-1:] - 1.0, q[:1] * v[:1]]
        return np.sum(w * np.concatenate(parts + [q[k:k + 1] * v[k:k + 1] for k in range(5)]) ** 2)

    rng = np.random.default_rng(7)
    x, w = rng.normal(size=80), rng.normal(size=39 + 39 + 3 + 1 + 1 + 5)
    assert reshaping.INLINED_PARTS < 10
    want = sg.value_and_grad(f, backend="python")(x, w)
    for backend in ("vm", "numba"):
        got = sg.value_and_grad(f, backend=backend)(x, w)
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-11, atol=1e-13)
    fd = [(f(x + 1e-6 * e, w) - f(x - 1e-6 * e, w)) / 2e-6 for e in np.eye(80)]
    np.testing.assert_allclose(want[1], fd, rtol=1e-6, atol=1e-7)
