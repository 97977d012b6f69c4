"""The C backend and sg.export_c: every op's C form against the Numba kernels (special values included,
bit for bit where the library is the same; symgrad's special functions over wide ranges), random graphs
on backend="c" against the interpreter, exported files compiled warning-free (-std=c99 -Wall -Wextra
-Werror -pedantic) and called through CasADi's calling convention from a C driver (also under
-fsanitize=address,undefined), sparse Hessians in compressed-column form, hostile names, and the errors
for what cannot be exported; rolled functions as C loops (sorts, scans, products, gathers through integer
arguments), their files flat in n. The random rolled programs on backend="c": tests/test_fuzz.py."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from backends import agree
from graphs import OP_NAMES, VARS, dags, points
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compile import c_backend, c_source
from symgrad.expr.build import apply
from symgrad.expr.ops import OPS

CC = shutil.which(os.environ.get("CC", "cc"))
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (the C backend's tests need one)")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.0, 1e-300, 1e300, np.inf, -np.inf, np.nan]


def test_every_op_has_a_c_form():
    """Each scalar op's template translates (symgrad's special functions through c_functions.py)."""
    for op in OPS.values():
        if op.numba and op.kind != "rolled":
            assert c_source.template(op.name)


def test_each_op_agrees_with_numba_at_special_values():
    """One program of every scalar op with a C form, at every pair of special values: the C kernels and
    the Numba kernels give the same bits (or both nan)."""
    x, y = sg.symbols("x y")
    outs = []
    for op in OPS.values():
        if not op.numba or op.kind == "rolled":
            continue
        outs.append(apply(op, (x, y, x)[:op.arity]))
    c = sg.compile(np.array(outs, dtype=object), [x, y], backend="c")
    n = sg.compile(np.array(outs, dtype=object), [x, y], backend="numba")
    points = np.array([(a, b) for a in SPECIAL for b in SPECIAL])
    got, want = c.batch(points), n.batch(points)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), [(outs[k].op.name, points[i]) for i, k in zip(*np.nonzero(~same))][:10]


@settings(max_examples=25, deadline=None)
@given(dags(names=OP_NAMES), st.lists(points, min_size=4, max_size=4))
def test_random_graphs_on_the_c_backend_agree_with_the_interpreter(expr, rows):
    X = np.array(rows)
    ref = sg.compile(expr, list(VARS), backend="python").batch(X)
    got = sg.compile(expr, list(VARS), backend="c").batch(X)
    assert agree(got, ref, rtol=1e-9)


def test_value_grad_batch_and_sum_on_the_c_backend():
    x = sg.vector("x", 3)
    w = sg.vector("w", 3)
    f = sg.log(1.0 + sg.exp(-(x[0] * w[0] + x[1] * w[1] + x[2] * w[2])))
    c = sg.value_and_grad(f, list(x), params=list(w), backend="c")
    n = sg.value_and_grad(f, list(x), params=list(w), backend="numba")
    rng = np.random.default_rng(0)
    X, W = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    v1, g1 = c(X[0], W[0])
    v2, g2 = n(X[0], W[0])
    assert v1 == v2 and np.array_equal(g1, g2)
    for a, b in zip(c.batch(X, W), n.batch(X, W)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(c.sum(X[0], W), n.sum(X[0], W)):
        np.testing.assert_allclose(a, b, rtol=1e-14)


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"
int main(void) {{
    long long sz_arg, sz_res, sz_iw, sz_w;
    {name}_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
    const double* arg[{n_in}];
    double* res[{n_out}];
    double in[{n_in}][{max_in}];
    double out[{n_out}][{max_out}];
    double* w = malloc(sizeof(double) * (size_t)(sz_w + 1));
    long long* iw = malloc(sizeof(long long) * (size_t)(sz_iw + 1));
    for (int i = 0; i < {n_in}; ++i) {{
        const long long* sp = {name}_sparsity_in(i);
        long long nnz = sp[2] == 1 ? sp[0] * sp[1] : sp[2 + sp[1]];
        for (long long k = 0; k < nnz; ++k) if (scanf("%lf", &in[i][k]) != 1) return 2;
        arg[i] = in[i];
    }}
    for (int i = 0; i < {n_out}; ++i) res[i] = out[i];
    if ({name}(arg, res, iw, w, 0) != 0) return 3;
    for (int i = 0; i < {n_out}; ++i) {{
        const long long* sp = {name}_sparsity_out(i);
        long long nnz = sp[2] == 1 ? sp[0] * sp[1] : sp[2 + sp[1]];
        for (long long k = 0; k < nnz; ++k) printf("%.17g\n", out[i][k]);
    }}
    free(w); free(iw);
    return 0;
}}
"""


