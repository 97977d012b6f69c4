"""sg.scan: the loop as one rolled node (interpreter, loop VM, Numba loops) against the same loop
in Python, finite differences and the element trace; derivatives of every kind through it."""

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr.node import TracingError
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.ode import ode
from symgrad.trace import limits

RNG = np.random.default_rng(7)
STEPS = 80  # >= limits.ROLLED_MIN elements: traced rolled


def rnn_loss(theta, xs, ys):
    """A tanh recurrence over a batch, squared error of a readout (the rnn example's model)."""
    W, u, b, v = theta[:9].reshape(3, 3), theta[9:12], theta[12:15], theta[15:18]

    def step(h, xy):
        x, y = xy
        h = np.tanh(h @ W.T + x[:, None] * u + b)
        return h, np.mean((h @ v - y) ** 2)

    _, errors = sg.scan(step, np.zeros((2, 3)), (xs, ys))
    return np.mean(errors)


def mixed(theta, xs):
    """A pytree carry with a scalar leaf, run backwards, two outputs per step, the last carry used."""
    a, b = theta[:3], theta[3:6]

    def step(c, x):
        h = np.sin(a * c["h"] + x[0] * b) + 0.1 * c["s"]
        s = c["s"] + np.sum(h * x[1])
        return {"h": h, "s": s}, (h[0] * s, np.cos(h))

    c, (first, rest) = sg.scan(step, {"h": np.ones(3), "s": 0.5}, xs, reverse=True)
    return np.sum(first) + np.sum(rest ** 2) + c["s"] + np.sum(c["h"] ** 3)


def data():
    theta = RNG.normal(scale=0.5, size=18)
    return theta, RNG.normal(size=(STEPS, 2)), RNG.normal(size=(STEPS, 2))


def numeric_grad(f, x, *rest, eps=1e-6):
    return np.array([(f(x + eps * e, *rest) - f(x - eps * e, *rest)) / (2 * eps) for e in np.eye(x.size)])


def test_eager_scan_is_lax_scan():
    def step(total, x):
        return total + x, total * x

    total, ys = sg.scan(step, 0.0, np.array([1.0, 2.0, 3.0]))
    assert total == 6.0 and ys.tolist() == [0.0, 2.0, 9.0]
    total, ys = sg.scan(step, 0.0, np.array([1.0, 2.0, 3.0]), reverse=True)
    assert total == 6.0 and ys.tolist() == [5.0, 6.0, 0.0]
    carry, nothing = sg.scan(lambda c, _: (2 * c, None), 1.0, length=4)
    assert carry == 16.0 and nothing is None


