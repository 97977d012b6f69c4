"""Rolled expressions compiled to Numba loops and run on the loop VM: values and gradients equal the
interpreter's."""

import itertools
import re
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rolled_graphs import nested_sums

import symgrad as sg
from symgrad.compile import c_backend, cache, loop_source
from symgrad.compile.kernels import REGISTRY, Backend
from symgrad.expr.rolled import array, index, reduce, subscript, table, tensor


def _check(f, arrays: dict, scalars: dict):
    """Compile f and its gradient wrt every array and scalar; compare with the interpreter."""
    wrt = [*arrays, *(sg.Var(n) for n in scalars)]
    grads = sg.grad(f, wrt)
    vg = sg.value_and_grad(f, wrt, backend="numba")
    x = np.concatenate([np.ravel(v) for v in arrays.values()] + [np.array(list(scalars.values()), dtype=float)])
    want = sg.evaluate([f, *grads], {**arrays, **scalars})
    value, gradient = vg(x)
    assert value == pytest.approx(want[0], rel=1e-13, abs=1e-13)
    np.testing.assert_allclose(gradient, np.concatenate([np.ravel(w) for w in want[1:]]), rtol=1e-12, atol=1e-12)
    module = cache.load(f"loops_{vg.program.key}", vg.program.source)
    out = np.empty_like(gradient)
    assert module.kernel(x, np.empty(0), out, np.full(module.WORK, np.nan)) == value  # a dirty workspace:
    np.testing.assert_array_equal(out, gradient)  # every temporary is written before it is read
    on_vm = sg.value_and_grad(f, wrt, backend="vm")(x)
    assert on_vm[0] == pytest.approx(want[0], rel=1e-13, abs=1e-13)  # the VM sums in another order
    np.testing.assert_allclose(on_vm[1], gradient, rtol=1e-12, atol=1e-12)
    return vg.source.split("def point")[0]  # the loop kernel


def _loop_bodies(source: str, trips: str) -> list[str]:
    """The bodies of the kernel's loops over ``range(n)`` for n matching the pattern ``trips``."""
    lines = source.split("def point")[0].splitlines()
    bodies = []
    for k, line in enumerate(lines):
        if re.fullmatch(rf"\s*for \w+ in range\(({trips})\):", line):
            depth = len(line) - len(line.lstrip())
            bodies.append("\n".join(itertools.takewhile(lambda b, d=depth: len(b) - len(b.lstrip()) > d,
                                                       lines[k + 1:])))
    return bodies


def test_rosenbrock_value_and_gradient_in_one_fused_loop_each():
    n = 50
    x, i = array("x", n), index("i", n - 1)
    f = reduce("sum", 100 * (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2 + (1 - subscript(x, i)) ** 2, i)
    text = _check(f, {x: np.linspace(-1, 1.2, n)}, {})
    assert f"range({n - 1})" in text  # the value's loop
    # The gradient's: its first and last iterations (x[i - 1], x[i + 1] outside x) apart, as they are
    # (the guarded neighbour loads clamped, not out of bounds), and the main loop over the others
    # specialised to them: no clamp, no test (LLVM vectorises it, peeling nothing).
    assert text.count("for ") == 4 and "range(0, 1)" in text and f"range({n - 1}, {n})" in text
    main = text.split(f"range({n - 2}):")[1].split("for ")[0]
    assert "min(max(" in text and "min(max(" not in main and "select" not in main


def test_an_mlp_with_tensors_reductions_max_and_a_scalar():
    rng = np.random.default_rng(0)
    A, v, i, j = array("A", (4, 3)), array("v", 3), index("i", 4), index("j", 3)
    h = tensor(sg.tanh(reduce("sum", subscript(A, (i, j)) * subscript(v, j), j) + sg.Var("b")), i)
    f = reduce("sum", subscript(h, i) ** 2, i) + reduce("max", subscript(h, i), i) * sg.Var("b")
    text = _check(f, {A: rng.normal(size=(4, 3)), v: rng.normal(size=3)}, {"b": 0.3})
    assert "math.tanh" in text


def test_tables_scatter_and_periodic_and_strided_addresses():
    rng = np.random.default_rng(1)
    x, i, j = array("x", 7), index("i", 3), index("j", 2)
    T = table([[0, 3], [3, 6], [6, 1]])
    f = reduce("sum", reduce("sum", sg.sin(subscript(x, subscript(T, (i, j)))) * (j + 1.0), j), i)
    f = f + reduce("sum", subscript(x, (i + 5) % 7) * subscript(x, 2 * i + 1), i)
    text = _check(f, {x: rng.normal(size=7)}, {})
    assert "+= " in text and "TABLE0" in text  # the gradient through the table is a scatter-add


def test_an_index_bound_again_inside_its_binder_gets_its_own_loop():
    x, y, i = array("x", 3), array("y", 3), index("i", 3)
    f = reduce("sum", subscript(x, i) * reduce("sum", subscript(y, i) * subscript(x, i), i), i)
    rng = np.random.default_rng(2)
    text = _check(f, {x: rng.normal(size=3), y: rng.normal(size=3)}, {})
    assert text.count("for ") >= 4


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(nested_sums(), st.data())
def test_random_nested_bodies_compile_to_the_interpreters_values(fAx, data):
    """Sparingly (each example compiles): random two-level bodies, value and gradients."""
    f, A, x = fAx
    A0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=A.size, max_size=A.size))).reshape(A.shape)
    x0 = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=x.size, max_size=x.size)))
    want = sg.evaluate([f, *sg.grad(f, [A, x])], {A: A0, x: x0})
    assume(all(np.all(np.isfinite(w)) for w in want))
    _check(f, {A: A0, x: x0}, {})


