"""Derivatives: the seed examples, SymPy agreement, forward vs reverse, kinks, NaN-safe where."""

import math

import numpy as np
import pytest
import sympy
from sympy_ref import close, numeric, sympy_grad

import symgrad as sg
from symgrad.expr.traverse import topo_order

x, y, z = sg.symbols("x y z")


def test_seed_example_values():
    f = x * y + sg.sin(x)
    assert sg.evaluate(f, {x: 2, y: 3}) == pytest.approx(6.909297426825682, rel=1e-15)
    g = sg.evaluate(sg.grad(f, [x, y]), {x: 2, y: 3})
    assert g == [pytest.approx(3 + math.cos(2), rel=1e-15), 2.0]


def test_x_plus_x_and_repeated_products():
    assert sg.diff(x + x, x) is sg.const(2)
    p, q = x * y, y * x  # two separate constructions, one node
    g = sg.grad(p + q, [x, y])
    assert sg.evaluate(g, {x: 5.0, y: 7.0}) == [14.0, 10.0]
    assert g[0] is 2 * y and g[1] is 2 * x


def test_diff_higher_order_and_jacobian_shapes():
    assert sg.diff(x ** 3, x, 2) is 6 * x
    J = sg.jacobian([x * y, x + y, sg.sin(z)], [x, y, z])
    assert J.shape == (3, 3) and J[2, 2] is sg.cos(z) and J[0, 2] is sg.const(0)
    v = sg.vector("v", 2)
    assert sg.grad(v[0] * v[1], v).shape == (2,)
    assert sg.jacobian(np.array([[x, y], [x * y, 1]], dtype=object), [x, y]).shape == (2, 2, 2)


FORMULAS = [
    x * y + sg.sin(x),
    sg.exp(-x ** 2 - y ** 2) * sg.cos(z) + x * y * z,
    sg.atan2(y, x) * sg.hypot(x, z) + sg.log1p(x ** 2) / sg.sqrt(y ** 2 + 1),
    sg.tanh(x * y) ** 3 - sg.sigmoid(z) * sg.softplus(x - y) + sg.erf(x / 3),
    sg.asinh(x) + sg.acosh(y ** 2 + 2) + sg.atanh(sg.tanh(z) / 2) + sg.asin(x / 4) * sg.acos(y / 5),
    sg.expm1(x / 2) * sg.tan(y / 3) + sg.sinh(z) / sg.cosh(x) + (x ** 2 + 1) ** (y / 3),
]
POINT = {"x": 0.7, "y": -1.3, "z": 0.4}


@pytest.mark.parametrize("f", FORMULAS, ids=str)
def test_gradient_and_hessian_match_sympy(f):
    xs = [x, y, z]
    ours = sg.evaluate(sg.grad(f, xs), POINT)
    assert close(ours, [numeric(d, POINT) for d in sympy_grad(f, xs)])
    H = sg.evaluate(sg.hessian(f, xs), POINT)
    s = sg.to_sympy(f)
    syms = [sympy.Symbol(n, real=True) for n in "xyz"]
    ref = [[numeric(sympy.diff(s, a, b), POINT) for b in syms] for a in syms]
    assert close(H, ref)
    assert close(H, H.T)


@pytest.mark.parametrize("f", FORMULAS, ids=str)
def test_forward_mode_matches_reverse(f):
    t = [0.3, -1.1, 2.0]
    fwd = sg.evaluate(sg.jvp(f, [x, y, z], t), POINT)
    rev = np.dot(sg.evaluate(sg.grad(f, [x, y, z]), POINT), t)
    assert close(fwd, rev, rtol=1e-12)


def test_stop_gradient_evaluates_to_its_argument_with_zero_derivative():
    f = x * sg.stop_gradient(x * x)
    assert sg.evaluate(f, {x: 3.0}) == 27.0
    assert sg.evaluate(sg.diff(f, x), {x: 3.0}) == 9.0


def test_kink_conventions():
    d = lambda f, v: sg.evaluate(sg.diff(f, x), {x: v, y: 0.0})  # noqa: E731
    assert [d(sg.abs(x), v) for v in (-2.0, 0.0, 2.0)] == [-1.0, 0.0, 1.0]
    assert [d(sg.relu(x), v) for v in (-2.0, 0.0, 2.0)] == [0.0, 0.0, 1.0]
    assert [d(sg.maximum(x, y), v) for v in (-1.0, 0.0, 1.0)] == [0.0, 0.5, 1.0]
    assert [d(sg.minimum(x, y), v) for v in (-1.0, 0.0, 1.0)] == [1.0, 0.5, 0.0]
    assert [d(sg.floor(x) + sg.ceil(x) + sg.sign(x), v) for v in (-0.5, 0.0, 0.5)] == [0.0] * 3
    assert d(sg.where(x > 0, x ** 2, -x), 0.0) == -1.0 and d(sg.where(x > 0, x ** 2, -x), 2.0) == 4.0