def test_bad_scans_name_the_problem():
    with pytest.raises(TypeError, match="structure and shapes of init"):
        sg.scan(lambda c, x: ((c, c), None), 0.0, np.ones(3))
    with pytest.raises(TypeError, match="pair"):
        sg.scan(lambda c, x: c + x, 0.0, np.ones(3))
    with pytest.raises(ValueError, match="leading axis"):
        sg.scan(lambda c, x: (c, None), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(ValueError, match="length"):
        sg.scan(lambda c, x: (c, None), 0.0, np.ones(3), length=0)
    with pytest.raises(TypeError, match="structure and shapes of init"):
        sg.scan(lambda c, x: (sg.array("Z", 3), None), sg.array("h", 2), sg.array("X", (4, 2)))
    with pytest.raises(TracingError, match="inside the step of another"):
        sg.scan(lambda c, x: (sg.scan(lambda d, y: (d + y, None), c, sg.array("Y", (3, 2)))[0] * x, None),
                sg.array("h", 2), sg.array("X", (4, 2)))


def test_rolled_scan_evaluates_as_the_loop():
    X, W, h0 = sg.array("X", (5, 3)), sg.array("W", (3, 3)), sg.array("h0", 3)
    hT, ys = sg.scan(lambda h, x: (np.tanh(W @ h + x), np.sum(h ** 2)), h0, X)
    assert hT.shape == (3,) and ys.shape == (5,) and "scan(" in str(hT)
    values = {X: RNG.normal(size=(5, 3)), W: RNG.normal(size=(3, 3)), h0: RNG.normal(size=3)}
    h, expected = values[h0], []
    for t in range(5):
        expected.append(np.sum(h ** 2))
        h = np.tanh(values[W] @ h + values[X][t])
    got_h, got_ys = sg.evaluate([hT, ys], values)
    np.testing.assert_allclose(got_h, h, rtol=1e-14)
    np.testing.assert_allclose(got_ys, expected, rtol=1e-14)
    unrolled = sg.unroll(hT)  # the oracle: the same loop as scalar expressions
    assert "X[4, 0]" in str(unrolled[0]) and "scan" not in str(unrolled[0])


def test_scan_round_trips_through_json_and_typesets():
    X = sg.array("X", (4, 2))
    hT, ys = sg.scan(lambda h, x: (np.tanh(h + x), h * 2), sg.array("h0", 2), X)
    back = sg.loads(sg.dumps([hT, ys]))
    assert back[0] is hT and back[1] is ys
    doc = json.loads(sg.dumps(hT))
    next(n for n in doc["nodes"] if n[0] == "scan")[1][0] = 3  # a length its arguments contradict
    with pytest.raises(sg.FormatError, match="scan"):
        sg.loads(json.dumps(doc))
    assert r"\operatorname{scan}" in sg.latex(hT)
    alone, _ = sg.scan(lambda h, x: (h * 2, None), sg.array("h0", 2), length=3)  # nothing stacked
    assert sg.loads(sg.dumps(alone)) is alone
    np.testing.assert_array_equal(sg.evaluate(alone, {"h0": [1.0, 2.0]}), [8.0, 16.0])


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_gradients_through_scan(backend):
    theta, xs, ys = data()
    vg = sg.value_and_grad(rnn_loss, backend=backend)
    value, g = vg(theta, xs, ys)
    assert "scan" in str(vg.compiled.program.roots[0]) or backend == "python"
    assert value == pytest.approx(rnn_loss(theta, xs, ys), rel=1e-13)
    np.testing.assert_allclose(g, numeric_grad(rnn_loss, theta, xs, ys), rtol=1e-6, atol=1e-8)
    value, g = sg.value_and_grad(mixed, backend=backend)(theta[:6], xs)
    assert value == pytest.approx(mixed(theta[:6], xs), rel=1e-12)
    np.testing.assert_allclose(g, numeric_grad(mixed, theta[:6], xs), rtol=1e-6, atol=1e-7)


def test_scan_gradients_match_the_element_trace(monkeypatch):
    theta, xs, ys = data()
    rolled = sg.value_and_grad(rnn_loss, argnums=(0, 1), backend="vm")(theta, xs, ys)
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)  # element by element: the scan a Python loop
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    elements = sg.value_and_grad(rnn_loss, argnums=(0, 1), backend="vm")(theta, xs, ys)
    assert rolled[0] == pytest.approx(elements[0], rel=1e-13)
    for a, b in zip(rolled[1], elements[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_numba_loops_run_scans():
    theta, xs, ys = data()
    vm = sg.value_and_grad(mixed, backend="vm")(theta[:6], xs)
    numba = sg.value_and_grad(mixed, backend="numba")(theta[:6], xs)
    assert numba[0] == pytest.approx(vm[0], rel=1e-14)
    np.testing.assert_allclose(numba[1], vm[1], rtol=1e-12)
    assert "for " in sg.grad(rnn_loss, backend="numba").trace(theta, xs, ys).compiled.source


def test_steps_whose_carry_is_a_row_or_unchanged_compile_right():
    """A step returning a row (or the carry itself) computes nothing: its carry is a copy the loops'
    planner removes, and the compiled loop must still write it (it once left the row unwritten)."""
    w, X = RNG.normal(size=3), RNG.normal(size=(STEPS, 3))

    def f(w, X):
        h, ys = sg.scan(lambda c, x: (x, c * 2), w, X)
        k, zs = sg.scan(lambda c, x: (c, c * x), h, X)
        return np.sum(h * w) + np.sum(ys) + np.sum(k ** 2) + np.sum(zs)

    def by_hand(w):
        return np.sum(X[-1] * w) + 2 * (np.sum(w) + np.sum(X[:-1])) + np.sum(X[-1] ** 2) + np.sum(X[-1] * X)

    expected = numeric_grad(by_hand, w)
    for backend in ("vm", "numba"):
        value, g = sg.value_and_grad(f, backend=backend)(w, X)
        assert value == pytest.approx(by_hand(w), rel=1e-13)
        np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)


def test_second_derivatives_through_scan():
    rng = np.random.default_rng(11)  # (its own: the module's RNG gives each order of tests other points)
    x, xs, v = rng.normal(scale=0.5, size=6), rng.normal(size=(STEPS, 2)), rng.normal(size=6)
    grad = sg.grad(mixed, backend="vm")
    expected = (grad(x + 1e-5 * v, xs) - grad(x - 1e-5 * v, xs)) / 2e-5
    np.testing.assert_allclose(sg.hvp(mixed, backend="vm")(x, xs, v), expected, rtol=1e-6, atol=1e-7)
    value, tangent = sg.jvp(mixed, (x, xs), (v, np.zeros_like(xs)))
    assert tangent == pytest.approx(grad(x, xs) @ v, rel=1e-12)
    hessian = sg.hessian(mixed, backend="vm")  # reverse over reverse: the backward scan's rows batched
    H = hessian(x, xs)
    assert hessian._last.indexed
    columns = np.array([(grad(x + 1e-5 * e, xs) - grad(x - 1e-5 * e, xs)) / 2e-5 for e in np.eye(6)])
    np.testing.assert_allclose(H, columns, rtol=1e-6, atol=1e-6 * np.abs(H).max())  # (differences' truncation)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_jacobians_of_scanned_outputs():
    _, xs, _ = data()

    def ys(w, xs):
        return sg.scan(lambda c, x: (np.sin(c * w + x), c[0] * x[1] + np.sum(c * w)), np.ones(2), xs)[1]

    w = np.array([0.3, -0.7])
    jacobian = sg.jacobian(ys, backend="vm")
    J = jacobian(w, xs)
    assert J.shape == (STEPS, 2) and jacobian._last.indexed
    expected = np.stack([(ys(w + 1e-6 * e, xs) - ys(w - 1e-6 * e, xs)) / 2e-6 for e in np.eye(2)], axis=1)
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-8)