def test_repeated_outputs_are_each_written_and_bad_outputs_named():
    x, i = array("x", 4), index("i", 4)
    a, b = sg.symbols("a b")
    f = reduce("sum", subscript(x, i) ** 2, i) + a + b
    ga, gb = sg.grad(f, [a, b])  # both the constant 1: one node, two outputs
    (gx,) = sg.grad(f, [x])
    f4 = sg.compile([f, ga, gx, gb, gx], [x, a, b], backend="numba")
    x0 = np.arange(4.0)
    np.testing.assert_array_equal(f4(np.concatenate([x0, [0.5, 0.25]])), [14.75, 1.0, *(2 * x0), 1.0, *(2 * x0)])
    with pytest.raises(ValueError, match="depend on a, b, which are not among the inputs"):
        sg.compile(f, [x])
    with pytest.raises(ValueError, match="the first output must be a scalar"):
        loop_source.source([gx], [x, a, b])
    with pytest.raises(ValueError, match="a constant table is no output"):
        loop_source.source([f, table([1, 2])], [x, a, b])


def _fresh_program(salt: float):
    x, i = array("x", 50), index("i", 49)
    return reduce("sum", (subscript(x, i + 1) - subscript(x, i) ** 2) ** 2 * salt, i), x


def _rosen_like(v, salt):
    return np.sum((v[1:] - v[:-1] ** 2) ** 2) * salt


def test_auto_runs_on_the_vm_while_numba_compiles_then_numba_takes_over(numba_tier, monkeypatch):
    """Tiered compilation: the first result at once from the loop VM, the same numbers from Numba."""
    import pickle

    from symgrad.compile import function, loop_vm

    monkeypatch.setattr(loop_vm, "at_hand", lambda: True)
    salt = 1.0 + np.random.default_rng().random()  # a program not in the disk cache yet
    f, x = _fresh_program(salt)
    v = np.linspace(-1.0, 1.0, 50)
    vg = sg.value_and_grad(f, [x])
    assert vg.backend == "vm" and vg._final is not None
    first = vg(v)
    assert first[0] == pytest.approx(_rosen_like(v, salt), rel=1e-13)
    assert vg.ready().backend == "numba"
    again = vg(v)
    assert first[0] == again[0] and np.array_equal(first[1], again[1])
    unpickled = pickle.loads(pickle.dumps(vg))  # (tiered again: from the disk, C's first where it is there)
    assert unpickled.backend in ("c", "numba") and np.array_equal(unpickled(v)[1], first[1])
    monkeypatch.setattr(function, "TIERED", False)
    f2, x2 = _fresh_program(3.0 + np.random.default_rng().random())
    assert sg.value_and_grad(f2, [x2]).backend == "numba"


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
@pytest.mark.parametrize("vm_at_hand", [False, True])
def test_auto_runs_a_loop_program_on_the_c_compilers_kernels_before_numbas(numba_tier, monkeypatch, vm_at_hand):
    """With a C compiler the tiers are the loop VM (where compiled), the C kernels (gcc: a fraction of a
    second; a quick build first past QUICK_LINES, not here), then Numba's; each gives the interpreter's
    numbers, and a late tier never replaces a later one."""
    from symgrad.compile import loop_vm

    monkeypatch.setattr(loop_vm, "at_hand", lambda: vm_at_hand)
    monkeypatch.setattr(c_backend, "QUICK_LINES", 10 ** 9)
    salt = 7.0 + np.random.default_rng().random()
    f, x = _fresh_program(salt)
    v = np.linspace(-1.0, 1.0, 50)
    vg = sg.value_and_grad(f, [x])
    assert vg.backend == ("vm" if vm_at_hand else "c")
    assert [tier for tier, _ in vg._tiers] == (["c", "numba"] if vm_at_hand else ["numba"])
    first = vg(v)
    assert first[0] == pytest.approx(_rosen_like(v, salt), rel=1e-13)
    assert vg.ready("c").backend in ("c", "numba")
    on_c = vg(v)
    assert vg.ready().backend in ("c", "numba")  # (the faster on a sampled call: test below)
    on_final = vg(v)
    reference = sg.value_and_grad(f, [x], backend="python")(v)
    for got in (first, on_c, on_final):
        assert got[0] == pytest.approx(reference[0], rel=1e-13) and np.allclose(got[1], reference[1], rtol=1e-13)


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
@pytest.mark.parametrize("numba_faster", [False, True])
def test_numbas_kernels_replace_the_c_ones_only_where_faster_on_a_sampled_call(numba_tier, monkeypatch,
                                                                                 numba_faster):
    """The Numba tier is timed against the C kernels on the arguments of a call made on them (alternating,
    the best of each), and kept only where 5% faster; no call's arguments are kept afterwards."""
    from symgrad.compile import function, loop_vm, tiers

    monkeypatch.setattr(loop_vm, "at_hand", lambda: False)
    salt = 9.0 + np.random.default_rng().random()
    f, x = _fresh_program(salt)
    v = np.linspace(-1.0, 1.0, 50)
    gate = threading.Event()
    tiers.worker("numba").submit(gate.wait)  # (Numba's tier waits until a call was made on the C kernels)
    vg = sg.value_and_grad(f, [x])
    assert vg.backend == "c"
    vg(v)
    assert vg._sample[0] is v
    timed = function.Compiled._faster  # (timed as ever; the verdict forced)
    monkeypatch.setattr(function.Compiled, "_faster", lambda self, point: (timed(self, point), numba_faster)[1])
    gate.set()
    assert vg.ready().backend == ("numba" if numba_faster else "c") and vg._sample is function._TIMED
    vg(v)
    assert vg._sample is function._TIMED
    assert vg(v)[0] == pytest.approx(_rosen_like(v, salt), rel=1e-13)


