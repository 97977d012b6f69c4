"""Rolled expressions: index symbols, arrays, loads, reductions, tensors; evaluated against unroll."""

import json
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from rolled_graphs import elements, nested_sums, rolled_sums, spread, tied, unrolled_grad
from sympy_ref import close

import symgrad as sg
from symgrad.expr import gathers, ops
from symgrad.expr.build import _LOOKED_AT, apply
from symgrad.expr.rolled import array, index, reduce, subscript, table, tensor, unroll, value_range

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@settings(max_examples=120, **SETTINGS)
@given(rolled_sums(), st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9), st.floats(-1.0, 1.0))
def test_rolled_values_equal_the_unrolled_graph(fx, values, a):
    f, x = fx
    x0 = np.array(values[: x.shape[0]]) + 0.123
    got = sg.evaluate(f, {x: x0, "a": a})
    want = sg.evaluate(unroll(f), {**elements("x", x0), "a": a})
    assume(np.isfinite(got) and np.isfinite(want))
    assert close(got, want, rtol=1e-12, atol=1e-12), (str(f), got, want)


@settings(max_examples=40, **SETTINGS)
@given(st.integers(1, 5), st.integers(1, 5), st.data())
def test_two_dimensional_contractions_equal_numpy_and_unroll(m, k, data):
    A, v = array("A", (m, k)), array("v", k)
    r, c = index("r", m), index("c", k)
    y = tensor(reduce("sum", subscript(A, (r, c)) * subscript(v, c), c), r)
    loss = reduce("sum", sg.tanh(subscript(y, r)) ** 2, r) + reduce("max", subscript(v, c), c)
    A0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=m * k, max_size=m * k))).reshape(m, k)
    v0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=k, max_size=k)))
    np.testing.assert_allclose(sg.evaluate(y, {A: A0, v: v0}), A0 @ v0, rtol=1e-13, atol=1e-15)
    want = np.sum(np.tanh(A0 @ v0) ** 2) + v0.max()
    assert math.isclose(sg.evaluate(loss, {A: A0, v: v0}), want, rel_tol=1e-12, abs_tol=1e-14)
    unrolled = sg.evaluate(unroll(loss), {**elements("A", A0), **elements("v", v0)})
    assert math.isclose(unrolled, want, rel_tol=1e-12, abs_tol=1e-14)


