"""Indexed expressions through the public API: sg.array / index / sum / tensor, their rolled Jacobians
and Hessians, and compiled functions of them (loops), against NumPy by hand and the unrolled graph."""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from rolled_graphs import elements, nested_sums, rolled_sums, spread, tied

import symgrad as sg

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def rosenbrock(n):
    x, i = sg.array("x", n), sg.index("i", n - 1)
    return sg.sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2, i), x


def rosenbrock_by_hand(x0):
    value = np.sum(100 * (x0[1:] - x0[:-1] ** 2) ** 2 + (1 - x0[:-1]) ** 2)
    g = np.zeros_like(x0)
    g[:-1] = -400 * x0[:-1] * (x0[1:] - x0[:-1] ** 2) - 2 * (1 - x0[:-1])
    g[1:] += 200 * (x0[1:] - x0[:-1] ** 2)
    return value, g


def test_the_api_of_the_issue_end_to_end(numba_tier):
    n = 10_000
    f, x = rosenbrock(n)
    g = sg.grad(f, x)
    assert g.shape == (n,) and sg.count_nodes(g) < 3 * sg.count_nodes(f) < 60
    text = str(g)
    assert text.startswith("tensor(") and text.endswith("j=0..9999)") and "x[j - 1]" in text
    vg = sg.value_and_grad(f, [x])
    x0 = np.random.default_rng(0).uniform(-2, 2, n)
    value, gradient = vg(x0)
    want_value, want_gradient = rosenbrock_by_hand(x0)
    assert value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12, atol=1e-9)
    assert vg.ready().backend == "numba" and "for " in vg.source and str(n - 1) in vg.source
    small, xs = rosenbrock(6)
    x6 = x0[:6]
    assert sg.evaluate(sg.unroll(small), elements("x", x6)) == pytest.approx(rosenbrock_by_hand(x6)[0], rel=1e-13)


def test_an_mlp_with_tensor_and_sum_against_numpy_by_hand():
    rng = np.random.default_rng(1)
    S, D, H, K = 6, 5, 4, 3
    X, T = sg.array("X", (S, D)), sg.array("T", (S, K))
    W1, b1, W2 = sg.array("W1", (D, H)), sg.array("b1", H), sg.array("W2", (H, K))
    s, d, h, o = sg.index("s", S), sg.index("d", D), sg.index("h", H), sg.index("o", K)
    hidden = sg.tensor(sg.tanh(sg.sum(X[s, d] * W1[d, h], d) + b1[h]), s, h)
    out = sg.tensor(sg.sum(hidden[s, h] * W2[h, o], h), s, o)
    loss = sg.sum((out[s, o] - T[s, o]) ** 2, s, o) / S
    X0, T0 = rng.normal(size=(S, D)), rng.normal(size=(S, K))
    W10, b10, W20 = rng.normal(size=(D, H)), rng.normal(size=H), rng.normal(size=(H, K))
    a = np.tanh(X0 @ W10 + b10)
    r = a @ W20 - T0
    want_loss = np.sum(r ** 2) / S
    dout = 2 * r / S
    dW2 = a.T @ dout
    dpre = (dout @ W20.T) * (1 - a ** 2)
    want = [X0.T @ dpre, dpre.sum(axis=0), dW2]
    for backend in ("python", "numba", "vm"):
        vg = sg.value_and_grad(loss, [W1, b1, W2], params=[X, T], backend=backend)
        weights, data = np.concatenate([W10.ravel(), b10, W20.ravel()]), np.concatenate([X0.ravel(), T0.ravel()])
        value, gradient = vg(weights, data)
        assert value == pytest.approx(want_loss, rel=1e-12)
        np.testing.assert_allclose(gradient, np.concatenate([w.ravel() for w in want]), rtol=1e-10, atol=1e-12)


def periodic_p5(n):
    x, i = sg.array("x", n), sg.index("i", n)
    return sg.sum(sg.sin(x[i]) * x[(i + 1) % n] + (x[i] - x[(i + n - 1) % n]) ** 2, i), x


def spring_chain(points):
    """Points (x, y) interleaved in one vector: springs of rest length 1 between neighbours."""
    q, i = sg.array("q", 2 * points), sg.index("i", points - 1)
    dx, dy = q[2 * i + 2] - q[2 * i], q[2 * i + 3] - q[2 * i + 1]
    return sg.sum((sg.sqrt(dx * dx + dy * dy) - 1.0) ** 2, i), q