def _run_exported(fun, tmp_path, inputs, name="f", n_in=1, n_out=1, flags=(), example=()):
    """Export ``fun`` (traced at ``example``), build it with a driver under the strict flags, feed ``inputs``
    (each argument's nonzeros in order), and return the printed results."""
    sg.export_c(fun, *example, name=name, directory=tmp_path)
    sizes = [len(v) for v in inputs]
    (tmp_path / "main.c").write_text(DRIVER.format(name=name, n_in=n_in, n_out=n_out, max_in=max(sizes),
                                                   max_out=4096))
    exe = tmp_path / "run"
    subprocess.run([CC, *STRICT, "-O1", *flags, "-o", str(exe), str(tmp_path / "main.c"),
                    str(tmp_path / f"{name}.c"), "-lm"], check=True, capture_output=True, text=True)
    text = " ".join(" ".join(repr(float(v)) for v in vec) for vec in inputs)
    run = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    return np.array([float(v) for v in run.stdout.split()])


def test_exported_value_and_gradient_through_casadis_convention(tmp_path):
    x, y = sg.symbols("x y")
    f = sg.maximum(x, y) * sg.sin(x) + x ** y + sg.where(x > y, sg.log1p(x * x), sg.tanh(y))
    fun = sg.value_and_grad(f, [x, y])
    for point in ([0.7, 1.3], [2.0, -0.5], [0.0, 0.0]):
        got = _run_exported(fun, tmp_path, [[point[0]], [point[1]]], n_in=2, n_out=2)
        value, grad = fun(np.array(point))
        np.testing.assert_array_equal(got, [value, *grad])


def test_exported_sparse_hessian_in_compressed_columns(tmp_path):
    x = sg.vector("x", 6)
    f = sum((1 - x[i]) ** 2 + 100 * (x[i + 1] - x[i] ** 2) ** 2 for i in range(5))
    H = sg.compile(sg.hessian(f, list(x), sparse=True), list(x))
    point = np.linspace(-1.0, 1.5, 6)
    got = _run_exported(H, tmp_path, [point])
    want = H(point).tocsc()
    want.sort_indices()
    np.testing.assert_array_equal(got, want.data)
    text = (tmp_path / "f.c").read_text()
    assert ", ".join(map(str, [6, 6, *want.indptr, *want.indices])) in text


def test_exported_matrix_results_are_column_major(tmp_path):
    x = sg.vector("x", 3)
    J = sg.jacobian([x[0] * x[1], sg.sin(x[2]) * x[0]], list(x))
    fun = sg.compile(J, list(x))
    point = np.array([0.5, -2.0, 1.25])
    got = _run_exported(fun, tmp_path, [point])
    np.testing.assert_array_equal(got, np.asarray(fun(point)).reshape(2, 3).ravel(order="F"))


def test_exported_file_runs_clean_under_the_sanitizers(tmp_path):
    x = sg.vector("x", 4)
    f = sg.log(sum(sg.exp(x[i]) for i in range(4))) + x[0] % 0.7 + x[1] // 0.3
    fun = sg.value_and_grad(f, list(x))
    got = _run_exported(fun, tmp_path, [[0.1, -0.2, 0.3, 2.0]], n_out=2,
                        flags=("-fsanitize=address,undefined", "-fno-sanitize-recover=all"))
    value, grad = fun(np.array([0.1, -0.2, 0.3, 2.0]))
    np.testing.assert_allclose(got, [value, *grad], rtol=1e-15)


