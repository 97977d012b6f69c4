"""sg.custom_jvp / sg.custom_vjp: JAX's examples (its "Custom derivative rules" page) give JAX's numbers,
derivatives of higher order differentiate the rule, every backend computes the function's value, and
random compositions wrapped with their true rule agree with the plain function and finite differences."""

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg


@sg.custom_jvp
def log1pexp(x):
    return np.log(1.0 + np.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return log1pexp(x), (1.0 - 1.0 / (1.0 + np.exp(x))) * x_dot


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_the_rule_replaces_the_graph_where_the_graph_overflows():
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(sg.grad(lambda x: np.log(1.0 + np.exp(x)))(1000.0))  # inf / inf
    assert sg.grad(log1pexp)(1000.0) == 1.0
    assert log1pexp(3.0) == pytest.approx(np.log1p(np.exp(3.0)), rel=1e-15)
    assert sg.jit(log1pexp)(3.0) == pytest.approx(np.log1p(np.exp(3.0)), rel=1e-15)
    np.testing.assert_allclose(sg.vmap(sg.jit(sg.grad(log1pexp)))(np.arange(3.0)), _sigmoid(np.arange(3.0)),
                               rtol=1e-15)


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_backends_compute_the_value_and_the_rule(backend):
    vg = sg.value_and_grad(log1pexp, backend=backend)
    for x in (-30.0, 0.5, 3.0, 700.0):
        value, slope = vg(x)
        assert value == pytest.approx(np.logaddexp(0.0, x), rel=1e-13)
        assert slope == pytest.approx(_sigmoid(x), rel=1e-14)


def test_second_derivatives_differentiate_the_rule():
    x = 1.3
    assert sg.grad(sg.grad(log1pexp))(x) == pytest.approx(_sigmoid(x) * (1 - _sigmoid(x)), rel=1e-13)
    h = sg.hvp(lambda v: np.sum(log1pexp(v)))(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    np.testing.assert_allclose(h, [_sigmoid(1.0) * (1 - _sigmoid(1.0)), 0.0], rtol=1e-13)


@sg.custom_jvp
def f_sin(x, y):
    return np.sin(x) * y


@f_sin.defjvp
def _f_sin_jvp(primals, tangents):
    (x, y), (x_dot, y_dot) = primals, tangents
    return f_sin(x, y), np.cos(x) * x_dot * y + np.sin(x) * y_dot


@sg.custom_vjp
def g_sin(x, y):
    return np.sin(x) * y


def _g_fwd(x, y):
    return g_sin(x, y), (np.cos(x), np.sin(x), y)


def _g_bwd(res, g):
    cos_x, sin_x, y = res
    return cos_x * g * y, sin_x * g


g_sin.defvjp(_g_fwd, _g_bwd)


@pytest.mark.parametrize("fn", [f_sin, g_sin], ids=["custom_jvp", "custom_vjp"])
def test_two_arguments_every_transform(fn):
    x, y = 2.0, 3.0
    assert fn(x, y) == pytest.approx(np.sin(2.0) * 3.0, rel=1e-15)
    out, dot = sg.jvp(fn, (x, y), (1.0, 0.5))
    assert dot == pytest.approx(np.cos(x) * y + np.sin(x) * 0.5, rel=1e-14)
    assert sg.grad(fn, argnums=(0, 1))(x, y) == pytest.approx((np.cos(x) * y, np.sin(x)), rel=1e-14)
    H = np.array(sg.hessian(fn, argnums=(0, 1))(x, y), dtype=float)
    np.testing.assert_allclose(H, [[-np.sin(x) * y, np.cos(x)], [np.cos(x), 0.0]], rtol=1e-13, atol=1e-15)
    J = sg.jacfwd(lambda v: fn(v[0], v[1]))(np.array([x, y]))
    np.testing.assert_allclose(J, [np.cos(x) * y, np.sin(x)], rtol=1e-14)


@partial(sg.custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x


clip_gradient.defvjp(lambda lo, hi, x: (x, None), lambda lo, hi, _, g: (np.clip(g, lo, hi),))


def test_a_bwd_that_clips_the_cotangent():
    def clip_sin(x):
        return np.sin(clip_gradient(-0.75, 0.75, x))

    xs = np.linspace(0.0, 10.0, 5)
    want = np.clip(np.cos(xs), -0.75, 0.75)
    np.testing.assert_allclose([sg.grad(clip_sin)(float(x)) for x in xs], want, rtol=1e-15)
    np.testing.assert_allclose(sg.vmap(sg.grad(clip_sin))(xs), want, rtol=1e-15)
    with pytest.raises(TypeError, match="not linear in the cotangent"):
        sg.jvp(clip_sin, (1.0,), (1.0,))
    # a derivative of the gradient differentiates fwd (the identity) and the clip as written, as JAX's:
    # d/dx clip(cos x) is -sin x inside the bounds, 0 where clipped (not the clip of -sin x)
    for x in (1.0, 3.0):
        want = -np.sin(x) if abs(np.cos(x)) < 0.75 else 0.0
        assert sg.grad(sg.grad(clip_sin))(x) == pytest.approx(want, rel=1e-15, abs=1e-300)


def test_nondiff_function_argument_and_defjvps():
    @partial(sg.custom_jvp, nondiff_argnums=(0,))
    def app(f, x):
        return f(x)

    @app.defjvp
    def _app_jvp(f, primals, tangents):
        return f(primals[0]), 2.0 * tangents[0]

    assert app(lambda x: x ** 3, 3.0) == 27.0
    assert sg.grad(app, 1)(lambda x: x ** 3, 3.0) == 2.0

    f = sg.custom_jvp(lambda x, y: np.sin(x) * y)
    f.defjvps(lambda t, ans, x, y: np.cos(x) * t * y, None)
    assert sg.grad(f, argnums=(0, 1))(0.5, 2.0) == pytest.approx((np.cos(0.5) * 2.0, 0.0), rel=1e-15)


def test_pytrees_in_and_out():
    @sg.custom_vjp
    def polar(p):
        return p["r"] * np.cos(p["t"]), p["r"] * np.sin(p["t"])

    def fwd(p):
        return polar(p), p

    def bwd(p, g):
        gx, gy = g
        return ({"r": gx * np.cos(p["t"]) + gy * np.sin(p["t"]),
                 "t": -gx * p["r"] * np.sin(p["t"]) + gy * p["r"] * np.cos(p["t"])},)

    polar.defvjp(fwd, bwd)

    def loss(p):
        x, y = polar(p)
        return x * 2.0 + y ** 2

    def plain(p):
        x, y = p["r"] * np.cos(p["t"]), p["r"] * np.sin(p["t"])
        return x * 2.0 + y ** 2

    p = {"r": 1.5, "t": 0.3}
    got, want = sg.grad(loss)(p), sg.grad(plain)(p)
    assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], rel=1e-14) for k in want)
    Hg, Hw = sg.hessian(loss)(p), sg.hessian(plain)(p)
    assert all(Hg[a][b] == pytest.approx(Hw[a][b], rel=1e-13) for a in p for b in p)


