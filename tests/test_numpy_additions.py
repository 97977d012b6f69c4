"""NumPy and SciPy functions JAX differentiates that symgrad refused or crashed on: np.fmod, np.ldexp,
np.frexp, np.sinc, scipy.special.erfinv / i0e / i1e, the nan-ignoring reductions (np.nansum ...
np.nanstd) and lax.dynamic_slice / dynamic_update_slice. Values against NumPy / SciPy, derivatives
against central differences (mpmath for the special functions' higher orders), on scalars, small
arrays (element by element) and 70+ elements (rolled), on every backend."""

import math

import mpmath
import numpy as np
import pytest
import scipy.special as ss
from backends import central_differences as _fd

import symgrad as sg
from symgrad import lax

RNG = np.random.default_rng(40)
BACKENDS = ["python", "vm", "numba"]


ELEMENTWISE = {  # name -> (function, inputs' sampler)
    "fmod": (lambda a: np.fmod(a * 3.0, 1.3 + 0.0 * a), lambda n: RNG.uniform(-4, 4, n)),
    "fmod by traced": (lambda a: np.fmod(np.full_like(a, 5.5), 1.0 + a * a), lambda n: RNG.uniform(0.3, 2, n)),
    "ldexp": (lambda a: np.ldexp(a, np.arange(a.size).reshape(a.shape) % 5 - 2), lambda n: RNG.normal(size=n)),
    "frexp mantissa": (lambda a: np.frexp(a)[0], lambda n: RNG.normal(size=n) * 50),
    "sinc": (np.sinc, lambda n: np.where(np.arange(n) % 4 == 0, 0.0, RNG.normal(size=n))),
    "erfinv": (ss.erfinv, lambda n: RNG.uniform(-0.95, 0.95, n)),
    "i0e": (ss.i0e, lambda n: RNG.normal(size=n) * 5),
    "i1e": (ss.i1e, lambda n: RNG.normal(size=n) * 5),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@pytest.mark.parametrize("size", [1, 5, 72])
def test_elementwise_values_and_gradients(name, size):
    f, sample = ELEMENTWISE[name]
    x = sample(size)
    loss = lambda a: float(np.sum(f(a) * np.linspace(0.5, 1.5, a.size)))  # noqa: E731
    fd = _fd(loss, x)
    for backend in ["python", "vm"]:
        np.testing.assert_allclose(sg.jit(f, backend=backend)(x), f(x), rtol=1e-13, atol=1e-300)
        g = sg.grad(lambda a: np.sum(f(a) * np.linspace(0.5, 1.5, a.size)), backend=backend)(x)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg=f"{name} {backend}")


@pytest.mark.parametrize("size", [1, 72])
def test_elementwise_values_and_gradients_on_numba(size):
    """Every function's values and gradient in one Numba program (a compile each costs a second), against
    NumPy / SciPy and the interpreter."""
    names = sorted(ELEMENTWISE)
    inputs = [ELEMENTWISE[name][1](size) for name in names]

    def all_of(*arrays):
        pairs = [(ELEMENTWISE[name][0], a) for name, a in zip(names, arrays)]
        return [f(a) for f, a in pairs] + [sg.grad(lambda b, f=f: np.sum(f(b) * np.linspace(0.5, 1.5, size)))(a)
                                           for f, a in pairs]

    got, want = (sg.jit(all_of, backend=b)(*inputs) for b in ("numba", "python"))
    for k, (name, x) in enumerate(zip(names, inputs)):
        np.testing.assert_allclose(got[k], ELEMENTWISE[name][0](x), rtol=1e-13, atol=1e-300, err_msg=name)
        np.testing.assert_allclose(got[len(names) + k], want[len(names) + k], rtol=1e-12, atol=1e-14, err_msg=name)


def _m(name):
    return {"erfinv": mpmath.erfinv, "i0e": lambda t: mpmath.exp(-abs(t)) * mpmath.besseli(0, t),
            "i1e": lambda t: mpmath.exp(-abs(t)) * mpmath.besseli(1, t)}[name]


