"""Tracing Python functions: values and derivatives against NumPy and finite differences,
NumPy on symbolic values, argument handling and the errors for untraceable code."""

import math
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr.arrays import ELEMENTWISE
from symgrad.expr.functions import SymArray

VM = dict(backend="vm")
rng = np.random.default_rng(0)


def fd_grad(f, x, *rest, h=1e-6):
    """Central differences of a float function of the array ``x`` (same shape as x)."""
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e, *rest) - f(x - e, *rest)) / (2 * h)
    return g


def mlp(x, W, b, v):
    return np.sum(v * np.tanh(W @ x + b)) ** 2


def rosen(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


ARGS = (rng.normal(size=3), rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=4))


def test_grad_of_each_argument_matches_finite_differences():
    x, W, b, v = ARGS
    vg = sg.value_and_grad(mlp, argnums=(0, 1, 2, 3), **VM)
    value, grads = vg(x, W, b, v)
    assert value == pytest.approx(mlp(x, W, b, v), rel=1e-12)
    for k, g in enumerate(grads):
        assert g.shape == ARGS[k].shape
        f_k = lambda a, k=k: mlp(*ARGS[:k], a, *ARGS[k + 1:])
        np.testing.assert_allclose(g, fd_grad(f_k, ARGS[k]), rtol=1e-6, atol=1e-8)


def test_an_int_argnums_gives_one_gradient_and_other_arguments_are_data():
    x, W, b, v = ARGS
    g = sg.grad(mlp, argnums=1, **VM)
    np.testing.assert_allclose(g(x, W, b, v), fd_grad(lambda a: mlp(x, a, b, v), W), rtol=1e-6, atol=1e-8)
    # New data values, same shapes: the same trace, new results.
    W2 = W * 0.5
    np.testing.assert_allclose(g(x * 2, W2, b, v), fd_grad(lambda a: mlp(x * 2, a, b, v), W2), rtol=1e-6,
                               atol=1e-8)
    assert len(g._traces) == 1
    assert g.compiled.program.inputs[:2] == ("W[0, 0]", "W[0, 1]")
    assert g.compiled.program.params[:2] == ("x[0]", "x[1]")


def test_scalar_arguments_and_scalar_gradients():
    f = lambda a, b: a * b + sg.sin(a) / b
    assert sg.grad(f, argnums=(0, 1), **VM)(2.0, 3.0) == pytest.approx(
        (3 + math.cos(2) / 3, 2 - math.sin(2) / 9), rel=1e-14)
    assert sg.grad(f, 1, **VM)(2.0, 3.0) == pytest.approx(2 - math.sin(2) / 9, rel=1e-14)
    assert isinstance(sg.grad(f, **VM)(2.0, 3.0), float)


def test_traced_once_per_shape_and_static_arguments_retrace():
    calls = []

    def f(x, power):
        calls.append(power)
        return np.sum(x ** power)

    g = sg.grad(f, static_argnums=1, **VM)
    np.testing.assert_allclose(g(np.array([1.0, 2.0]), 3), [3.0, 12.0])
    np.testing.assert_allclose(g(np.array([2.0, 1.0]), 3), [12.0, 3.0])
    np.testing.assert_allclose(g(np.array([2.0, 1.0, 1.0]), 3), [12.0, 3.0, 3.0])
    np.testing.assert_allclose(g(np.array([2.0, 1.0]), 2), [4.0, 2.0])
    assert calls == [3, 3, 2]


def test_keyword_arguments_static_and_data():
    def f(x, *, scale, mode):
        return scale * np.sum(np.exp(x) if mode == "exp" else x ** 2)

    g = sg.grad(f, static_argnames="mode", **VM)
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(g(x, scale=2.0, mode="exp"), 2 * np.exp(x), rtol=1e-14)
    np.testing.assert_allclose(g(x, scale=3.0, mode="sq"), 6 * x, rtol=1e-14)


def test_jit_returns_arrays_scalars_and_tuples():
    @sg.jit(**VM)
    def f(x, y):
        return x * y, np.sum(np.sin(x)), np.outer(x, x)

    x = np.array([0.3, -0.7, 1.1])
    a, s, o = f(x, 2.0)
    np.testing.assert_allclose(a, x * 2.0, rtol=1e-15)
    assert s == pytest.approx(np.sum(np.sin(x)), rel=1e-14)
    np.testing.assert_allclose(o, np.outer(x, x), rtol=1e-15)
    assert sg.jit(lambda x: np.linalg.norm(x), **VM)(x) == pytest.approx(np.linalg.norm(x), rel=1e-14)