@pytest.mark.parametrize("n", [5, 200])  # element by element; a rolled trace falls back to elements
def test_arrays(n):
    x = np.linspace(-3.0, 50.0, n)
    g = sg.grad(lambda v: np.sum(log1pexp(v) * np.arange(n)))(x)
    np.testing.assert_allclose(g, _sigmoid(x) * np.arange(n), rtol=1e-13)


@pytest.mark.parametrize("n", [3, 100])  # element by element, rolled
def test_nested_derivatives_of_arrays_and_the_argument_left_untouched(n):
    """The call must not write its placeholders into the caller's array (it did, element by element:
    Jacobians of gradients came back zero, and a later use of the array read placeholders)."""
    x = np.linspace(0.5, 2.0, n)
    h = sg.jacfwd(sg.jacrev(lambda v: np.sum(log1pexp(v))))(x)
    np.testing.assert_allclose(h, np.diag(_sigmoid(x) * (1.0 - _sigmoid(x))), rtol=1e-13, atol=1e-300)
    g = sg.grad(lambda v: np.sum(log1pexp(v) * v))(x)
    np.testing.assert_allclose(g, np.log1p(np.exp(x)) + x * _sigmoid(x), rtol=1e-13)


def test_symbolic_calls_print_as_calls_and_evaluate_as_the_function():
    x = sg.Var("x")
    e = log1pexp(x) * 2
    assert str(e) == "2*log1pexp(x)"
    assert sg.evaluate(e, {x: 0.0}) == pytest.approx(2 * np.log(2.0), rel=1e-15)
    assert str(sg.grad(log1pexp(x), [x])[0]) == "1 - 1/(exp(x) + 1)"
    assert sg.compile(e, [x])(np.array([0.0])) == pytest.approx(2 * np.log(2.0), rel=1e-15)
    with pytest.raises(sg.FormatError, match="custom_jvp"):
        sg.dumps(e)


