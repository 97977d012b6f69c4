"""NumPy programs differentiated as autograd's test suite does: every supported ufunc, reductions with
axis / keepdims, indexing, reshaping, stacking, contractions and small linear algebra, at first and
second order, against central finite differences of the same function run on plain NumPy floats."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.expr.arrays import ELEMENTWISE

rng = np.random.default_rng(7)
PY = dict(backend="python")  # the reference interpreter: no compile, so the whole table stays fast


def fd_grad(f, x, h=1e-6):
    """Central differences of a scalar function of the float array ``x``."""
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def scalarize(fn, shape_out_weights):
    """sum(w * fn(x)) with fixed random weights: every output entry reaches the gradient."""
    return lambda x: np.sum(np.asarray(fn(x)) * shape_out_weights)


def check(fn, x, order=2, rtol=1e-5, atol=1e-6):
    w = rng.uniform(0.5, 1.5, size=np.shape(fn(x)))
    f = scalarize(fn, w)
    g = sg.grad(f, **PY)(x)
    np.testing.assert_allclose(g, fd_grad(f, x), rtol=rtol, atol=atol, err_msg="first order")
    if order >= 2:
        H = sg.hessian(f, **PY)(x).reshape(x.size, x.size)
        ref = np.array([fd_grad(lambda z, i=i: sg.grad(f, **PY)(z).ravel()[i], x).ravel() for i in range(x.size)])
        np.testing.assert_allclose(H, ref, rtol=10 * rtol, atol=10 * atol, err_msg="second order")


U = rng.uniform(0.2, 0.8, size=(2, 3))  # inside every unary domain but arccosh's
N = rng.normal(size=(2, 3))
V = rng.uniform(0.5, 1.5, size=(2, 3))

UNARY = {  # ufunc -> a point where it is smooth (kinks and steps: away from their jumps)
    np.arccosh: 1.5 + U, np.log: V, np.log2: V, np.log10: V, np.sqrt: V, np.reciprocal: V, np.cbrt: V,
    np.arctanh: U - 0.5, np.sign: N, np.floor: N * 3, np.ceil: N * 3, np.trunc: N * 3, np.rint: N * 3,
    np.isnan: N, np.isinf: N, np.isfinite: N,
}
ON_CONDITIONS = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert)
BINARY = {  # ufunc -> (a, b)
    np.power: (V, N), np.float_power: (V, N), np.divide: (N, V), np.true_divide: (N, V), np.arctan2: (N, V),
    np.remainder: (N * 3, V), np.floor_divide: (N * 3, V), np.heaviside: (N, V),
}


@pytest.mark.parametrize("ufunc", sorted(ELEMENTWISE, key=lambda u: u.__name__), ids=lambda u: u.__name__)
def test_every_supported_ufunc_at_first_and_second_order(ufunc):
    if ufunc in ON_CONDITIONS:  # (&, |, ^, ~: of conditions, as NumPy's refuse floats)
        check(lambda ab: 1.0 * ufunc(*(ab[:ufunc.nin] > 0.0)), np.stack([N, N[::-1]]))
    elif ufunc is np.ldexp:  # (its exponents are integers: data)
        check(lambda a: np.ldexp(a, np.array([[1, -2, 0], [3, 0, -1]])), N)
    elif ufunc.nin == 1:
        check(ufunc, UNARY.get(ufunc, U))
    else:
        a, b = BINARY.get(ufunc, (U + 0.1 * N, V))
        check(lambda ab: ufunc(ab[0], ab[1]), np.stack([a, b]))


PROGRAMS = {
    "sum axis keepdims": lambda x: np.sum(x ** 2, axis=1, keepdims=True),
    "mean axis": lambda x: np.mean(np.sin(x), axis=0),
    "mean keepdims": lambda x: np.mean(x * x, axis=1, keepdims=True),
    "var ddof": lambda x: np.var(x, axis=0, ddof=1),
    "std all": lambda x: np.std(x),
    "std axis": lambda x: x.std(axis=1),
    "average weights": lambda x: np.average(x, axis=1, weights=[1.0, 2.0, 3.0]),
    "prod axis": lambda x: np.prod(x, axis=0),
    "max all 2-D": lambda x: np.max(x),
    "min axis tuple": lambda x: np.min(x, axis=(0, 1)),
    "max keepdims": lambda x: np.max(x, axis=0, keepdims=True),
    "cumsum": lambda x: np.cumsum(x, axis=1),
    "cumprod": lambda x: np.cumprod(x.ravel()),
    "logsumexp": lambda x: np.max(x) + np.log(np.sum(np.exp(x - np.max(x)))),
    "norm": lambda x: np.linalg.norm(x),
    "norm axis": lambda x: np.linalg.norm(x, axis=1),
    "norm ord 3": lambda x: np.linalg.norm(x.ravel(), ord=3),
    "norm inf": lambda x: np.linalg.norm(x.ravel(), ord=np.inf),
    "norm matrix 1": lambda x: np.linalg.norm(x, 1),
    "norm matrix inf": lambda x: np.linalg.norm(x, np.inf),
    "fancy index": lambda x: x[[1, 0, 1], [2, 0, 1]] * x[0, ::-1],
    "bool mask (data)": lambda x: x[np.array([[True, False, True], [False, True, True]])],
    "negative and step slices": lambda x: x[-1, ::2] * x[:, -1].sum(),
    "reshape transpose": lambda x: x.reshape(3, 2).T @ x.reshape(3, 2),
    "swapaxes moveaxis": lambda x: np.moveaxis(np.swapaxes(x[None], 1, 2), 0, -1) ** 2,
    "ravel squeeze expand": lambda x: np.squeeze(np.expand_dims(x.ravel(), 0)) * np.arange(6.0),
    "flip roll": lambda x: np.roll(np.flip(x, axis=1), 1) * x,
    "repeat tile": lambda x: np.repeat(x[0], 2) * np.tile(x[1], 2),
    "stack concatenate": lambda x: np.concatenate([np.stack([x[0], x[1]]), np.vstack([x[1], x[0]])]) ** 3,
    "hstack dstack": lambda x: np.hstack([x, x ** 2]).sum() + np.dstack([x, x]).prod(),
    "einsum": lambda x: np.einsum("ij,kj->ik", x, np.sin(x)),
    "dot outer inner": lambda x: np.dot(x[0], x[1]) + np.outer(x[0], x[1]).sum() + np.inner(x[0], x[0]),
    "tensordot": lambda x: np.tensordot(x, x, axes=([1], [1])),
    "trace diag tril triu": lambda x: np.trace(x[:, :2]) + np.diag(x[:, :2]).sum()
    + np.tril(x).sum() * np.triu(x).sum(),
    "cross": lambda x: np.cross(x[0], x[1]),
    "diff": lambda x: np.diff(x, axis=1) ** 2,
    "where clip": lambda x: np.where(x > 0, np.exp(x), np.clip(x, -0.5, 0.5)),
    "select": lambda x: np.select([x > 0.5, x < -0.5], [x ** 2, -x], default=x ** 3),
    "nan_to_num": lambda x: np.nan_to_num(np.log(x + 1.5)),
    "linspace": lambda x: np.linspace(x[0, 0], x[1, 1], 5) ** 2,
    "gradient": lambda x: np.gradient(x[0] ** 2),
    "gradient edge 2": lambda x: np.gradient(np.exp(x), 0.5, axis=1, edge_order=2),
    "fmax fmin": lambda x: np.fmax(x[0], x[1]) * np.fmin(x[0], 0.1),
    "abs sign mixed": lambda x: np.abs(x) * np.sign(x) + x,
    "mod floordiv": lambda x: (x * 3) % 1.7 + (x * 3) // 1.7,
    "round": lambda x: np.round(x * 10, 1) + x,
    "astype real conj": lambda x: x.astype(float).real * np.conj(x) + np.imag(x),
    "python operators": lambda x: divmod(x[0, 0] * 5, 2.0)[1] * abs(x[1, 1]) + round(x[0, 1] * 7) ** 2 * x[0, 2],
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_numpy_programs_at_first_and_second_order(name):
    check(PROGRAMS[name], N)


A = rng.normal(size=(4, 4))
SPD = A @ A.T + 4 * np.eye(4)
LINALG = {
    "solve": (lambda a: np.linalg.solve(a, np.arange(1.0, 5.0)), A),
    "solve matrix rhs": (lambda a: np.linalg.solve(a, np.sin(a)), A),
    "inv": (lambda a: np.linalg.inv(a), A),
    "det": (lambda a: np.linalg.det(a), A),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1], A),
    "cholesky": (lambda a: np.linalg.cholesky(0.5 * (a + a.T)), SPD),
    "stacked det": (lambda a: np.linalg.det(np.stack([a, a.T + np.eye(4)])), A),
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_small_linear_algebra_against_numpy_and_finite_differences(name):
    fn, a = LINALG[name]
    value = sg.jit(fn, **PY)(a)
    np.testing.assert_allclose(value, fn(a), rtol=1e-10, atol=1e-12)
    check(fn, a, order=1)


def test_pivoting_handles_zero_leading_entries_like_numpy():
    P = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    assert sg.jit(np.linalg.det, **PY)(P) == pytest.approx(np.linalg.det(P), rel=1e-14)
    np.testing.assert_allclose(sg.jit(np.linalg.inv, **PY)(P), np.linalg.inv(P), rtol=1e-14)
    np.testing.assert_allclose(sg.grad(np.linalg.det, **PY)(P), np.linalg.det(P) * np.linalg.inv(P).T, rtol=1e-12)


def test_linear_algebra_beyond_the_unrolled_size_says_so():
    with pytest.raises(sg.TracingError, match="up to 8x8"):
        sg.grad(lambda a: np.linalg.det(a), **PY)(np.eye(9))


def test_every_elementwise_function_is_in_the_tables():
    """A ufunc added to the supported set without a point in its domain fails here first."""
    assert len(ELEMENTWISE) >= 60
    assert {np.mod, np.fmax, np.fmin, np.logaddexp2, np.degrees, np.radians, np.conjugate} <= set(ELEMENTWISE)


@pytest.mark.parametrize("n", [5, 100])  # element by element, rolled
@pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")
def test_logical_ufuncs_and_operators_on_conditions(n):
    """np.logical_and / or / xor / not and &, |, ^, ~ of traced conditions, as NumPy's (nan is true),
    under grad (masks in np.where) and jit (bool results); & of other traced values: TypeError."""
    x = np.linspace(-2.0, 4.0, n)
    x[1] = np.nan
    cases = [lambda x: np.logical_and(x > 0, x < 3), lambda x: np.logical_or(x < -1, x > 3.5),
             lambda x: np.logical_xor(x > 0, x > 2), lambda x: np.logical_not(x > 1),
             lambda x: (x > 0) & ~(x > 3) | (x < -1.5), lambda x: (x > 1) ^ (x < 3),
             lambda x: np.logical_and(x, x - 1.0), lambda x: np.logical_not(x - 1.0)]
    for case in cases:
        got = sg.jit(case, backend="vm")(x)
        assert got.dtype == bool
        np.testing.assert_array_equal(got, case(x))
        f = lambda x, case=case: np.sum(np.where(case(x), np.nan_to_num(x) ** 2, 1.0))  # noqa: E731
        np.testing.assert_array_equal(sg.grad(f)(x), np.where(case(x), 2 * np.nan_to_num(x), 0.0))
    assert sg.grad(lambda a: np.where(np.logical_or(a > 1, a < -1), a ** 3, a))(2.0) == 12.0
    with pytest.raises(TypeError, match=r"combines conditions only \(comparisons, bools\)"):
        sg.jit(lambda x: x & 3)(x)