@pytest.mark.parametrize("name", ["erfinv", "i0e", "i1e"])
def test_special_functions_to_the_third_derivative_against_mpmath(name):
    mpmath.mp.dps = 30
    x = sg.Var("x")
    e = {"erfinv": ss.erfinv, "i0e": ss.i0e, "i1e": ss.i1e}[name](x)
    ds = [e]
    for _ in range(3):
        ds.append(sg.diff(ds[-1], x))
    points = [0.3, -0.7, 0.93] if name == "erfinv" else [0.3, -2.5, 7.0, 45.0]
    for backend in BACKENDS:
        run = sg.compile(ds, [x], backend=backend)
        for p in points:
            got = np.asarray(run(np.array([p])), dtype=float).ravel()
            for order, value in enumerate(got):
                want = float(mpmath.diff(_m(name), mpmath.mpf(p), order))
                assert value == pytest.approx(want, rel=1e-10, abs=1e-14), (name, backend, p, order)


def test_compiled_special_functions_match_scipy_everywhere():
    """The compiled ive / erfinv (expr/special_series.py) on many points, edges included."""
    from symgrad.compile import special

    xs = np.concatenate([RNG.normal(size=2000) * 20, np.linspace(-60, 60, 241), [0.0, -0.0, 1e-300, 29.9, 30.1,
                                                                                  1e3, 1e5, -1e5]])
    for n in range(5):
        want = ss.ive(n, xs)
        got = np.array([special.ive(float(n), v) for v in xs])
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)
    assert special.ive(0.0, np.inf) == 0.0 and math.isnan(special.ive(0.5, 1.0))
    ys = np.concatenate([RNG.uniform(-1, 1, 5000), [0.0, 0.5, 1 - 1e-15, -1 + 1e-16, 1 - 2 ** -53, 1e-300]])
    np.testing.assert_allclose([special.erfinv(v) for v in ys], ss.erfinv(ys), rtol=1e-14, atol=1e-300)
    assert special.erfinv(1.0) == np.inf and special.erfinv(-1.0) == -np.inf and math.isnan(special.erfinv(1.5))


def test_ive_of_large_orders_near_and_far_from_the_argument():
    """Orders of hundreds and thousands: the asymptotic series was used where it does not converge (ive(100,
    131) was -2.7e-4 where SciPy gives 4.1e-18; ive(200, 232.5) 8e16) and the power series overflowed or
    took time linear in the order (2**53: it never returned). SciPy's values (mpmath's where SciPy gives
    nan), the interpreter's Python and the compiled function."""
    from symgrad.compile import special
    from symgrad.expr import special_series

    mpmath.mp.dps = 30
    for k in (20, 50, 100, 200, 300, 1000, 1700, 10_000):
        xs = np.concatenate([np.logspace(-2, 5.5, 25), k + np.linspace(-15, 45, 9), [k * k / 2.0, 2.0 * k]])
        xs = xs[xs > 0]
        want = ss.ive(k, xs)
        for f in (special.ive, special_series.ive):
            got = np.array([f(float(k), v) for v in xs])
            np.testing.assert_allclose(got, want, rtol=2e-12, atol=1e-300, err_msg=f"order {k}")
    assert special.ive(2.0 ** 53, 5.0) == special_series.ive(2.0 ** 53, 5.0) == 0.0
    exact = float(mpmath.besseli(10 ** 6, 10 ** 13) * mpmath.exp(-10 ** 13))  # (SciPy: nan)
    assert special.ive(1e6, 1e13) == pytest.approx(exact, rel=1e-13)
    assert special.ive(-3.0, -2.0) == special.ive(3.0, -2.0) == pytest.approx(ss.ive(3, -2.0), rel=1e-14)
    for f in (special.ive, special_series.ive):  # (|x| / n underflowing: Python's float division raised)
        assert f(2.0, 5e-324) == f(1e300, 1e-300) == 0.0
        assert f(1.0, -1e-320) == -5e-321 and f(2.0, 1e-160) == 1.25e-321


def test_frexp_gives_numpys_mantissas_and_exponents_at_the_edges():
    v = np.array([3.0, -0.1, 0.0, -0.0, 8.0, 0.5, 1e-310, -np.inf, np.inf, 1024.0, 2.0 ** -1022, 5e-324, np.nan,
                  1.7e308, 1.0 - 2 ** -53, 2.0 ** 40])
    for backend in ("python", "vm"):
        m, e = sg.jit(np.frexp, backend=backend)(v)
        M, E = np.frexp(v)
        np.testing.assert_array_equal(m, M)
        np.testing.assert_array_equal(e, E)
    big = RNG.normal(size=90) * 1e3
    big[::9] = 0.0
    m, e = sg.jit(np.frexp, backend="numba")(big)
    np.testing.assert_array_equal(m, np.frexp(big)[0])
    np.testing.assert_array_equal(e, np.frexp(big)[1])