def test_jacobian_and_hessian_shapes_follow_jax():
    x, W, b, v = ARGS
    J = sg.jacobian(lambda W, x: np.tanh(W @ x), **VM)(W, x)
    assert J.shape == (4, 4, 3)
    fd = np.stack([fd_grad(lambda a, i=i: np.tanh(a @ x)[i], W) for i in range(4)])
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-8)
    H = sg.hessian(rosen, **VM)(np.array([1.0, 2.0, 3.0]))
    g = sg.grad(rosen, **VM)
    ref = np.array([fd_grad(lambda a, i=i: g(a)[i], np.array([1.0, 2.0, 3.0])) for i in range(3)])
    np.testing.assert_allclose(H, ref, rtol=1e-6, atol=1e-6)
    blocks = sg.hessian(mlp, argnums=(0, 2), **VM)(x, W, b, v)
    assert [[blk.shape for blk in row] for row in blocks] == [[(3, 3), (3, 4)], [(4, 3), (4, 4)]]
    np.testing.assert_allclose(blocks[0][1], blocks[1][0].T, rtol=1e-12)


def test_hvp_is_the_hessian_times_v():
    x, W, b, v = ARGS
    H = sg.hessian(mlp, argnums=1, **VM)(x, W, b, v).reshape(12, 12)
    V = rng.normal(size=(4, 3))
    hv = sg.hvp(mlp, argnums=1, **VM)(x, W, b, v, V)
    assert hv.shape == W.shape
    np.testing.assert_allclose(hv.ravel(), H @ V.ravel(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sg.hvp(mlp, argnums=1, **VM)(x, W, b, v, v=V), hv, rtol=1e-15)


@pytest.mark.parametrize("backend", ["vm", "numba"])
def test_call_many_is_a_call_for_each_tangent_cotangent_and_vector(backend):
    """Function.call_many (a sparse Jacobian's products, one batched kernel call, rows on threads) gives
    what call gives for each extra, for rolled programs (loops) and element-traced ones."""
    from symgrad.trace import Function

    def f(x, w):
        return np.sin(x[1:] * x[:-1]) * w[1:] + np.cumsum(x)[:-1] ** 2

    for n in (5, 200):  # (traced element by element, then rolled)
        x, w = rng.normal(size=n), rng.normal(size=n)
        seeds = [rng.normal(size=n) for _ in range(3)]
        jvp, vjp = Function(f, "jvp", backend=backend), Function(f, "vjp", backend=backend)
        hvp = Function(lambda x, w: np.sum(f(x, w) ** 2), "hvp", argnums=0, backend=backend)
        cases = [(jvp, [(s, np.zeros(n)) for s in seeds]), (vjp, [s[1:] for s in seeds]), (hvp, seeds)]
        for fn, extras in cases:
            many = fn.call_many((x, w), {}, extras)
            for got, extra in zip(many, extras):
                want = fn.call((x, w), {}, extra)
                for a, b in zip(sg.pytree.flatten(got)[0], sg.pytree.flatten(want)[0]):
                    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_inspection_formulas_and_source():
    g = sg.grad(lambda x: x[0] * x[1] + np.sin(x[0]), **VM)
    with pytest.raises(RuntimeError, match="not been traced"):
        g.formulas()
    g(np.array([1.0, 2.0]))
    assert g.formulas().splitlines() == ["f = x[0]*x[1] + sin(x[0])", "df/dx[0] = x[1] + cos(x[0])",
                                         "df/dx[1] = x[0]"]
    assert str(g.exprs) == "x[0]*x[1] + sin(x[0])"
    assert [str(d) for d in g.derivatives] == ["x[1] + cos(x[0])", "x[0]"]
    assert "cos" in g.source
    t = g.trace(np.zeros(3))
    assert t.arguments["x"].shape == (3,) and t.compiled.program.inputs == ("x[0]", "x[1]", "x[2]")
    assert "d2f/dx[0]dx[1] = 1" in sg.hessian(lambda x: x[0] * x[1], **VM).trace(np.zeros(2)).formulas()


def test_the_numba_backend_runs_traced_functions():
    vg = sg.value_and_grad(lambda x, y: x ** 2 * y + np.exp(x), backend="numba")
    value, g = vg(1.5, 2.0)
    assert value == pytest.approx(1.5 ** 2 * 2 + math.exp(1.5), rel=1e-15)
    assert g == pytest.approx(2 * 1.5 * 2 + math.exp(1.5), rel=1e-15)
    assert vg.compiled.backend == "numba"


# ---- NumPy on symbolic values ------------------------------------------------------------------

@pytest.mark.parametrize("ufunc", sorted(ELEMENTWISE, key=lambda u: u.__name__), ids=lambda u: u.__name__)
def test_every_supported_ufunc_builds_what_numpy_computes(ufunc):
    a, b = np.array([0.3, 0.7, 1.9]), np.array([1.2, -0.4, 0.6])
    sa, sb = (sg.vector(n, 3).view(SymArray) for n in "ab")
    if ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert):  # (of conditions: &, |, ^, ~)
        a, b, sa, sb = a > 0.5, b > 0.5, sa > 0.5, sb > 0.5
    if ufunc is np.ldexp:  # (its exponents are integers)
        b = sb = np.array([3, -1, 0])
    exprs = ufunc(*(sa, sb)[: ufunc.nin])
    assert isinstance(exprs, SymArray)
    got = np.array([sg.evaluate(e, {**{f"a[{i}]": a[i] for i in range(3)}, **{f"b[{i}]": b[i] for i in range(3)}})
                    for e in exprs], dtype=float)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, ufunc(*(a, b)[: ufunc.nin]).astype(float), rtol=1e-14, equal_nan=True)