def test_rosenbrock_is_a_few_nodes_at_any_size():
    sizes = []
    for n in (10, 10**6):
        x, i = array("x", n), index("i", n - 1)
        f = reduce("sum", 100 * (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2 + (1 - subscript(x, i)) ** 2, i)
        sizes.append(sg.count_nodes(f))
    assert sizes[0] == sizes[1] < 20
    x0 = np.linspace(-1, 1, 10**6)
    want = np.sum(100 * (x0[1:] - x0[:-1] ** 2) ** 2 + (1 - x0[:-1]) ** 2)
    assert math.isclose(sg.evaluate(f, {"x": x0}), want, rel_tol=1e-12)
    text, tex = str(f), sg.latex(f)  # the order of the two terms is canonical, by structural hash
    assert text.startswith("sum(") and text.endswith(", i=0..999998)") and "(1 - x[i])**2" in text
    assert "100*(x[i + 1] - x[i]**2)**2" in text
    assert tex.startswith(r"\sum_{i=0}^{999998} ") and r"100 \cdot \left(x_{i + 1} - x_{i}^{2}\right)^{2}" in tex


def test_gathers_through_tables_and_periodic_indices():
    x, i = array("x", 5), index("i", 4)
    T = table([4, 0, 2, 1])
    f = reduce("sum", subscript(x, subscript(T, i)) * i, i) + reduce("sum", subscript(x, (i + 3) % 5), i)
    x0 = np.array([0.5, 1.2, -0.3, 2.0, 1.1])
    want = np.sum(x0[[4, 0, 2, 1]] * np.arange(4)) + np.sum(x0[(np.arange(4) + 3) % 5])
    assert math.isclose(sg.evaluate(f, {x: x0}), want, rel_tol=1e-14)
    assert str(unroll(reduce("sum", subscript(x, (i + 3) % 5), i))) == "x[3] + x[4] + x[0] + x[1]"


def test_a_row_of_a_scatter_at_one_constant_address_reads_the_scatter_without_that_axis():
    """A scan's adjoint seeded by a loss reading one carry reads a row of a scatter into that row alone: the
    row is the scatter of the other axes (an array of the row's size, not steps x row), another row is 0."""
    from symgrad.expr.ndarrays import element
    from symgrad.expr.rolled import scatter
    from symgrad.expr.traverse import topo_order

    x, i, j = array("x", (3, 4)), index("i", 3), index("j", 4)
    sc = scatter(sg.sin(x[i, j]), (sg.const(2.0), j), (i, j), (6, 4))  # every x[i, j] added into row 2
    x0 = np.random.default_rng(2).normal(size=(3, 4))
    want = np.zeros((6, 4))
    want[2] = np.sin(x0).sum(axis=0)
    for row in range(6):
        e = tensor(element(sc, (sg.const(float(row)), j)), j)
        assert all(n is not sc for n in topo_order([e])) and ("scatter" in str(e)) == (row == 2)
        np.testing.assert_allclose(sg.evaluate(e, {x: x0}), want[row], rtol=1e-15)
    k = index("k", 6)
    np.testing.assert_allclose(sg.evaluate(tensor(element(sc, (k, j)), k, j), {x: x0}), want, rtol=1e-15)


def test_gathers_rename_site_indices_that_the_targets_name():
    """A site over indices named as the adjoint's targets (a Hessian differentiates a first adjoint, a
    tensor over l, into the adjoint at l again): x[m, l] read at (l, m) is the transpose, and the
    masked sum over a tested address's own l does not capture the target l."""
    x, y, z = array("x", (3, 3)), array("y", (3, 3)), array("z", (2, 3))
    r, m, o = index("l", 3), index("m", 3), index("o", 2)
    Y, Z = np.arange(9.0).reshape(3, 3), np.arange(6.0).reshape(2, 3) + 1
    g = gathers.gather(x, [(subscript(x, (m, r)), subscript(y, (r, m)) * 10.0)], (r, m))
    np.testing.assert_array_equal(sg.evaluate(tensor(g, r, m), {y: Y}), 10 * Y.T)
    p = [0, 2, 0]
    g = gathers.gather(y, [(subscript(y, (subscript(table(p), r), 0)), subscript(z, (o, r)))], (r, m), outer=(o,))
    want = np.zeros((2, 3, 3))
    for k, row in enumerate(p):
        want[:, row, 0] += Z[:, k]
    np.testing.assert_array_equal(sg.evaluate(tensor(g, o, r, m), {z: Z}), want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 4), min_size=2, max_size=3), st.lists(st.integers(0, 3), min_size=3, max_size=3),
       st.integers(0, 3), st.booleans())
