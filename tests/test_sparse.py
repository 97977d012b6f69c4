"""Sparse Jacobians and Hessians against the dense ones, hvp, and SciPy's optimizers using them."""

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from graphs import VARS, dags, finite, points
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compile import c_backend, cache, sparse_loops
from symgrad.expr.node import TracingError
from symgrad.expr.rolled import table
from symgrad.expr.sparsity import dependencies

VM = dict(backend="vm")
NAMES = [v.name for v in VARS]


def rosen(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_hessian(x):
    """Extended Rosenbrock's tridiagonal Hessian, by hand (SciPy's rosen_hess, without the n x n array)."""
    n = len(x)
    diag = np.zeros(n)
    diag[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    diag[1:] += 200
    off = -400 * x[:-1]
    return scipy.sparse.diags([off, diag, off], [-1, 0, 1], format="csr")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=8), points)
def test_sparse_hessian_equals_the_dense_one(f, at):
    """Every structural zero is a true zero, every stored entry the dense entry."""
    H = sg.hessian(f, VARS, sparse=True)
    values = dict(zip(NAMES, at))
    dense = np.array(sg.evaluate(sg.hessian(f, VARS), values), dtype=float)
    got = np.zeros((3, 3))
    data = np.array(sg.evaluate(H.exprs, values), dtype=float) if H.nnz else np.zeros(0)
    for i in range(3):
        for k in range(H.indptr[i], H.indptr[i + 1]):
            got[i, H.indices[k]] = data[k]
    assume(finite(dense, got))
    np.testing.assert_allclose(got, dense, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=8), dags(max_ops=8), points)
def test_sparse_jacobian_equals_the_dense_one(f, g, at):
    J = sg.jacobian([f, g, VARS[0] * 2.0], VARS, sparse=True)
    values = dict(zip(NAMES, at))
    dense = np.array(sg.evaluate(sg.jacobian([f, g, VARS[0] * 2.0], VARS), values), dtype=float)
    got = np.array(sg.evaluate(J.to_dense(), values), dtype=float)
    assume(finite(dense, got))
    np.testing.assert_allclose(got, dense, rtol=1e-9, atol=1e-12)


def test_the_pattern_skips_arguments_without_derivative():
    x, y, z = VARS
    assert dependencies([sg.where(x > y, z, 2 * z), sg.floor(x) * y], [x, y, z]) == [
        frozenset({2}), frozenset({1})]
    H = sg.hessian(x * y + sg.sin(z), [x, y, z], sparse=True)
    assert (H.indptr.tolist(), H.indices.tolist(), [str(e) for e in H.exprs]) == (
        [0, 1, 2, 3], [1, 0, 2], ["1", "1", "-sin(x2)"])


ROSEN_10K = """
import resource, sys
import numpy as np, scipy.sparse
import symgrad as sg
sys.path.insert(0, sys.argv[1])
from test_sparse import rosen, rosen_hessian
n = 10_000
x = np.linspace(-1.2, 1.3, n)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
h = sg.hessian(rosen, sparse=True)
H = h(x)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
assert isinstance(H, scipy.sparse.csr_matrix) and H.shape == (n, n) and H.nnz == 3 * n - 2
assert abs(H - rosen_hessian(x)).max() <= 1e-12 * abs(rosen_hessian(x)).max()
assert grown < n * n * 8 / 2, f"peak grew {grown / 1e6:.0f} MB: something n x n was allocated"
assert [s.direct is not None for s in h._sparse_rolled.values()] == [True]  # (rolled: its bands' formulas)
print("ok")
"""