def test_hostile_names_are_only_strings(tmp_path):
    main, kw, odd = sg.Var("main"), sg.Var("int"), sg.Var('ü"?\\')
    fun = sg.value_and_grad(main * kw + sg.cos(odd), [main, kw, odd])
    got = _run_exported(fun, tmp_path, [[1.5], [2.0], [0.25]], n_in=3, n_out=2)
    value, grad = fun(np.array([1.5, 2.0, 0.25]))
    np.testing.assert_array_equal(got, [value, *grad])
    with pytest.raises(ValueError, match="cannot name a C function"):
        sg.export_c(fun, name="main", directory=tmp_path)
    with pytest.raises(ValueError, match="cannot name a C function"):
        sg.export_c(fun, name="2f", directory=tmp_path)


def test_special_functions_in_c_are_the_numba_kernels_bit_for_bit(tmp_path):
    """digamma, polygamma, sinc's derivatives, erfinv and ive are symgrad's own Python, written as C by
    c_functions.py: over wide ranges and at special values, the same bits as the Numba kernels; an exported
    file holding them all compiles under the strict flags."""
    x, y = sg.symbols("x y")
    outs = np.array([apply(OPS[n], (x, y)[:OPS[n].arity]) for n in ("digamma", "polygamma", "sinc",
                     "sinc_derivative", "erfinv", "ive", "gammaln")], dtype=object)
    rng = np.random.default_rng(5)
    points = np.concatenate([np.c_[rng.uniform(-30, 30, 4000), rng.integers(0, 8, 4000)],
                             np.c_[rng.integers(0, 8, 2000), rng.uniform(-1, 1, 2000)],
                             np.array([(a, b) for a in SPECIAL + [3.0, 171.0] for b in SPECIAL + [3.0, 171.0]])])
    got = sg.compile(outs, [x, y], backend="c").batch(points)
    want = sg.compile(outs, [x, y], backend="numba").batch(points)
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()
    got = _run_exported(sg.compile(outs, [x, y]), tmp_path, [[0.7], [2.0]], n_in=2)
    np.testing.assert_array_equal(got, want[:0].tolist() or sg.compile(outs, [x, y])(np.array([0.7, 2.0])))


def test_what_cannot_be_exported_says_so(tmp_path):
    with pytest.raises(TypeError, match="compiled formula"):
        sg.export_c(lambda v: v, directory=tmp_path)


def test_a_missing_compiler_is_named(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    x = sg.Var("x")
    with pytest.raises(c_backend.CompilerError, match="no-such-cc"):
        sg.compile(x * x, [x], backend="c")


def test_traced_value_and_gradient_with_matrix_and_data_arguments(tmp_path):
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(2, 3)), rng.normal(size=3)
    vg = sg.value_and_grad(lambda x, w: np.sum(np.tanh(x @ w) ** 2) + np.max(x))
    got = _run_exported(vg, tmp_path, [x.ravel(order="F"), w], n_in=2, n_out=2, example=(x, w))
    value, grad = vg(x, w)
    np.testing.assert_array_equal(got, [value, *grad.ravel(order="F")])


def test_traced_sparse_hessian_and_hvp(tmp_path):
    x = np.linspace(-1.0, 1.0, 7)
    f = lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
    H = sg.hessian(f, sparse=True)
    want = H(x).tocsc()
    want.sort_indices()
    np.testing.assert_array_equal(_run_exported(H, tmp_path, [x], example=(x,)), want.data)
    v = np.arange(7.0)
    hvp = sg.hvp(f)
    got = _run_exported(hvp, tmp_path, [x, v], n_in=2, example=(x, v))
    np.testing.assert_allclose(got, hvp(x, v), rtol=1e-13)


def _held_out(x, A, d):
    """Rolled code of every kind the loops have: a sort and its gather, a strided slice, running sums and a
    max, a matrix product with a matrix argument, elementwise min / max, a data argument."""
    y = np.sort(x)[::2] * d[:50]
    return (np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2) + np.max(np.cumsum(np.tanh(x)))
            + np.sum(y ** 2) + np.sum(np.sin(A @ x[:8]) * A[:, 0]) + np.sum(np.minimum(x, 0.3) * np.maximum(x, d)))