@pytest.mark.parametrize("op", [sg.maximum, sg.minimum])
def test_a_tree_of_max_shares_its_derivative_evenly_among_ties_however_nested(op):
    """max(max(x, y), z) at x = y = z: 1/3 each, as np.max's (JAX, autograd), not 1/4, 1/4, 1/2."""
    w = sg.Var("w")
    nestings = [op(op(x, y), z), op(x, op(y, z)), op(op(z, x), y)]
    at = {x: 2.0, y: 2.0, z: 2.0}
    for f in nestings:
        assert sg.evaluate(sg.grad(f, [x, y, z]), at) == [1 / 3] * 3
        assert sg.evaluate(sg.jvp(f, [x, y, z], [1.0, 10.0, 100.0]), at) == pytest.approx(37.0, rel=1e-15)
        assert sg.evaluate(sg.grad(f, [x, y, z]), {**at, y: 3.0 if op is sg.maximum else 1.0}) == [0, 1, 0]
    g = op(op(x, y), op(z, w))  # two ties of four leaves
    assert sg.evaluate(sg.grad(g, [x, y, z, w]), {x: 1.0, y: 5.0, z: 5.0, w: 1.0 if op is sg.maximum else 9.0}) \
        == ([0, 0.5, 0.5, 0] if op is sg.maximum else [1, 0, 0, 0])
    shared = op(x, y)  # used twice: a leaf of the tree above it, with a derivative of its own
    assert sg.evaluate(sg.grad(op(shared, z) + shared, [x, y, z]), at) == [0.75, 0.75, 0.5]


def test_a_running_max_keeps_a_gradient_graph_linear_in_its_length():
    """Each partial maximum is used again (summed), so no tree reaches past one node: no n**2 shares."""
    v = sg.vector("v", 2000)
    m, total = v[0], 0
    for k in range(1, 2000):
        m = sg.maximum(m, v[k])
        total = total + m
    assert sg.count_nodes(sg.grad(total, list(v))) < 20 * 2000


def test_where_gradient_is_not_poisoned_by_the_untaken_branch():
    f = sg.where(x > 0, sg.sqrt(x), 0)
    g = sg.diff(f, x)
    assert sg.evaluate(g, {x: -1.0}) == 0.0
    assert sg.evaluate(g, {x: 4.0}) == 0.25
    h = sg.where(x > 0, sg.log(x) * y, y)  # chained through more ops
    gx, gy = sg.grad(sg.sin(h) * 2, [x, y])
    assert sg.evaluate(gx, {x: -1.0, y: 2.0}) == 0.0
    assert sg.evaluate(gy, {x: -1.0, y: 2.0}) == pytest.approx(2 * math.cos(2.0))
    assert sg.evaluate(sg.diff(g, x), {x: -1.0}) == 0.0  # second derivative too


def test_domain_errors_give_nan_like_numpy():
    assert math.isnan(sg.evaluate(sg.log(x), {x: -1.0}))
    assert sg.evaluate(sg.log(x), {x: 0.0}) == -math.inf
    assert math.isnan(sg.evaluate(sg.sqrt(x), {x: -1.0}))
    assert sg.evaluate(1 / x, {x: 0.0}) == math.inf


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: sg.grad(x * y, [x, x]), ValueError, "'x' more than once"),
        (lambda: sg.grad(x * y, ["x", y]), TypeError, r"string 'x'.*sg.Var\('x'\)"),
        (lambda: sg.grad(x * y, [x * y]), TypeError, "variables \\(or sg.array inputs\\) only"),
        (lambda: sg.grad([x, y], [x]), TypeError, "one scalar expression"),
        (lambda: sg.diff(x, "x"), TypeError, "string 'x'"),
        (lambda: sg.jvp(x, [x, y], [1.0]), ValueError, "2 variables but 1 tangents"),
    ],
)
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_gradient_graph_is_a_small_multiple_of_the_function():
    """Cheap-gradient principle on a 10**5-node function (the ratio is reported in the closing note)."""
    rng = np.random.default_rng(0)
    xs = sg.vector("p", 300)
    nodes = list(xs)
    for i in range(85_000):
        a, b = nodes[-1 - rng.integers(min(len(nodes), 20))], nodes[rng.integers(len(nodes))]
        k = i % 3
        nodes.append(sg.sin(a) * b if k == 0 else sg.exp(a * 0.01) + b if k == 1 else sg.tanh(a - b))
    f = sum(nodes[-50:], sg.const(0.0))
    n_f = len(topo_order([f]))
    g = sg.grad(f, xs)
    n_all = len(topo_order([f, *g]))
    ratio = (n_all - n_f) / n_f
    print(f"function nodes {n_f}, new gradient nodes {n_all - n_f}, ratio {ratio:.2f}")
    assert n_f > 100_000
    assert ratio < 4.0
    point = {v.name: 0.1 * i for i, v in enumerate(xs)}
    assert close(sg.evaluate(g[:3], point), sg.check_grad(f, xs[:3], point).numeric, rtol=1e-5)


