"""Trust: transforms compose as in JAX, traced comparisons are comparisons, derivatives at the
points where textbook formulas give 0*inf, pytrees, has_aux, jvp / vjp and argument handling,
each against finite differences or closed forms."""

import functools
import itertools
import math

import numpy as np
import pytest
from test_numpy_grads import fd_grad as fd

import symgrad as sg

VM = dict(backend="vm")
f = lambda x: 3 * np.sin(x) * x  # f' = 3 sin + 3x cos, f'' = 6 cos - 3x sin, f''' = -9 sin - 3x cos
D = [f, lambda x: 3 * math.sin(x) + 3 * x * math.cos(x), lambda x: 6 * math.cos(x) - 3 * x * math.sin(x),
     lambda x: -9 * math.sin(x) - 3 * x * math.cos(x)]
X0 = 0.5
DIFFERENTIATE = {  # a transform of a scalar function, as a scalar function again
    "grad": lambda g: sg.grad(g, **VM),
    "value_and_grad": lambda g: (lambda x: sg.value_and_grad(g, **VM)(x)[1]),
    "jacobian": lambda g: sg.jacobian(g, **VM),
    "jvp": lambda g: (lambda x: sg.jvp(g, (x,), (1.0,))[1]),
    "vjp": lambda g: (lambda x: sg.vjp(g, x)[1](1.0)[0]),
}
KEEP = {"jit": lambda g: sg.jit(g, **VM)}


@pytest.mark.parametrize("outer,inner", [(a, b) for a, b in itertools.product(
    DIFFERENTIATE, repeat=2)])
def test_every_pair_of_derivative_transforms_is_the_second_derivative(outer, inner):
    g = DIFFERENTIATE[outer](DIFFERENTIATE[inner](f))
    assert float(g(X0)) == pytest.approx(D[2](X0), rel=1e-12)


@pytest.mark.parametrize("name", ["grad", "jacobian", "jvp"])
def test_jit_inside_and_outside_changes_nothing(name):
    d = DIFFERENTIATE[name]
    for g in (d(KEEP["jit"](f)), KEEP["jit"](d(f)), sg.value_and_grad(sg.jit(f), **VM)):
        out = g(X0)
        got = out[1] if isinstance(out, tuple) else out
        assert float(got) == pytest.approx(D[1](X0), rel=1e-12)
    assert sg.value_and_grad(sg.jit(f), **VM)(X0)[0] == pytest.approx(D[0](X0), rel=1e-14)


def test_triple_nesting_and_hessian_of_a_gradient():
    g3 = sg.grad(sg.grad(sg.grad(f, **VM), **VM), **VM)
    assert g3(X0) == pytest.approx(D[3](X0), rel=1e-12)
    assert sg.jacobian(sg.jacobian(sg.grad(f)))(X0) == pytest.approx(D[3](X0), rel=1e-12)
    assert sg.grad(lambda x: sg.hvp(f)(x, 1.0))(X0) == pytest.approx(D[3](X0), rel=1e-12)
    x = np.array([0.3, -0.8, 1.1])
    H = sg.jacobian(sg.grad(lambda v: np.sum(np.sin(v) * v[::-1])))(x)
    np.testing.assert_allclose(H, sg.hessian(lambda v: np.sum(np.sin(v) * v[::-1]))(x), rtol=1e-14)


def test_closures_over_the_outer_variables_are_not_confused():
    # d/dx [x * d/dy (x + y)] = 1 (the classic perturbation-confusion test)
    assert sg.grad(lambda x: x * sg.grad(lambda y: x + y)(1.0))(3.0) == pytest.approx(1.0)
    # the inner argument has the outer one's name and the closure holds the outer variable
    def outer(x):
        y = x
        return sg.grad(lambda x: x * y * y)(2.0)
    assert sg.grad(outer)(1.5) == pytest.approx(3.0)