def test_gathers_solve_mixed_radix_addresses_as_quotient_and_remainder(sizes, slack, offset, jacobian):
    """x[c + 12*k + 4*j + l] (a reshaped slice of a flat vector): each target is one (k, j, l), found
    by // and % from the largest coefficient down, where solving l alone summed over j and k (a
    flat-vector MLP's gradient: a loop over every row at each of its entries). Against np.add.at."""
    coefficients, span = [], 0
    for n, extra in zip(sizes, slack):  # each coefficient past what the digits below it reach
        coefficients.append(span + 1 + extra if coefficients else 1 + extra % 3)  # (5*j + 20*k: a swapaxes)
        span += coefficients[-1] * (n - 1)
    indices = [index(f"i{k}", n) for k, n in enumerate(sizes)]
    address = offset + sum(c * i for c, i in zip(coefficients, indices))
    x, y, o = array("x", offset + span + 3), array("y", tuple(sizes)), index("o", 2)
    w = subscript(y, tuple(indices)) * (o + 1.0 if jacobian else 1.0)
    t = index("t", x.shape[0])
    g = gathers.gather(x, [(subscript(x, address), w)], (t,), outer=(o,) if jacobian else ())
    assert "sum" not in str(g) or coefficients[0] != 1 and not jacobian  # (a gradient scatters 5*j + 20*k)
    Y = np.arange(1.0, 1.0 + np.prod(sizes)).reshape(sizes)
    want = np.zeros(x.shape[0])
    at = offset + sum(c * np.arange(n).reshape([-1 if k == m else 1 for m in range(len(sizes))])
                      for k, (c, n) in enumerate(zip(coefficients, sizes)))
    np.add.at(want, np.broadcast_to(at, Y.shape).ravel(), Y.ravel())
    got = sg.evaluate(tensor(g, *((o,) if jacobian else ()), t), {y: Y})
    np.testing.assert_array_equal(got, np.stack([want, 2 * want]) if jacobian else want)