def test_vmap_and_sum_over_scans():
    def one(w, xs):
        h, ys = sg.scan(lambda h, x: (np.tanh(w * h + x), h * x), np.zeros(2), xs)
        return np.sum(ys) + np.sum(h)

    w, batch = 0.7, RNG.normal(size=(3, STEPS, 2))
    expected = np.array([sg.grad(one)(w, batch[b]) for b in range(3)])
    per_example = sg.vmap(sg.grad(one), in_axes=(None, 0))
    np.testing.assert_allclose(per_example(w, batch), expected, rtol=1e-12)
    assert per_example._last.indexed  # the batch is an index of the scan's step, not a Python loop
    np.testing.assert_allclose(sg.grad(one).sum(w, batch), expected.sum(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_vmap_batches_every_part_of_a_scan(backend):
    def run(w, h0, xs):  # w: read whole; h0: the initial carry; xs: the rows
        h, ys = sg.scan(lambda h, x: (np.tanh(w * h + x[0]), h * x[1]), h0, xs, reverse=True)
        return np.sum(ys ** 2) + np.sum(h * w)

    W, H0, XS = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3)), RNG.normal(size=(STEPS, 4, 2, 3))
    for in_axes, args in (((0, 0, 1), (W, H0, XS)), ((None, 0, None), (W[0], H0, XS[:, 0])),
                          ((0, None, 1), (W, H0[0], XS))):
        f = sg.vmap(sg.value_and_grad(run, argnums=(0, 1)), in_axes=in_axes, backend=backend)
        value, (dw, dh) = f(*args)
        assert f._last.indexed
        for b in range(4):
            one = [a if axis is None else np.take(a, b, axis=axis) for a, axis in zip(args, in_axes)]
            v, (gw, gh) = sg.value_and_grad(run, argnums=(0, 1), backend="vm")(*one)
            assert value[b] == pytest.approx(v, rel=1e-12)
            np.testing.assert_allclose(dw[b], gw, rtol=1e-10, atol=1e-13)
            np.testing.assert_allclose(dh[b], gh, rtol=1e-10, atol=1e-13)