def laplacian_energy(m, k):
    u, r, c = sg.array("u", (m, k)), sg.index("r", m - 1), sg.index("c", k - 1)
    return sg.sum((u[r + 1, c] - u[r, c]) ** 2 + (u[r, c + 1] - u[r, c]) ** 2, r, c) / 2, u


def _by_hand(case, v):
    if case == "p5":
        s = np.roll(v, -1)
        g = np.cos(v) * s + np.roll(np.sin(v), 1) + 2 * (v - np.roll(v, 1)) - 2 * (np.roll(v, -1) - v)
        return np.sum(np.sin(v) * s + (v - np.roll(v, 1)) ** 2), g
    if case == "springs":
        p = v.reshape(-1, 2)
        d = p[1:] - p[:-1]
        length = np.linalg.norm(d, axis=1)
        w = (2 * (length - 1) / length)[:, None] * d
        g = np.zeros_like(p)
        g[1:] += w
        g[:-1] -= w
        return np.sum((length - 1) ** 2), g.ravel()
    gr, gc = np.diff(v, axis=0)[:, :-1], np.diff(v, axis=1)[:-1]  # both over r < m-1, c < k-1
    g = np.zeros_like(v)
    g[1:, :-1] += gr
    g[:-1, :-1] -= gr
    g[:-1, 1:] += gc
    g[:-1, :-1] -= gc
    return (np.sum(gr ** 2) + np.sum(gc ** 2)) / 2, g


@pytest.mark.parametrize("case", ["p5", "springs", "laplacian"])
def test_periodic_strided_and_two_dimensional_problems_against_numpy_by_hand(case):
    f, x = {"p5": lambda: periodic_p5(40), "springs": lambda: spring_chain(30),
            "laplacian": lambda: laplacian_energy(7, 9)}[case]()
    x0 = np.random.default_rng(2).normal(size=x.shape)
    want_value, want_gradient = _by_hand(case, x0)
    for backend in ("python", "numba", "vm"):
        value, gradient = sg.value_and_grad(f, [x], backend=backend)(x0)  # x0 in x's own shape
        assert value == pytest.approx(want_value, rel=1e-12)
        np.testing.assert_allclose(gradient, want_gradient.ravel(), rtol=1e-11, atol=1e-11)
    # Unit-stride accesses invert (gathers, one formula per range); strided ones scatter.
    assert ("scatter" in str(sg.grad(f, x))) == (case == "springs")


@settings(max_examples=40, **SETTINGS)
@given(rolled_sums(), st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9), st.floats(-1.0, 1.0))
def test_jacobians_of_tensors_and_hessians_equal_the_unrolled_graphs(fx, values, a):
    f, x = fx
    n = x.shape[0]
    x0 = spread(values, n)
    point = {x: x0, "a": a}
    assume(not tied(f, point))
    reduction = next((m for m in sg.expr.traverse.topo_order([f]) if m.op.name in ("sum", "max", "min")), None)
    assume(reduction is not None)  # (a reduction over one element is that element: no node)
    y = sg.tensor(reduction.args[0], reduction.args[1])  # the summed body, as an array
    names = [sg.Var(f"x[{k}]") for k in range(n)]
    scalar_point = {**elements("x", x0), "a": a}
    Jx, Ja = sg.jacobian(y, [x, sg.Var("a")])
    want = np.array(sg.evaluate(sg.jacobian(list(sg.unroll(y)), names + [sg.Var("a")]), scalar_point), dtype=float)
    got = np.column_stack([sg.evaluate(Jx, point), sg.evaluate(Ja, point)])
    H = sg.hessian(f, x)
    want_h = np.array(sg.evaluate(sg.hessian(sg.unroll(f), names), scalar_point), dtype=float)
    got_h = sg.evaluate(H, point)
    assume(np.all(np.isfinite(want)) and np.all(np.isfinite(want_h)))
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11, err_msg=str(y))
    np.testing.assert_allclose(got_h, want_h, rtol=1e-10, atol=1e-10, err_msg=str(f))