def test_index_ranges():
    i, j = index("i", 4), index("j", 3)
    assert value_range(2 * i - j + 1) == (-1, 7)
    assert value_range((i + 3) % 4) == (0, 3)
    assert value_range(subscript(table([[5, -2], [7, 0]]), (i % 2, j % 2))) == (-2, 7)
    for c in (-8, -3, -1, 2, 5):  # floored, as Python's (Jacobians' stride solutions divide by -8)
        for e, values in (((j - 3 * i) // c, [(b - 3 * a) // c for a in range(4) for b in range(3)]),
                          ((j - 3 * i) % c, [(b - 3 * a) % c for a in range(4) for b in range(3)])):
            assert value_range(e) == (min(values), max(values)), (e, c)
    with pytest.raises(TypeError, match="1.5 is not an integer"):
        value_range(i // 1.5)


def test_asking_whether_a_value_is_index_arithmetic_prints_nothing():
    """The planner and the emitters ask value_range whether arbitrary nodes are index arithmetic and
    catch its TypeError: its message, which prints the expression (an LSTM gradient's scan: 57 s of
    a 60 s first call), is made when shown only."""
    from unittest import mock

    x, i = array("x", 4), index("i", 4)
    with mock.patch.object(sg.Expr, "__str__", side_effect=AssertionError("printed")):
        for e in (subscript(x, i) * 2, i * 1.5, sg.sin(i)):
            with pytest.raises(TypeError) as caught:
                value_range(e)
    assert "an index can read tables" in str(caught.value) or "sin is not allowed" in str(caught.value)


@pytest.mark.parametrize("build, error, match", [
    (lambda x, i: subscript(x, i + 2), IndexError, r"x\[i \+ 2\]: the index i \+ 2 takes values 2\.\.5, outside "
                                                   r"0\.\.4, with i in 0\.\.3"),
    (lambda x, i: subscript(x, i - 1), IndexError, "takes values -1..2"),
    (lambda x, i: subscript(x, (i, i)), IndexError, "x has 1 dimension"),
    (lambda x, i: subscript(x, sg.sin(i)), TypeError, "sin is not allowed in an index"),
    (lambda x, i: subscript(x, i * 0.5), TypeError, "0.5 is not an integer"),
    (lambda x, i: subscript(x, 1.5), TypeError, "an index must be an integer or an index expression"),
    (lambda x, i: subscript(x, subscript(table([0, 9, 1, 2]), i)), IndexError, "takes values 0..9, outside 0..4"),
    (lambda x, i: subscript(sg.Var("y"), i), TypeError, "only arrays can be subscripted"),
    (lambda x, i: subscript(x, subscript(tensor(subscript(x, i), i), i)), TypeError,
     "an index can read tables \\(or as_index of data\\)"),
    (lambda x, i: reduce("sum", subscript(x, i), sg.Var("k")), TypeError, "reduce over an index symbol"),
    (lambda x, i: reduce("sum", x, i), TypeError, "the body must be a scalar expression"),
    (lambda x, i: tensor(subscript(x, i) * index("k", 2), i), ValueError, r"also varies over \['k'\]"),
    (lambda x, i: tensor(subscript(x, i), i, i), ValueError, "an index appears twice"),
    (lambda x, i: sg.evaluate(subscript(x, i), {x: np.zeros(5)}), ValueError, "varies over the index i: reduce"),
    (lambda x, i: sg.evaluate(reduce("sum", subscript(x, i), i), {}), ValueError, "no value given for the array"),
    (lambda x, i: sg.evaluate(reduce("sum", subscript(x, i), i), {x: np.zeros(3)}), ValueError,
     r"has shape \(3,\), expected \(5,\)"),
    (lambda x, i: index("i", 0), ValueError, "the size must be a positive integer"),
    (lambda x, i: array("x", (2, 0)), ValueError, "the shape must be positive integers"),
    (lambda x, i: table([1.5]), TypeError, "a table must be a non-empty integer array"),
    (lambda x, i: sg.expr.diff.jvp(reduce("sum", subscript(x, i), i), [x], [1.0]), ValueError,
     r"the tangent of x must be an array of shape \(5,\)"),
    (lambda x, i: sg.grad(reduce("sum", subscript(x, i), i), [sg.Var("a"), sg.Var("a")]), ValueError,
     "more than once"),
    (lambda x, i: sg.compile(reduce("sum", subscript(x, i), i), []), ValueError,
     r"depend on x, which are not among the inputs \(\) or params \(\)"),
    (lambda x, i: sg.compile(subscript(x, i), [x]), ValueError, r"the output x\[i\] varies over \['i'\]"),
    (lambda x, i: sg.compile(x[1], [x], backend="llvm"), ValueError, r"backend must be one of \('auto', 'numba'"),
    (lambda x, i: sg.compile(x[1], [x, x]), ValueError, "array 'x' is listed twice"),
])
def test_construction_errors_name_the_array_the_index_and_its_range(build, error, match):
    with pytest.raises(error, match=match):
        build(array("x", 5), index("i", 4))


def test_saving_and_pickling_rolled_expressions():
    x, i, j = array("x", 5), index("i", 4), index("j", 2)
    A, r, c = array("A", (2, 3)), index("r", 2), index("c", 3)
    T = table([[4, 0], [2, 1]])
    f = reduce("sum", (subscript(x, i + 1) - subscript(x, (i + 2) % 5)) ** 2, i) + \
        reduce("max", subscript(x, subscript(T, (j, 1))), j)
    y = tensor(reduce("sum", subscript(A, (r, c)), c), r)
    for e in (f, y):
        assert sg.loads(sg.dumps(e)) is e and pickle.loads(pickle.dumps(e)) is e
    doc = json.loads(sg.dumps(f))
    for node in doc["nodes"]:
        if node[0] == "index" and node[1][0] == "i":
            node[1][1] = 9  # a forged range: the loads are checked again on loading
    with pytest.raises(sg.FormatError, match=r"\(load\): x\[i \+ 1\]: the index i \+ 1 takes values 1..9"):
        sg.loads(json.dumps(doc))
    doc["nodes"][0][1] = ["x", "5"]
    with pytest.raises(sg.FormatError, match=r"the payload of array is \[name, \[shape\]\], got \['x', '5'\]"):
        sg.loads(json.dumps(doc))


@settings(max_examples=120, **SETTINGS)
@given(rolled_sums(), st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9), st.floats(-1.0, 1.0))
def test_rolled_gradients_equal_the_unrolled_graphs(fx, values, a):
    f, x = fx
    x0 = spread(values, x.shape[0])
    assume(not tied(f, {x: x0, "a": a}))
    gx, ga = sg.grad(f, [x, sg.Var("a")])
    assert gx.shape == x.shape and ga.shape == ()
    got = sg.evaluate([gx, ga], {x: x0, "a": a})
    want, want_a = unrolled_grad(f, {"x": x0}, {"a": a})
    assume(np.all(np.isfinite(got[0])) and np.isfinite(got[1]) and np.all(np.isfinite(want["x"])))
    np.testing.assert_allclose(got[0], want["x"], rtol=1e-12, atol=1e-12, err_msg=str(f))
    np.testing.assert_allclose(got[1], want_a[0], rtol=1e-12, atol=1e-12, err_msg=str(f))


@pytest.mark.parametrize("case", ["stride", "table", "two_dims", "diagonal", "mlp", "unused"])
def test_gradients_of_each_kind_of_access(case):
    rng = np.random.default_rng(3)
    x, i, j = array("x", 7), index("i", 3), index("j", 2)
    A, r, c = array("A", (3, 4)), index("r", 3), index("c", 4)
    if case == "stride":  # two coordinates per point, as in a spring chain
        f = reduce("sum", (subscript(x, 2 * i + 2) - subscript(x, 2 * i)) ** 2 * subscript(x, 2 * i + 1), i)
    elif case == "table":  # a gather through connectivity: scattered back
        T = table([[0, 3], [3, 6], [6, 1]])
        f = reduce("sum", reduce("sum", sg.sin(subscript(x, subscript(T, (i, j)))) * (j + 1.0), j), i)
    elif case == "two_dims":
        f = reduce("sum", reduce("sum", subscript(A, (r, c)) ** 2 * subscript(x, c + 2), c), r)
    elif case == "diagonal":  # one index in two dimensions: solved once, checked once
        f = reduce("sum", subscript(A, (r, r + 1)) * subscript(x, r), r)
    elif case == "mlp":
        h = tensor(sg.tanh(reduce("sum", subscript(A, (r, c)) * subscript(x, c), c)), r)
        f = reduce("sum", (subscript(h, r) - subscript(x, r + 4)) ** 2, r) + reduce("max", subscript(h, r), r)
    else:
        f = reduce("sum", subscript(x, i) ** 2, i) + sg.Var("a")
    arrays = {"x": rng.normal(size=7), "A": rng.normal(size=(3, 4))}
    wrt = [x, A]
    got = sg.evaluate(sg.grad(f, wrt), {x: arrays["x"], A: arrays["A"], "a": 0.5})
    want, _ = unrolled_grad(f, arrays, {"a": 0.5})
    for g, name in zip(got, ("x", "A")):
        np.testing.assert_allclose(g, want[name], rtol=1e-12, atol=1e-13, err_msg=case)
    if case in ("table", "stride"):
        (g,) = sg.grad(f, [x])
        assert "scatter" in str(g)
        assert sg.loads(sg.dumps(g)) is g and pickle.loads(pickle.dumps(g)) is g
    if case in ("two_dims", "mlp"):
        assert "scatter" not in str(sg.grad(f, wrt))


def test_the_rosenbrock_gradient_is_one_readable_formula_at_any_size():
    for n in (6, 10**6):
        x, i = array("x", n), index("i", n - 1)
        f = reduce("sum", 100 * (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2 + (1 - subscript(x, i)) ** 2, i)
        (g,) = sg.grad(f, [x])
        assert sg.count_nodes(g) < 3 * sg.count_nodes(f)
    text = str(g)
    assert text.startswith("tensor(where(j") and "scatter" not in text and "x[j - 1]" in text and "#" not in text
    assert text.endswith("=0..999999)")
    # Its neighbour loads leave x where their guard is false: marked, clamped, and saved as such.
    assert any(n.op.name == "load" and n.payload == "guarded" for n in sg.expr.traverse.topo_order([g]))
    assert sg.loads(sg.dumps(g)) is g
    x0 = np.linspace(-1, 1, n)
    want = np.zeros(n)
    want[:-1] = -400 * x0[:-1] * (x0[1:] - x0[:-1] ** 2) - 2 * (1 - x0[:-1])
    want[1:] += 200 * (x0[1:] - x0[:-1] ** 2)
    np.testing.assert_allclose(sg.evaluate(g, {x: x0}), want, rtol=1e-12, atol=1e-9)


_X, _I = array("x", 3), index("i", 1)


@settings(max_examples=60, **SETTINGS)
@given(rolled_sums(), st.lists(st.floats(-1.5, 1.5), min_size=18, max_size=18), st.floats(-1.0, 1.0))
@example(fx=(reduce("sum", apply(ops.fmod, (0.5, _X[_I])) + _X[_I], _I) + sg.sin(sg.Var("a")), _X),
         values=[4.406059220867105e-54] + [0.0] * 8 + [0.0859375] + [0.0] * 8, a=0.0)
def test_forward_mode_and_hessian_vector_products_equal_the_unrolled_graphs(fx, values, a):
    f, x = fx
    n = x.shape[0]
    x0 = spread(values, n)
    v0 = np.array(values[9:9 + n])
    v = array("v", n)
    point = {x: x0, v: v0, "a": a}
    assume(not tied(f, point))
    directional = sg.expr.diff.jvp(f, [x, sg.Var("a")], [v, 0.5])
    (g,) = sg.grad(f, [x])
    hvp = sg.expr.diff.jvp(g, [x], [v])  # forward over reverse
    names = [sg.Var(f"x[{k}]") for k in range(n)]
    scalar_point = {**elements("x", x0), "a": a}
    u = unroll(f)
    gu = np.array(sg.evaluate(sg.grad(u, names + [sg.Var("a")]), scalar_point), dtype=float)
    H = np.array(sg.evaluate(sg.hessian(u, names), scalar_point), dtype=float).reshape(n, n)
    got = [sg.evaluate(directional, point), sg.evaluate(hvp, point)]
    want = [gu[:n] @ v0 + 0.5 * gu[n], H @ v0]
    assume(all(np.all(np.isfinite(w)) for w in want + got))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-11, atol=1e-11, err_msg=str(f))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-10, err_msg=str(f))


