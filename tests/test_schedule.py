"""The schedule checker: every loop program's steps pass it before they run, and each kind of wrong
schedule (the planner's bugs it exists to catch) is refused with a ScheduleError naming the array."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.compile.schedule import Schedule, ScheduleError, Step, schedule, verify
from symgrad.expr.build import apply
from symgrad.expr.ops import OPS

PERM = np.random.default_rng(0).permutation(64)


def _gradient_schedule():
    """The schedule of a permuted gather through np.minimum's value and gradient: t1 (the minimum), a
    scatter added into the gradient tensor t1 + scatter, and the sum reading t1."""
    vg = sg.value_and_grad(lambda x: np.sum(x * np.minimum(x[PERM], 0.0)), backend="vm")
    program = vg.trace(np.ones(64)).compiled.program
    return schedule(list(program.roots) if program.returns_value else [sg.Var("zero") * 0.0, *program.roots])


def test_the_old_wrong_schedule_of_a_gather_through_minimum_is_refused():
    """The planner once filled the gradient's buffer with the minimum's tensor (which the value still
    reads after the steps), then added the scatter into it: the value read the gradient (twice the sum)."""
    good = _gradient_schedule()
    verify(good)
    (minimum,), (scatter,) = (next(s.nodes for s in good.steps if s.kind == kind) for kind in ("fill", "add"))
    grad = good.steps[-1].nodes[0]
    wrong = [Step("fill", (minimum,)), Step("add", (scatter,))]
    with pytest.raises(ScheduleError, match="into the buffer of .*minimum.*, which step 2 still reads"):
        verify(Schedule(good.outputs, good.order, wrong, {minimum: grad, scatter: grad}, good.fused))


def test_reads_before_writes_and_adds_into_unzeroed_buffers_are_refused():
    good = _gradient_schedule()
    with pytest.raises(ScheduleError, match="before it is computed"):
        verify(Schedule(good.outputs, good.order, good.steps[::-1], good.home, good.fused))
    without_zero = [s for s in good.steps if s.kind != "zero"]
    with pytest.raises(ScheduleError, match="not zeroed or filled"):
        verify(Schedule(good.outputs, good.order, without_zero, good.home, good.fused))
    zero = next(s for s in good.steps if s.kind == "zero")
    with pytest.raises(ScheduleError, match="twice"):
        verify(Schedule(good.outputs, good.order, [zero, *good.steps], good.home, good.fused))
    with pytest.raises(ScheduleError, match="not complete"):
        verify(Schedule(good.outputs, good.order, good.steps[:-1], good.home, good.fused))


def test_an_address_outside_its_array_is_refused():
    """Loads the planner builds skip subscript's range check: the checker redoes it."""
    x, i = sg.array("x", 4), sg.index("i", 4)
    outside = sg.tensor(apply(OPS["load"], (x, i + 1)) * 2.0, i)
    with pytest.raises(ScheduleError, match=r"i \+ 1 takes values 1..4, outside 0..3"):
        verify(Schedule([outside], [outside], [Step("fill", (outside,))]))


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_every_loop_program_passes_the_checker_before_it_runs(monkeypatch, backend):
    from symgrad.compile import schedule as module

    checked = []
    monkeypatch.setattr(module, "verify", lambda s: checked.append(s) or verify(s))
    x = np.random.default_rng(1).normal(size=100)
    value, grad = sg.value_and_grad(lambda x: np.sum(np.cumsum(x) * np.tanh(x[::-1])), backend=backend)(x)
    assert checked and value == pytest.approx(np.sum(np.cumsum(x) * np.tanh(x[::-1])), rel=1e-12)