@pytest.mark.parametrize("backend", ["python", "vm", "numba"])
def test_an_infinite_partial_behind_a_losing_max_stays_out_of_the_derivatives(backend):
    """sqrt(max(x, 0)) and max(x, 0)**1.5 are flat where x < 0: their derivatives are 0 there, not
    0 * inf = nan (JAX gives nan); the max's partial is a where's 0, which a product keeps outside
    (the soak's hvp of max(x, 0)**1.5 was nan where finite differences are 0)."""
    x = np.array([-0.5, 0.0, 0.3, 2.0] * 16)
    grad = sg.grad(lambda x: np.sum(np.sqrt(np.maximum(x, 0.0))), backend=backend)(x)
    want = np.where(x > 0, 0.5 / np.sqrt(np.maximum(x, 1e-300)), np.where(x == 0, np.inf, 0.0))
    np.testing.assert_array_equal(grad[x != 0], want[x != 0])
    f = lambda x: np.sum(np.maximum(x, 0.0) ** 1.5 + np.minimum(x, 0.0) ** 3)  # noqa: E731
    hv = sg.hvp(f, backend=backend)(x, np.ones_like(x))  # (at 0 itself: inf, the curvature of x**1.5 there)
    with np.errstate(divide="ignore"):  # (x == 0 divides by 0 in the branch not taken)
        want = np.where(x > 0, 0.75 / np.sqrt(np.abs(x)), 6 * x)
    np.testing.assert_allclose(hv[x != 0], want[x != 0])
    y = x[x != 0][:6]
    H = sg.hessian(lambda y: np.sum(np.clip(y, 0.0, 1.0) ** 1.5), backend=backend)(y)
    np.testing.assert_allclose(H, np.diag(np.where((y > 0) & (y < 1), 0.75 / np.sqrt(np.abs(y)), 0.0)))


def test_an_infinite_partial_behind_abs_at_zero_stays_out_of_the_hvp():
    """The soak's hvp of sum |x_i - x_j|**1.5 over pairs including i == j: x_k - x_k is 0 whatever x is, so
    its terms have derivatives 0; the chain rule met |u|**1.5's inf curvature times abs's 0 (nan)."""
    x = np.random.default_rng(1403316539).normal(size=64)
    f = lambda x: np.sum(np.abs(x[:4, None] - x) ** 1.5)  # noqa: E731
    v = np.random.default_rng(2).normal(size=64)
    hv = sg.hvp(f, backend="vm")(x, v)
    G = sg.grad(f, backend="vm")
    np.testing.assert_allclose(hv, (G(x + 1e-6 * v) - G(x - 1e-6 * v)) / 2e-6, rtol=1e-5, atol=1e-5)
    assert sg.grad(lambda x: np.sum(np.abs(x)))(np.array([-1.0, 0.0, 2.0] * 22)).tolist()[:3] == [-1.0, 0.0, 1.0]


def test_an_array_read_at_computed_addresses_is_as_finite_as_the_array():
    """A guarded product (``where(g == 0, 0, g*p)``, diff._Masks) is for partials that may be nan where
    the inputs are finite. An address's floor division or modulo is index arithmetic, never a value,
    and a scatter of finite values is finite: GMM's lower triangles (a table of positions) were
    guarded in every product of the gradient, which blocked BLAS."""
    from symgrad.expr import diff
    from symgrad.expr.rolled import array, index, reduce, scatter, subscript, tensor

    x, i, j = array("x", (12,)), index("i", 12), index("j", 4)
    masks = diff._Masks([])
    assert not masks.may_fail(subscript(x, ((i * 5 + 3) // 7) % 12))
    assert not masks.may_fail(scatter(subscript(x, i), (i % 4,), (i,), (4,)))
    assert masks.may_fail(scatter(sg.log(subscript(x, i)), (i % 4,), (i,), (4,)))
    assert masks.may_fail(subscript(tensor(1 / subscript(x, i), i), j))
    assert not masks.may_fail(reduce("sum", subscript(x, i) * 2.0, i))