@pytest.mark.parametrize("case", ["table", "periodic", "tensor"])
def test_reverse_over_reverse_equals_the_unrolled_hessian(case):
    """Second derivatives through the nodes first derivatives make: scatters, guards, gathers."""
    n = 5
    x, v, i = array("x", n), array("v", n), index("i", 4)
    if case == "table":
        f = reduce("sum", sg.sin(subscript(x, subscript(table([0, 3, 3, 1]), i))) ** 2 * subscript(x, i + 1), i)
    elif case == "periodic":
        f = reduce("sum", subscript(x, (i + 2) % n) ** 3 * subscript(x, i), i)
    else:
        h = tensor(sg.tanh(subscript(x, i) * subscript(x, i + 1)), i)
        f = reduce("max", subscript(h, i) * subscript(x, i), i) + reduce("sum", subscript(h, i) ** 2, i)
    (g,) = sg.grad(f, [x])
    j = index("j", n)
    (hv,) = sg.grad(reduce("sum", subscript(g, j) * subscript(v, j), j), [x])
    rng = np.random.default_rng(5)
    x0, v0 = rng.normal(size=n), rng.normal(size=n)
    names = [sg.Var(f"x[{k}]") for k in range(n)]
    H = np.array(sg.evaluate(sg.hessian(unroll(f), names), elements("x", x0)), dtype=float)
    np.testing.assert_allclose(sg.evaluate(hv, {x: x0, v: v0}), H @ v0, rtol=1e-11, atol=1e-12)