def test_a_scatter_added_into_a_buffer_of_another_shape_is_refused():
    """np.sum(np.sum(x, axis=1)[index array]): the gradient is the scatter broadcast over a second
    axis; the planner added the (8,) scatter into the (8, 8) gradient's buffer (the loop VM left
    56 of 64 entries 0)."""
    x = np.random.default_rng(0).normal(size=(8, 8))
    f = lambda x: np.sum(np.sum(x, axis=1)[np.arange(8)[::-1]])  # noqa: E731
    for backend in ("python", "vm"):
        np.testing.assert_array_equal(sg.value_and_grad(f, backend=backend)(x)[1], np.ones((8, 8)))
    good = schedule(sg.value_and_grad(f, backend="vm").trace(x).compiled.program.roots)
    (scatter,) = next(s.nodes for s in good.steps if s.kind == "add")
    grad = good.outputs[-1]
    wrong = [Step("zero", (grad,)), Step("add", (scatter,))]
    with pytest.raises(ScheduleError, match=r"of shape \(8,\) into the buffer of .* of shape \(8, 8\)"):
        verify(Schedule(good.outputs[-1:], good.order, wrong, {scatter: grad}))


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_scatters_the_rest_of_a_gradient_also_reads_keep_buffers_of_their_own(backend):
    """Two soak programs (abs through a permutation, and a reversed pad): the gradient's tensor is
    adj + where(w == 0, 0, -sign(w) * adj) with adj the sum of two scatters. The scatters were added into
    the tensor's buffer after its other terms, which read them: the checker refused the schedule
    (ScheduleError: reads ... before it is computed). Such scatters keep buffers of their own."""
    rng = np.random.default_rng(1910803889)
    w, x = rng.normal(size=(8, 8)), rng.normal(size=4)
    perm = np.random.default_rng(24).permutation(8)

    def f(w):
        v = (np.trace(w) + (w - np.abs(w)))[perm]
        return np.sum(np.tanh(v) * v)

    def g(x):
        v = np.pad(x - np.abs(x), (2, 3))
        v = v[np.arange(v.shape[0])[::-1]].reshape(3, -1)
        return np.sum(np.tanh(v) * v)

    for fn, arg in ((f, w), (g, x)):
        value, grad = sg.value_and_grad(fn, backend=backend)(arg)
        want_value, want_grad = sg.value_and_grad(fn, backend="python")(arg)
        assert value == pytest.approx(want_value, rel=1e-14)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("backend", ["vm", "c", "numba"])
def test_a_product_reads_a_scans_carries_of_one_number_where_they_are(backend):
    """GradBench's least squares: the powers t_i^j (np.cumprod under vmap: carries of shape (n, 1)) times x
    were copied into a matrix for BLAS, 16 MB a call at n = 16392. The product reads the scan's own array,
    its axis of one element dropped. Value and gradient against the closed form on each loop backend."""
    from symgrad.compile import c_backend
    from symgrad.gradbench.llsq import llsq
    from symgrad.gradbench.namespaces import SG

    if backend == "c" and not c_backend.available():
        pytest.skip("no C compiler")
    n, m = 64, 128
    vg = sg.jit(sg.value_and_grad(lambda x: llsq(SG, x, n)), backend=backend)
    x = np.random.default_rng(3).normal(size=m)
    value, grad = vg(x)
    steps = schedule(list(vg.exprs)).steps
    (dot,) = (s for s in steps if s.kind == "dot")
    assert "scan" in {a.args[0].op.name for a in dot.nodes[0].args[0].args[0].args}
    assert not [s for s in steps if s.kind == "fill" and any(np.prod(t.shape) >= n * m for t in s.nodes)]
    t = -1.0 + 2.0 * np.arange(n) / (n - 1)
    T = t[:, None] ** np.arange(m)
    r = T @ x - np.sign(t)
    assert value == pytest.approx(np.sum(r ** 2) / 2, rel=1e-12)
    np.testing.assert_allclose(grad, T.T @ r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["vm", "c", "numba"])