def test_mistakes_are_named():
    nonlinear = sg.custom_jvp(lambda x: x)
    nonlinear.defjvp(lambda p, t: (p[0], t[0] ** 2))
    with pytest.raises(TypeError, match="not linear in the tangents"):
        sg.grad(nonlinear)(1.0)
    no_rule = sg.custom_jvp(lambda x: x ** 2)
    assert sg.jit(no_rule)(3.0) == 9.0
    with pytest.raises(TypeError, match="without a rule"):
        sg.grad(no_rule)(1.0)
    wrong = sg.custom_vjp(lambda x, y: x * y)
    wrong.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (r[1] * g,))
    with pytest.raises(TypeError, match="tuple of 2 cotangent"):
        sg.grad(wrong)(1.0, 2.0)

    def closes_over(w, z):
        h = sg.custom_jvp(lambda x: x * z)
        h.defjvp(lambda p, t: (h(*p), t[0] * z))
        return h(w)

    with pytest.raises(sg.TracingError, match="reads the traced value z"):
        sg.grad(closes_over)(1.0, 2.0)


# Random compositions, wrapped with the chain rule's derivative as their rule: the same gradients and
# Hessians as the plain composition (reverse over the rule), and finite differences agree.
_UNARY = {
    "sin": (np.sin, np.cos),
    "tanh": (np.tanh, lambda u: 1.0 - np.tanh(u) ** 2),
    "exp": (lambda u: np.exp(0.3 * u), lambda u: 0.3 * np.exp(0.3 * u)),
    "square": (lambda u: u * u, lambda u: 2.0 * u),
    "softplus": (lambda u: np.log(1.0 + np.exp(u)), _sigmoid),
}


def _compose(names):
    def f(x):
        for n in names:
            x = _UNARY[n][0](x)
        return x
    return f


def _chain(names):
    def d(x):
        slope = 1.0
        for n in names:
            slope = slope * _UNARY[n][1](x)
            x = _UNARY[n][0](x)
        return slope
    return d


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(_UNARY)), min_size=1, max_size=4), st.booleans(),
       st.floats(-1.5, 1.5), st.floats(-1.5, 1.5))