def test_sympy_forms_and_sympys_own_derivative_of_the_sum():
    """to_sympy gives Sum over Idx of IndexedBase loads; SymPy's diff of it (KroneckerDelta sums,
    after doit) equals our gathered gradient, element by element."""
    sympy = pytest.importorskip("sympy")
    n = 5
    x, i = array("x", n), index("i", n - 1)
    f = reduce("sum", 100 * (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2 + (1 - subscript(x, i)) ** 2, i)
    s = sg.to_sympy(f)
    assert isinstance(s, sympy.Sum) and s.limits[0][1:] == (0, n - 2)
    X = sympy.IndexedBase("x", (n,))
    x0 = np.array([0.3, -0.2, 1.1, 0.7, -0.5])
    values = {X[k]: x0[k] for k in range(n)}
    want = [float(sympy.diff(s, X[k]).doit().subs(values)) for k in range(n)]
    (g,) = sg.grad(f, [x])
    np.testing.assert_allclose(sg.evaluate(g, {x: x0}), want, rtol=1e-12)
    assert isinstance(sg.to_sympy(g), sympy.Lambda)
    with pytest.raises(TypeError, match="max nodes have no SymPy form"):
        sg.to_sympy(reduce("max", subscript(x, i), i))


def test_latex_of_rolled_expressions_parses_in_mathtext():
    mathtext = pytest.importorskip("matplotlib.mathtext").MathTextParser("path")
    x, i, r, c = array("x", 6), index("i", 5), index("r", 2), index("c", 3)
    A = array("A", (2, 3))
    f = reduce("sum", 100 * (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2, i)
    f = f + reduce("max", subscript(x, i), i)
    y = tensor(reduce("sum", subscript(A, (r, c)) * subscript(x, c), c), r)
    for e in (f, sg.grad(f, [x])[0], y, reduce("min", subscript(y, r), r) ** 2):
        for line in sg.latex(e).split(" \\\\\n"):  # computed arrays are named: one line each
            mathtext.parse(f"${line}$")


@settings(max_examples=60, **SETTINGS)
@given(nested_sums(), st.data())
def test_nested_rolled_gradients_equal_the_unrolled_graphs(fAx, data):
    f, A, x = fAx
    A0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=A.size, max_size=A.size))).reshape(A.shape)
    x0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=x.size, max_size=x.size)))
    A0, x0 = A0 + 0.01 * np.arange(A.size).reshape(A.shape), x0 + 0.013 * np.arange(x.size)
    point = {A: A0, x: x0}
    assume(not tied(f, point))
    got = sg.evaluate(sg.grad(f, [A, x]), point)
    want, _ = unrolled_grad(f, {"A": A0, "x": x0}, {})
    assume(all(np.all(np.isfinite(g)) for g in (*got, *want.values())))
    np.testing.assert_allclose(got[0], want["A"], rtol=1e-11, atol=1e-11, err_msg=str(f))
    np.testing.assert_allclose(got[1], want["x"], rtol=1e-11, atol=1e-11, err_msg=str(f))