def test_traced_equality_builds_a_comparison():
    assert sg.jit(lambda x, y: np.sum(x == y) + 0.0)(2.0, 2.0) == 1.0
    assert sg.jit(lambda x, y: np.sum(x != y) + 0.0)(2.0, 2.0) == 0.0
    sinc = sg.value_and_grad(lambda x: sg.where(x == 0.0, 1.0, sg.sin(x) / x))
    assert sinc(0.0) == (1.0, 0.0)
    assert sinc(0.5)[0] == pytest.approx(math.sin(0.5) / 0.5)
    v = np.array([1.0, 5.0, 3.0])
    assert sg.jit(lambda x: np.sum(x == np.array([1.0, 2.0, 3.0])))(v) == 2.0


def test_nan_to_num_gives_finite_values_and_zero_gradient_where_not_finite():
    x = np.array([1.0, np.nan, np.inf, -np.inf])
    vg = sg.value_and_grad(lambda x: np.sum(np.nan_to_num(x * 2.0)))
    value, g = vg(x)
    assert value == pytest.approx(2.0 + 0.0 + np.finfo(float).max - np.finfo(float).max)
    np.testing.assert_array_equal(g, [2.0, 0.0, 0.0, 0.0])
    clean = sg.jit(lambda x: np.nan_to_num(x, nan=-1.0, posinf=9.0))(x)
    np.testing.assert_array_equal(clean, [1, -1, 9, -np.finfo(float).max])


def test_power_and_hypot_where_the_textbook_partials_are_nan():
    x, y = sg.symbols("x y")
    at = lambda e, a, b: sg.evaluate(e, {x: a, y: b})
    assert at(sg.grad(x ** y, [x, y]), 0.0, 2.5) == [0.0, 0.0]  # JAX and finite differences: 0
    assert at(sg.grad(x ** y, [x, y]), 0.0, 0.0) == [0.0, 0.0]  # x**0 is constant
    np.testing.assert_allclose(at(sg.hessian(x ** y, [x, y]), 0.0, 2.5), 0.0)
    assert at(sg.grad(x ** y, [x, y]), 2.0, 3.0) == pytest.approx([12.0, 8 * math.log(2)])
    assert at(sg.grad(sg.hypot(x, y), [x, y]), 0.0, 0.0) == [0.5, 0.5]  # JAX's split, as maximum
    np.testing.assert_array_equal(at(sg.hessian(sg.hypot(x, y), [x, y]), 0.0, 0.0), 0.0)
    assert at(sg.grad(sg.hypot(x, y), [x, y]), 3.0, 4.0) == pytest.approx([0.6, 0.8])
    for backend in ("numba", "vm"):
        vg = sg.value_and_grad(x ** y + sg.hypot(x, y), [x, y], backend=backend)
        np.testing.assert_array_equal(vg([0.0, 0.0])[1], [0.5, 0.5])
        np.testing.assert_array_equal(vg([0.0, 2.5])[1], [0.0, 1.0])


def test_logaddexp_is_smooth_with_the_exact_hessian_at_a_tie():
    H = sg.hessian(lambda a, b: np.logaddexp(a, b), argnums=(0, 1))(1.0, 1.0)
    np.testing.assert_allclose(np.array(H, dtype=float), [[0.25, -0.25], [-0.25, 0.25]], rtol=1e-14)
    x, y = sg.symbols("x y")
    L = sg.logaddexp(x, y)
    good = sg.check_grad(sg.grad(L, [x])[0], [x, y], [1.0, 1.0])
    assert good.status == ["ok", "ok"]
    wrong = sg.check_grad(sg.grad(L, [x])[0], [x, y], [1.0, 1.0], grad_exprs=[x * 0.0, y * 0.0])
    assert wrong.status == ["FAIL", "FAIL"]  # a smooth function: a wrong derivative is a failure, not a kink