@pytest.mark.parametrize("backend", ["python", "vm"])
@settings(max_examples=40, **SETTINGS)
@given(fAx=nested_sums(), data=st.data())
def test_compiled_programs_on_the_interpreter_and_the_vm_equal_evaluate(backend, fAx, data):
    """The LoopProgram path (layouts, params, batch, sum) checked broadly where nothing compiles per program."""
    f, A, x = fAx
    A0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=A.size, max_size=A.size))).reshape(A.shape)
    x0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=x.size, max_size=x.size)))
    want = sg.evaluate([f, *sg.grad(f, [A])], {A: A0, x: x0})
    assume(all(np.all(np.isfinite(w)) for w in want))
    vg = sg.value_and_grad(f, [A], params=[x], backend=backend)
    value, gradient = vg(A0, x0)
    assert value == pytest.approx(want[0], rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(gradient, np.ravel(want[1]), rtol=1e-12, atol=1e-12)
    V, G = vg.batch(np.stack([A0.ravel(), 2 * A0.ravel()]), x0)
    assert V[0] == value and np.array_equal(G[0], gradient)
    total, gsum = vg.sum(A0.ravel(), np.stack([x0, x0]))
    assert total == pytest.approx(2 * value, rel=1e-14, abs=1e-14)
    np.testing.assert_allclose(gsum, 2 * gradient, rtol=1e-14, atol=1e-14)


def test_batch_sum_pickling_and_hessians_of_compiled_loops():
    f, x = rosenbrock(12)
    a = sg.Var("a")
    f = f * sg.exp(a)
    vg = sg.value_and_grad(f, [x, a], backend="numba")
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (300, 13))
    V, G = vg.batch(X)
    for row in (0, 150, 299):
        value, gradient = vg(X[row])
        assert V[row] == value and np.array_equal(G[row], gradient)
    back = pickle.loads(pickle.dumps(vg))
    assert back.backend == "numba" and back(X[7])[0] == vg(X[7])[0]
    t, i = sg.Var("t"), sg.index("i", 11)
    fit = sg.sum((x[i] * t - x[i + 1]) ** 2, i)
    vs = sg.value_and_grad(fit, [x], params=[t], backend="numba")
    P = rng.normal(size=(50, 1))
    total, gsum = vs.sum(X[0, :12], P)
    rows = [vs(X[0, :12], p) for p in P]
    assert total == pytest.approx(sum(r[0] for r in rows), rel=1e-12)
    np.testing.assert_allclose(gsum, np.sum([r[1] for r in rows], axis=0), rtol=1e-12)
    H = sg.hessian(f, x)
    Hc = sg.compile(H, [x, a], backend="numba")
    assert Hc(X[0]).shape == (12, 12)
    np.testing.assert_allclose(Hc(X[0]), sg.evaluate(H, {x: X[0, :12], a: X[0, 12]}), rtol=1e-12, atol=1e-12)
    hv = sg.hvp(f, [x, a])
    v = rng.normal(size=13)
    H_full = sg.evaluate(sg.hessian(sg.unroll(f), [sg.Var(f"x[{k}]") for k in range(12)] + [a]),
                         {**elements("x", X[0, :12]), "a": X[0, 12]})
    np.testing.assert_allclose(hv(X[0], v), np.array(H_full, dtype=float) @ v, rtol=1e-11, atol=1e-11)


def test_call_errors_name_the_arrays_and_their_shapes():
    f, x = rosenbrock(10)
    vg = sg.value_and_grad(f, [x], backend="python")
    with pytest.raises(ValueError, match=r"x: expected shape \(10,\) for \(x\[10\]\), got shape \(11,\)"):
        vg(np.zeros(11))
    assert repr(vg) == "<Compiled python: 27 ops, inputs (x[10]), outputs (10,)>"
    with pytest.raises(TypeError, match="give the index symbol"):
        sg.sum(sg.Var("a"))
    with pytest.raises(ValueError, match="needs one scalar expression, got the array"):
        sg.value_and_grad(sg.grad(f, x), [x])
    assert sg.evaluate(sg.sum(x), {x: np.arange(10.0)}) == 45.0  # an array alone: all its elements
    u, r, c = sg.array("u", (2, 3)), sg.index("r", 2), sg.index("c", 3)
    assert sg.evaluate(sg.max(u[r, c] * 1.0, r, c), {u: np.arange(6.0).reshape(2, 3)}) == 5.0
    assert sg.evaluate(sg.min(u), {u: np.arange(6.0).reshape(2, 3)}) == 0.0