def test_guarded_products_along_a_chain_read_each_adjoint_once():
    """The gradient of where(x > 0, chain(x), 0) through L scaled sigmoids: each guarded product (its
    partial an exp that may overflow) tests an adjoint (and the partial: 0 only where it is not finite)
    and multiplies it, which the next one tests and multiplies again.
    Stored once per element, the guards grow linearly with L (inline they nested: 15, 45, 153, 561
    wheres at L = 2, 4, 8, 16, the loops of an LSTM's gradient 4000 lines a body); the division's
    partial, its denominator at least 1, is not guarded (ranges.py); the values, nan kept out where the
    mask is off, are the interpreter's and finite differences'."""
    x, i = sg.array("x", 50), sg.index("i", 50)

    def gradient(L):
        v = x[i]
        for _ in range(L):
            v = x[i] / (1.0 + sg.exp(-v * 1.5))
        f = sg.sum(sg.where(x[i] > 0, v, 0.0) ** 2, i)
        return f, sg.grad(f, [x])[0]

    order = sg.expr.traverse.topo_order
    wheres = [sum(n.op.name == "where" for n in order([gradient(L)[1]])) for L in (2, 4, 8, 16)]
    assert [b - a for a, b in zip(wheres, wheres[1:])] == [4, 8, 16], wheres  # 2 wheres a sigmoid
    f, g = gradient(6)
    v = np.random.default_rng(3).normal(size=50) * 30  # exp overflows: inf partials where masked off
    got = sg.compile(g, [x], backend="python")(v)
    assert np.all(np.isfinite(got)) and np.all(got[v <= 0] == 0)
    value = sg.compile(f, [x], backend="python")
    fd = [(value(v + e) - value(v - e)) / 2e-6 for e in 1e-6 * np.eye(50)[:8]]
    np.testing.assert_allclose(got[:8], fd, rtol=1e-5, atol=1e-9)
    for backend in ("vm", "numba"):
        np.testing.assert_allclose(sg.compile(g, [x], backend=backend)(v), got, rtol=1e-13, atol=1e-300)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]), st.integers(-3, 3), st.integers(-12, 12),
       st.integers(1, 9), st.booleans())