def test_rolled_loops_export_through_casadis_convention(tmp_path):
    rng = np.random.default_rng(0)
    x, A, d = rng.normal(size=100), rng.normal(size=(20, 8)), rng.normal(size=100)
    vg = sg.value_and_grad(_held_out, argnums=(0, 1))
    assert type(vg.trace(x, A, d).compiled.program).__name__ == "LoopProgram"
    got = _run_exported(vg, tmp_path, [x, A.ravel(order="F"), d], n_in=3, n_out=3, example=(x, A, d))
    value, (gx, gA) = vg(x, A, d)
    np.testing.assert_allclose(got, np.r_[value, gx, gA.ravel(order="F")], rtol=1e-13, atol=1e-13)


def test_rolled_export_runs_clean_under_the_sanitizers_and_its_size_is_flat_in_n(tmp_path):
    def f(x):  # a scan (running products), a sort, a reversed cumsum, a gather through integer positions
        return np.sum(np.cumprod(1.0 + 0.1 * np.sin(x))) + np.sum(np.sort(x)[::-1] * np.cumsum(x[::-1]))
    x = np.random.default_rng(1).normal(size=120)
    vg = sg.value_and_grad(f)
    got = _run_exported(vg, tmp_path, [x], n_out=2, example=(x,),
                        flags=("-fsanitize=address,undefined", "-fno-sanitize-recover=all"))
    value, grad = vg(x)
    np.testing.assert_allclose(got, [value, *grad], rtol=1e-12)
    sizes = [sg.export_c(vg, np.ones(n), directory=tmp_path / str(n))[0].stat().st_size for n in (200, 10 ** 5)]
    assert sizes[1] <= sizes[0] + 200, sizes  # (the digits of the sizes only)


def test_rolled_vmap_and_jacobian_export_column_major(tmp_path):
    rng = np.random.default_rng(4)
    X, x = rng.normal(size=(4, 100)), rng.normal(size=70)
    per_row = sg.vmap(sg.grad(lambda x: np.sum(np.sort(x)[:50] ** 2) + np.max(x)))
    jac = sg.jacobian(lambda x: np.cumsum(np.tanh(x))[::3])
    for fun, arg in ((per_row, X), (jac, x)):
        assert type(fun.trace(arg).compiled.program).__name__ == "LoopProgram"
        got = _run_exported(fun, tmp_path, [arg.ravel(order="F")], example=(arg,))
        np.testing.assert_allclose(got, np.asarray(fun(arg)).ravel(order="F"), rtol=1e-14, atol=1e-15)


def test_rolled_sparse_hessian_and_jacobian_export_their_band_kernels(tmp_path):
    """Large arrays' sparse derivatives as symgrad computes them (band formulas in one kernel, assembled):
    the same nonzeros bit for bit, in column order, the assembly a loop a band."""
    x = np.linspace(-1.0, 1.0, 1000)
    rosen = lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
    pairs = lambda x: x[1:] * x[:-1] ** 2 - np.sin(x[1:])  # noqa: E731
    for fun in (sg.hessian(rosen, sparse=True), sg.jacobian(pairs, sparse=True)):
        got = _run_exported(fun, tmp_path, [x], example=(x,))
        want = fun(x).tocsc()
        want.sort_indices()
        assert "band formulas" in fun.explain()
        np.testing.assert_array_equal(got, want.data)
        text = (tmp_path / "f.c").read_text()
        assert ", ".join(map(str, [*want.shape, *want.indptr, *want.indices])) in text
        assert sum("res[0][" in line for line in text.splitlines()) <= 4