@pytest.mark.parametrize("backend", ["numba", "vm"])
def test_matrix_products_through_blas_in_any_orientation_equal_the_interpreter(backend):
    rng = np.random.default_rng(4)
    m, k, n = 16, 17, 18  # m*k*n past BLAS_MIN: products call np.dot
    A, B, v = sg.array("A", (m, k)), sg.array("B", (n, k)), sg.array("v", m)
    r, c, s = sg.index("r", m), sg.index("c", k), sg.index("s", n)
    AB = sg.tensor(sg.sum(A[r, c] * B[s, c], c), r, s)             # A @ B.T
    BtA = sg.tensor(sg.sum(sg.tanh(AB[r, s]) * A[r, c], r), s, c)  # (tanh(AB)).T @ A, an operand materialised
    Av = sg.tensor(sg.sum(A[r, c] * v[r], r), c)                   # A.T @ v
    f = sg.sum(sg.sum(BtA[s, c] * B[s, c], s, c) * 0.01 + Av[c] ** 2, c)
    vg = sg.value_and_grad(f, [A, B, v], backend=backend)
    assert vg.source.count("np.dot(" if backend == "numba" else "DOT") >= 4  # forward products and the gradient's
    point = {A: rng.normal(size=(m, k)), B: rng.normal(size=(n, k)), v: rng.normal(size=m)}
    want = sg.evaluate([f, *sg.grad(f, [A, B, v])], point)
    value, gradient = vg(np.concatenate([np.ravel(point[a]) for a in (A, B, v)]))
    assert value == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(gradient, np.concatenate([np.ravel(w) for w in want[1:]]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sg.evaluate(AB, point), point[A] @ point[B].T, rtol=1e-13)


_X = sg.array("x", 3)


@settings(max_examples=60, **SETTINGS)
@given(rolled_sums(), st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9), st.floats(-1.0, 1.0))
@example(fx=(np.fmod(0.5, sg.Var("a")) + _X[0] + sg.sin(sg.Var("a")) + 2, _X), values=[0.0] * 9,
         a=3.1063841466331044e-114)  # (fmod's partial in b differentiated to 1e211, not 0)
def test_the_loop_vm_equals_the_interpreter_on_random_bodies(fx, values, a):
    """Every op, max / min, periodic and reversed addresses: nothing compiles per program, so broadly."""
    f, x = fx
    x0 = spread(values, x.shape[0])
    point = {x: x0, "a": a}
    assume(not tied(f, point))
    want = sg.evaluate([f, *sg.grad(f, [x, sg.Var("a")])], point)
    assume(all(np.all(np.isfinite(w)) for w in want))
    value, gradient = sg.value_and_grad(f, [x, sg.Var("a")], backend="vm")(np.append(x0, a))
    assert value == pytest.approx(want[0], rel=1e-12, abs=1e-12), str(f)
    np.testing.assert_allclose(gradient, np.append(want[1], want[2]), rtol=1e-11, atol=1e-11, err_msg=str(f))
    v = np.cos(np.arange(x.shape[0] + 1.0))  # H v, forward over reverse, against the unrolled Hessian
    names = [sg.Var(f"x[{k}]") for k in range(x.shape[0])] + [sg.Var("a")]
    H = np.array(sg.evaluate(sg.hessian(sg.unroll(f), names), {**elements("x", x0), "a": a}), dtype=float)
    assume(np.all(np.isfinite(H)))
    hv = sg.hvp(f, [x, sg.Var("a")], backend="vm")(np.append(x0, a), v)
    np.testing.assert_allclose(hv, H @ v, rtol=1e-10, atol=1e-10, err_msg=str(f))


def test_a_constant_gradient_array_keeps_its_shape_in_forward_mode():
    """jvp of an array that does not vary is a zero array of its shape, not a scalar zero (hvp's layout)."""
    x, i, a = sg.array("x", 3), sg.index("i", 1), sg.Var("a")
    f = sg.sin(a) + sg.sum(a + 0.5 + x[i], i)
    (tx,) = sg.jvp(sg.grad(f, [x]), [x, a], [sg.array("v", 3), 1.0])
    assert tx.shape == (3,)
    hv = sg.hvp(f, [x, a], backend="vm")(np.zeros(4), np.ones(4))
    np.testing.assert_array_equal(hv, [0.0, 0.0, 0.0, -np.sin(0.0)])


