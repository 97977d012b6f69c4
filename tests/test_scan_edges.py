"""sg.scan at its edges: a loop counted by ``length`` alone is one node when traced, zero steps give
``init`` and empty ``ys`` (``lax.scan`` of length 0), a carry that changes shape is refused, and a
user's array named like a step's placeholder stays an input of its own."""

import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad import TracingError
from symgrad.expr.traverse import count_nodes, topo_order

RNG = np.random.default_rng(11)


def complex_step_grad(f, x, eps=1e-30):
    """The derivative to rounding (no cancellation, unlike finite differences over 1000 steps)."""
    x = np.asarray(x, dtype=float)
    return np.array([f(x + 1j * eps * e).imag / eps for e in np.eye(x.size)]).reshape(x.shape)


def decay(w, n):
    """A loop with no stacked input: a NumPy initial carry, a scalar leaf, outputs every step."""
    def step(c, _):
        h, s = c
        h = np.sin(w * h) + 0.5
        return (h, s + np.sum(h)), np.sum(h * w)
    (h, s), ys = sg.scan(step, (np.ones(64), 0.0), length=n)
    return np.sum(h ** 2) + s + np.sum(ys)


def decay_loop(w, n):
    h, s, total = np.ones(64, dtype=np.result_type(w, float)), 0.0, 0.0
    for _ in range(n):
        h = np.sin(w * h) + 0.5
        s += np.sum(h)
        total += np.sum(h * w)
    return np.sum(h ** 2) + s + total


@pytest.mark.parametrize("w", [0.7, np.linspace(-0.9, 0.9, 64)])  # element by element, and rolled
def test_a_length_only_scan_is_one_node_when_traced(w):
    vg = sg.value_and_grad(lambda w: decay(w, 1000), backend="vm")
    value, g = vg(w)
    trace = vg.trace(w)
    assert count_nodes(trace.outputs[0][0]) < 300  # (12006 nodes as a Python loop)
    roots = list(trace.compiled.program.roots)
    assert sum(n.op.name == "scan" for n in topo_order(roots)) == 2  # the loop, and its gradient's backwards
    assert value == pytest.approx(decay_loop(np.asarray(w), 1000), rel=1e-12)
    np.testing.assert_allclose(g, complex_step_grad(lambda v: decay_loop(v, 1000), w), rtol=1e-10)


def test_a_billion_steps_trace_at_once():
    f = sg.jit(lambda w: sg.scan(lambda c, _: (c * w + 1.0, None), 1.0, length=10**9)[0], backend="vm")
    program = f.trace(0.5).compiled.program
    assert len(program) < 30 and "scan" in str(program)


def test_eager_scans_stay_python_loops():
    carry, ys = sg.scan(lambda c, _: (c * 0.5, c), 8.0, length=3)
    assert carry == 1.0 and ys.tolist() == [8.0, 4.0, 2.0]
    assert decay(0.7, 5) == pytest.approx(decay_loop(0.7, 5), rel=1e-14)


@pytest.mark.parametrize("reverse", [False, True])
def test_zero_steps_give_init_and_empty_ys(reverse):
    def step(c, x):
        return {"h": c["h"] * x[0], "s": c["s"]}, (np.outer(c["h"], x), c["s"])

    init = {"h": np.ones(2), "s": 3.0}
    carry, (a, b) = sg.scan(step, init, np.zeros((0, 4)), reverse=reverse)
    assert carry is init and a.shape == (0, 2, 4) and b.shape == (0,)
    carry, ys = sg.scan(lambda c, _: (c + 1.0, c), np.zeros(3), length=0)
    assert carry.tolist() == [0.0] * 3 and ys.shape == (0, 3)
    with pytest.raises(TypeError, match="structure and shapes of init"):
        sg.scan(lambda c, x: (np.ones(4), None), np.zeros(3), np.zeros((0, 2)))


def test_zero_steps_inside_a_trace():
    def f(w):
        h, ys = sg.scan(lambda h, _: (np.tanh(w * h), np.sum(h)), w * 2.0, length=0)
        return np.sum(h ** 2) + np.sum(ys)

    w = RNG.normal(size=70)
    value, g = sg.value_and_grad(f, backend="vm")(w)
    assert value == pytest.approx(np.sum(4 * w ** 2), rel=1e-14)
    np.testing.assert_allclose(g, 8 * w, rtol=1e-14)