def test_long_scans_run_without_recursion():
    def f(w, xs):
        h, _ = sg.scan(lambda h, x: (0.5 * h + w * x, None), 0.0 * w, xs)
        return h

    xs = np.ones(100_000)
    value, g = sg.value_and_grad(f, backend="vm")(0.3, xs)
    assert value == pytest.approx(0.6) and g == pytest.approx(2.0)


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(1, 6), width=st.integers(1, 3), reverse=st.booleans(), seed=st.integers(0, 999))
def test_random_scans_agree_with_the_python_loop(steps, width, reverse, seed):
    rng = np.random.default_rng(seed)
    A, X = rng.normal(size=(width, width)), rng.normal(size=(steps, width))
    h0 = rng.normal(size=width)

    def step(h, x):
        new = np.sin(A @ h) * x + 0.5 * h
        return new, np.sum(new * h) + x[0]

    def loop(h):
        out = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            h, out[t] = step(h, X[t])
        return h, np.array(out)

    hs, xs = sg.array("h", width), sg.array("xs", (steps, width))
    with sg.expr.tracing.capturing() as found:
        hT, ys = sg.scan(step, hs, xs, reverse=reverse)
    values = {hs: h0, xs: X, **found}
    expected = loop(h0)
    for got, want in zip(sg.evaluate([hT, ys], values), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    loss = sg.sum(ys) + np.sum(hT ** 2)
    g = sg.evaluate(sg.grad(loss, hs), values)
    vm = sg.compile([loss, sg.grad(loss, hs)], [hs], [xs, *found], backend="vm")  # the loop VM too
    on_vm = vm(h0, np.concatenate([X.ravel(), *(v.ravel() for v in found.values())]))
    assert on_vm[0] == pytest.approx(sg.evaluate(loss, values), rel=1e-13, abs=1e-14)
    np.testing.assert_allclose(on_vm[1:], g, rtol=1e-12, atol=1e-14)
    eps = 1e-6
    fd = [(np.sum(loop(h0 + eps * e)[1]) + np.sum(loop(h0 + eps * e)[0] ** 2) - np.sum(loop(h0 - eps * e)[1])
           - np.sum(loop(h0 - eps * e)[0] ** 2)) / (2 * eps) for e in np.eye(width)]
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


def test_hessians_through_a_scan_over_broadcast_rows_are_rolled_and_right(monkeypatch):
    """The soak's Hessians through scans over the rows of a reshaped, transposed cumsum (and
    np.maximum.accumulate): the rolled Jacobian of the gradient raised a ValueError deep inside (tensor:
    the body also varies over ...). A stride solved first (b = t + 2*i) kept the index solved after it
    (i = u): solutions are now composed. Rolled (no warning), they equal the element trace."""
    x = np.random.default_rng(1).normal(size=64)
    step = lambda c, r: (c * np.sum(r ** 2), None)  # noqa: E731
    fns = (lambda x: sg.scan(step, 1.0, np.cumsum(x).reshape(8, 8).T * 0.3)[0],
           lambda x: np.sum(np.maximum.accumulate(np.sin(np.diff(x)).reshape(3, -1), axis=1) ** 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [sg.hessian(fn, backend="vm")(x) for fn in fns]
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    for H, fn in zip(got, fns):
        want = sg.hessian(fn, backend="python")(x)
        np.testing.assert_allclose(H, want, rtol=1e-12, atol=1e-12 * np.abs(H).max())


def test_hessian_of_a_scan_read_through_a_table_and_at_one_row(monkeypatch):
    """The soak's silently wrong Hessian (python and vm agreed; hvp was right): the first adjoint of
    the scan's rows is a tensor over l reading ys[p[l]]; differentiated again, that site's l met the
    target l of ys's adjoint, and the masked sum over the site's l captured the target. Sites' indices
    that the targets also name are renamed. Checked against the closed form and the element trace."""
    p = 5 * np.arange(STEPS) % STEPS  # not injective: a Jacobian gathers it through tested addresses
    ys = lambda x: sg.scan(lambda c, r: (c + r, np.sum(c)), np.zeros(1), x)[1]  # noqa: E731
    f = lambda x: (lambda y: np.sum(y[p] * y) * y[STEPS - 2])(ys(x))  # noqa: E731
    x = np.random.default_rng(1671812004).normal(size=STEPS)
    got = [sg.hessian(f, backend=b)(x) for b in ("python", "vm")]
    L, P = np.tril(np.ones((STEPS, STEPS)), -1), np.eye(STEPS)[p]  # y = L @ x; sum(y[p] * y) = y @ P @ y
    S, y, k = P + P.T, L @ x, np.eye(STEPS)[STEPS - 2]
    want = L.T @ (S * y[-2] + np.outer(S @ y, k) + np.outer(k, S @ y)) @ L
    monkeypatch.setattr(limits, "ROLLED_MIN", 10**9)
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    element = sg.hessian(f, backend="python")(x)
    for H in (*got, element):
        np.testing.assert_allclose(H, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_adjoints_of_arrays_read_whole_ride_in_the_reverse_carry_unless_large(monkeypatch):
    """The adjoints of the arrays a step reads whole are summed step by step in the reverse scan's
    carry (JAX's transpose of a scan), where they add at most ``CARRIED`` times the carry's size;
    larger ones (and all, with CARRIED = 0) are one sweep over every step after it. Both ways
    agree, with finite differences too."""
    from symgrad.expr import scans

    theta, xs, ys = data()

    def reverse_carry(vg):
        found = [n for n in sg.expr.traverse.topo_order(list(vg.compiled.program.roots)) if n.op.name == "scan"]
        return max(n.shape[1] for n in found if n.payload[1])

    carried = sg.value_and_grad(rnn_loss, backend="vm")
    got = carried(theta, xs, ys)
    assert reverse_carry(carried) == 6 + 9 + 3 + 3 + 3  # h (2 x 3), then W, u, b, v
    monkeypatch.setattr(scans, "CARRIED", 0)
    swept = sg.value_and_grad(rnn_loss, backend="vm")
    want = swept(theta, xs, ys)
    assert reverse_carry(swept) == 6
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[1], numeric_grad(rnn_loss, theta, xs, ys), rtol=1e-6, atol=1e-8)


def test_outputs_read_a_stacked_carrys_rows_instead_of_computing_them_again():
    """An LSTM's carry stacks its layers' states and its output reads the last layer's: the outputs
    are computed after the loop from the stored carries, reading that row (element by element, in
    the addresses' canonical form), not the layers again from the carry before each step (GradBench's
    LSTM objective: 29.7 -> 8.1 ms, with the loops' changes). Values as the Python loop's."""
    rng = np.random.default_rng(3)
    W, X = rng.normal(scale=0.2, size=(2, 40, 40)), rng.normal(size=(30, 40))

    def step(h, x):
        first = np.tanh(W[0] @ h[0] + x)
        second = np.tanh(W[1] @ h[1] + first)
        return np.stack([first, second]), np.sum(np.exp(second) * x)

    def loss(h0):
        return np.sum(sg.scan(step, h0, X)[1])

    def loop(h0):
        h, total = h0, 0.0
        for x in X:
            h, y = step(h, x)
            total += y
        return total

    h0 = rng.normal(size=(2, 40))
    value = sg.jit(loss, backend="vm")
    assert value(h0) == pytest.approx(loop(h0), rel=1e-13)
    roots = value.compiled.program.roots
    outside = sg.expr.traverse.topo_order(list(roots))  # (not the step's body: a scan's payload)
    assert "scan" in str(roots[0]) and not any(n.op.name == "tanh" for n in outside)
    g = sg.grad(loss, backend="vm")(h0)
    np.testing.assert_allclose(g.ravel(), numeric_grad(lambda v: loop(v.reshape(2, 40)), h0.ravel()), rtol=1e-5,
                               atol=1e-6)


def rk4(x, s):
    """GradBench's ODE (RK4 to t = 2 in ``s`` steps), its state as small as x."""
    return ode(SG, x, s)


@pytest.mark.parametrize("transform", ["jit", "grad", "hessian"])
def test_a_long_scan_over_a_small_state_is_traced_rolled(transform, monkeypatch):
    """Arrays under ROLLED_MIN elements trace element by element, but a scan of LONG_LOOP steps or more
    there would repeat its step's nodes per step (1000 RK4 steps over 10 elements: 10**6 lines of C):
    the function is traced rolled instead, one loop. Its values are the element trace's."""
    x, s = RNG.uniform(0.5, 1.5, size=4), 40
    make = {"jit": lambda: sg.jit(lambda x: rk4(x, s), backend="vm"),
            "grad": lambda: sg.grad(lambda x: rk4(x, s)[-1], backend="vm"),
            "hessian": lambda: sg.hessian(lambda x: rk4(x, s)[-1], backend="vm")}[transform]
    f = make()
    got = f(x)
    line = f.explain().splitlines()[1]
    assert line.startswith("  x: (4,) -> rolled (whole arrays: loops), for a loop of 40 steps"), line
    assert f._last.indexed
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    element = make()
    want = element(x)
    assert not element._last.indexed
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    closed = np.cumprod(x) * 2.0 ** np.arange(1, 5) / np.cumprod(np.arange(1, 5))  # y_i = prod x * t^(i+1)/(i+1)!
    if transform == "jit":
        np.testing.assert_allclose(got, closed, rtol=1e-6)


def test_a_long_fori_loop_over_a_small_array_is_traced_rolled_and_short_ones_are_not(monkeypatch):
    def f(x, n):
        return np.sum(sg.fori_loop(0, n, lambda i, y: 0.5 * np.sin(y) * x + 0.3 * y[::-1], x) ** 2)

    x = RNG.normal(size=5)
    for n, indexed in ((limits.LONG_LOOP - 1, False), (limits.LONG_LOOP, True), (30, True)):
        g = sg.grad(f, static_argnums=1, backend="vm")
        got = g(x, n)
        assert g._last.indexed == indexed
        with monkeypatch.context() as m:
            m.setattr(limits, "LONG_LOOP", 10**9)
            np.testing.assert_allclose(got, sg.grad(f, static_argnums=1)(x, n), rtol=1e-12, atol=1e-15)
        fd = numeric_grad(f, x, n)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_a_long_scan_beside_code_without_a_rolled_form_stays_element_by_element():
    """np.linalg.det has no rolled form: the rolled trace a long scan asks for fails, and the element
    trace (its Python loop) is taken after all, quietly (the arrays are small: nothing to warn of)."""
    def f(x):
        y, _ = sg.scan(lambda c, _: (c * 0.9 + x, None), np.zeros(3), None, length=20)
        return np.linalg.det(np.outer(x, x[::-1]) + np.eye(3)) + np.sum(y ** 2)

    x = RNG.normal(size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = sg.grad(f, backend="vm")
        got = g(x)
    assert not g._last.indexed and "element by element (arrays under" in g.explain()
    np.testing.assert_allclose(got, numeric_grad(f, x), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("join", [np.stack, np.array, lambda v: np.asarray(v, dtype=object)])
def test_a_step_that_stacks_its_scalars_stays_one_rolled_loop(join, monkeypatch):
    """A pendulum's RK1 step as JAX code writes it, ``np.stack([v, -g * np.sin(x) - c * v])``: NumPy makes an
    object array of the step's scalars, which a rolled trace takes as a rolled array of them (it had sent
    the function element by element: 1000 steps, 3.4 s to the first result). The element trace agrees."""
    def pend(theta, s):
        def step(y, _):
            return y + 0.01 * join([y[1], -theta[0] * np.sin(y[0]) - theta[1] * y[1]]), y[0]

        y, ys = sg.scan(step, np.array([1.0, 0.0]), None, length=s)
        return np.sum(ys ** 2) + y[0]

    theta = np.array([9.8, 0.1])
    g = sg.grad(pend, static_argnums=1, backend="vm")
    got = g(theta, 60)
    assert g._last.indexed and g._last.rolled_for == "a loop of 60 steps"
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    element = sg.grad(pend, static_argnums=1, backend="vm")
    np.testing.assert_allclose(got, element(theta, 60), rtol=1e-12)
    assert not element._last.indexed
    np.testing.assert_allclose(got, numeric_grad(lambda t: pend(t, 60), theta), rtol=1e-6)


def test_an_element_traces_objects_are_not_taken_for_a_rolled_array():
    """Only in a rolled trace do scalars become a rolled array (a 0-d argument is a variable there too): an
    element trace's variables in an object array meeting a rolled array are still ElementsMet (the scan's
    step then runs as the loop that has them)."""
    from symgrad.expr import ndarrays, tracing

    x, a = sg.symbols("x"), sg.array("a", 3)
    with pytest.raises(ndarrays.ElementsMet):
        ndarrays.operand(np.array([x, a[0]], dtype=object))
    with tracing.rolled_trace(True):
        joined = ndarrays.operand(np.array([a[0] * x, 1.0], dtype=object))
    values = {a: np.array([3.0, 0.0, 0.0]), x: 2.0}
    assert joined.shape == (2,) and sg.evaluate(joined, values).tolist() == [6.0, 1.0]


def test_a_step_stacking_scalars_beside_a_scalar_argument_stays_one_loop(monkeypatch):
    """The step size passed as a number (a 0-d argument, a variable in the rolled trace too) beside
    np.stack in the step: the tester's RK4 over 10 states, 1000 steps, took 42 s (the scan unrolled)."""
    def f(y0, h):
        def step(y, _):
            return y + h * np.stack([y[1], -np.sin(y[0])]), None

        return np.sum(sg.scan(step, y0, None, length=200)[0] ** 2)

    y0 = np.array([1.0, 0.0])
    g = sg.grad(f, argnums=(0, 1), backend="vm")
    got = g(y0, 0.01)
    assert g._last.indexed and g._last.rolled_for == "a loop of 200 steps"
    assert int(g.explain().split(" nodes")[0].split()[-1]) < 100  # (one loop: the step's nodes once)
    monkeypatch.setattr(limits, "LONG_LOOP", 10**9)
    want = sg.grad(f, argnums=(0, 1), backend="vm")(y0, 0.01)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert got[1] == pytest.approx(want[1], rel=1e-12)


def test_an_except_of_fns_own_around_a_construct_without_a_rolled_form_is_not_taken_for_its_value():
    """The rolled trace's refusal (np.linalg.det has no rolled form) caught by an ``except Exception`` in the
    traced function ran its except branch: 0.3 where NumPy gives 1.054 (the tester's case: a long scan
    over a small state; before, arrays of 64 elements or more without a scan). The rolled trace is refused
    and the element trace, whose det NumPy computes, gives NumPy's value."""
    def f(s, n):
        try:
            c, _ = sg.scan(lambda c, _: (np.stack([c[1], -c[0]]) * 0.1 + c, None), s, None, length=n)
            d = np.linalg.det(np.outer(c, c) + np.eye(2))
        except Exception:  # noqa: BLE001 (the user's code)
            d = np.sum(s)
        return d

    def numpy(s, n):
        c = s
        for _ in range(n):
            c = np.array([c[1], -c[0]]) * 0.1 + c
        return np.linalg.det(np.outer(c, c) + np.eye(2))

    s = np.array([0.1, 0.2])
    for n in (7, 8, 200):
        g = sg.jit(f, static_argnums=1, backend="vm")
        assert g(s, n) == pytest.approx(numpy(s, n), rel=1e-12)
        assert not g._last.indexed
    x = np.linspace(0.1, 1.0, 64)
    big = sg.jit(lambda x: f(x[:2], 0) + np.sum(x), backend="vm")
    with pytest.warns(UserWarning, match=r"caught by an except of fn's own at test_scan.py:\d+"):
        got = big(x)
    assert got == pytest.approx(numpy(x[:2], 0) + np.sum(x), rel=1e-12)



@pytest.mark.parametrize("backend", ["python", "vm", "c", "numba"])
def test_a_stack_whose_rows_are_all_alike_is_read_whole_by_the_step(backend):
    """A stack every row of which is the same array (np.broadcast_to, np.cumprod of an np.full: GradBench's
    least squares) was stored once per step, 16 MB at n = 16392: the step reads the row whole instead.
    Values against the loop in Python (sg.scan on NumPy values), the gradient against central
    differences, on every backend."""
    from symgrad.compile import c_backend
    from symgrad.expr import scans
    from symgrad.expr.traverse import topo_order

    if backend == "c" and not c_backend.available():
        pytest.skip("no C compiler")

    def f(x):
        def step(h, r):
            return np.tanh(h * r + 0.1), np.sum(h * r)
        last, ys = sg.scan(step, x[5:10], np.broadcast_to(x[:5], (7, 5)))
        powers = np.cumprod(np.broadcast_to(0.9 + 0.1 * np.tanh(x[3:4]), (100,)))
        return np.sum(last ** 2) + np.sum(ys * x[10:17]) + np.sum(powers * x[20:120])

    x = RNG.normal(size=120)
    value, grad = sg.jit(sg.value_and_grad(f), backend=backend)(x)
    traced = sg.jit(f)
    traced(x)
    found = [scans._parts(n) for n in topo_order([traced.exprs]) if n.op.name == "scan"]
    assert len(found) == 2 and all(not stacks and consts for *_, stacks, consts in found)
    assert value == pytest.approx(f(x), rel=1e-12)
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(120)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


def test_a_scan_over_a_traced_scalar_repeated_by_numpy_is_one_rolled_node():
    """``x[1] * np.ones(60)`` is an object array (NumPy broadcast the traced scalar): the scan ran as a Python
    loop over the 70-element carry's elements, 92,908 nodes for its gradient, and its C took cc over 60 s.
    Now the array of one expression is a rolled one, read whole by the step. Against the loop on NumPy
    values and central differences."""
    def f(x):
        def step(c, r):
            c = np.tanh(0.8 * c + 0.3 * r * c + 0.1 * r)
            return c, c * r
        c, ys = sg.lax.scan(step, x[:70] * 0.3, x[1] * np.ones(60))
        return np.sum(c * c) + np.sum(np.sin(ys))

    x = RNG.uniform(0.2, 0.9, 70)
    g = sg.value_and_grad(f, backend="vm")
    value, grad = g(x)
    assert "rolled" in g.explain() and int(g.explain().split(" nodes")[0].rsplit(" ", 1)[1]) < 300
    assert value == pytest.approx(f(x), rel=1e-12)
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(70)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_loss_of_the_last_carry_alone_seeds_the_reverse_scan_without_a_row_of_zeros(reverse):
    """GradBench's ODE: the gradient of y[-1] read at each reverse step a row of the carries' adjoint,
    zero but at the start (8 MB zeroed each call at n = 10^4, 100 steps). The reverse scan now starts from
    it and stacks no such row. Value and gradient against the loop on NumPy values and central
    differences, on the interpreter and the loop VM; the reverse scan has one stack fewer."""
    from symgrad.expr import scans
    from symgrad.expr.traverse import topo_order

    def f(x):
        def step(c, r):
            return np.sin(0.9 * c + 0.2 * r) + 0.05 * c[::-1], None
        c, _ = sg.scan(step, x[:70], x[70:].reshape(12, 5).repeat(14, axis=1), reverse=reverse)
        return c[-1] * 2.0 + c[3]

    x = RNG.normal(size=130)
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(130)])
    v = RNG.normal(size=130)
    for backend in ("python", "vm"):
        value, grad = sg.value_and_grad(f, backend=backend)(x)
        assert value == pytest.approx(f(x), rel=1e-12)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
        g = sg.grad(f, backend=backend)  # second order: forward over the seeded reverse scan
        np.testing.assert_allclose(sg.hvp(f, backend=backend)(x, v), (g(x + 1e-6 * v) - g(x - 1e-6 * v)) / 2e-6,
                                   rtol=1e-5, atol=1e-6)
    g = sg.jit(sg.grad(f))
    g(x)
    found = [scans._parts(n) for n in topo_order([g.exprs]) if n.op.name == "scan"]
    assert len(found) == 2 and [p[1] for p in found].count(not reverse) == 1
    back = next(p for p in found if p[1] != reverse)
    assert len(back[4]) == 3  # (the carries before and after each step, the rows: no adjoint's rows)


@pytest.mark.parametrize("backend", ["python", "vm"])
def test_running_products_and_maxima_second_derivatives_at_zeros_and_ties(backend):
    """np.cumprod (now the scan's own node) at exact zeros of x: the Hessian-vector product against central
    differences of the gradient (a polynomial there); np.maximum.accumulate at ties: piecewise linear, its
    Hessian 0 and finite."""
    x = RNG.uniform(0.5, 1.5, 100)
    x[[3, 40, 41]] = 0.0
    w = np.cos(np.arange(100.0))
    f = lambda x: np.sum(np.cumprod(x) * w) + np.sum(np.cumprod(x[:60].reshape(6, 10), axis=1) ** 2)  # noqa: E731
    v = RNG.normal(size=100)
    g = sg.grad(f, backend=backend)
    np.testing.assert_allclose(sg.hvp(f, backend=backend)(x, v), (g(x + 1e-6 * v) - g(x - 1e-6 * v)) / 2e-6,
                               rtol=1e-5, atol=1e-6)
    ties = np.round(RNG.uniform(-1.5, 1.5, 100) * 2) / 2
    m = lambda x: np.sum(np.maximum.accumulate(x) * w)  # noqa: E731
    h = sg.hvp(m, backend=backend)(ties, v)
    assert np.all(h == 0.0)