def test_sparse_derivatives_go_through_indexed_nodes_and_refuse_array_inputs():
    x, i = sg.array("x", 4), sg.index("i", 3)
    a, b, c = sg.symbols("a b c")
    f = sg.sum(x[i] * a * a * b + sg.sin(x[i + 1] * b), i) + c
    point = {a: 1.0, b: 2.0, c: 0.5, x: np.arange(4.0) / 3}
    H = sg.hessian(f, [a, b, c], sparse=True)
    assert H.nnz == 4  # c enters linearly: its row and column are structurally zero
    np.testing.assert_allclose(np.array(sg.evaluate(H.to_dense(), point), dtype=float),
                               np.array(sg.evaluate(sg.hessian(f, [a, b, c]), point), dtype=float), rtol=1e-14)
    with pytest.raises(TypeError, match=r"sparse=True\) differentiates .* variables, not the array x:"):
        sg.hessian(f, [x], sparse=True)


def test_index_arithmetic_beyond_two_to_the_53_is_refused_when_built():
    """Index values are exact as floats (the loop VM's registers) and int64 only below 2**53: 2**53 + 1
    was stored as 2**53, and (i * 2**62) % 7 gave a different wrong address on every backend."""
    x, i = sg.array("x", 8), sg.index("i", 8)
    with pytest.raises(OverflowError, match=r"beyond \+-2\*\*53"):
        x[i + 2**53 + 1 - 2**53 - 1]
    with pytest.raises(OverflowError, match=r"beyond \+-2\*\*53"):
        x[(i * 2**62) % 7]
    with pytest.raises(OverflowError, match=r"beyond \+-2\*\*53"):
        x[sg.table([2**60, 1])[i % 2] % 8]
    assert sg.evaluate(sg.sum(x[(i * 2**40 + 3) % 8], i), {x: np.arange(8.0)}) == 8 * 3.0  # exact below


@pytest.mark.parametrize("make", [lambda: sg.index("i", 2**63), lambda: sg.index("i", True),
                                  lambda: sg.array("y", (True, 3)), lambda: sg.array("y", (2**40, 2**20)),
                                  lambda: sg.array("y", 0)])
def test_sizes_are_positive_integers_below_two_to_the_53(make):
    with pytest.raises(ValueError, match="positive integer"):
        make()


def test_loads_at_fixed_rows_scatter_their_adjoints_into_one_buffer():
    """Rows read at fixed positions (``W[0]``, ``W[2]`` of a stack of weights, as an LSTM's layers
    read theirs) scatter their adjoints, one add per element, into one buffer: gathered, every entry
    of W tested every site's row (an LSTM's reverse step: 67 cycles an entry). Right on every
    backend, against finite differences."""
    import symgrad.numpy as snp

    def f(W, x):
        return snp.sum(snp.tanh(W[0] * x) * W[3] + W[1] * W[2] ** 2) + snp.sum(W[0] * W[3])

    W, x = np.random.default_rng(4).normal(size=(4, 30)), np.random.default_rng(5).normal(size=30)
    eps, want = 1e-6, np.zeros_like(W)
    for k in np.ndindex(W.shape):
        e = np.zeros_like(W)
        e[k] = eps
        want[k] = (float(np.sum(np.tanh((W + e)[0] * x) * (W + e)[3] + (W + e)[1] * (W + e)[2] ** 2) +
                         np.sum((W + e)[0] * (W + e)[3])) - float(np.sum(np.tanh((W - e)[0] * x) * (W - e)[3] +
                         (W - e)[1] * (W - e)[2] ** 2) + np.sum((W - e)[0] * (W - e)[3]))) / (2 * eps)
    for backend in ("python", "vm", "numba"):
        g = sg.grad(f, backend=backend)
        np.testing.assert_allclose(g(W, x), want, rtol=1e-7, atol=1e-8)
    roots = g.compiled.program.roots
    order = sg.expr.traverse.topo_order(list(roots))
    assert sum(n.op.name == "scatter" for n in order) >= 4 and not any(
        n.op.name == "eq" and any(a.op.name == "index" and a.payload[1] == 4 for a in n.args) for n in order)