def test_the_c_backend_runs_rolled_loops_as_the_numba_loops():
    """Bit for bit where the operations are the same (no library call); the value, gradient and Hessian
    product of the held-out function within rounding; an index out of bounds raises as on Numba."""
    rosen = lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
    x = np.random.default_rng(2).normal(size=300)
    got, want = sg.value_and_grad(rosen, backend="c")(x), sg.value_and_grad(rosen, backend="numba")(x)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    rng = np.random.default_rng(3)
    x, A, d, v = rng.normal(size=100), rng.normal(size=(20, 8)), rng.normal(size=100), rng.normal(size=100)
    for transform in (sg.value_and_grad, sg.hvp):
        f = transform(_held_out)
        args = (x, A, d, v) if transform is sg.hvp else (x, A, d)
        a, b = transform(_held_out, backend="c")(*args), f(*args)
        np.testing.assert_allclose(np.hstack(a), np.hstack(b), rtol=1e-12)
    def batched(x):  # (a product per batch row: np.dot on rows of views, found by the fuzzer)
        v = np.exp(0.2 * x.reshape(4, -1))
        return np.sum(np.sin(np.einsum("kij,kj->ki", v[:, :, None] * v[:, None, :], v)))
    x4 = rng.normal(size=384)
    got, want = (np.hstack(sg.value_and_grad(batched, backend=b)(x4)) for b in ("c", "python"))
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())  # (sums in other orders)
    gather = sg.grad(lambda x, i: np.sum(x[i] ** 2), backend="c")
    i = rng.integers(0, 100, 80)
    np.testing.assert_array_equal(gather(x, i), np.bincount(i, 2 * x[i], minlength=100))
    with pytest.raises(IndexError, match="out of bounds"):
        gather(x, np.r_[i[:-1], 100])


def test_what_a_trace_cannot_export_says_so(tmp_path):
    def branchy(x):
        return x[0] * 2.0 if x[0] > 0 else x[1]
    with pytest.raises(NotImplementedError, match="np.where"):
        sg.export_c(sg.grad(branchy), np.ones(3), directory=tmp_path)


def test_the_export_command(tmp_path, monkeypatch):
    from symgrad import cli
    (tmp_path / "lossmod.py").write_text("import numpy as np\n\ndef loss(x, A):\n"
                                         "    return np.sum(np.tanh(A @ x) ** 2) + np.max(x)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert cli.main(["export", "lossmod:loss", "--shapes", "100,300x100", "--transform", "value_and_grad",
                     "--name", "vg", "--to", str(tmp_path)]) == 0  # (rolled: a matrix product as loops)
    subprocess.run([CC, *STRICT, "-c", str(tmp_path / "vg.c"), "-o", str(tmp_path / "vg.o")], check=True)
    assert cli.main(["export", "x*y + sin(x)", "--wrt", "x,y", "--name", "g", "--to", str(tmp_path)]) == 0
    subprocess.run([CC, *STRICT, "-c", str(tmp_path / "g.c"), "-o", str(tmp_path / "g.o")], check=True)
    assert cli.main(["export", "x*y", "--name", "main", "--to", str(tmp_path)]) == 2
    assert cli.main(["export", "no_such_module:f", "--shapes", "3", "--to", str(tmp_path)]) == 2


def test_the_flat_entry_point_is_casadis_over_two_vectors(tmp_path):
    x = sg.vector("x", 3)
    fun = sg.compile(sg.jacobian([x[0] * x[1], sg.sin(x[2]) * x[0]], list(x)), list(x))
    sg.export_c(fun, name="jac", directory=tmp_path)
    (tmp_path / "main.c").write_text(r"""
#include <stdio.h>
#include "jac.h"
int main(void) {
    const double in[3] = {0.5, -2.0, 1.25};
    double out[6];
    if (jac_flat(in, out) != 0) return 1;
    for (int k = 0; k < 6; ++k) printf("%.17g\n", out[k]);
    return 0;
}
""")
    exe = tmp_path / "run"
    subprocess.run([CC, *STRICT, "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "jac.c"), "-lm"],
                   check=True, capture_output=True)
    got = np.array(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(), float)
    point = np.array([0.5, -2.0, 1.25])
    np.testing.assert_array_equal(got, np.asarray(fun(point)).reshape(2, 3).ravel(order="F"))