@pytest.mark.parametrize("n", [5, 100])  # element by element, and rolled
def test_a_carry_that_changes_shape_is_refused(n):
    def f(w, xs):
        c, _ = sg.scan(lambda c, x: (np.sum(c * x) * w[:3], None), w[:2], xs)
        return np.sum(c)

    w, xs = RNG.normal(size=n), RNG.normal(size=(n, 2))
    with pytest.raises(TypeError, match=r"structure and shapes of init: \(3,\) returned, \(2,\) expected"):
        sg.grad(f, backend="vm")(w, xs)
    with pytest.raises(TypeError, match=r"\(3,\) returned, \(2,\) expected"):
        f(w, xs)
    with pytest.raises(TypeError, match=r"\{'a': \(\)\} returned, \{'a': \(2,\)\} expected"):
        sg.scan(lambda c, _: ({"a": 1.0}, None), {"a": np.ones(2)}, length=2)


@pytest.mark.parametrize("name", ["scan#c", "scan#x0", "scan#k0", "scan#0"])
def test_user_arrays_named_like_placeholders_are_inputs(name):
    """A user's array called like a step's placeholder was the same node (hash-consing): numba and the
    loop VM read the carry where the step reads the user's array."""
    A, h0, X = sg.array(name, (8,)), sg.array("h0", 8), sg.array("X", (3, 8))
    hT, ys = sg.scan(lambda h, x: (h * 0.5 + A * x, np.sum(A * h)), h0, X)
    values = {A: RNG.normal(size=8), h0: RNG.normal(size=8), X: RNG.normal(size=(3, 8))}
    h, expected = values[h0], []
    for t in range(3):
        expected.append(np.sum(values[A] * h))
        h = h * 0.5 + values[A] * values[X][t]
    got = sg.evaluate([hT, ys], values)
    np.testing.assert_allclose(got[0], h, rtol=1e-14)
    np.testing.assert_allclose(got[1], expected, rtol=1e-14)
    for backend in ("vm", "numba", "python"):
        f = sg.compile([hT, ys], [A, h0, X], backend=backend)
        out = f(np.concatenate([values[A], values[h0], values[X].ravel()]))
        np.testing.assert_allclose(out, np.concatenate([h, expected]), rtol=1e-13)


def _fd(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)]).reshape(x.shape)


def test_ys_of_an_element_traced_scan_compare_and_take_ufuncs():
    """Traced element by element (8 elements), a scan's ys were a plain object array: np.minimum,
    comparisons and np.logaddexp on them failed (found by symgrad.fuzz)."""
    x = RNG.normal(size=8)

    def f(x):
        c, ys = sg.scan(lambda c, r: (c + r, c), 0.0, x)
        return np.sum(np.minimum(ys, 0.3)) + np.sum(np.logaddexp(ys, ys)) + np.sum(ys > 0.1)

    value, grad = sg.value_and_grad(f, backend="python")(x)
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(grad, _fd(f, x), rtol=1e-6, atol=1e-8)


def test_a_scan_of_numbers_meets_element_traced_arrays():
    """A length-only scan reading nothing traced is one rolled node inside an element trace too: where
    its ys meet arrays traced element by element, they are read element by element (they were refused:
    a NumPy object array combined with a traced array)."""
    x = RNG.normal(size=8)

    def f(x):
        c, ys = sg.scan(lambda c, r: (c + 1.0, c), 0.0, length=5)
        return np.sum(x[:5] * ys)

    value, grad = sg.value_and_grad(f, backend="python")(x)
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_array_equal(grad, [0, 1, 2, 3, 4, 0, 0, 0])
    jac = sg.jacobian(lambda x: sg.scan(lambda c, r: (c + 1.0, c), 0.0, length=5)[1] * np.sum(x))(x)
    np.testing.assert_array_equal(jac, np.outer(np.arange(5.0), np.ones(8)))