def test_a_comparison_of_index_arithmetic_its_ranges_settle_is_made_as_1_or_0(name, c, k, n, two):
    """``k + 70 < 70`` over k in 0..69 is 0 as it is made (a slice of a concatenation: the part it reads,
    no where); a comparison the ranges leave open stays; either way its value at every index is the
    comparison's, which the interpreter computes from the indices."""
    i, j = index("i", n), index("j", 3)
    left, right = c * i + k, (j if two else float(n // 2))
    made = ops.OPS[name](left, right)
    values = [[float(getattr(int(c * a + k), f"__{name}__")(b if two else n // 2)) for b in range(3)]
              for a in range(n)]
    ls, rs = [c * a + k for a in range(n)], (range(3) if two else [n // 2])
    (l0, l1), (r0, r1) = (min(ls), max(ls)), (min(rs), max(rs))
    disjoint, point = l1 < r0 or r1 < l0, l0 == l1 == r0 == r1
    settled = disjoint or point if name in ("eq", "ne") else \
        len({getattr(a, f"__{name}__")(b) for a in (l0, l1) for b in (r0, r1)}) == 1
    bare = two and left.op not in _LOOKED_AT  # (i or 2*i against j: apply's rules look at neither; loops settle)
    if made.op.name == "const":
        assert np.all(np.array(values) == made.payload)
    assert made.op.name == ("const" if settled and not bare else name) or made.op.name == "const" and not two
    got = np.broadcast_to(sg.evaluate(tensor(made + 0 * i + 0 * j, i, j), {}), (n, 3))
    assert np.array_equal(got, values)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["mod", "floor_divide"]), st.integers(-3, 3), st.integers(-30, 30), st.integers(1, 9),
       st.sampled_from([-7, -3, -1, 1, 2, 5, 14]))
def test_a_remainder_or_quotient_of_index_arithmetic_in_one_block_is_made_without_it(name, c, k, n, d):
    """``(i + 14) % 14`` over i in 0..13 is ``i`` and ``(i + 14) // 14`` is 1 as they are made (the gates
    of a concatenation's adjoint); where the range spans blocks the op stays; either way the value at
    every index is Python's floored one."""
    i = index("i", n)
    made = ops.OPS[name](c * i + k, float(d))
    py = (lambda a: a % d) if name == "mod" else (lambda a: a // d)
    values = [float(py(c * a + k)) for a in range(n)]
    one_block = len({(c * a + k) // d for a in range(n)}) == 1
    assert (name in {m.op.name for m in sg.expr.traverse.topo_order([made])}) == (not one_block)
    assert made.op.name != "const" or one_block and (name == "floor_divide" or c == 0)
    assert np.array_equal(np.broadcast_to(sg.evaluate(tensor(made + 0 * i, i), {}), (n,)), values)


def test_a_slice_of_a_concatenation_reads_its_part():
    a, h = sg.array("a", 70), sg.array("h", 70)
    f = sg.jit(lambda a, h: np.sum(np.concatenate([a, h, a])[70:140] * 2.0))
    va, vh = np.linspace(0, 1, 70), np.linspace(1, 2, 70)
    assert f(va, vh) == pytest.approx(2 * vh.sum(), rel=1e-14)
    assert "where" not in str(f.exprs), f.exprs
    del a, h