NANS = [np.nansum, np.nanmean, np.nanvar, np.nanstd, np.nanmax, np.nanmin]


@pytest.mark.parametrize("fn", NANS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape,axis", [((3, 4), None), ((3, 4), 1), ((10, 8), None), ((10, 8), 0), ((10, 8), 1)])
def test_nan_reductions(fn, shape, axis):
    x = RNG.normal(size=shape)
    x.flat[::5] = np.nan
    kept = ~np.isnan(x)
    fd = _fd(lambda a: float(np.sum(fn(np.where(kept, a, np.nan), axis=axis) * 1.5)), np.where(kept, x, 0.0))
    for backend in ["python", "vm"]:
        np.testing.assert_allclose(sg.jit(lambda a: fn(a, axis=axis), backend=backend)(x), fn(x, axis=axis),
                                   rtol=1e-13)
        g = sg.grad(lambda a: np.sum(fn(a, axis=axis) * 1.5), backend=backend)(x)
        np.testing.assert_allclose(np.where(kept, g, 0.0), fd, rtol=1e-6, atol=1e-8)
        assert np.all(g[~kept] == 0.0)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nan_reductions_on_numba(axis):
    """Every nan reduction's values and gradients in one Numba program (a compile each costs a second)."""
    x = RNG.normal(size=(10, 8))
    x.flat[::5] = np.nan
    kept = ~np.isnan(x)

    def all_of(a):
        return [fn(a, axis=axis) for fn in NANS] + \
            [sg.grad(lambda b, fn=fn: np.sum(fn(b, axis=axis) * 1.5))(a) for fn in NANS]

    got = sg.jit(all_of, backend="numba")(x)
    want = sg.jit(all_of, backend="python")(x)
    for fn, value, g, g_want in zip(NANS, got[:6], got[6:], want[6:], strict=True):
        np.testing.assert_allclose(value, fn(x, axis=axis), rtol=1e-13)
        np.testing.assert_allclose(g, g_want, rtol=1e-12, atol=1e-14)
        assert np.all(g[~kept] == 0.0)


def test_nan_reductions_ddof_and_all_nan():
    x = RNG.normal(size=(3, 4))
    x[1, 2] = np.nan
    assert float(sg.jit(lambda a: np.nanvar(a, ddof=1))(x)) == pytest.approx(np.nanvar(x, ddof=1), rel=1e-13)
    assert np.isnan(sg.jit(lambda a: np.nanmax(a))(np.full(3, np.nan)))


@pytest.mark.parametrize("starts", [(1, 0, 2), (3, 4, 5), (-1, 1, 0)])  # (clamped into the array, as JAX does)
def test_dynamic_slices_of_a_3d_array(starts):
    o = RNG.normal(size=(4, 5, 6))
    u = RNG.normal(size=(2, 3, 2))
    s = [min(max(k, 0), n - m) for k, n, m in zip(starts, o.shape, u.shape)]
    want = o.copy()
    want[s[0]:s[0] + 2, s[1]:s[1] + 3, s[2]:s[2] + 2] = u
    for backend in BACKENDS:
        got = sg.jit(lambda a, b: lax.dynamic_update_slice(a, b, starts), backend=backend)(o, u)
        np.testing.assert_array_equal(got, want)
        ga, gb = sg.grad(lambda a, b: np.sum(lax.dynamic_update_slice(a, b, starts) ** 2), argnums=(0, 1),
                         backend=backend)(o, u)
        np.testing.assert_allclose(gb, 2 * u, rtol=1e-15)
        np.testing.assert_allclose(ga, np.where(want == o, 2 * o, 0.0), rtol=1e-15)
    np.testing.assert_array_equal(sg.jit(lambda a: lax.dynamic_slice(a, starts, (2, 3, 2)))(o),
                                  o[s[0]:s[0] + 2, s[1]:s[1] + 3, s[2]:s[2] + 2])
    with pytest.raises(ValueError, match="takes 3 start indices"):
        lax.dynamic_slice(o, (1, 2), (1, 1))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_hessians_of_running_products_on_the_interpreter(axis):
    """Over 100 index symbols (each tensor of the second sweep binds fresh ones): the interpreter shares
    array axes between symbols never used together, within NumPy's 64; the loop VM's values, and
    central differences of the gradient."""
    x = RNG.uniform(0.5, 1.5, (4, 5, 6))
    f = lambda a: np.sum(np.cumprod(a, axis=axis))  # noqa: E731
    h = sg.hessian(f, backend="python")(x)
    np.testing.assert_allclose(h, sg.hessian(f, backend="vm")(x), rtol=1e-13)
    g = sg.grad(f, backend="vm")
    k = np.unravel_index(17, x.shape)
    e = np.zeros_like(x)
    e[k] = 1e-6
    np.testing.assert_allclose(h[k], (g(x + e) - g(x - e)) / 2e-6, rtol=1e-6, atol=1e-9)


def test_ldexp_at_the_ends_of_the_exponent_range():
    """NumPy's bits where 2**i alone overflows or underflows (1e-300 * 2**1100 is 1.4e31), and the
    constants of an element trace are not folded into an inf (2**550 * (2**550 * x))."""
    a = np.array([1e-300, 1.5, 2.0, -3.0, 1e300])
    i = np.array([1100, -1074, 5, -1080, -2000])
    for backend in ("python", "vm"):
        np.testing.assert_array_equal(sg.jit(lambda v: np.ldexp(v, i), backend=backend)(a), np.ldexp(a, i))
    big = np.linspace(-3, 3, 80)
    ib = (np.arange(80) * 37) % 2200 - 1100
    with np.errstate(all="ignore"):
        want = np.ldexp(big, ib)
    np.testing.assert_array_equal(sg.jit(lambda v: np.ldexp(v, ib), backend="vm")(big), want)
    x = sg.Var("x")
    assert float(sg.evaluate(2.0 ** 550 * (2.0 ** 550 * x), {x: 1e-300})) == math.ldexp(1e-300, 1100)
    assert str(3.0 * (2.0 * x)) == "6*x"


def test_fmods_higher_derivatives_in_the_divisor_are_exact_where_the_quotient_is_huge():
    """d fmod(a, b)/db is the whole number -trunc(a/b), constant between jumps: its derivatives are 0. Written
    as (fmod(a, b) - a)/b and differentiated, two terms of ~a/b**2 cancelled only on paper: at
    b = 3.1e-114 the loop VM's H v was -1e211 (a fuzzed body in CI). Every backend, against exact rationals."""
    from fractions import Fraction

    a, b = sg.symbols("a b")
    f = np.fmod(a, b)
    db = sg.diff(f, b)
    outputs = [f, sg.diff(f, a), db, sg.diff(db, b), sg.diff(db, a), sg.diff(sg.diff(db, b), b)]
    points = [(0.5, 3.1063841466331044e-114), (1.0, 0.1), (-7.25, 0.3), (1e200, 1e-100), (5.5, -1e-200),
              (-0.0, 2.0), (3.0, 1e5)]
    for backend in ["python", "vm", "numba", "c"]:
        run = sg.compile(outputs, [a, b], backend=backend)
        for p, q in points:
            got = np.asarray(run(np.array([p, q])), dtype=float)
            whole = (Fraction(p) - Fraction(float(np.fmod(p, q)))) / Fraction(q)
            assert whole.denominator == 1
            # (the partial is computed as (fmod - a)/b: the whole number itself where it is one in floats)
            np.testing.assert_allclose(got[:3], [np.fmod(p, q), 1.0, -float(whole)], rtol=1e-15,
                                       err_msg=f"{backend} at {p, q}")
            np.testing.assert_array_equal(got[3:], 0.0, err_msg=f"{backend} at {p, q}")


def test_sinc_where_pi_x_overflows_is_numpys_nan_on_every_backend():
    """np.sinc(1e308) is sin(inf) / inf, nan: the python backend raised "math domain error" (Python's sin of
    inf), Numba's and the VM's gave nan. Values and first derivatives; 1e307 (pi x finite) as NumPy."""
    x = sg.Var("x")
    points = np.array([1e308, -1e308, 1e307])
    for backend in ("python", "vm"):
        run = sg.compile([np.sinc(x), sg.diff(np.sinc(x), x)], [x], backend=backend)
        got = np.array([run(np.array([p])) for p in points])
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got[:, 0], np.sinc(points))
        assert np.isnan(got[:2, 1]).all() and np.isfinite(got[2, 1])