def test_a_scan_over_rolled_rows_whose_step_reads_element_traced_arrays():
    """The soak's reproducer: traced element by element (8 elements), a step reading x[:8] (an object array)
    over the rows of a rolled length-only scan's ys raised TracingError; it runs as a loop, the rows read
    element by element. A step that fails rolled for other reasons still says so."""
    x = RNG.normal(size=8)

    def f(x):
        _, rows = sg.scan(lambda c, r: (c + 1.0, c), 0.0, length=3)
        _, ys = sg.scan(lambda c, r: (x[:8] * r, x[:8] * c), np.zeros(8), rows)
        return np.sum(ys)

    value, grad = sg.value_and_grad(f, backend="python")(x)
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(grad, 2 * x, rtol=1e-14)  # rows 0, 1, 2: ys 0, 0, x * x
    with pytest.raises(TracingError, match="inside the step of another"):
        sg.scan(lambda c, x: (sg.scan(lambda d, y: (d + y, None), c, sg.array("Y", (3, 2)))[0] * x, None),
                sg.array("h", 2), sg.array("X", (4, 2)))


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_rows_a_step_never_reads_have_no_adjoint(backend):
    """Their adjoint was an array of zeros, which sqrt's nan partial (w < 0) turned into nan."""
    x, w = RNG.normal(size=64), np.array([-0.5, 0.7, -1.2])

    def f(x, w):
        _, ys = sg.scan(lambda c, r: (c, c), np.zeros(2), np.sqrt(w))
        return np.sum(ys) + np.sum(x * x)

    with np.errstate(invalid="ignore"):
        _, (gx, gw) = sg.value_and_grad(f, argnums=(0, 1), backend=backend)(x, w)
    np.testing.assert_array_equal(gw, np.zeros(3))
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-14)


def test_vmap_of_the_gradient_of_a_scan_with_a_scalar_carry():
    """The step's result read back in its derivative at a one-value index (a scalar carry packed as one
    element) also where that index is not bound: vmap of grad raised ValueError (found by symgrad.fuzz)."""
    def f(x):
        last, ys = sg.scan(lambda c, r: (np.tanh(c) + 0.1 * r, c), 0.3, x)  # (the carry itself as ys)
        return np.sum(ys) + last

    x = np.random.default_rng(1).normal(size=24)
    g = sg.grad(f)(x)
    h = 1e-6
    np.testing.assert_allclose(g, [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(24)], atol=1e-8)
    G = sg.vmap(sg.grad(f, backend="python"), backend="python")(np.stack([x, 2 * x]))
    np.testing.assert_allclose(G, [g, sg.grad(f)(2 * x)], rtol=1e-13, atol=1e-15)

    def found(x):  # the fuzzer's program: the rows unused, so a zero gradient
        _, ys = sg.scan(lambda c, r: (np.tanh(c), c), 0.0, x)
        return np.sum(ys)

    np.testing.assert_array_equal(sg.vmap(sg.grad(found, backend="python"), backend="python")(np.stack([x] * 3)),
                                  np.zeros((3, 24)))


def test_a_scan_node_over_a_scalar_says_so():
    """A mutated document's scan read a scalar as its stacked rows: IndexError deep inside (hypothesis,
    test_hostile); scans.make names the shapes (sg.loads turns that into a FormatError)."""
    from symgrad.expr import rolled, scans

    c, x = scans.placeholder((2,)), scans.placeholder((2,))
    with pytest.raises(ValueError, match="the stacked inputs have shapes"):
        scans.make(c * x, c, rolled.array("c0", 2), [(x, sg.Var("v"))], [])


def test_a_numpy_array_times_a_scalar_row_keeps_the_scan_rolled():
    """A step multiplying a captured NumPy array by a scalar row of ``xs`` (``b * x``, xs of shape
    (T,)) made an object array of its elements, so the scan went to a Python loop and the whole
    function to the element trace (T=100 with a 64 x 64 product: 1.68M nodes, a Numba compile of
    over 10 minutes; an independent tester's find). Rolled now; values and gradients as the loop's."""
    rng = np.random.default_rng(12)
    W, b = rng.normal(size=(64, 64)) * 0.1, rng.normal(size=64)

    def f(h0, xs):
        h, ys = sg.scan(lambda h, x: (np.tanh(W @ h + b * x), np.sum(b * x * h)), h0, xs)
        return np.sum(h ** 2) + np.sum(ys)

    def loop(h0, xs):
        h, total = h0, 0.0
        for x in xs:
            h, total = np.tanh(W @ h + b * x), total + np.sum(b * x * h)
        return np.sum(h ** 2) + total

    h0, xs = rng.normal(size=64), rng.normal(size=100)
    vg = sg.value_and_grad(f, argnums=(0, 1), backend="vm")
    value, (gh, gx) = vg(h0, xs)
    assert "rolled" in vg.explain() and len(sg.expr.traverse.topo_order(list(vg.compiled.program.roots))) < 200
    assert value == pytest.approx(loop(h0, xs), rel=1e-12)
    fd = [(loop(h0, xs + 1e-6 * e) - loop(h0, xs - 1e-6 * e)) / 2e-6 for e in np.eye(100)[:10]]
    np.testing.assert_allclose(gx[:10], fd, rtol=1e-6, atol=1e-8)