@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_numpy_functions_that_need_values_or_floats_raise_clear_errors():
    x = np.array([1.0, -2.0])

    def branchy(x):
        if x[0] > 0:
            return x[0]
        return -x[0]

    g = sg.grad(branchy, **VM)  # a Python if: decided by the call's values (JAX's grad without jit)
    np.testing.assert_array_equal(g(x), [1.0, 0.0])
    np.testing.assert_array_equal(g(-x), [-1.0, 0.0])
    rows = np.outer(np.where(np.arange(100) % 3, 1.0, -1.0), [1.0, 2.0])  # each row its own branch
    np.testing.assert_array_equal(sg.vmap(sg.grad(branchy), **VM)(rows), np.c_[np.sign(rows[:, 0]), np.zeros(100)])
    with pytest.raises(sg.TracingError, match=r"np\.spacing is not supported .* np\.sin"):
        sg.grad(lambda x: np.sum(np.spacing(x)), **VM)(x)
    with pytest.raises(sg.TracingError, match=r"np\.argmax needs the values"):
        sg.grad(lambda x: x[np.argmax(x)], **VM)(x)
    with pytest.raises(sg.TracingError, match=r"np\.linalg\.eigh cannot run on symbolic arrays"):
        sg.grad(lambda x: np.sum(np.linalg.eigh(np.outer(x, x))[0]), **VM)(x)
    with pytest.raises(sg.TracingError, match=r"math\.\* functions .* sg\.sin"):
        sg.grad(lambda x: math.sin(x[0]), **VM)(x)
    with pytest.raises(sg.TracingError, match="static arguments"):
        sg.grad(lambda x: x[0] * len(range(x[1])), **VM)(x)
    with pytest.raises(sg.TracingError, match="out="):
        sg.grad(lambda x: np.sin(x, out=np.empty(2))[0], **VM)(x)