def test_sg_functions_work_elementwise_on_traced_and_plain_arrays():
    x = np.array([0.5, -1.0, 2.0])
    f = lambda v: np.sum(sg.sigmoid(v) * sg.relu(v) + sg.erf(v) + sg.softplus(v) + sg.where(v > 0, sg.sin(v), 0.0)
                         + sg.maximum(v, 0.1))
    np.testing.assert_allclose(sg.grad(f)(x), fd(f, x), rtol=1e-6)
    assert isinstance(sg.sin(np.array([1.0, 2.0])), np.ndarray) and sg.sin(1.0) == math.sin(1.0)
    np.testing.assert_allclose(sg.sigmoid(x), 1 / (1 + np.exp(-x)), rtol=1e-15)


def test_pytrees_in_and_out():
    params = {"W": np.array([[1.0, 2.0], [0.5, -1.0]]), "b": (0.3, np.array([0.1, -0.2]))}
    loss = lambda p, x: np.sum(np.tanh(p["W"] @ x + p["b"][1]) * p["b"][0])
    x = np.array([0.7, -0.4])
    g = sg.grad(loss)(params, x)
    assert set(g) == {"W", "b"} and isinstance(g["b"], tuple) and g["W"].shape == (2, 2)
    for path, val in [("W", params["W"]), ("b1", params["b"][1])]:
        def part(v, path=path):
            p = {"W": v, "b": params["b"]} if path == "W" else {"W": params["W"], "b": (params["b"][0], v)}
            return loss(p, x)
        np.testing.assert_allclose(g["W"] if path == "W" else g["b"][1], fd(part, val), rtol=1e-6)
    # a tuple of same-shape arrays is two leaves, never stacked
    g2 = sg.grad(lambda t: np.sum(t[0] * t[1] ** 2))((np.ones(2), np.full(2, 3.0)))
    assert isinstance(g2, tuple) and np.allclose(g2[0], 9.0) and np.allclose(g2[1], 6.0)
    assert sg.grad(lambda xs: xs[0] * xs[1])([2.0, 5.0]) == [5.0, 2.0]
    out = sg.jit(lambda x: {"a": x * 2, "b": [x, x ** 2]})(3.0)
    assert out == {"a": 6.0, "b": [3.0, 9.0]}
    J = sg.jacobian(lambda x: {"s": np.sum(x), "v": x * 2})(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(J["v"], 2 * np.eye(2))
    H = sg.hessian(lambda p: p["a"] ** 2 * p["b"])({"a": 1.0, "b": 2.0})
    assert H == {"a": {"a": 4.0, "b": 2.0}, "b": {"a": 2.0, "b": 0.0}}


def test_has_aux_follows_jax():
    fn = lambda x: (np.sum(x ** 2), {"mean": np.mean(x)})
    x = np.array([1.0, 2.0])
    (value, aux), g = sg.value_and_grad(fn, has_aux=True)(x)
    assert value == 5.0 and aux == {"mean": 1.5} and np.allclose(g, [2.0, 4.0])
    g, aux = sg.grad(fn, has_aux=True)(x)
    assert np.allclose(g, [2.0, 4.0]) and aux["mean"] == 1.5
    J, aux = sg.jacobian(lambda x: (x ** 2, x[0]), has_aux=True)(x)
    assert np.allclose(J, np.diag([2.0, 4.0])) and aux == 1.0
    with pytest.raises(TypeError, match="must return a pair"):
        sg.grad(lambda x: x, has_aux=True)(1.0)


def test_jvp_and_vjp_on_functions():
    fn = lambda x, y: (x * np.sin(y), x + y)
    x, y = np.array([1.0, 2.0]), np.array([0.5, -0.5])
    tx, ty = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    out, tangent = sg.jvp(fn, (x, y), (tx, ty))
    np.testing.assert_allclose(out[0], x * np.sin(y))
    np.testing.assert_allclose(tangent[0], tx * np.sin(y) + x * np.cos(y) * ty)
    np.testing.assert_allclose(tangent[1], tx + ty)
    out, back = sg.vjp(fn, x, y)
    ct = (np.array([1.0, 2.0]), np.array([0.5, 0.5]))
    gx, gy = back(ct)
    np.testing.assert_allclose(gx, ct[0] * np.sin(y) + ct[1])
    np.testing.assert_allclose(gy, ct[0] * x * np.cos(y) + ct[1])
    with pytest.raises(ValueError, match="tangents has shapes"):
        sg.jvp(fn, (x, y), (tx, np.ones(3)))


def test_argument_handling():
    assert sg.grad(functools.partial(lambda a, x: a * x ** 2, 3.0))(2.0) == 12.0
    assert sg.grad(lambda x, y: x * y, argnums=-1)(2.0, 5.0) == 2.0
    g = sg.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0], dtype=np.float32))
    assert g.dtype == np.float32 and np.allclose(g, [2.0, 4.0])
    assert sg.grad(lambda x: np.sum(x ** 2))(np.zeros(0)).shape == (0,)
    assert sg.value_and_grad(lambda x, y: np.sum(x) + y, argnums=0)(np.zeros(0), 2.0) == (2.0, pytest.approx([]))
    with pytest.raises(TypeError, match="complex inputs are not supported"):
        sg.grad(lambda x: x)(1 + 2j)
    with pytest.raises(TypeError, match=r"argument 'has_axu' \(did you mean 'has_aux'\?\); accepted: .*argnums"):
        sg.grad(lambda x: x, has_axu=True)