def test_a_failed_background_compile_leaves_the_vm_running(numba_tier, monkeypatch):
    from symgrad.compile import loop_vm, tiers

    monkeypatch.setattr(loop_vm, "at_hand", lambda: True)
    monkeypatch.setattr(tiers, "C_TIER", False)
    monkeypatch.setitem(REGISTRY["loops"], "numba", Backend("numba", lambda program, roots: (_ for _ in ()).throw(
        MemoryError("LLVM"))))
    salt = 5.0 + np.random.default_rng().random()
    f, x = _fresh_program(salt)
    with pytest.warns(UserWarning, match=r"compiling a loop program failed \(MemoryError: LLVM\); it runs on the"):
        vg = sg.value_and_grad(f, [x]).ready()
    v = np.linspace(-1.0, 1.0, 50)
    assert vg.backend == "vm" and vg(v)[0] == pytest.approx(_rosen_like(v, salt), rel=1e-13)
    import pickle

    with pytest.warns(UserWarning, match="compiling a loop program failed"):  # (tiered again where it lands)
        assert pickle.loads(pickle.dumps(vg)).ready().backend == "vm"


def test_a_cheap_tensor_read_only_in_loops_over_its_indices_is_computed_there():
    """A tensor of a few operations (no transcendental), read element by element by a reduction over its
    indices and by another tensor over them, is computed in both loops, not stored and read back (lse's
    softmax); read inside a loop over another index as well, it would be computed again for each value
    of that index: stored. Values against the interpreter on the VM and Numba's loops."""
    from symgrad.compile.plan import plan
    from symgrad.expr.traverse import topo_order

    rng = np.random.default_rng(5)
    X, y = array("X", (6, 7)), array("y", 7)
    i, j, k = index("i", 6), index("j", 7), index("k", 7)
    t = tensor(subscript(X, (i, j)) * subscript(y, j) + 1.0, i, j)
    total = reduce("sum", reduce("sum", subscript(t, (i, j)) ** 2, j), i)
    g = tensor(subscript(t, (i, j)) * total, i, j)
    crossed = reduce("sum", reduce("sum", reduce("sum", subscript(t, (i, j)) * subscript(y, k), k), j), i)

    def stored(outputs):
        planned, _ = plan(outputs)
        return [n for n in topo_order(planned) if n.op.name == "tensor" and n.shape == (6, 7)
                and all(n is not p for p in planned)]

    assert stored([total, g]) == [] and len(stored([total, g, crossed])) == 1
    values = {X: rng.normal(size=(6, 7)), y: rng.normal(size=7)}
    x = np.concatenate([values[X].ravel(), values[y]])
    want = np.concatenate([np.ravel(w) for w in sg.evaluate([total, crossed, g], values)])
    for backend in ("vm", "numba"):
        np.testing.assert_allclose(sg.compile([total, crossed, g], [X, y], backend=backend)(x), want, rtol=1e-13)


def test_sums_down_columns_add_row_by_row_in_the_same_order():
    """t[j, k] = sum(body(i, j, k), i) over 12 rows is filled as a scatter adding row after row
    (k innermost, contiguous): each element's additions in the interpreter's order, so the
    numba loops and the VM give the interpreter's numbers to the last bit."""
    rng = np.random.default_rng(2)
    A, w = array("A", (12, 3, 5)), array("w", 12)
    i, j, k = index("i", 12), index("j", 3), index("k", 5)
    a = subscript(A, (i, j, k))
    t = tensor(reduce("sum", sg.where(a > 0, a ** 2, -a) * subscript(w, i), i), j, k)
    f = reduce("sum", reduce("sum", sg.sin(subscript(t, (j, k))), k), j)
    values = {A: rng.normal(size=(12, 3, 5)), w: rng.normal(size=12)}
    _check(f, values, {})
    x = np.concatenate([values[A].ravel(), values[w]])
    want = sg.evaluate(t, values)
    assert "t3[i5, i6] += " in sg.compile([f, t], [A, w], backend="numba").source  # k innermost, i outside
    for backend in ("numba", "vm"):
        got = sg.compile([f, t], [A, w], backend=backend)(x)
        np.testing.assert_array_equal(got[1:].reshape(3, 5), want)