def test_rosenbrock_10k_hessian_is_tridiagonal_and_never_dense():
    """In a process of its own: its peak memory (an n x n float array is 800 MB) is its own."""
    done = subprocess.run([sys.executable, "-c", ROSEN_10K, str(Path(__file__).parent)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_sparse_jacobian_of_a_traced_function():
    f = lambda x: np.concatenate([x[1:] - x[:-1] ** 2, [np.sum(x)]])
    x = np.array([0.5, -1.0, 2.0, 0.25])
    J = sg.jacobian(f, sparse=True, **VM)(x)
    dense = sg.jacobian(f, **VM)(x)
    np.testing.assert_array_equal(J.toarray(), dense)
    assert J.nnz == 2 * 3 + 4


def test_hvp_of_an_expression():
    x, y, z = VARS
    f = x * x * y + sg.exp(y * z)
    hv = sg.hvp(f, [x, y, z], **VM)
    at, v = np.array([0.5, 1.5, -0.5]), np.array([1.0, -2.0, 3.0])
    H = np.array(sg.evaluate(sg.hessian(f, [x, y, z]), dict(zip(NAMES, at))), dtype=float)
    np.testing.assert_allclose(hv(at, v), H @ v, rtol=1e-13)


# ---- SciPy ----------------------------------------------------------------------------------

X0 = np.array([-1.2, 1.0] * 25)


def test_minimize_with_jac_true_takes_the_value_and_gradient_directly():
    vg = sg.value_and_grad(rosen, **VM)
    res = scipy.optimize.minimize(vg, X0, jac=True, method="L-BFGS-B", options=dict(maxiter=5000))
    assert res.success and np.allclose(res.x, 1.0, atol=1e-4)
    x, y = sg.symbols("x y")
    vg2 = sg.value_and_grad((1 - x) ** 2 + 100 * (y - x * x) ** 2, [x, y], **VM)
    assert np.allclose(scipy.optimize.minimize(vg2, [-1.2, 1.0], jac=True, method="BFGS").x, 1.0, atol=1e-5)


TIGHT = {"trust-constr": dict(xtol=1e-14, gtol=1e-10), "Newton-CG": dict(xtol=1e-12)}


@pytest.mark.parametrize("method", list(TIGHT))
def test_second_order_methods_with_the_sparse_hessian(method):
    """The same path as SciPy's hand-written rosen_der / rosen_hess (from this start, extended
    Rosenbrock has a local minimum near x[0] = -1 besides the global one at 1)."""
    vg = sg.value_and_grad(rosen, **VM)
    hess = sg.hessian(rosen, sparse=True, **VM)
    options = dict(maxiter=3000) | TIGHT[method]
    res = scipy.optimize.minimize(vg, X0, jac=True, hess=hess, method=method, options=options)
    ref = scipy.optimize.minimize(scipy.optimize.rosen, X0, jac=scipy.optimize.rosen_der,
                                  hess=scipy.optimize.rosen_hess, method=method, options=options)
    assert np.allclose(res.x, ref.x, atol=1e-6), (method, res.message)
    assert np.linalg.norm(vg(res.x)[1]) < 1e-6


def test_newton_cg_with_hessian_vector_products():
    vg = sg.value_and_grad(rosen, **VM)
    hv = sg.hvp(rosen, **VM)
    options = dict(maxiter=3000, xtol=1e-12)
    res = scipy.optimize.minimize(vg, X0, jac=True, hessp=hv, method="Newton-CG", options=options)
    ref = scipy.optimize.minimize(scipy.optimize.rosen, X0, jac=scipy.optimize.rosen_der,
                                  hessp=scipy.optimize.rosen_hess_prod, method="Newton-CG", options=options)
    assert np.allclose(res.x, ref.x, atol=1e-6) and np.linalg.norm(vg(res.x)[1]) < 1e-6


def test_least_squares_with_the_compiled_jacobian():
    t = np.linspace(0, 3, 40)
    y = 2.5 * np.exp(-1.3 * t) + 0.5

    def residuals(p, t, y):
        return p[0] * np.exp(-p[1] * t) + p[2] - y

    fun = sg.jit(residuals, **VM)
    for jac in (sg.jacobian(residuals, **VM), sg.jacobian(residuals, sparse=True, **VM)):
        res = scipy.optimize.least_squares(fun, [1.0, 1.0, 0.0], jac=jac, args=(t, y))
        np.testing.assert_allclose(res.x, [2.5, 1.3, 0.5], rtol=1e-8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
@example(1)  # (a where's branch widened over two reductions' indices: found by this test)
def test_rolled_patterns_never_miss_a_nonzero(seed):
    """The Hessian pattern of random NumPy programs (gathers, scatters, reductions, running sums,
    scans: symgrad.fuzz), found from the rolled gradient's addresses, holds every nonzero of the
    exact dense Hessian (the loop VM's)."""
    from symgrad import fuzz
    from symgrad.expr.sparsity import rolled_pattern

    p = fuzz.generate(seed)
    assume(int(np.prod(p.shapes[0])) <= 300)
    f, args = p.function(), p.inputs()
    g = sg.grad(f, argnums=0, backend="vm")
    try:
        g(*args)
    except TracingError:  # (a scan inside a scan: no rolled form, refused by name)
        assume(False)
    program = g.compiled.program
    assume(hasattr(program, "roots"))  # (rolled)
    try:
        pattern = rolled_pattern(list(program.roots), list(program.inputs.exprs)).toarray()
    except NotImplementedError:  # (an address read from an array, a scan's: the sparse path takes the element one)
        assume(False)
    dense = np.asarray(sg.hessian(f, argnums=0, backend="vm")(*args)).reshape(pattern.shape)
    missed = (dense != 0) & ~pattern
    assert not missed.any(), (p.source, np.argwhere(missed)[:5])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
def test_sparse_hessians_of_random_programs_are_the_dense_ones(seed):
    """The sparse Hessian of random NumPy programs (gathers, scatters, reductions, running sums, scans:
    symgrad.fuzz), from its bands' formulas where they are bands, else from colour products, equals
    the exact dense Hessian (the loop VM's) entry for entry."""
    from symgrad import fuzz
    from symgrad.trace.sparse import RolledSparse

    p = fuzz.generate(seed)
    assume(int(np.prod(p.shapes[0])) <= 300)
    f, args = p.function(), p.inputs()
    h = sg.hessian(f, argnums=0, sparse=True, backend="vm")
    try:
        sparse = RolledSparse(h, tuple(args), {})
    except (NotImplementedError, TracingError, TypeError):  # (no rolled form: sg.hessian takes the element path)
        assume(False)
    dense = np.asarray(sg.hessian(f, argnums=0, backend="vm")(*args)).reshape(sparse.pattern.shape)
    got = sparse(tuple(args), {}).toarray()
    np.testing.assert_allclose(got, dense, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(dense).max()))


def _banded(x):
    return np.sum(np.sin(x * np.roll(x, 3)) + x[::2] ** 2 @ np.ones(x.shape[0] // 2)) + np.sum(x[:-1] * x[1:] ** 3)


def _permuted(x, w):
    p = np.argsort(np.cos(np.arange(x.shape[0])))
    return np.sum(w * np.tanh(x[p] - x) ** 2) + np.sum(np.minimum(x[p], 0.3) * x)


def _coupled(x):
    return np.sum(x) ** 2 + np.sum(np.exp(x[1:] - x[:-1]))


@pytest.mark.parametrize("fn, n", [(rosen, 10**4), (_banded, 4000), (_permuted, 500), (_coupled, 300)])
def test_sparse_hessians_of_large_arrays_are_the_dense_ones(fn, n):
    """sg.hessian(fn, sparse=True) of arrays of ROLLED_MIN elements or more: the pattern from the rolled
    gradient, a Hessian-vector product per colour (no element-by-element trace: Rosenbrock at 10^5 was 73 s
    to its first result). Every entry the dense rolled Hessian's (the VM's) and central differences' of the
    gradient; CSR, sorted, symmetric."""
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n)
    args = (x, rng.uniform(0.5, 1.5, n)) if fn is _permuted else (x,)
    h = sg.hessian(fn, sparse=True)
    H = h(*args)
    assert isinstance(H, scipy.sparse.csr_matrix) and H.shape == (n, n) and H.has_sorted_indices
    assert len(h._sparse_rolled) == 1 and None not in h._sparse_rolled.values()
    if n <= 4000:
        dense = sg.hessian(fn, backend="vm")(*args)
        np.testing.assert_allclose(H.toarray(), dense, rtol=1e-10, atol=1e-10)
    else:
        np.testing.assert_allclose(H.toarray()[:50, :50], rosen_hessian(x).toarray()[:50, :50], rtol=1e-12)
        assert abs(H - rosen_hessian(x)).max() <= 1e-12 * abs(rosen_hessian(x)).max()
    g, e, step = sg.grad(fn, backend="vm"), np.zeros(n), 1e-6
    for j in rng.choice(n, 3, replace=False):
        e[:] = 0.0
        e[j] = step
        column = (g(x + e, *args[1:]) - g(x - e, *args[1:])) / (2 * step)
        np.testing.assert_allclose(H[:, j].toarray().ravel(), column, rtol=1e-5, atol=1e-5)
    assert abs(H - H.T).max() <= 1e-12 * max(1.0, abs(H).max())


def _defects(z, dt):
    """Trapezoidal collocation defects of a double integrator (positions, velocities, controls in z)."""
    p, v, u = z.reshape(3, -1)
    return np.concatenate([p[1:] - p[:-1] - dt * (v[1:] + v[:-1]) / 2,
                           v[1:] - v[:-1] - dt * (np.sin(u[1:]) + np.sin(u[:-1])) / 2, p[:1] * v[:1]])


@pytest.mark.parametrize("fn, n, args", [(_defects, 1500, (0.01,)), (lambda x: x[1:] * np.exp(x[:-1]), 3000, ())])
def test_sparse_jacobians_of_large_arrays_are_the_dense_ones(fn, n, args):
    """sg.jacobian(fn, sparse=True) of arrays of ROLLED_MIN elements or more: the pattern from the rolled
    outputs' addresses (a concatenation's parts only where they are: 4 nonzeros a defect row, not
    every part's in every row), one Jacobian-vector product per colour. Every entry the dense rolled
    Jacobian's (the VM's) and central differences'."""
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n)
    j = sg.jacobian(fn, sparse=True)
    J = j(x, *args)
    dense = sg.jacobian(fn, backend="vm")(x, *args)
    assert isinstance(J, scipy.sparse.csr_matrix) and J.shape == dense.shape
    assert None not in j._sparse_rolled.values()
    np.testing.assert_array_equal(J.toarray(), dense)
    assert J.nnz == np.count_nonzero(dense)  # (no structural zero here)
    step = 1e-6
    for k in rng.choice(n, 3, replace=False):
        e = np.zeros(n)
        e[k] = step
        np.testing.assert_allclose(J[:, k].toarray().ravel(), (fn(x + e, *args) - fn(x - e, *args)) / (2 * step),
                                   rtol=1e-6, atol=1e-6)


def _turned(z):
    """Each row's point p turned about its k (a bundle adjustment's Rodrigues step, cut down): the cross
    product reads p and k at rotated addresses ([1, 2, 0][c]) that meet a plain one's columns."""
    x = z.reshape(-1, 6)
    p, k = x[:, :3], x[:, 3:]
    return (p * np.cos(np.sum(k ** 2, axis=1, keepdims=True)) + np.cross(k, p)).ravel()


def _mirrored(x):
    """Row i reads x[i] and x[n - 1 - i]: two formulas, one column on the middle row."""
    return x * x[::-1] + np.sin(x[::-1])


@pytest.mark.parametrize("fn, size, meeting", [(_turned, 6 * 400, False), (_mirrored, 801, True)])
def test_entries_of_two_formulas_meeting_at_one_position_are_added(fn, size, meeting):
    """Where two band formulas' addresses give the same column on a row (the mirrored product's middle
    row), the direct evaluation adds their values there; where the rows' pieces make two reads one
    formula (the cross product's rotated addresses, on rows 6j + r), they are one entry. The entries are
    the dense Jacobian's and central differences'."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, size)
    j = sg.jacobian(fn, sparse=True)
    J = j(x)
    direct = next(iter(j._sparse_rolled.values())).direct
    assert direct is not None and (np.diff(direct.assembly.starts).max(initial=0) == 2) == meeting  # (the case)
    dense = sg.jacobian(fn, backend="vm")(x)
    np.testing.assert_allclose(J.toarray(), dense, rtol=1e-13, atol=1e-15)
    assert J.nnz == np.count_nonzero(dense)
    for k in [*rng.choice(x.size, 4, replace=False), size // 2]:
        e = np.zeros(x.size)
        e[k] = 1e-6
        np.testing.assert_allclose(J[:, k].toarray().ravel(), (fn(x + e) - fn(x - e)) / 2e-6,
                                   rtol=1e-6, atol=1e-7)


def test_a_dense_jacobian_row_is_one_reverse_sweep_not_a_colour_a_column():
    """A constraint on all the variables (``np.sum(x ** 2) - 1`` closing the vector) makes a row of n
    nonzeros: column colouring alone gives each column its own colour (n products: 117 s at n = 5000). The
    row is one vector-Jacobian product instead, the other rows coloured without it (2 colours)."""
    def c(x):
        return np.concatenate([x[1:] - x[:-1] ** 2, [np.sum(x ** 2) - 1.0, x[0] * 2]])

    x = np.cos(np.arange(3000.0))
    j = sg.jacobian(c, sparse=True)
    J = j(x)
    (sparse,) = j._sparse_rolled.values()
    assert sparse.colours == 2 and sparse.dense_rows.tolist() == [2999]
    np.testing.assert_array_equal(J.toarray(), sg.jacobian(c, backend="vm")(x))


def test_a_dense_row_under_a_where_widens_only_its_own_row():
    """The pattern of a concatenation whose last row sums all of x: only that row is widened by the sum's
    index (it was every row: n * n points, 7.6 GB at n = 2 * 10^4, killed at 4 * 10^4). Allocations are
    counted (tracemalloc sees NumPy's), not timed; the entries are the dense Jacobian's at a smaller n."""
    import tracemalloc

    def c(x):
        return np.concatenate([x[1:] - x[:-1] ** 2, [np.sum(x ** 2) - 1.0]])

    x = np.linspace(-1.0, 1.0, 2000)
    np.testing.assert_array_equal(sg.jacobian(c, sparse=True)(x).toarray(), sg.jacobian(c, backend="vm")(x))
    from symgrad.expr.sparsity import rolled_pattern

    t = sg.jit(c).trace(np.zeros(20000))  # (the traced formulas alone: no kernel compiled)
    tracemalloc.start()
    try:
        found = rolled_pattern(list(t.flat), t.inputs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.nnz == 2 * 19999 + 20000 and found[19999].nnz == 20000
    assert peak < 100e6, f"{peak / 1e6:.0f} MB"


def test_a_python_branch_on_values_gives_each_branch_its_own_sparse_matrix():
    """A Python ``if`` on a traced value: the branch another call takes has other entries (here other
    nonzeros). Its matrix is that branch's: the rolled path's one pattern and kernels from the first branch
    gave the wrong one silently (2.8 off); such a function takes the element path, which traces each branch."""
    def f(x):
        if x[0] > 0:
            return np.sum(x[1:] * x[:-1] ** 2)
        return np.sum(np.sin(x) * x[::-1])

    def g(x):
        return x[1:] * x[:-1] if x[0] > 0 else np.sin(x[::-1])[1:]

    h, j = sg.hessian(f, sparse=True), sg.jacobian(g, sparse=True)
    for sign in (1.0, -1.0, 1.0):
        x = np.linspace(0.1, 1.0, 100) * sign
        np.testing.assert_allclose(h(x).toarray(), sg.hessian(f, backend="vm")(x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(j(x).toarray(), sg.jacobian(g, backend="vm")(x), rtol=1e-12, atol=1e-12)


def _rolled_pair(x):
    return np.sum(np.cos(x - np.roll(x, 3)) * x ** 2) + np.sum(np.sin(x[1:] * x[:-1]))


def _defects(z):
    q, v = z[:100], z[100:]
    return np.concatenate([q[1:] - q[:-1] - 0.1 * (v[1:] + v[:-1]), v[1:] - v[:-1] + 0.1 * np.sin(q[1:]) * q[:-1],
                           q[:1], v[-1:] - 1.0, q[-1:] * v[:1]])


@pytest.mark.parametrize("fn, n, hessian", [(rosen, 200, True), (_rolled_pair, 120, True), (_defects, 200, False)])
def test_the_bands_of_a_sparse_hessian_or_jacobian_are_its_entries(fn, n, hessian):
    """h.bands() / h.formulas(): one formula per band over the row index (a periodic or concatenated
    read: one per address); evaluated at every row, placed at its column, they are the sparse matrix."""
    from symgrad.expr import sparsity

    x = np.random.default_rng(3).normal(size=n)
    h = (sg.hessian if hessian else sg.jacobian)(fn, sparse=True, **VM)
    M = h(x).toarray()
    (roots, v), built = h._last_sparse.formula, np.zeros_like(M)
    entries = sparsity.band_entries(roots[0], v)
    i = roots[0].args[1]
    for at, formula, _ in entries:
        cols = np.broadcast_to(sparsity._indexed(at, sparsity._Grid((i,))), (M.shape[0],))
        values = sg.evaluate(sg.tensor(formula, i), {v: x})
        inside = (cols >= 0) & (cols < n)
        assert not np.any(values[~inside]), "an entry outside the matrix is not zero"
        np.add.at(built, (np.arange(M.shape[0])[inside], cols[inside]), values[inside])
    np.testing.assert_allclose(built, M, rtol=1e-12, atol=1e-12)
    text = h.formulas()
    assert text.count(" = ") >= len(entries) and ("H[" if hessian else "J[") in text
    assert fn is not rosen or [str(at) for at, _, _ in entries] == ["j - 1", "j", "j + 1"]  # (tridiagonal)


def test_a_sparse_result_changed_by_its_caller_leaves_the_next_one_alone():
    """Each result has its own structure: eliminate_zeros() on one (it rewrites indices in place) must
    not change the pattern the next call fills (the values would land in the wrong columns)."""
    x = np.linspace(-1.0, 1.0, 500)
    h = sg.hessian(rosen, sparse=True, **VM)
    first = h(x)
    first.data[:] = 0.0
    first.eliminate_zeros()
    np.testing.assert_allclose(h(x).toarray(), scipy.sparse.csr_matrix(rosen_hessian(x)).toarray(),
                               rtol=1e-12, atol=1e-12)


def test_explain_says_how_a_rolled_sparse_matrix_is_computed():
    h = sg.hessian(rosen, sparse=True, backend="vm")
    h(np.linspace(-1.0, 1.0, 5000))
    assert h.explain().splitlines()[-1] == \
        "  rolled sparse Hessian (5000, 5000), 14998 nonzeros: 3 band formulas at every row, one kernel"
    j = sg.jacobian(lambda x: np.cumsum(x.reshape(30, 10), axis=1).ravel() * x, sparse=True,
                    backend="vm")  # (running sums: no bands; in blocks of 10, not dense)
    j(np.linspace(-1.0, 1.0, 300))
    line = j.explain().splitlines()[-1]
    assert line.startswith("  rolled sparse Jacobian (300, 300), 1650 nonzeros: ") and "colour products" in line


def _block(k):
    """A k x k dense block (the first k variables' sum, squared) on a diagonal."""
    return lambda v: np.sum(v[:k]) ** 2 + np.sum(np.sin(v) * v)


@pytest.mark.parametrize("n, k", [(200, 200), (200, 150)])
def test_a_dense_hessian_pattern_is_computed_dense_and_returned_in_csr(n, k):
    """sparse=True where the pattern is dense (np.sum(v) ** 2: 82 s at n = 3000 colouring it, 0.3 s dense) or
    nearly (a 150 x 150 block of 200 x 200): the dense Hessian, its entries returned in the pattern's CSR
    (structural zeros outside it not stored), said by explain(). Entries the dense Hessian's and central
    differences' of the gradient."""
    from symgrad.trace.sparse import DENSE_FRACTION

    x = np.cos(np.arange(n, dtype=float))
    h = sg.hessian(_block(k), sparse=True, backend="vm")
    H = h(x)
    nnz = k * k + n - k
    assert nnz >= DENSE_FRACTION * n * n
    assert isinstance(H, scipy.sparse.csr_matrix) and H.shape == (n, n) and H.nnz == nnz and H.has_sorted_indices
    assert h.explain().splitlines()[-1] == \
        f"  pattern dense ({nnz:,} of {n * n:,} entries): computed as a dense Hessian, returned in CSR"
    np.testing.assert_allclose(H.toarray(), sg.hessian(_block(k), backend="vm")(x), rtol=1e-12, atol=1e-12)
    g = sg.grad(_block(k), backend="vm")
    for j in (0, k - 1, n - 1):
        e = np.zeros(n)
        e[j] = 1e-6
        np.testing.assert_allclose(H[:, j].toarray().ravel(), (g(x + e) - g(x - e)) / 2e-6, rtol=1e-5, atol=1e-5)
    assert h(x + 1.0).nnz == nnz  # (the pattern kept: entries that are zero at a point stay stored)


def test_a_dense_jacobian_pattern_is_computed_dense_and_returned_in_csr():
    """The same for sg.jacobian(..., sparse=True): every output reads the sum of all the inputs."""
    fn = lambda v: v * np.sum(v) + np.exp(v)  # noqa: E731
    x = np.linspace(-1.0, 1.0, 150)
    j = sg.jacobian(fn, sparse=True, backend="vm")
    J = j(x)
    assert isinstance(J, scipy.sparse.csr_matrix) and J.shape == (150, 150) and J.nnz == 150 * 150
    assert "pattern dense (22,500 of 22,500 entries): computed as a dense Jacobian" in j.explain()
    np.testing.assert_allclose(J.toarray(), sg.jacobian(fn, backend="vm")(x), rtol=1e-13, atol=1e-13)
    e = np.zeros(150)
    e[7] = 1e-6
    np.testing.assert_allclose(J[:, 7].toarray().ravel(), (fn(x + e) - fn(x - e)) / 2e-6, rtol=1e-6, atol=1e-6)


def _trapezoids(z):
    p, v, u = z.reshape(3, -1)  # (the double integrator's collocation defects above, at dt = 0.01)
    return np.concatenate([p[1:] - p[:-1] - 0.005 * (v[1:] + v[:-1]), v[1:] - v[:-1] - 0.005 * (u[1:] + u[:-1])])


@pytest.mark.parametrize("make, n, args", [(lambda: sg.hessian(rosen, sparse=True), 10**5, ()),
                                           (lambda: sg.hessian(_block(80), sparse=True, backend="vm"), 200, ()),
                                           (lambda: sg.jacobian(_trapezoids, sparse=True), 1500, ())])
def test_sparse_patterns_stay_sparse(make, n, args):
    """Rosenbrock's tridiagonal Hessian (at 10^5), a block under DENSE_FRACTION of the entries and a
    banded collocation Jacobian are not computed dense (no n x n array)."""
    f = make()
    M = f(np.linspace(-1.0, 1.0, n), *args)
    (sparse,) = f._sparse_rolled.values()
    assert isinstance(M, scipy.sparse.csr_matrix) and sparse.dense is None
    assert "pattern dense" not in f.explain()


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 120), st.booleans(), st.integers(0, 2**32 - 1))
def test_the_c_sparse_loops_give_numbas_bits(size, m, wide, seed):
    """The assembly and colouring in C (built where a compiler is found) against Numba's loops and
    NumPy: the same sums in the same order, the same colours."""
    rng = np.random.default_rng(seed)
    kind = np.int64 if wide else np.int32
    positions, sources = rng.integers(0, size, m).astype(kind), rng.integers(0, 2 * m + 1, m).astype(kind)
    values = rng.normal(size=2 * m + 1) * 10.0 ** rng.integers(-8, 8, 2 * m + 1)
    numba_loops, c_loops = cache.load("sparse_loops_v1", sparse_loops._SOURCE), sparse_loops._c_library()
    want = np.bincount(positions, values[sources], minlength=size)
    for loops in (numba_loops, c_loops):
        order, starts = loops.arrange(positions, sources, size)
        got = loops.assemble(values, order, starts)
        assert np.array_equal(order, numba_loops.arrange(positions, sources, size)[0])
        assert np.allclose(got, want, rtol=1e-12, atol=0) and order.dtype == kind
    assert np.array_equal(c_loops.assemble(values, order, starts), numba_loops.assemble(values, order, starts))
    pattern = scipy.sparse.random(size, size, density=min(1.0, m / size ** 2), random_state=seed % 2**31,
                                  format="csr")
    columns = pattern.tocsc()
    args = (pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64), columns.indptr.astype(np.int64),
            columns.indices.astype(np.int64), size)
    assert np.array_equal(c_loops.colour(*args), numba_loops.colour(*args))


def test_an_assembly_refuses_values_it_would_read_past():
    from symgrad.compile.sparse_loops import Assembly

    assembly = Assembly(np.array([0, 1]), np.array([0, 4]), 2)
    assert assembly(np.arange(5.0)).tolist() == [0.0, 4.0]
    with pytest.raises(ValueError, match="reads 5 values, got an array of shape"):
        assembly(np.arange(4.0))
    with pytest.raises(ValueError, match="positions and sources"):
        Assembly(np.array([0, 2]), np.array([0, 1]), 2)


def _random_rows(rng: np.random.Generator, n: int):
    """Rows over i < n reading x (n elements) at random index arithmetic (// and % by 1..4, mirrored,
    shifted, through tables), under random conditions on i (a cut, a parity): a concatenation's and a
    reshape's rows, and worse."""
    x, i = sg.array("x", n), sg.index("i", n)
    cut = int(rng.integers(1, n))

    def address():
        d, c = int(rng.integers(1, 5)), int(rng.integers(0, 4))
        forms = [i // d, (i + c) // (d + 1), i % (d + 1) + c, n - 1 - i, d * (i // d),
                 table(rng.integers(0, n, n // d + 1).tolist())[i // d]]
        return forms[rng.integers(len(forms))]

    def value(depth):
        if depth == 0 or rng.random() < 0.3:
            return x[address()]
        a, b = value(depth - 1), value(depth - 1)
        kind = rng.integers(4)
        if kind == 0:
            return sg.where(i < cut if rng.random() < 0.7 else i % 2 == 0, a, b)
        return a * b if kind == 1 else sg.sin(a) + b if kind == 2 else a - 2.0 * b

    return sg.tensor(value(4), i), x


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([70, 128, 150, 257, 300]))
def test_the_pieces_of_random_rows_are_their_rows(seed, n):
    """row_pieces splits rows at their conditions' cuts and by the period of their // and %: every row
    lands in one piece, and each piece's values (the loop VM's) are those rows' values."""
    from symgrad.compile.function import compile
    from symgrad.expr.row_pieces import row_pieces

    rng = np.random.default_rng(seed)
    rows, x = _random_rows(rng, n)
    at = rng.uniform(-1, 1, n)
    want = compile([rows], [x], [], "vm")(at)
    pieces = row_pieces(rows)
    assert np.array_equal(np.sort(np.concatenate([on for _, on in pieces])), np.arange(n))
    got = compile([piece for piece, _ in pieces], [x], [], "vm")(at)
    np.testing.assert_array_equal(got, want[np.concatenate([on for _, on in pieces])])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_an_assembly_of_runs_and_loose_values_is_bincounts(seed):
    """Assembly copies runs of values landing alone at evenly spaced positions (band formulas' values in
    CSR order, side by side: a transposed block) and adds the rest: every entry is np.bincount's, at
    positions no value reaches 0, whether runs meet other values, touch, or stop short of RUN_MIN."""
    rng = np.random.default_rng(seed)
    count, step = int(rng.integers(1, 3 * sparse_loops.RUN_MIN)), int(rng.integers(1, 6))
    width, start = int(rng.integers(1, step + 1)), int(rng.integers(0, 5))
    size = start + step * count + int(rng.integers(0, 5))
    slots = rng.permutation(width) if rng.random() < 0.3 else np.arange(width)
    positions = [start + slot + step * np.arange(count) for slot in slots]  # (a run a slot, its sources in order)
    positions.append(rng.integers(0, size, int(rng.integers(0, 50))))  # (loose values, some meeting the runs)
    shuffled = rng.random() < 0.5
    if shuffled:
        positions = [positions[k] for k in rng.permutation(len(positions))]
    positions = np.concatenate(positions)
    in_order = rng.random() < 0.8
    sources = np.arange(positions.size) if in_order else rng.permutation(positions.size)
    values = rng.normal(size=positions.size + 3)
    assembly = sparse_loops.Assembly(positions, sources, size)
    want = np.bincount(positions, values[sources], minlength=size)
    np.testing.assert_array_equal(assembly(values), want)
    np.testing.assert_array_equal(sparse_loops._module().assemble(values, *assembly.arranged()), want)  # (export)
    if count >= sparse_loops.RUN_MIN and np.array_equal(slots, np.arange(width)) and \
            positions.size == width * count and in_order and not shuffled:
        assert [run[3:] for run in assembly.runs] == [(count, width)]  # (one transposed block)


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
def test_the_sparse_loops_are_built_on_a_thread_of_their_own_while_the_first_sparse_function_traces(
        monkeypatch, tmp_path):
    """Where neither the process nor the cache has them (a new machine), the colouring and assembly loops'
    C is built on a thread beside the trace (0.08 s of a fresh process's first sparse result, waited for
    after the trace before), and the Hessian is right."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    sparse_loops._module.cache_clear()
    threads, build = [], c_backend.build

    def recording(text, stem, *args, **kwargs):
        if stem == "sparse_loops":
            threads.append(threading.current_thread().name)
        return build(text, stem, *args, **kwargs)

    monkeypatch.setattr(c_backend, "build", recording)
    try:
        x = np.linspace(-1.0, 1.5, 300)
        H = sg.hessian(rosen, sparse=True)(x)
        for thread in threading.enumerate():
            if thread.name == "symgrad-sparse-loops":
                thread.join()
    finally:
        sparse_loops._module.cache_clear()  # (this cache folder's objects: not the next test's)
    assert "symgrad-sparse-loops" in threads, threads
    np.testing.assert_allclose(H.toarray(), rosen_hessian(x).toarray(), rtol=1e-13, atol=1e-12)
