"""Programs the compiled loops (loop VM, Numba) once got silently wrong, each against the interpreter,
the element-by-element trace (its own graph: the oracle) and NumPy. Regression tests of issue 20."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.fuzz.oracle import element_trace

RNG = np.random.default_rng(7)
X, Y = RNG.normal(size=100), RNG.normal(size=80)
PERM, TABLE = RNG.permutation(180), RNG.integers(0, 180, size=70)


def _element(fn, args, argnums):
    with element_trace():
        return sg.value_and_grad(fn, argnums=argnums, backend="python")(*args)


def _agree(fn, args, backends=("python", "vm")):
    """Value and gradient on each backend equal the element trace's (1e-12 relative) and NumPy's value."""
    argnums = tuple(range(len(args)))
    want_value, want_grad = _element(fn, args, argnums)
    assert want_value == pytest.approx(fn(*args), rel=1e-12, abs=1e-12)
    want = np.concatenate([np.ravel(g) for g in want_grad])
    for backend in backends:
        value, grad = sg.value_and_grad(fn, argnums=argnums, backend=backend)(*args)
        got = np.concatenate([np.ravel(g) for g in grad])
        scale = max(1.0, np.abs(want).max())
        assert value == pytest.approx(want_value, rel=1e-12, abs=1e-12), backend
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale, err_msg=backend)


@pytest.mark.parametrize("clip", [
    lambda v: np.minimum(v, 0.0), lambda v: np.maximum(v, 0.0), lambda v: np.clip(v, -0.3, 0.4)])
def test_a_permuted_gather_through_min_max_clip(clip):
    """The gradient's tensor (what the product contributes) is an array the value reads too: the
    scatter of the gather's adjoint added into its buffer made the value twice the sum."""
    perm = PERM[PERM < 64]
    _agree(lambda x: np.sum(x * clip(x[perm])), (X[:64],), ("python", "vm", "numba"))