def test_a_sum_strided_down_a_column_and_contiguous_across_the_output_adds_row_by_row():
    """t[k, l] = sum(w[i, k] * (v[k, l] + w[i, k]), i) (k-means' Hessian diagonal was
    sum(w[i, k] * v[k, l], i), which the plan now factors): w's column read with a stride of w's row
    inside the loop over l, again for each l; as a scatter adding row after row (l innermost, w[i, k]
    once per (i, k)) each element still adds the same terms in the same order: the interpreter's
    numbers to the last bit."""
    rng = np.random.default_rng(3)
    W, V = array("W", (40, 6)), array("V", (6, 5))
    i, k, m = index("i", 40), index("k", 6), index("m", 5)
    w = subscript(W, (i, k))
    t = tensor(reduce("sum", 2.0 * w * (subscript(V, (k, m)) + w), i), k, m)
    values = {W: rng.normal(size=(40, 6)), V: rng.normal(size=(6, 5))}
    x = np.concatenate([values[W].ravel(), values[V].ravel()])
    want = sg.evaluate(t, values)
    for backend in ("c", "vm"):
        compiled = sg.compile([t], [W, V], backend=backend)
        if backend == "c":
            assert "+=" in compiled.source
        np.testing.assert_array_equal(compiled(x).reshape(6, 5), want)
    sums = values[W].sum(0)[:, None], (values[W] ** 2).sum(0)[:, None]
    np.testing.assert_allclose(want, 2 * (sums[0] * values[V] + sums[1]), rtol=1e-13)


def test_a_reduction_inside_loops_it_does_not_vary_over_is_computed_once():
    """k-means' gradient: the min over clusters of each point's distance, read inside a sum over the
    points of a tensor over the clusters (loops: cluster, then point). Computed where it was read, it
    cost clusters x points x clusters; the plan stores it once per point (a tensor over the points),
    and the values stay the interpreter's."""
    from symgrad.compile.plan import plan

    P, C = sg.array("P", (300, 4)), sg.array("C", (20, 4))
    w, u, k = sg.index("w", 300), sg.index("u", 20), sg.index("k", 4)
    d = sg.sum((P[w, k] - C[u, k]) ** 2, k)
    cost = sg.sum(sg.min(d, u), w)
    g = sg.grad(cost, [C])[0]
    outputs, _ = plan([g])
    order = sg.expr.traverse.topo_order(outputs)
    stored = [n for n in order if n.op.name == "tensor" and n.args[0].op.name == "min"]
    assert [t.shape for t in stored] == [(300,)]
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=1200), rng.normal(size=80)])
    want = sg.compile(g, [P, C], backend="python")(x)
    for backend in ("vm", "numba"):
        np.testing.assert_allclose(sg.compile(g, [P, C], backend=backend)(x), want, rtol=1e-12, atol=1e-12)
    points, centers = x[:1200].reshape(300, 4), x[1200:].reshape(20, 4)
    near = np.argmin(((points[:, None] - centers[None]) ** 2).sum(2), axis=1)
    by_hand = np.array([-2 * (points[near == c] - centers[c]).sum(0) for c in range(20)])
    np.testing.assert_allclose(want.reshape(20, 4), by_hand, rtol=1e-12, atol=1e-12)