def test_where_maximum_and_clip_work_on_arrays_and_differentiate_the_taken_branch():
    f = lambda x: np.sum(np.where(x > 0, np.log(np.abs(x) + 1e-300), 0.0) + np.clip(x, -1, 1) + np.maximum(x, 0))
    x = np.array([2.0, -3.0, 0.5])
    g = sg.grad(f, **VM)(x)
    np.testing.assert_allclose(g, [1 / 2 + 0 + 1, 0 + 0 + 0, 2 + 1 + 1], rtol=1e-14)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="argument 's' is str.*static"):
        sg.grad(lambda x, s: x, argnums=1, **VM)(1.0, "abc")
    assert sg.grad(lambda x, s: x * len(s), **VM)(1.0, "abc") == 3.0  # not differentiated: static
    with pytest.raises(TypeError, match="must return one scalar, got shape \\(2,\\).*sg.jacobian"):
        sg.grad(lambda x: x, **VM)(np.ones(2))
    with pytest.raises(TypeError, match="static argument 1 must be hashable"):
        sg.grad(lambda x, opts: x, static_argnums=1, **VM)(1.0, [np.ones(2)])
    assert sg.grad(lambda x, shape: x * shape[0], static_argnums=1, **VM)(1.0, [3]) == 3.0  # a list of ints
    with pytest.raises(TypeError, match="argnums 2 is not a traced positional argument"):
        sg.grad(lambda x: x, argnums=2, **VM)(1.0)
    with pytest.raises(TypeError, match="expected a function"):
        sg.jit(3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sparse'; accepted: .*argnums, has_aux"):
        sg.grad(lambda x: x, sparse=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=2, max_size=6))
def test_traced_gradient_matches_the_expression_api(xs):
    x = np.array(xs)
    f = lambda x: np.sum(np.tanh(x[1:] * x[:-1])) + np.sum(x ** 2 / (1 + x[::-1] ** 2))
    s = sg.vector("x", len(x))
    ref = sg.evaluate(sg.grad(f(s.view(SymArray)), s), {f"x[{i}]": v for i, v in enumerate(x)})
    np.testing.assert_allclose(sg.grad(f, backend="python")(x), np.array(ref, dtype=float), rtol=1e-12,
                               atol=1e-14)


def test_huge_integer_arguments():
    g = sg.grad(lambda x, y: x * y)
    assert g(10**20, 2.0) == 2.0
    with pytest.raises(ValueError, match="too large for a float64"):
        g(10**400, 2.0)


@pytest.mark.parametrize("n", [3, 100])  # element by element, rolled
def test_results_follow_the_float_dtype_of_the_array_arguments(n):
    """float32 arrays give float32 results, as JAX's (computed in float64, then rounded); a float64
    array or none (Python floats are weak, as in JAX) gives float64."""
    x32 = np.linspace(0.0, 1.0, n, dtype=np.float32)
    out = sg.jit(lambda x, s: np.sin(x) * s)(x32, 2.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, (np.sin(x32.astype(float)) * 2.0).astype(np.float32), rtol=1e-7)
    value, grad = sg.value_and_grad(lambda x: np.sum(x ** 2))(x32)
    assert type(value) is np.float32 and grad.dtype == np.float32
    assert sg.jit(lambda x, y: x * y)(x32, np.ones(n)).dtype == np.float64
    assert sg.jit(lambda x: x * 2.0)(np.arange(n)).dtype == np.float64


_INT_LEAVES = st.sampled_from(["a", "b", "3", "-2", "(a // 3)", "np.abs(b)"])


def _int_expr(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from(["//", "%"]), children).map(
            lambda t: f"({t[0]} {t[1]} (np.abs({t[2]}) + 1))"),
        st.tuples(st.sampled_from(["np.minimum", "np.maximum"]), children, children).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"))


@settings(max_examples=30, deadline=None)
@given(st.recursive(_INT_LEAVES, _int_expr, max_leaves=6).filter(lambda t: re.search(r"\b[ab]\b", t)),
       st.sampled_from([4, 100]),
       st.sampled_from(["", " > 2", " * 1.0", " / 2"]))
def test_integer_arithmetic_under_jit_gives_numpys_values_and_dtypes(text, n, tail):
    """Integer arguments combined by + - * // % min max give NumPy's int64 (comparisons: bool; a
    float operand or / : float64), exactly, element by element and rolled."""
    f = eval(f"lambda a, b: {text}{tail}")
    rng = np.random.default_rng(n)
    a, b = rng.integers(-50, 50, n), rng.integers(-50, 50, n)
    assume(not np.array_equal(f(a, b), f(a + 1, b - 1)))  # (a - a folds to the float 0.0: not NumPy's int)
    want, got = f(a, b), sg.jit(f, backend="vm")(a, b)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