def test_a_scan_over_running_sums_reading_a_strided_slice_of_a_product_has_a_gradient():
    def f(x, w):
        v2 = w[5:]
        v4 = np.cumsum(x)
        v6 = (v2[:48] * np.sin(v4))[1::3]
        return np.sum(sg.scan(lambda h, r: (np.tanh(h * v6[:5] + r), None), v2[:5], v4)[0] ** 2)

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=48), rng.normal(size=72)
    got = sg.grad(f, argnums=(0, 1), backend="vm")(x, w)
    want = sg.grad(f, argnums=(0, 1), backend="python")(x, w)
    for a, b in zip(got, want):  # (the step's constants leaked into the gradient: a rebuild folded a read of the
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)  # stored step result back into its formula)
    fd = [(f(x + 1e-6 * e, w) - f(x - 1e-6 * e, w)) / 2e-6 for e in np.eye(48)]
    np.testing.assert_allclose(want[0], fd, rtol=1e-6, atol=1e-8)
    _, tangent = sg.jvp(lambda x: f(x, w), (x,), (np.ones(48),))  # forward mode's scan: the same substitution
    assert tangent == pytest.approx(np.sum(want[0]), rel=1e-10)


@pytest.mark.parametrize("n", [16, 20])
def test_a_step_reading_many_scalars_of_an_element_traced_array_has_a_gradient(n):
    """The fuzzer's reproducer: a step reading ``w[:16]`` of a small array (traced element by element: 16
    scalars) summed their adjoints in the reverse carry, one concatenation of 17 parts, which raised the
    TracingError meant for a Python loop over rows; past 15 the rest are summed by the reverse sweep."""
    def f(w):
        def step(h, _):
            h = h * 0.9 + np.sum(h * w[:16]) * 0.1
            return h, h
        _, ys = sg.scan(step, np.linspace(0.5, 1.0, 16), length=5)
        return np.sum(ys)

    def loop(w):
        h, total = np.linspace(0.5, 1.0, 16).astype(w.dtype), 0.0
        for _ in range(5):
            h = h * 0.9 + np.sum(h * w[:16]) * 0.1
            total += np.sum(h)
        return total

    w = RNG.normal(size=n)
    value, grad = sg.value_and_grad(f, backend="python")(w)
    assert value == pytest.approx(loop(w), rel=1e-12)
    np.testing.assert_allclose(grad, complex_step_grad(loop, w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_a_step_reading_another_scans_result_is_rolled_not_a_nested_scan(backend):
    """The tester's case: a step closing over the final carry of a scan run before it was refused as a
    scan inside the step (its outer values were checked before closure conversion made them consts),
    so the function was traced element by element (10,944 nodes). Rolled now, against the loop by hand
    and central differences."""
    rng = np.random.default_rng(3)
    X, c0 = rng.normal(size=(25, 64)), rng.normal(size=64)

    def f(c0, X):
        h, _ = sg.scan(lambda h, x: (np.tanh(0.9 * h + x), None), c0, X[1:])
        g, _ = sg.scan(lambda g, x: (np.sin(g) * h + x, None), c0, X[:-1])
        return np.sum(g * g)

    def by_hand(c0, X):
        h = c0
        for x in X[1:]:
            h = np.tanh(0.9 * h + x)
        g = c0
        for x in X[:-1]:
            g = np.sin(g) * h + x
        return np.sum(g * g)

    vg = sg.value_and_grad(f, argnums=1, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the fallback to elements warned)
        value, grad = vg(c0, X)
    assert "rolled" in vg.explain() and value == pytest.approx(by_hand(c0, X), rel=1e-13)
    for at in ((23, 5), (24, 7), (22, 0)):  # (the last rows: through g, through h, through both)
        e = np.zeros_like(X)
        e[at] = 1e-6
        assert grad[at] == pytest.approx((by_hand(c0, X + e) - by_hand(c0, X - e)) / 2e-6, rel=1e-6)