def test_a_loop_runs_its_main_range_with_the_tests_on_its_index_settled():
    """A shift written with concatenate (``y = [1, x[:-1]]``, as an ODE's right-hand side is): read
    through ``where(i < 1, one[i], x[i - 1])``, each element tests its index and reads both sides
    clamped. The main loop (i >= 1, one range past the boundary iterations) runs the body with the
    test settled, reading x[i - 1] only (an RK4 step of GradBench's ODE: 370 -> 46 us on 10^4
    entries); the values are the interpreter's and the VM's."""
    import symgrad.numpy as jnp

    def rate(x, y):
        return x * jnp.concatenate([jnp.ones(1), y[:-1]])

    def ode(x):
        y = jnp.zeros(x.shape)
        for _ in range(3):
            k1 = rate(x, y)
            k2 = rate(x, y + 0.05 * k1)
            y = y + 0.1 * (k1 + k2)
        return jnp.sum(y * y)

    x = np.random.default_rng(4).normal(size=200)
    want = sg.value_and_grad(ode, backend="python")(x)
    vg = sg.value_and_grad(ode, backend="numba")
    got = vg(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(got[1]), sg.value_and_grad(ode, backend="vm")(x)[1])  # same bits
    # the main loops (the others: 1 to 6 long), or their blocks of 8 where a long sum rides along
    mains = _loop_bodies(vg.compiled.source, r"19\d|8")
    assert mains and all("select" not in m and "min(max(" not in m for m in mains)


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_a_remainder_or_quotient_by_an_index_that_may_be_zero_follows_numpys_floats(backend):
    """``1 % j`` and ``1 // j`` at j = 0 are nan and inf, as NumPy's floats give (the compiled loops computed them
    in integers: 0, so ``where(1 % j >= 0, 1, 0)`` was 1 there, 0 in the interpreter; found by
    test_hostile's mutated documents)."""
    j = index("j", 4)
    outputs = [tensor(sg.where((1 % j) >= 0, 1.0, 0.0), j), tensor(1 // j + 0.5 * j, j)]
    x = array("x", 1)
    want = np.concatenate([np.ravel(v) for v in sg.evaluate(outputs, {x: np.zeros(1)})])
    got = sg.compile(outputs, [x], backend=backend)(np.zeros(1))
    np.testing.assert_array_equal(got, want)
    assert got[0] == 0.0 and got[4] == np.inf


def test_each_part_of_a_concatenation_runs_in_a_loop_of_its_own():
    """``np.concatenate`` of three parts is a tensor whose body picks a part by comparing its index
    (``where(i < 79, x[i + 1] * x[i], ...)``): each part's run (16 or more iterations between the
    points where a comparison flips or a read leaves its array) is a loop with the comparisons
    settled and no clamped reads, not only the longest (an ODE's reverse step, whose carry packs the
    carry's adjoint beside the rates': half its elements ran both parts, 31 -> 12 ms)."""
    import symgrad.numpy as jnp

    def f(x, y):
        return jnp.concatenate([x[1:] * x[:-1], jnp.sin(y[2:]), y[:30] * 2.0]) * 3.0

    rng = np.random.default_rng(5)
    x, y = rng.normal(size=80), rng.normal(size=90)
    jf = sg.jit(f, backend="numba")
    got = jf(x, y)
    np.testing.assert_allclose(got, np.concatenate([x[1:] * x[:-1], np.sin(y[2:]), y[:30] * 2.0]) * 3.0,
                               rtol=1e-15)
    np.testing.assert_array_equal(got, sg.jit(f, backend="vm")(x, y))
    runs = _loop_bodies(jf.compiled.source, "79|87|30")
    assert len(runs) == 3 and all("select" not in body and "min(max(" not in body for body in runs)


def test_a_large_workspace_comes_from_python_kept_per_thread(monkeypatch):
    """A kernel whose temporaries take ``kernels.OWN_WORK`` floats or more gets its workspace from
    Python, a spare one kept per thread (Numba's allocator took 48 MB from the OS on every call of an
    ODE's gradient, a page fault per page: 20 ms of 32): same values, from threads at once too."""
    import threading

    from numba.core.registry import CPUDispatcher

    from symgrad.compile import kernels

    def f(w, xs):
        h, _ = sg.scan(lambda h, x: (np.tanh(w * h + x), None), np.zeros(3), xs)
        return np.sum(h ** 2)

    w, xs = 0.7, np.random.default_rng(2).normal(size=(40, 3))
    want = sg.value_and_grad(f, backend="numba")(w, xs)
    monkeypatch.setattr(kernels, "OWN_WORK", 16)
    vg = sg.value_and_grad(f, backend="numba")
    got = vg(w, xs)
    assert not isinstance(vg.compiled._point, CPUDispatcher) and "take(WORK)" in vg.compiled.source
    assert got[0] == want[0] and got[1] == want[1]
    results = [None] * 4

    def call(k):
        results[k] = [vg(w * (1 + k / 10), xs) for _ in range(20)]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, rows in enumerate(results):
        alone = sg.value_and_grad(f, backend="vm")(w * (1 + k / 10), xs)
        for value, g in rows:
            assert value == pytest.approx(alone[0], rel=1e-13) and g == pytest.approx(alone[1], rel=1e-12)


def test_a_stack_raveled_runs_each_layer_in_a_loop_of_its_own():
    """``np.stack`` of three layers raveled is read through ``where(i // 14 < 1, ...)``: the floor
    division's flips (i = 14, 28) cut the loop, each layer's run has the tests settled (an LSTM's carry
    packed after each step)."""
    import symgrad.numpy as jnp

    def f(x):
        return jnp.stack([jnp.sin(x[:14]), x[14:28] * 2.0, jnp.exp(x[28:42])]).ravel() + 1.0

    x = np.random.default_rng(6).normal(size=70)
    jf = sg.jit(f, backend="numba")
    got = jf(x)
    np.testing.assert_allclose(got, np.concatenate([np.sin(x[:14]), x[14:28] * 2.0, np.exp(x[28:42])]) + 1.0,
                               rtol=1e-15)
    runs = _loop_bodies(jf.compiled.source, "14")
    assert len(runs) == 3 and all("select" not in body and "min(max(" not in body for body in runs)


def _loops_around(source: str, needle: str) -> list[list[str]]:
    """For each kernel line containing ``needle``, the ``for`` lines of the loops around it."""
    lines, found = source.split("def point")[0].splitlines(), []
    for k, line in enumerate(lines):
        if needle in line:
            depth, around = len(line) - len(line.lstrip()), []
            for above in reversed(lines[:k]):
                d = len(above) - len(above.lstrip())
                if d < depth and above.lstrip().startswith("for "):
                    around.append(above.strip())
                    depth = d
            found.append(around)
    return found


def test_a_table_gather_is_stored_once_and_a_scattered_sum_adds_row_by_row():
    """GMM's lower triangles (``zeros.at[:, rows, cols].set(ltri)``) are read through a table of
    positions inside each point's product: the gather is stored once before the loop over points,
    not repeated for each; their gradient is a sum over the points that a scatter adds into ltri:
    stored first, added row by row (j innermost), not each entry summing its column alone, strided
    (GradBench's GMM gradient: 6.4 -> 4.0 ms). Values: the VM's and finite differences'."""
    import symgrad.numpy as snp

    d, k, n = 5, 3, 200
    rows, cols = np.triu_indices(d, 1)

    def f(ltri, x):
        lower = snp.zeros((k, d, d)).at[:, rows, cols].set(ltri)
        return snp.sum(snp.einsum("kij,nj->nki", lower, x) ** 2)

    rng = np.random.default_rng(0)
    ltri, x = rng.normal(size=(k, d * (d - 1) // 2)), rng.normal(size=(n, d))
    g = sg.jit(sg.grad(f), backend="numba")
    got = g(ltri, x)
    np.testing.assert_allclose(got, sg.jit(sg.grad(f), backend="vm")(ltri, x), rtol=1e-13)
    lower = np.zeros((k, d, d))
    lower[:, rows, cols] = ltri
    want = 2 * np.einsum("kil,nl,nj->kij", lower, x, x)[:, rows, cols]  # d/dL sum((L x)^2) = 2 (L x) x^T
    np.testing.assert_allclose(got, want, rtol=1e-12)
    source = g.compiled.source
    assert not any("range(200)" in line for around in _loops_around(source, "TABLE0[") for line in around)
    assert any(around and "range(200)" in around[-1] for around in _loops_around(source, "] += "))


def test_a_contraction_batched_over_an_index_of_both_factors_is_one_blas_product_per_batch():
    """GMM's ``einsum("kij,nkj->nki", L, x[:, None] - mu)``: k, which both factors vary over, is a batch,
    one np.dot per cluster (it was a loop nest four deep, testing L's mask at every point); so are the
    gradient's contractions, guarded ones ``where(m, 0, a*b)`` too (a logsumexp over the clusters,
    whose partials may be inf). Values and gradients: the interpreter's and finite differences'."""
    import symgrad.numpy as snp

    d, k, n = 6, 4, 300
    rows, cols = np.triu_indices(d, 1)

    def f(mu, ltri, x):
        lower = snp.zeros((k, d, d)).at[:, rows, cols].set(ltri)
        centred = x[:, None, :] - mu[None]
        qx = snp.exp(mu)[None] * centred + snp.einsum("kij,nkj->nki", lower, centred)
        beta = -0.5 * snp.sum(qx * qx, axis=2)
        top = snp.max(beta, axis=1, keepdims=True)
        return snp.sum(snp.log(snp.sum(snp.exp(beta - top), axis=1)) + top[:, 0])

    rng = np.random.default_rng(4)
    mu, ltri, x = rng.uniform(size=(k, d)), 0.3 * rng.normal(size=(k, d * (d - 1) // 2)), rng.normal(size=(n, d))
    want = sg.value_and_grad(f, argnums=(0, 1), backend="python")(mu, ltri, x)
    for backend in ("vm", "numba"):
        g = sg.jit(sg.value_and_grad(f, argnums=(0, 1)), backend=backend)
        value, grads = g(mu, ltri, x)
        assert value == pytest.approx(want[0], rel=1e-12)
        for got, w in zip(grads, want[1]):
            np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-10)
    h, e = 1e-6, np.zeros_like(ltri)
    e[2, 5] = h
    fd = (f(mu, ltri + e, x) - f(mu, ltri - e, x)) / (2 * h)
    assert grads[1][2, 5] == pytest.approx(float(fd), rel=1e-6)
    batched = _loops_around(g.compiled.source, "np.dot(")
    assert len(batched) >= 2 and all(len(a) == 1 and a[0].endswith(f"in range({k}):") for a in batched)


@pytest.mark.parametrize("lower", ["finite", "may be nan"])
def test_a_sum_over_points_of_products_with_a_factor_fixed_over_them_sums_the_points_first(lower):
    """GMM's gradient for the means: over the points n, minus L[k]^T times each point's adjoint, each
    guarded ``where(g[n, k] == 0, 0, .)``: planned as L[k]^T times the guarded adjoints summed over the
    points (one product for all of them, not one for each), where L is finite; L = sqrt(...), which may
    be nan, keeps the guard outside (0 where masked, not 0 * nan). Values: the interpreter's."""
    from symgrad.compile.plan import plan

    L, G, W = sg.array("L", (3, 5, 4)), sg.array("G", (200, 3, 5)), sg.array("W", (200, 3))
    n, k, i, j = sg.index("n", 200), sg.index("k", 3), sg.index("i", 5), sg.index("j", 4)
    a = L[k, i, j] if lower == "finite" else sg.sqrt(L[k, i, j])
    term = sg.where(sg.eq(W[n, k], 0.0), 0.0, -sg.sum(a * G[n, k, i], i))
    t = sg.tensor(sg.sum(term, n), k, j)
    outputs, _ = plan([t])
    nested = [s for s in sg.expr.traverse.topo_order(outputs) if s.op.name == "sum" and s.args[1] is n
              and any(b.op.name == "sum" for b in sg.expr.traverse.topo_order([s.args[0]]))]
    assert bool(nested) == (lower != "finite")
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(size=60), rng.normal(size=3000), rng.integers(0, 2, size=600)])
    want = sg.compile([t], [L, G, W], backend="python")(x)
    assert np.isnan(want).any() == (lower != "finite")
    for backend in ("vm", "numba"):
        np.testing.assert_allclose(sg.compile([t], [L, G, W], backend=backend)(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fixed", ["finite", "may be nan"])
def test_a_factor_a_sum_does_not_vary_over_multiplies_the_sum_once(fixed):
    """k-means' Hessian diagonal: over the points w, each centroid's tangent T[u, k] times the point's
    weight M[w, u], multiplied points x clusters x dimensions. Planned as T[u, k] times the weights
    summed over the points (stored once per cluster), where T is finite; sqrt(T), which may be nan,
    stays inside (0 * nan summed, as the interpreter does). Values: the interpreter's."""
    from symgrad.compile.plan import plan

    T, M = sg.array("T", (20, 4)), sg.array("M", (300, 20))
    w, u, k = sg.index("w", 300), sg.index("u", 20), sg.index("k", 4)
    a = T[u, k] if fixed == "finite" else sg.sqrt(T[u, k])
    t = sg.tensor(sg.sum(2.0 * (M[w, u] * a), w), u, k)
    outputs, _ = plan([t])
    order = sg.expr.traverse.topo_order(outputs)
    per_point = [n for n in order if n.op.name in ("sum", "scatter") and k in n.free | set(n.args[1:])
                 and any(b.op.name == "load" and b.args[0] is M for b in sg.expr.traverse.topo_order([n.args[0]]))]
    assert bool(per_point) == (fixed != "finite")
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(size=80), (rng.random(6000) < 0.1) * 1.0])
    want = sg.compile([t], [T, M], backend="python")(x)
    assert np.isnan(want).any() == (fixed != "finite")
    weights = x[80:].reshape(300, 20).sum(0)
    if fixed == "finite":
        np.testing.assert_allclose(want.reshape(20, 4), 2.0 * x[:80].reshape(20, 4) * weights[:, None], rtol=1e-13)
    from symgrad.compile import c_backend

    for backend in ("vm", "numba", *(["c"] if c_backend.available() else [])):
        np.testing.assert_allclose(sg.compile([t], [T, M], backend=backend)(x), want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [1003, 200])
def test_a_long_sum_adds_into_eight_accumulators_with_the_same_bits_on_the_vm(n):
    """A sum of ``INTERLEAVED_MIN`` or more elements at a kernel's top level adds element k into
    accumulator k % 8, in blocks of 8 that LLVM vectorises (strictly in order, each addition waits on
    the one before: a sum of 1.28M 0.64 -> 0.19 ms), alone, riding along a loop filling the
    gradient, and through a loop specialised from an offset (a concatenation's boundary). The loop
    VM adds its lanes the same way: the same bits; whole and split into pieces; the interpreter's
    values to rounding."""
    import symgrad.numpy as jnp

    from symgrad.compile import pieces

    def f(x):
        y = x * jnp.concatenate([jnp.ones(1), x[:-1]])
        return jnp.sum(jnp.exp(x - jnp.max(x))) + jnp.sum(y * y) + jnp.sum(x[3:] * x[:-3])

    x = np.random.default_rng(n).normal(size=n)
    want = sg.value_and_grad(f, backend="python")(x)
    vm = sg.value_and_grad(f, backend="vm")(x)
    vg = sg.value_and_grad(f, backend="numba")
    with pieces.sized(0, 25):  # (six pieces: each a Numba function compiled on its own)
        split = sg.value_and_grad(f, backend="numba")
        got_split = split(x)
    assert "def piece3(" in split.compiled.source
    for got in (vg(x), got_split):
        assert got[0] == vm[0]
        np.testing.assert_array_equal(got[1], vm[1])
    assert vm[0] == pytest.approx(want[0], rel=1e-13)
    np.testing.assert_allclose(vm[1], want[1], rtol=1e-12, atol=1e-12)
    assert len(_loop_bodies(vg.compiled.source, "8")) >= 3
    assert sum(line.strip().endswith("] = 0.0") for line in vg.compiled.source.splitlines()) >= 3


def test_a_sum_of_a_tensor_rides_along_the_loop_filling_it():
    """log-sum-exp's gradient: the exponentials are stored (the gradient reads them twice), and their sum,
    which read them back in a loop of its own, is added in the loop storing them, each element as it is
    stored (lse of 1.28M: 3.5 -> 3.1 ms); a tensor read once where it is computed is computed there
    (3.1 -> 2.8 ms); so is the softmax, exponential / sum, in the two loops reading it (its sum, the
    gradient), not stored and read back. The VM's bits, the interpreter's values."""
    def lse(x):
        top = np.max(x)
        return np.log(np.sum(np.exp(x - top))) + top

    x = np.random.default_rng(7).normal(size=3000)
    want = sg.value_and_grad(lse, backend="python")(x)
    vm = sg.value_and_grad(lse, backend="vm")(x)
    vg = sg.value_and_grad(lse, backend="numba")
    got = vg(x)
    assert got[0] == vm[0] == pytest.approx(want[0], rel=1e-13)
    np.testing.assert_array_equal(got[1], vm[1])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)
    blocks = _loop_bodies(vg.compiled.source, "8")
    stored_and_summed = [b for b in blocks if re.search(r"t\d+\[i\d+\] = v", b)
                         and re.search(r"(t\d+)\[(i\d+)\] = \1\[\2\] \+", b)]
    assert len(stored_and_summed) == 1
    # the gradient, softmax plus the max's ties, computed in its loop: neither the ties' tensor (read
    # once) nor the softmax (cheap: the exponentials times a scalar) is stored; the exponentials are
    kernel = vg.compiled.source.split("def point")[0]
    assert len(set(re.findall(r"work\[\d+:\d+\]\.reshape\(\(3000,\)\)", kernel))) == 1


def test_background_compiles_wait_for_the_foreground_builds(numba_tier):
    """A background compile queued during compile.tiers.building() starts only once the build ends
    (building the next kernels while Numba compiled the first ones took twice as long)."""
    import time

    from symgrad.compile.tiers import building

    x, y = sg.symbols("x y")
    c = sg.compile(x * y + sg.sin(x), [x, y], backend="vm")
    started = []

    def make():
        started.append(time.perf_counter())
        return c.program.kernels("vm")

    with building():
        c._upgrade(("numba", make))
        time.sleep(0.2)  # (the compile waits 2 s at most: it cannot have started here)
        assert not started
        ended = time.perf_counter()
    c.ready()
    assert started and started[0] >= ended
    assert c([2.0, 3.0]) == 6.0 + np.sin(2.0)


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
def test_two_scatters_into_one_gradient_add_in_the_same_order_on_every_loop_backend():
    """The gradient of two rolls along different axes scatters twice into one array (an independent
    tester's case): the loop VM, which runs a nest a block of lanes at a time, added the two in another
    order than the compiled loops (the last bit of 8 entries of 72); each scatter is a nest of its own."""
    x = np.random.default_rng(1).normal(size=(8, 9))

    def f(x):
        return np.sum((np.roll(x, 3, axis=1) + np.roll(x, -2, axis=0)) * x)

    got = {b: sg.jit(sg.grad(f), backend=b)(x) for b in ("vm", "numba", "c")}
    want = (np.roll(x, 3, axis=1) + np.roll(x, -2, axis=0) + np.roll(x, -3, axis=1) + np.roll(x, 2, axis=0))
    assert np.array_equal(got["vm"], got["numba"]) and np.array_equal(got["c"], got["numba"])
    np.testing.assert_allclose(got["vm"], want, rtol=1e-14, atol=1e-15)


def test_scatters_reaching_no_element_in_common_add_in_one_loop_on_every_backend():
    """The adjoint of ``sum(sin(x[i % 5]) * (i + 1) + x[i % 5 + 5]**2 * i)`` over i in 0..9 scatters into
    x's gradient twice, at ``i % 5`` and ``i % 5 + 5``: two disjoint boxes of addresses, so one loop nest
    adds both (an LSTM's gates: 42 loops fewer); the values and bits are the same on every backend, and
    those of two rolls, which may reach one element from different iterations, stay in nests of their own."""
    from symgrad.compile.schedule import schedule

    x, i = array("x", 10), index("i", 10)
    g = sg.grad(sg.sum(sg.sin(x[i % 5]) * (i + 1.0) + x[i % 5 + 5] ** 2 * i, i), [x])[0]
    adds = [len(step.nodes) for step in schedule([g]).steps if step.kind == "add"]
    assert adds == [2], adds
    v = np.random.default_rng(2).normal(size=10)
    k = np.arange(5)
    want = np.concatenate([np.cos(v[:5]) * (2 * k + 7), 2 * v[5:] * (2 * k + 5)])
    got = {b: sg.compile(g, [x], backend=b)(v) for b in ("vm", "numba", *(("c",) * c_backend.available()))}
    np.testing.assert_allclose(got["vm"], want, rtol=1e-14)
    for b in got:
        np.testing.assert_array_equal(got[b], got["vm"])

    y, j = array("y", 8), index("j", 8)
    rolled_twice = sg.grad(sg.sum(y[(j + 3) % 8] * y[j] + y[(j + 5) % 8] * y[j] ** 2, j), [y])[0]
    assert all(len(step.nodes) == 1 for step in schedule([rolled_twice]).steps if step.kind == "add")


def test_a_scatter_a_range_settles_to_zero_adds_no_loop_there():
    """A scatter over 56 entries of ``where(k // 14 < 1, sin(g[k]), 0) + where(k // 14 >= 3, g[k]**2, 0)``
    at ``k % 14`` (an LSTM gradient's gates, from a concatenation of four parts): its loop runs the first
    and last parts' 14 iterations, none adding 0.0 over the 28 between (57 such loops in the LSTM's), with
    the interpreter's values on every loop backend."""
    from symgrad.expr.rolled import scatter

    g, k = array("g", 56), index("k", 56)
    s = scatter(sg.where(k // 14 < 1, sg.sin(g[k]), 0.0) + sg.where(k // 14 >= 3, g[k] ** 2, 0.0), (k % 14,),
                (k,), (14,))
    v = np.linspace(-1, 1, 56)
    want = np.sin(v[:14]) + v[42:] ** 2
    np.testing.assert_allclose(sg.compile(s, [g], backend="python")(v), want, rtol=1e-15)
    for backend in ("vm", "numba", *(("c",) * c_backend.available())):
        np.testing.assert_array_equal(sg.compile(s, [g], backend=backend)(v), want)
    source = sg.compile(s, [g], backend="numba").source.split("def point")[0]
    assert "+= 0.0" not in source and re.findall(r"range\((\d+)\)", source) == ["14", "14"], source


def test_a_sum_riding_on_a_scatter_whose_adjoint_settles_to_zero_keeps_its_loop():
    """The fuzzer's reproducer: the gradient of ``sum(concatenate([w, w])[arange(8) // 2])``, whose second
    half is never read (its scatter's adjoint settles to 0) and whose value's sum rides in that scatter's
    nest: the nest lost its leading node and raised TypeError on every loop backend."""
    def f(x, w):
        return np.sum(np.concatenate([w, w])[np.arange(x.shape[0]) // 2])

    x, w = np.ones((8, 8)), np.linspace(-1, 1, 64)
    want = np.zeros(64)
    want[:4] = 2.0
    for backend in ("python", "vm", "numba", *(("c",) * c_backend.available())):
        value, grad = sg.value_and_grad(f, argnums=1, backend=backend)(x, w)
        assert value == pytest.approx(2 * w[:4].sum(), rel=1e-14)
        np.testing.assert_array_equal(grad, want)