def test_integers_beyond_two_to_the_53_are_refused():
    f = sg.jit(lambda a: a % 7)
    assert f(np.array([2**52, 9])).tolist() == [2**52 % 7, 2]
    with pytest.raises(OverflowError, match="beyond 2\\*\\*53"):
        f(np.array([2**60 + 1, 9]))
    with pytest.raises(OverflowError, match="beyond 2\\*\\*53"):
        sg.jit(lambda a: a * a)(np.array([2**30, 1]))


@pytest.mark.parametrize("n", [5, 100])  # element by element, rolled
def test_a_traced_boolean_mask_is_refused_with_the_way_around(n):
    a = np.linspace(0.0, 2.0, n)
    with pytest.raises(sg.TracingError, match=r"traced boolean mask.*np.where\(mask, a, 0.0\)"):
        sg.grad(lambda a: np.sum(a[a > 1]))(a)
    np.testing.assert_array_equal(sg.grad(lambda a: np.sum(np.where(a > 1, a, 0.0)))(a), (a > 1) * 1.0)


@pytest.mark.parametrize("x", [2.0, np.array([1.0, 2.0])])  # a traced scalar, a small array
def test_zeros_like_and_kin_of_traced_values(x):
    f = lambda x: np.sum(x + np.zeros_like(x) + np.full_like(x, 2.0) * x * np.ones_like(x))  # noqa: E731
    np.testing.assert_allclose(sg.grad(f)(x), 3.0 * np.ones_like(x))


def test_python_ints_as_sizes_in_arange_zeros_and_nested_grads():
    """GradBench's pattern: jit(lambda A: grad(f)(A, n)) with n a size, and np.arange(n) / np.zeros(n)
    of an int argument under grad (they raised: n traced as a number)."""
    f = lambda A, n: np.sum(A.reshape(n, n)[0] ** 2)  # noqa: E731
    A = np.arange(9.0)
    np.testing.assert_array_equal(sg.jit(lambda A: sg.grad(f)(A, 3))(A), [0, 2, 4, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(sg.grad(lambda A: np.sum(sg.grad(f)(A, 3) ** 2))(A),
                                  [0, 8, 16, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(sg.grad(lambda x, n: np.sum(x) * np.sum(np.arange(n)))(np.ones(3), 5),
                                  [10.0] * 3)
    np.testing.assert_array_equal(sg.grad(lambda x, n: np.sum(x) * np.sum(np.zeros(n) + 1))(np.ones(300), 5),
                                  [5.0] * 300)


def test_an_unpickled_array_finds_the_trace_of_a_fresh_one():
    """An unpickled float64 array has a dtype equal to NumPy's float64 but not the same object: it
    keys the same trace (it traced again, once per such argument: Dask's workers receive them)."""
    import pickle

    g = sg.grad(lambda x: np.sum(np.sin(x) * x), **VM)
    x = rng.normal(size=5)
    moved = pickle.loads(pickle.dumps(x))
    assert moved.dtype == np.float64 and moved.dtype is not x.dtype
    np.testing.assert_array_equal(g(x), g(moved))
    assert len(g._traces) == 1


def test_an_object_array_of_numbers_is_traced_as_their_float64_values():
    """NumPy reads np.array([1.0, 4.0], dtype=object) as numbers (a pandas column often is one): the
    values and gradients are the float64 array's, not formulas; an object array of Exprs stays symbolic,
    and one holding a string is refused naming the argument."""
    loss = lambda w, t, y: np.sum((w[0] * t + w[1] - y) ** 2)  # noqa: E731
    w, t, y = np.array([2.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 4.5])
    want = sg.value_and_grad(loss, backend="vm")(w, t, y)
    for backend in ("vm", "python"):
        vg = sg.value_and_grad(loss, backend=backend)
        value, grad = vg(w, t, y.astype(object))
        assert type(value) is float and grad.dtype == np.float64
        assert value == want[0] and np.array_equal(grad, want[1])
        value, grad = vg.sum(w.astype(object), t, y.astype(object))
        np.testing.assert_allclose(value, want[0], rtol=1e-15)
    x = sg.Var("x")
    assert str(sg.jit(lambda v: v * 2)(np.array([x, 1.0], dtype=object))[0]) == "2*x"
    with pytest.raises(TypeError, match="argument 'v' is an object array holding neither numbers"):
        sg.jit(lambda v: v * 2)(np.array(["a", 1.0], dtype=object))