@pytest.mark.parametrize("make,error,match", [
    (lambda: sg.grad(lambda a: a, argnums="a"), TypeError, "argnums must be an int or a tuple of ints"),
    (lambda: sg.grad(lambda a: a, argnums=(0, 0)), ValueError, r"argnums \(0, 0\) names an argument twice"),
    (lambda: sg.grad(lambda a, n: a * n, argnums=(0, 1), static_argnums=1), ValueError,
     "argument 1 is in argnums and static_argnums"),
    (lambda: sg.jit(lambda a: a, static_argnums="0"), TypeError, "static_argnums must be an int"),
])
def test_argument_specs_name_the_problem(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_function_returning_nothing_is_named_and_numpy_ints_are_argnums():
    with pytest.raises(TypeError, match=r"returned nothing \(None: a missing return\?\)"):
        sg.grad(lambda a: None)(np.ones(3))
    assert sg.jit(lambda a: None)(np.ones(3)) is None  # (as JAX: a jit may return None)
    np.testing.assert_array_equal(sg.grad(lambda a: np.sum(a * a), argnums=np.int64(0))(np.ones(2)), [2.0, 2.0])


def test_array_likes_are_converted_on_the_fast_path():
    x, y = sg.symbols("x y")
    vg = sg.value_and_grad(x * y, [x, y], **VM)
    for arg in ([2.0, 3.0], (2, 3), np.array([2, 3]), np.array([2.0, 3.0], dtype=np.float32)):
        value, g = vg(arg)
        assert value == 6.0 and g.tolist() == [3.0, 2.0]
    with pytest.raises(TypeError, match="complex"):
        vg(np.array([1 + 1j, 2.0]))


def test_check_grad_on_python_functions_uses_the_function_itself_for_the_numbers():
    report = sg.check_grad(lambda x, y: np.sum(np.sin(x) * y), np.array([0.5, 1.0]), 2.0)
    assert report.ok and report.names == ["x[0]", "x[1]", "y"]
    np.testing.assert_allclose(report.grad, [2 * np.cos(0.5), 2 * np.cos(1.0), np.sin(0.5) + np.sin(1.0)])
    assert sg.check_grad(lambda x: np.sum(np.abs(x)), np.array([0.0, 1.0])).status == ["kink", "ok"]
    # a function that computes something else on traced values than on floats is caught
    odd = lambda x: x * (1.0 if isinstance(x, float) else 2.0)
    assert sg.check_grad(odd, 1.5).status == ["FAIL"]
    with pytest.raises(sg.GradientCheckError):
        sg.check_grad(odd, 1.5, raise_on_failure=True)


@pytest.mark.parametrize("name", ["jacfwd", "jacrev"])
def test_jacfwd_and_jacrev_give_jaxs_blocks(name):
    """Blocks output.shape + argument.shape per output leaf and argument, against central differences."""
    jac = getattr(sg, name)

    def fn(x, w):
        return {"a": np.sin(x) * w, "b": np.sum(x ** 2) * w}

    x, w = np.random.default_rng(4).normal(size=(2, 3)), 0.7
    J = jac(fn, argnums=(0, 1))(x, w)
    assert J["a"][0].shape == (2, 3, 2, 3) and J["a"][1].shape == (2, 3) and J["b"][0].shape == (2, 3)
    h = 1e-6
    for k in np.ndindex(2, 3):
        e = np.zeros((2, 3))
        e[k] = h
        column = (fn(x + e, w)["a"] - fn(x - e, w)["a"]) / (2 * h)
        np.testing.assert_allclose(J["a"][0][(..., *k)], column, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(J["a"][1], np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(J["b"][0], 2 * x * w, rtol=1e-12)
    assert jac(np.tanh)(0.3) == pytest.approx(1 - np.tanh(0.3) ** 2, rel=1e-12)  # argnums=0 by default


def test_python_ints_bools_and_objects_not_differentiated_are_static():
    """JAX's grad leaves such arguments Python values: a size, a flag, a shape, ``self`` of a method."""
    def f(x, n, flag, shape):
        v = x[:n] * np.arange(n)
        return np.sum(v.reshape(shape) ** 2) if flag else np.sum(v)

    x = np.random.default_rng(6).normal(size=100)
    g = sg.grad(f)
    want = np.zeros(100)
    want[:10] = 2 * x[:10] * np.arange(10) ** 2
    np.testing.assert_allclose(g(x, 10, True, [2, 5]), want, rtol=1e-12)
    want = np.zeros(100)
    want[:12] = np.arange(12)
    np.testing.assert_allclose(g(x, 12, False, (3, 4)), want, rtol=1e-12)
    assert sg.jit(lambda v, k: v * k)(2.0, 3) == 6.0 and sg.grad(lambda v, k: v * k)(2.0, 3) == 3.0
    assert sg.grad(lambda v, k: v ** k, argnums=1)(2.0, 3.0) == pytest.approx(8 * math.log(2.0))


def test_jit_and_grad_on_methods_bind_self_and_see_its_attributes():
    class Model:
        def __init__(self, W):
            self.W = W

        @sg.jit
        def predict(self, x):
            return np.sum(self.W * x)

        def loss(self, x):
            return np.sum(self.W * x ** 2)

    rng = np.random.default_rng(7)
    x, m = rng.normal(size=100), Model(rng.normal(size=100))
    assert m.predict(x) == pytest.approx(np.sum(m.W * x), rel=1e-12)
    m.W = np.ones(100)  # a new attribute value: read again, not stale
    assert m.predict(x) == pytest.approx(np.sum(x), rel=1e-12)
    assert Model(2 * np.ones(100)).predict(x) == pytest.approx(2 * np.sum(x), rel=1e-12)
    np.testing.assert_allclose(sg.grad(m.loss)(x), 2 * m.W * x, rtol=1e-12)
    np.testing.assert_allclose(sg.grad(Model.loss, argnums=1)(m, x), 2 * m.W * x, rtol=1e-12)
    with pytest.raises(TypeError, match="self is argument 0: argnums=1"):
        sg.grad(Model.loss)(m, x)


def test_objects_static_without_asking_key_the_trace_by_identity():
    """Two instances equal by __eq__ (and hash) but holding different arrays: keyed by value, the second
    call reused the first one's trace and returned its numbers (100 for 200)."""
    class Model:
        def __init__(self, W):
            self.W = W

        def __eq__(self, other):
            return True

        def __hash__(self):
            return 0

        @sg.jit
        def total(self, x):
            return np.sum(self.W * x)

    x = np.ones(100)
    assert Model(np.ones(100)).total(x) == 100.0 and Model(2 * np.ones(100)).total(x) == 200.0


def test_linearize_is_the_jvp_at_a_fixed_point():
    def f(x, z):
        return np.sum(np.sin(x) * z) + x[0] * z[1]

    x, z = np.array([0.3, 1.2, -0.7]), np.array([2.0, -1.0, 0.5])
    y, f_jvp = sg.linearize(f, x, z)
    assert y == pytest.approx(f(x, z), rel=1e-15)
    rng = np.random.default_rng(3)
    for _ in range(3):
        tx, tz = rng.normal(size=3), rng.normal(size=3)
        assert f_jvp(tx, tz) == pytest.approx(sg.jvp(f, (x, z), (tx, tz))[1], rel=1e-14)
        h = 1e-6
        assert f_jvp(tx, tz) == pytest.approx((f(x + h * tx, z + h * tz) - f(x - h * tx, z - h * tz)) / (2 * h),
                                              rel=1e-7)
    y, f_jvp, aux = sg.linearize(lambda v: (np.sin(v) * 2.0, v.shape[0]), x, has_aux=True)
    np.testing.assert_allclose(f_jvp(np.ones(3)), 2.0 * np.cos(x), rtol=1e-15)
    assert aux == 3
    with pytest.raises(TypeError, match="one per primal"):
        f_jvp(np.ones(3), np.ones(3))


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_jacobians_through_gathers_by_integer_arguments(backend):
    """A Jacobian's row cannot scatter: an address read from a table is tested at each target instead
    (hand tracking: vertices indexed by correspondences)."""
    rng = np.random.default_rng(5)
    V, idx, w = rng.normal(size=(70, 3)), rng.integers(0, 70, size=65), rng.normal(size=65)

    def h(V, idx, w):
        return (V[idx] * w[:, None]).ravel() + np.repeat(np.sin(V[idx, 0]), 3) * V[3, 1]

    J_V, J_w = sg.jacobian(h, argnums=(0, 2), backend=backend)(V, idx, w)
    eps, want = 1e-6, np.zeros((195, 70, 3))
    for a, b in np.ndindex(70, 3):
        step = np.zeros((70, 3))
        step[a, b] = eps
        want[:, a, b] = (h(V + step, idx, w) - h(V - step, idx, w)) / (2 * eps)
    np.testing.assert_allclose(J_V, want, atol=1e-8)
    np.testing.assert_allclose(J_w, sg.jacfwd(h, argnums=2, backend=backend)(V, idx, w), rtol=1e-14)
    np.testing.assert_allclose(sg.jacrev(h, backend=backend)(V, idx, w), J_V, rtol=1e-14)
    H = sg.hessian(lambda V, idx: np.sum(np.sin(V[idx]) ** 2), backend=backend)(V, idx)
    counts = np.bincount(idx, minlength=70)[:, None] * np.ones(3)
    np.testing.assert_allclose(np.einsum("abab->ab", H), counts * 2 * np.cos(2 * V), rtol=1e-12, atol=1e-12)
    assert np.count_nonzero(H) == np.count_nonzero(counts)


def test_reverse_over_forward_hvp_stays_rolled():
    """JAX's hvp_revfwd: grad of a jvp whose tangent is a concrete array (it went element by element,
    warning about var() of an array)."""
    import warnings

    rng = np.random.default_rng(2)
    X, V = rng.normal(size=(30, 40)), rng.normal(size=(30, 40))
    f = lambda X: np.sum(np.tanh(X) ** 2)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (hv,) = sg.grad(lambda p: sg.jvp(f, p, (V,))[1])((X,))
    t = np.tanh(X)
    np.testing.assert_allclose(hv, (2 * (1 - t * t) * (1 - 3 * t * t)) * V, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("jac", [sg.jacfwd, sg.jacrev])
def test_jacobians_of_arrays_built_of_scalars_inside_jit(jac):
    """An output built of traced scalars, a 64-element input (rolled) and a scalar one: under jit the
    Jacobian's block held only its first row (silently: shape (64,) for (2, 64))."""
    p = np.linspace(0.1, 1.0, 64)

    def f(p, s):
        return np.stack([p[0] * p[1] * s, np.sin(p[2])]), (p[3] * s, np.sum(p ** 2))

    want = jac(f, argnums=(0, 1))(p, 0.7)
    got = sg.jit(jac(f, argnums=(0, 1)))(p, 0.7)
    assert sg.tree_structure(got) == sg.tree_structure(want)
    for g, w in zip(sg.tree_leaves(got), sg.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-14)
    (dp, ds), _ = want
    assert dp.shape == (2, 64) and dp[0, 1] == 0.1 * 0.7 and dp[1, 2] == np.cos(p[2]) and ds[0] == p[0] * p[1]


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_jacobians_through_permutations_gather_through_the_inverse_table(backend):
    """A Jacobian's row cannot scatter: a gather through a table tested every address, a sum over the
    table at each of n x n entries (the soak's Jacobian of 1040 reversed entries asked the interpreter for
    8.4 GB). A one-to-one table is inverted instead; a table with repeats still tests every address."""
    rng = np.random.default_rng(3)
    y, perm = rng.normal(size=200), rng.permutation(200)
    repeats = rng.integers(0, 200, 200)
    for table in (perm, perm[:150], repeats):
        g = lambda y, t=table: np.sin(y[t]) * y[t[::-1]]  # noqa: E731
        J = sg.jacobian(g, backend=backend)(y)
        fd = np.stack([(g(y + e) - g(y - e)) / 2e-6 for e in np.eye(200) * 1e-6], axis=1)
        np.testing.assert_allclose(J, fd, atol=1e-8)
    x = rng.normal(size=1040)
    J = sg.jacobian(lambda x: sg.grad(lambda u: np.sum(np.sin(u)))(x[np.arange(1040)[::-1]]), backend=backend)(x)
    np.testing.assert_array_equal(J, np.diag(-np.sin(x[::-1]))[:, ::-1])


def test_hessians_through_permutations_read_the_inverse_table_in_range():
    """The soak's Hessians of a reversed or permuted x summed over part of it ((v * v)[:16], v[1:] * v[:-1]):
    the inverse table's solution lies beyond the index's shorter range at some targets (silently wrong
    entries before the range was checked)."""
    x = np.random.default_rng(258522345).normal(size=64)
    perm = np.random.default_rng(97).permutation(64)
    for f in (lambda x: np.sum((x[::-1] * x[::-1])[:16]), lambda x: np.sum(x[::-1][1:] * x[::-1][:-1]),
              lambda x: np.sum(x[perm][1:] * x[perm][:-1])):
        H = sg.hessian(f, backend="python")(x)
        G = sg.grad(f, backend="python")
        fd = np.stack([(G(x + e) - G(x - e)) / 2e-6 for e in np.eye(64) * 1e-6], axis=1)
        np.testing.assert_allclose(H, fd, atol=1e-7)


def test_the_interpreter_refuses_more_values_at_once_than_it_holds():
    """A Jacobian through a padded, permuted array tests every address: 1040**3 values in one where of the
    interpreter (8.4 GB: the soak's OOM); it says so and names the way out, which the loops take."""
    fv = lambda x: np.log(1.0 + np.pad(x, (2, 3))[np.random.default_rng(49).permutation(1040)] ** 2) ** 2  # noqa: E731
    with pytest.raises(ValueError, match=r"1,124,864,000 values at once .* evaluate it compiled"):
        sg.jacobian(fv, backend="python")(np.ones(1040))