def test_a_reverse_scan_reads_the_carries_where_they_are_and_keeps_two_rows(backend):
    """GradBench's ODE, the gradient of y[-1]: the reverse scan stacked copies of the forward carries
    before and after each step (two arrays of steps x n), kept all its own carries (steps x 2n) where
    only the last is read, and started from a row of an array of steps x n zeros but the loss's one
    (48 MB of workspace at GradBench's size). Now the workspace is the forward carries and a few rows.
    Values against the interpreter, the gradient against central differences."""
    from symgrad.compile import c_backend
    from symgrad.gradbench.namespaces import SG
    from symgrad.gradbench.ode import ode

    if backend == "c" and not c_backend.available():
        pytest.skip("no C compiler")
    n, s = 64, 31
    loss = lambda x: ode(SG, x, s)[-1]  # noqa: E731
    x = np.random.default_rng(5).uniform(0.5, 1.5, n)
    f = sg.jit(sg.grad(loss), backend=backend)
    grad = f(x)
    np.testing.assert_allclose(grad, sg.jit(sg.grad(loss), backend="python")(x), rtol=1e-13)
    h = 1e-5 * np.eye(n)
    for k in (0, 31, 63):  # (y[-1] is a polynomial of degree 4 in each x_k: differences nearly exact)
        assert grad[k] == pytest.approx((loss(x + h[k]) - loss(x - h[k])) / 2e-5, rel=1e-7)
    planned = schedule([f.exprs])
    (scan,) = planned.last_only
    assert scan.payload[1] and scan.shape == (s + 1, 2 * n)  # (the carry's adjoint, then x's running sum)
    assert not [t for step in planned.steps for t in step.nodes if step.kind in ("fill", "zero")
                and np.prod(t.shape) >= s * n]
    assert _workspace(f.trace(x).compiled.program, backend) <= (s + 1) * n + 20 * n  # (was 6 (s + 1) n)


def test_rows_of_a_scan_read_but_its_last_are_refused_for_keeping_two():
    """A schedule keeping two rows of a reversed scan whose other rows are read is refused."""
    from symgrad.expr import scans

    t, j, k = sg.index("t", 5), sg.index("j", 64), sg.index("k", 64)
    h, r = scans.placeholder((64,)), scans.placeholder((64,))
    rows = sg.tensor(sg.sin(sg.array("x", (5, 64))[t, j]), t, j)
    node = scans.make(sg.tensor(sg.tanh(h[k]) * r[k], k), h, sg.array("c", 64), [(r, rows)], [], reverse=True)
    only_last = schedule([sg.sum(node[0, k], k)])
    assert only_last.last_only == {node}
    every = schedule([sg.sum(node[1, k] + node[0, k], k)])
    assert not every.last_only
    with pytest.raises(ScheduleError, match="but its last are read"):
        verify(Schedule(every.outputs, every.order, every.steps, every.home, every.fused, {node}))


@pytest.mark.parametrize("backend", ["vm", "c", "numba"])
def test_a_forward_scan_read_at_its_last_carry_alone_runs_reversed_over_its_rows_reversed(backend):
    """A simulation's final state (``sg.scan`` forward, its last carry read): the compiled loops kept every
    carry, steps x state. The plan runs it reversed over its rows reversed (read in place, backwards), and
    the loops keep two rows. Over a slice of an argument, its reverse, and no rows (``length=``); chained."""
    from symgrad.compile import c_backend

    if backend == "c" and not c_backend.available():
        pytest.skip("no C compiler")

    def step(h, r):
        return np.tanh(0.9 * h + r[:70]) + 0.1 * h[::-1], None

    def f(X, c):
        h, _ = sg.scan(step, c, X[1:])
        h, _ = sg.scan(step, h, X[::-1])
        h, _ = sg.scan(lambda h, _: (np.cos(h) * 0.5 + h[::-1] * 0.25, None), h, length=17)
        return h[3] + h * np.sum(X)

    rng = np.random.default_rng(4)
    X, c = rng.normal(size=(40, 70)), rng.normal(size=70)
    jitted = sg.jit(f, backend=backend)
    np.testing.assert_allclose(jitted(X, c), sg.jit(f, backend="python")(X, c), rtol=1e-13, atol=1e-13)
    planned = schedule([jitted.exprs])
    assert len(planned.last_only) == 3  # (fills: X's sum, and each scan's initial carry: rows of 70)
    assert all(np.prod(t.shape) <= 70 for s in planned.steps if s.kind == "fill" for t in s.nodes)
    assert _workspace(jitted.trace(X, c).compiled.program, backend) <= 24 * 70  # (every carry: over 97 x 70)


def _workspace(program, backend: str) -> int:
    """The floats of workspace a loop program takes on ``backend``."""
    from symgrad.compile import loop_vm

    return int(loop_vm.lower(program)["dims"][2]) if backend == "vm" else program.parts.work