def test_random_compositions_with_their_rule(names, vjp, a, b):
    f, d = _compose(names), _chain(names)
    if vjp:
        wrapped = sg.custom_vjp(f)
        wrapped.defvjp(lambda x: (f(x), x), lambda x, g: (d(x) * g,))
    else:
        wrapped = sg.custom_jvp(f)
        wrapped.defjvp(lambda p, t: (f(p[0]), d(p[0]) * t[0]))

    def loss(x, y):
        return wrapped(x * y) + wrapped(x) * y

    def plain(x, y):
        return f(x * y) + f(x) * y

    # (on the VM: each example is a new graph, which Numba would compile; the rules are the point here)
    got, want = (sg.grad(fn, argnums=(0, 1), backend="vm")(a, b) for fn in (loss, plain))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    hessians = [np.array(sg.hessian(fn, argnums=(0, 1), backend="vm")(a, b), dtype=float) for fn in (loss, plain)]
    np.testing.assert_allclose(*hessians, rtol=1e-10, atol=1e-12)
    h = 1e-6
    fd = (loss(a + h, b) - loss(a - h, b)) / (2 * h)
    assert got[0] == pytest.approx(fd, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_an_elementwise_rule_on_large_arrays_is_rolled(backend):
    x = np.linspace(-3.0, 800.0, 500)
    weights = np.arange(500.0)
    g = sg.grad(lambda v: np.sum(log1pexp(v * 2.0) * weights), backend=backend)
    np.testing.assert_allclose(g(x), 2.0 * weights * _sigmoid(2.0 * x), rtol=1e-13)
    assert g._latest().indexed
    vg = sg.value_and_grad(lambda v: np.sum(g_sin(v, v[::-1]) ** 2), backend=backend)
    value, grad = vg(x[:100] / 100.0)
    u = x[:100] / 100.0
    assert value == pytest.approx(np.sum((np.sin(u) * u[::-1]) ** 2), rel=1e-13)
    dv = 2 * np.sin(u) * u[::-1]
    np.testing.assert_allclose(grad, dv * np.cos(u) * u[::-1] + (dv * np.sin(u))[::-1], rtol=1e-12)
    assert vg._latest().indexed


def test_a_rule_that_is_not_elementwise_goes_element_by_element():
    @sg.custom_vjp
    def normalise(v):
        return v / np.sum(v)

    def bwd(v, g):
        s = np.sum(v)
        return (g / s - np.sum(g * v) / s ** 2,)

    normalise.defvjp(lambda v: (normalise(v), v), bwd)
    x = np.linspace(1.0, 2.0, 80)
    loss = sg.grad(lambda v: np.sum(normalise(v) ** 2))
    with pytest.warns(UserWarning, match="not elementwise"):
        got = loss(x)
    s = np.sum(x)
    n = x / s
    np.testing.assert_allclose(got, 2 * n / s - np.sum(2 * n * x) / s ** 2, rtol=1e-12, atol=1e-15)
    assert not loss._latest().indexed


def test_python_control_flow_in_the_function_and_its_rule():
    """JAX's example: an if on the argument, in the function and in its JVP rule, decided by the value."""
    @sg.custom_jvp
    def f(x):
        if x > 0:
            return np.sin(x)
        return np.cos(x)

    @f.defjvp
    def _f_jvp(primals, tangents):
        (x,), (x_dot,) = primals, tangents
        return f(x), (2.0 if x > 0 else 3.0) * x_dot

    g = sg.grad(f)
    assert (g(1.0), g(-1.0), g(2.0)) == (2.0, 3.0, 2.0)
    assert sg.jit(f)(-1.0) == np.cos(-1.0)
    np.testing.assert_array_equal(sg.vmap(g)(np.array([1.0, -1.0, 2.0])), [2.0, 3.0, 2.0])


@partial(sg.custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
    """JAX's "Custom derivative rules" fixed point, as written there (jnp -> np, lax / jax -> sg)."""
    def cond_fun(carry):
        x_prev, x = carry
        return np.abs(x_prev - x) > 1e-6

    def body_fun(carry):
        _, x = carry
        return x, f(a, x)

    _, x_star = sg.while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
    return x_star


def _fixed_point_fwd(f, a, x_init):
    x_star = fixed_point(f, a, x_init)
    return x_star, (a, x_star)


def _fixed_point_rev(f, res, x_star_bar):
    a, x_star = res
    _, vjp_a = sg.vjp(lambda a: f(a, x_star), a)
    a_bar, = vjp_a(fixed_point(partial(_rev_iter, f), (a, x_star, x_star_bar), x_star_bar))
    return a_bar, np.zeros_like(x_star)


def _rev_iter(f, packed, u):
    a, x_star, x_star_bar = packed
    _, vjp_x = sg.vjp(partial(f, a), x_star)
    return x_star_bar + vjp_x(u)[0]


fixed_point.defvjp(_fixed_point_fwd, _fixed_point_rev)


def test_a_bwd_that_loops_on_the_cotangent_until_it_converges():
    """JAX's fixed-point example: bwd iterates on the cotangent with an unbounded while_loop, whose
    condition reads the cotangent (a placeholder when the rule is traced). Such control flow is
    decided at a cotangent of 1, the rule being linear in it; guards retrace at other arguments."""
    def newton_sqrt(a):
        return fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)

    assert newton_sqrt(2.0) == pytest.approx(np.sqrt(2.0), rel=1e-12)
    first, second = sg.grad(newton_sqrt), sg.grad(sg.grad(newton_sqrt))
    for a in (2.0, 9.0, 100.0, 0.01, 2.0):  # (different numbers of steps: retraced each time)
        assert first(a) == pytest.approx(0.5 / np.sqrt(a), rel=1e-9)
        assert second(a) == pytest.approx(-0.25 * a ** -1.5, rel=1e-9)
    a = np.array([2.0, 9.0, 100.0])
    np.testing.assert_allclose(sg.vmap(sg.grad(newton_sqrt, backend="vm"))(a), 0.5 / np.sqrt(a), rtol=1e-9)


@pytest.mark.parametrize("bwd", [lambda x, g: (2.0 * x * g if g > 0 else 0.0 * g,),  # (JAX: 0 at g < 0)
                                 lambda x, g: (2.0 * x * g ** 3 if abs(g) > 0.5 else g,)])
def test_a_bwd_branching_on_the_cotangent_must_be_linear_in_it(bwd):
    f = sg.custom_vjp(lambda x: x ** 2)
    f.defvjp(lambda x: (x ** 2, x), bwd)
    with pytest.raises(TypeError, match="decides Python control flow on the cotangent's value and is not linear"):
        sg.grad(lambda x: -3.0 * f(x))(2.0)