def test_a_gather_by_halves_with_two_arguments():
    _agree(lambda x, w: np.sum(np.tanh(x - w) * x[np.arange(x.shape[0]) // 2]), (X, X[::-1] * 0.5))


def test_the_readmes_scan_rnn_differentiates_at_every_width():
    """A gradient whose own tensor is an input array plus a scatter (the array was given the output's
    buffer: IndexError in the planner from a carry of 8 on)."""
    for width in (7, 8, 12):
        W, xs = RNG.normal(size=(width, width)) * 0.3, RNG.normal(size=(20, width))

        def rnn(W, xs):
            h, _ = sg.scan(lambda h, x: (np.tanh(W @ h + x), None), np.zeros(W.shape[0]), xs)
            return np.sum(h ** 2)

        _agree(rnn, (W, xs), ("python", "vm", "numba") if width == 8 else ("python", "vm"))


def test_an_input_plus_a_scatter_is_a_gradient_of_its_own():
    _agree(lambda x: np.sum(x ** 2 / 2) + np.sum(np.cos(x[TABLE % 100]) * Y[:70]), (X,))


@pytest.mark.parametrize("name", ["perm", "table", "halves", "2-d"])
def test_a_gather_through_concatenate(name):
    """A gather of a concatenation reads each part through a guarded load, whose address leaves the
    part where the other is read: the adjoint scatters only where the guard holds (was IndexError)."""
    fn = {"perm": lambda x, y: np.sum(np.concatenate([x, y])[PERM] * np.arange(180)),
          "table": lambda x, y: np.sum(np.concatenate([x, y])[TABLE] ** 2),
          "halves": lambda x, y: np.sum(np.concatenate([x, y])[np.arange(180) // 2] * np.concatenate([y, x])),
          "2-d": lambda x, y: np.sum(np.concatenate([x.reshape(10, 10)[:8], y.reshape(8, 10)], axis=1)
                                     [:, PERM[:16] % 20] ** 2)}[name]
    _agree(fn, (X, Y))


@pytest.mark.parametrize("fn", [sg.stop_gradient, sg.sigmoid, sg.relu, sg.softplus])
def test_sg_functions_apply_elementwise_to_rolled_arrays(fn):
    """sg.stop_gradient(x) of a traced array built one scalar node of the whole array (a SyntaxError
    in the generated loops, a broadcasting error in the interpreter)."""
    _agree(lambda x: np.sum(fn(x[3:]) * x[:-3] ** 2), (X,))


def test_sigmoid_of_a_slice_of_a_scan_carry():
    def f(x):
        c, _ = sg.scan(lambda c, r: (c * 0.5 + r, None), np.zeros(8), x.reshape(10, 10)[:, :8])
        return np.sum(sg.sigmoid(c[2:5]) * c[:3])

    _agree(f, (X,))


def test_a_scalar_op_refuses_a_whole_array():
    with pytest.raises(TypeError, match="sin.*whole array x"):
        sg.expr.ops.OPS["sin"](sg.array("x", 4))


def test_the_loop_vm_and_the_compiled_loops_give_the_same_bits():
    """backend="auto" answers from the loop VM and then from Numba's loops: one program, the same
    bits. Here: cubes (x*x*x both, not a pow call in one), reductions past a VM block of lanes
    (folded in order, not per lane), exp beside sin in one loop (the C library's exp in both),
    running sums, maxima, scatters, BLAS products."""
    def f(x):
        m = x.reshape(50, 100)
        return (np.sum(np.abs(x) ** 3) ** (1 / 3) + np.sum(np.sin(x) * np.exp(x / 4)) + np.mean(np.tanh(x) * x)
                + np.sum(np.cumsum(m, axis=1).cumsum(0) ** 3) * 1e-6 + np.max(x * np.cos(x))
                + np.sum(np.log1p(x[::3] ** 2) * x[1::3][::-1]) + np.sum((m ** 2 @ np.abs(x[:100])) ** 0.5)
                + np.sum(np.logaddexp(x[:2500], x[2500:])) + np.sum(sg.softplus(x) * sg.sigmoid(-x)))

    x = np.random.default_rng(5).normal(size=5000) * 2
    vg = sg.value_and_grad(f, backend="vm")
    program = vg.trace(x).compiled.program
    results = []
    for backend in ("vm", "numba"):
        out = np.empty(program.n_out)
        results.append((program.kernels(backend).kernel("point")(x, np.zeros(0), out), out))
    (value_vm, out_vm), (value_numba, out_numba) = results
    assert value_vm == value_numba
    np.testing.assert_array_equal(out_vm, out_numba)
    assert program.library  # (the library switch was exercised)
    value, grad = sg.value_and_grad(f, backend="python")(x)
    assert out_vm[0] == pytest.approx(value, rel=1e-12)  # (the value is the first output here)
    np.testing.assert_allclose(out_vm[1:], grad, rtol=1e-9, atol=1e-9)


def test_a_product_with_part_of_an_array_as_its_operand():
    """x[:100] of a 5000-element x in a matrix-vector product: BLAS was handed all of x (a ValueError
    from np.dot on the VM and in the compiled loops)."""
    x = np.random.default_rng(3).normal(size=5000)
    want = sg.value_and_grad(lambda x: np.sum(x.reshape(50, 100) ** 2 @ x[:100]), backend="python")(x)
    for backend in ("vm", "numba"):
        value, grad = sg.value_and_grad(lambda x: np.sum(x.reshape(50, 100) ** 2 @ x[:100]), backend=backend)(x)
        assert value == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(grad, want[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tangent", ["numpy", "traced"])
def test_jvp_inside_a_rolled_trace(tangent):
    """sg.jvp of a function of a traced array, its tangent a NumPy array or traced itself."""
    v = Y[:64] if tangent == "numpy" else None

    def f(x):
        t = v if v is not None else x[::-1] * 2.0
        return np.sum(sg.jvp(lambda a: np.sin(a) ** 2, (x,), (t,))[1] * x)

    x = X[:64]
    t = Y[:64] if tangent == "numpy" else x[::-1] * 2.0
    assert sg.jit(f)(x) == pytest.approx(np.sum(np.sin(2 * x) * t * x), rel=1e-12)
    _agree(f, (x,))


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")
@pytest.mark.parametrize("outer", [np.sin, np.tanh, np.square])
def test_a_nan_partial_in_an_untaken_branch_stays_out_of_the_gradient(outer):
    """where(x > 0.1, sqrt(x), 0): sqrt's derivative is nan where x < 0, which the branch never takes.
    The adjoint read through a materialised tensor hid the conditional zero from the rule that keeps
    the nan out (nan in half the rolled gradient; the element trace gave 0, as here)."""
    x = X[:64]
    f = lambda x: np.sum(outer(np.where(x > 0.1, np.sqrt(x), 0.0)))  # noqa: E731
    want = np.where(x > 0.1, (outer(np.sqrt(np.abs(x)) + 1e-7) - outer(np.sqrt(np.abs(x)) - 1e-7)) / 2e-7, 0.0) \
        * 0.5 / np.sqrt(np.abs(x))
    for backend in ("python", "vm"):
        grad = sg.value_and_grad(f, backend=backend)(x)[1]
        assert not np.isnan(grad).any()
        np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-8)
    _agree(f, (x,))


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")
def test_a_conditional_zero_read_through_a_table_stays_out_of_the_scatter():
    """where(x > .1, sqrt(x), 0)[3 * arange(n) % n]: the adjoint scatters through the table; the
    condition reads x at the same addresses, so it is a condition on the target, read outside the
    scatter (nan in half the gradient before: sqrt's partial times a scattered zero)."""
    x = X[:64]
    f = lambda x: np.sum(np.where(x > 0.1, np.sqrt(x), 0.0)[3 * np.arange(64) % 64])  # noqa: E731
    for backend in ("python", "vm"):
        grad = sg.value_and_grad(f, backend=backend)(x)[1]
        np.testing.assert_allclose(grad, np.where(x > 0.1, 0.5 / np.sqrt(np.abs(x)), 0.0), rtol=1e-14)
    _agree(f, (x,))


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")
@pytest.mark.parametrize("name", ["broadcast row", "self product", "minus a row"])
def test_a_masked_value_read_at_several_sites_keeps_nan_partials_out(name):
    """where(x > .1, sqrt(x), 0) read at two sites: its adjoint is a sum of two masked terms, which
    times sqrt's partial (nan where x < 0) was nan; found by symgrad.fuzz."""
    fn = {"broadcast row": lambda x: np.sum((v := np.where(x > 0.1, np.sqrt(x), 0.0)) * v[:1]),
          "self product": lambda x: np.sum((v := np.where(x > 0.1, np.sqrt(x), 0.0)).reshape(8, 8)
                                           @ v.reshape(8, 8).T),
          "minus a row": lambda x: np.sum((v := np.where(x > 0.1, np.sqrt(x), 0.0)) - v[:1] * v[1:2])}[name]
    x = X[:64]
    h, E = 1e-6, np.eye(64)
    with np.errstate(invalid="ignore"):
        want = np.array([(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in E])  # (flat where x < 0.1)
    for backend in ("python", "vm"):
        np.testing.assert_allclose(sg.value_and_grad(fn, backend=backend)(x)[1], want, rtol=1e-6, atol=1e-6)


def test_a_product_whose_operands_were_planned_again_stays_a_product():
    """A matrix product whose operand the planner rebuilt (a sum down columns made row by row) was
    turned into a scatter while still listed as a BLAS product (a KeyError in both compiled backends)."""
    x = np.random.default_rng(566368857).normal(size=64)

    def f(x):
        v = np.stack([1.0 + x ** 2, 1.0 + x ** 2], axis=1)
        return np.sum(np.sin(v @ v.T - np.sum(v @ v.T, axis=0)))

    _agree(f, (x,), ("python", "vm", "numba"))


def test_std_over_an_axis_of_one_element():
    """np.std over an axis of length 1 is identically 0: x - mean(x) folds (a reduction over one element
    is that element); its gradient was nan (sqrt's partial at 0 times a zero that did not fold)."""
    X2 = np.random.default_rng(2).random((1, 70))
    for backend in ("python", "vm"):
        np.testing.assert_array_equal(sg.grad(lambda X: np.sum(np.std(X, axis=0)), backend=backend)(X2),
                                      np.zeros((1, 70)))


@pytest.mark.parametrize("name", ["std of a constant scan carry", "std of a tied pair", "norm of zeros"])
def test_spread_and_norm_at_zero_have_derivative_zero(name):
    """np.std of equal entries and the norm of zeros: 0 (as |x| at 0, and as central differences) on
    every backend and traced element by element (the rolled trace gave nan or 0.5, the element trace 0
    where 0 * w folded; found by symgrad.fuzz)."""
    def scan_std(w):
        return np.std(sg.scan(lambda c, r: (c * r, None), np.zeros(4), w)[0])

    fn = {"std of a constant scan carry": scan_std,
          "std of a tied pair": lambda x: np.std(x[np.array([3, 3])]) + np.sum(x),
          "norm of zeros": lambda x: np.linalg.norm(x * 0.0) + np.linalg.norm(x[:2] - x[:2])}[name]
    w = np.random.default_rng(3).normal(size=70)
    want = np.zeros(70) if name != "std of a tied pair" else np.ones(70)
    np.testing.assert_array_equal(_element(fn, (w,), 0)[1], want)
    for backend in ("python", "vm"):
        np.testing.assert_array_equal(sg.grad(fn, backend=backend)(w), want, err_msg=backend)


def test_an_array_of_traced_arrays_returned_has_numpys_shape():
    """np.array([x, 2 * x]) returned from a rolled trace came back as two numbers."""
    x = np.arange(72.0).reshape(8, 9)
    np.testing.assert_array_equal(sg.jit(lambda x: np.array([x, 2 * x]), backend="python")(x), [x, 2 * x])
    np.testing.assert_array_equal(sg.jit(lambda x: np.array([[2 * x, x + 1], [x, x]]))(x),
                                  [[2 * x, x + 1], [x, x]])


def test_np_max_over_ties_shares_evenly_rolled_or_element_by_element():
    """Inputs rounded to whole numbers tie: the element trace's pairwise reduce (a tree of maxima is
    one max) shares the derivative evenly among them as the rolled max does, not 1/2, 1/4, ..."""
    v = np.clip(np.round(X), -2.0, 1.0)
    fn = lambda v: np.max(v) * 3 + np.min(np.sin(v))  # noqa: E731
    _agree(fn, (v,))
    g = _element(fn, (v,), (0,))[1][0]
    top, low = v == v.max(), np.sin(v) == np.sin(v).min()
    assert top.sum() >= 3 and low.sum() >= 3
    np.testing.assert_allclose(g, 3 * top / top.sum() + np.cos(v) * low / low.sum(), rtol=1e-15)


def test_a_trace_is_the_same_graph_whatever_was_traced_before():
    """Fresh names (a nested trace's x#7, a derivative's index i#12) once ordered sums and commutative
    arguments by their counter: the third trace of one function was another graph (a nan Hessian
    where the first two gave 0, found by the fuzzer). Now names made fresh hash and sort by the
    name they came from and by when they were made: every trace is the same graph, the same bits."""
    def f(x):
        v1 = sg.grad(lambda u: np.sum(np.tanh(u)) * np.sum(u))(x.reshape(4, -1))
        _, ys = sg.scan(lambda c, r: (c, r), 0.0, np.where(v1 > 0.1, np.sqrt(v1), 0.0))
        return np.sum(ys)

    x = np.random.default_rng(589791939).normal(size=64)
    seen = []
    for _ in range(3):
        h = sg.hessian(lambda x: f(x), backend="python")  # a new function each time: traced again
        with np.errstate(all="ignore"):
            seen.append((h.trace(x).formulas(), h(x).tobytes()))
        sg.grad(lambda u: np.sum(u[::-1] * u))(np.ones(70))  # moves the counters on
    assert seen[0] == seen[1] == seen[2]


_MASKED_ELSEWHERE = {
    "a reshape read again": lambda w: np.sum(np.where((v := np.where(w.reshape(8, -1) > 0.1, np.sqrt(
        w.reshape(8, -1)), 0.0)) > 0.3, v, 0.5 * v)),
    "entries never gathered": lambda w: np.sum(np.concatenate([w[::-1] * 2, np.sqrt(w)])[TABLE[TABLE < 64]]),
    "an outer self product": lambda w: np.sum((v := np.where(w[5:] > 0.1, np.sqrt(w[5:]), 0.0) * w[:59])[:16, None]
                                              * v),
    "einsum of the masked": lambda w: np.sum(np.einsum("ij,kj->ik", v := np.where(
        w.reshape(16, -1) > 0.1, np.sqrt(w.reshape(16, -1)), 0.0), v)),
    "log of the masked": lambda w: np.sum(np.where(w > 0, np.log(np.abs(w) + (w < 0)) * w, w)[PERM[PERM < 64]]),
}


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("name", list(_MASKED_ELSEWHERE))
def test_a_nan_partial_of_a_value_masked_elsewhere_stays_out_of_the_gradient(name):
    """sqrt's partial is nan at a negative; where the value is masked, or never read, its adjoint is 0,
    yet 0 * nan came through an array of the adjoint's own (a tensor, a scatter) or a sum of many
    masked terms: nan in the rolled gradient or in the element trace's (found by symgrad.fuzz).
    Such a product is guarded now: the gradient is the finite differences', everywhere."""
    fn, w = _MASKED_ELSEWHERE[name], X[:64]
    h, E = 1e-6, np.eye(64)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.array([(fn(w + h * e) - fn(w - h * e)) / (2 * h) for e in E])
    for backend in ("python", "vm"):
        got = sg.value_and_grad(fn, backend=backend)(w)[1]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)
    _agree(fn, (w,))


def test_a_condition_on_a_sum_of_the_gathered_values_is_not_moved_into_the_scatter():
    """where(sum(x[perm]) > .1, ...): the condition reads x[perm[j]] inside a sum over j, the scatter's
    own index symbol; moving the scatter's condition to its target rewrote that bound load as x[k]
    (half the gradient 0 instead of 1; found by symgrad.fuzz)."""
    perm = np.random.default_rng(33).permutation(64)
    fn = lambda x: np.where((v := np.sum(x[perm])) > 0.1, v, 0.0) + np.sum(np.where(x[perm] > 0, x[perm], 0.0))  # noqa: E731
    x = X[:64] + 0.3
    assert np.sum(x) > 0.1
    for backend in ("python", "vm"):
        np.testing.assert_array_equal(sg.value_and_grad(fn, backend=backend)(x)[1], 1.0 + (x > 0), err_msg=backend)
    _agree(fn, (x,))


def test_a_rolled_scan_result_meets_a_carry_traced_element_by_element():
    """A length-only scan of constants is one rolled node even in a function of small arrays; its
    rows as the xs of a scan whose carry is traced element by element raised TracingError (found by
    symgrad.fuzz): they are read element by element, and the scan runs as a loop."""
    def f(x):
        _, ys = sg.scan(lambda c, r: (c * 1.5, c), np.ones(4), length=3)
        _, out = sg.scan(lambda c, r: (c + r, c * r), x, ys.ravel())
        return np.sum(out)

    x = X[:8]
    want = f(x)
    value, grad = sg.value_and_grad(f, backend="python")(x)
    ys = np.ravel([np.ones(4) * 1.5 ** k for k in range(3)])
    assert value == pytest.approx(want, rel=1e-13)
    np.testing.assert_allclose(grad, np.full(8, np.sum(ys)), rtol=1e-13)


def test_np_max_over_several_axes_shares_evenly_among_all_its_ties():
    """np.max of a 2-D array is a max over rows of maxima over columns: its ties were shared per row
    first (1/3, 1/3, 1/6, 1/6 for four; found by symgrad.fuzz), now evenly as one max over both."""
    a = np.clip(np.round(np.random.default_rng(0).normal(size=(8, 20))), -2.0, 1.0)
    top = a == a.max()
    assert top.sum() > 3 and len(set(np.nonzero(top)[0])) > 1
    for backend in ("python", "vm"):
        g = sg.grad(lambda u: np.max(u) + np.min(u, axis=(0, 1)), backend=backend)(a)
        low = a == a.min()
        np.testing.assert_allclose(g, top / top.sum() + low / low.sum(), rtol=1e-15, err_msg=backend)
        assert sg.jvp(lambda u: np.max(u), (a,), (np.ones_like(a),), backend=backend)[1] == pytest.approx(1.0)
    _agree(lambda u: np.max(u) * 2 + np.min(u), (a,))


def test_two_scans_with_the_same_step_fill_their_own_rows():
    """A gradient recomputes a scan whose initial carry and rows are read at equal but different
    addresses (t3[l + 1 + 1] and t3[l + 2]): two scans, one (hash-consed) step. The compiled loops
    wrote the second scan's rows into the first's last row and read uninitialised memory (nan, inf or
    a wrong number; the loop VM was right; found by symgrad.fuzz)."""
    def f(w):
        _, v4 = sg.scan(lambda c, r: (c * 0.9 + r, c * 0.9 + r), 0.0, w)
        v6 = v4[1:]
        _, v9 = sg.scan(lambda c, r: (c[::-1] * 0.5 + r, c[::-1] * 0.5 + r), v6[:8], v6)
        return np.sum(v9 * v9)

    w = np.random.default_rng(5).normal(size=128)
    _agree(f, (w,), ("python", "vm", "numba"))


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # f on numbers: sqrt(x < 0)
def test_a_masked_neighbour_in_a_product_folded_into_a_where_stays_out_of_the_gradient():
    """where(x > 0.1, sqrt(x), 0) of two neighbours multiplied: the product folds into where(c_i, where(c_j,
    sqrt(x_i) * sqrt(x_j), 0), 0), and the contribution to x_i, itself a where with a 0 branch, was left
    unguarded: 0 (x_j masked) times sqrt(x_j) = nan (x_j < 0). Traced element by element it gave nan where
    the rolled trace and finite differences give a number (found by symgrad.fuzz)."""
    def f(x):
        v2 = np.where(x > 0.1, np.sqrt(x), 0.0)
        v6 = np.concatenate([v2[1:] * v2[:-1], v2]).reshape(3, -1)
        return np.sum(np.where(v6 > 0.3, v6, 0.5 * v6))

    x = np.random.default_rng(1123634819).normal(size=128)
    _agree(f, (x,))
    assert np.isfinite(_element(f, (x,), (0,))[1][0]).all()


def test_a_rolled_array_times_an_element_traced_one_with_matmul():
    """rolled @ object array (an element trace's x[:2] times a length-only scan's rows) raised TracingError
    ('a NumPy array of dtype object combined with a traced array'; found by symgrad.fuzz)."""
    def f(x):
        _, rows = sg.scan(lambda c, r: (c, c), np.ones(2), length=3)
        return np.sum(rows @ x[:2]) + np.sum(x[:2] @ rows.T) + np.sum(x ** 2)

    x = np.random.default_rng(8).normal(size=64)
    value, grad = _element(f, (x,), (0,))
    assert value == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(grad[0], 2 * x + np.r_[6.0, 6.0, np.zeros(62)], rtol=1e-12)


def test_a_slice_of_a_column_sum_as_a_scans_carry_keeps_its_own_buffer():
    """np.sum(x, axis=0)[:1] read by a scan: the planner took the column sums (a scatter of 8 entries) for
    the terms adding into the 1-entry slice and scheduled them into its buffer; the checker refused the
    schedule (ScheduleError on the VM and Numba; found by symgrad.fuzz)."""
    def f(x):
        _, ys = sg.scan(lambda c, r: (c, c), np.sum(x, axis=0)[:1], x)
        return np.sum(ys)

    x = np.random.default_rng(1217880859).normal(size=(8, 8))
    _agree(f, (x,), ("python", "vm", "numba"))
