"""symgrad checked with JAX's own gradient-test records, ported by renames as a JAX user would port them.

Ported from https://github.com/jax-ml/jax (Apache License 2.0, Copyright The JAX Authors):

- tests/lax_numpy_test.py: ``GRAD_TEST_RECORDS`` (``NumpyGradTests.testOpGrad``) and
  ``GRAD_SPECIAL_VALUE_TEST_RECORDS`` (``testOpGradSpecialValue``, with ``testSincAtZero``'s orders 3 and 4);
- tests/lax_autodiff_test.py: ``LAX_GRAD_OPS`` and ``LAX_GRAD_OPS_WITH_OUT_DTYPE`` (``testOpGrad``),
  ``LAX_GRAD_SPECIAL_VALUE_TESTS`` (``testOpGradSpecialValue``), ``testSortGrad``, and the ``x**y`` special
  points of ``testPowSecondDerivative`` / ``testPowIntPowerAtZero`` / ``testPowIntPowerAtZero2``.

The renames: ``jnp.f`` -> ``np.f``; ``lax.f`` -> its NumPy / ``scipy.special`` namesake (``lax.asin`` ->
``np.arcsin``, ``lax.erf_inv`` -> ``scipy.special.erfinv``, ``lax.logistic`` -> ``expit``, ``lax.rsqrt`` ->
``1 / np.sqrt``, ``lax.bessel_i0e`` -> ``i0e``, ...); ``jtu.rand_*`` -> a NumPy generator drawing the same values.
Each record keeps JAX's op, order, domain and argument shapes (float64 only), and gets a shape of 64 elements
or more, which symgrad traces onto rolled loops (below 64: element by element, the other code path).

JAX's ``check_grads(f, args, order, ["fwd", "rev"])`` becomes, per record, backend and shape: ``sg.jit``'s
output equals NumPy's entry by entry; "fwd": ``sg.jvp`` along a random direction equals central differences of
the NumPy function; "rev": the value summed against fixed random weights (JAX: a random cotangent) equals
NumPy's and ``sg.grad`` of it equals central differences entry by entry; to order 2, ``sg.hvp`` along a random
direction equals central differences of ``sg.grad``. Special values are checked to
their order against mpmath's derivatives at 50 digits. Records with complex inputs or outputs are left out
(complex numbers are out of symgrad's scope); the sorting-based records (JAX's ``testSortGrad``, and NumPy's
median / quantile / percentile / partition on the same inputs) are included.

Outcomes: "ok"; "WRONG" (a number differs); "unsupported" (symgrad refuses: TracingError, NotImplementedError,
TypeError); "crash" (any other exception). Every run asserts its outcome against ``UNSUPPORTED`` both ways
(refused exactly when listed, with the listed words in the message), so together the runs assert that the
refused set is exactly ``UNSUPPORTED``; ``XFAIL`` lists the known wrong answers (strict: a fix fails the run).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from itertools import combinations_with_replacement

import mpmath
import numpy as np
import pytest
import scipy.special as sc

import symgrad as sg

BACKENDS = ("python", "vm")
ROLLED_MIN = 64  # an array argument this large is traced onto indexed expressions (rolled loops)
UNSUPPORTED_ERRORS = (sg.TracingError, NotImplementedError, TypeError)
H = 1e-5  # the finite-difference step, relative to the point's magnitude
RTOL = 1e-5

# ------------------------------------------------------------------------------------- JAX's domains
# jax._src.test_util's rand_* factories, drawing the same distributions from a NumPy generator.


def rand_default(rng, shape):
    return 3 * rng.standard_normal(shape)


def rand_positive(rng, shape):
    return 1 + 2 * rng.random(shape)


def rand_small(rng, shape):
    return 1e-3 * rng.standard_normal(shape)


def rand_not_small(rng, shape):
    x = 3 * rng.standard_normal(shape)
    return x + np.where(x > 0, 10.0, -10.0)


def rand_uniform(low, high):
    return lambda rng, shape: low + (high - low) * rng.random(shape)


def rand_unique_int(rng, shape):
    return rng.permutation(math.prod(shape)).reshape(shape).astype(float)


# JAX's shapes: jtu.NUMPY_SCALAR_SHAPE / PYTHON_SCALAR_SHAPE make an np.float64 / a Python float.
NP_SCALAR, PY_SCALAR = "np.float64", "float"
NONEMPTY_SHAPES = [NP_SCALAR, PY_SCALAR, (), (4,), (3, 4), (3, 1), (1, 4), (2, 1, 4), (2, 3, 4)]  # lax_numpy_test
COMPATIBLE_SHAPES = [[(3,)], [(), (3, 4), (3, 1), (1, 4)], [(2, 3, 4), (2, 1, 4)]]  # lax_autodiff_test
BIG = {1: [((8, 9),)], 2: [((8, 9), (8, 9)), ((8, 9), (1, 9))]}  # ours: rolled, and rolled with broadcasting


def numpy_shapes(nargs):
    return list(combinations_with_replacement(NONEMPTY_SHAPES, nargs)) + BIG[nargs]


def lax_shapes(nargs):
    return [s for group in COMPATIBLE_SHAPES for s in combinations_with_replacement(group, nargs)] + BIG[nargs]


def make_arg(rand, rng, shape):
    if shape == PY_SCALAR:
        return float(rand(rng, ()))
    if shape == NP_SCALAR:
        return np.float64(rand(rng, ()))
    return np.asarray(rand(rng, shape), dtype=float)


# --------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Record:
    name: str
    fun: Callable
    nargs: int
    order: int
    rand: Callable
    shapes: list  # of argument-shape tuples
    elementwise: bool = True  # each output entry reads one entry of each (broadcast) argument
    numba: bool = False  # also on Numba (a compile costs ~0.5 s: a handful only)


def rsqrt(x):
    return 1 / np.sqrt(x)  # lax.rsqrt has no NumPy namesake


def numpy_record(name, fun, nargs, order, rand, **kw):
    return Record(f"lax_numpy/{name}", fun, nargs, order, rand, numpy_shapes(nargs), **kw)


def lax_record(name, fun, nargs, order, rand, **kw):
    return Record(f"lax_autodiff/{name}", fun, nargs, order, rand, lax_shapes(nargs), **kw)


def sort_record(name, fun, **kw):
    # testSortGrad: unique integers (no ties, so the order is differentiable), the last axis, order 2; its
    # (4, 9, 3) is already rolled. JAX's (0,) is kept for sort only (np.median of nothing is nan, a warning).
    shapes = ([((0,),)] if name.startswith("sort") else []) + [((5,),), ((5, 7),), ((4, 9, 3),)]
    return Record(f"lax_autodiff/{name}", fun, 1, 2, rand_unique_int, shapes, elementwise=False, **kw)


U09, U01_04, U13 = rand_uniform(-0.9, 0.9), rand_uniform(0.1, 0.4), rand_uniform(-1.3, 1.3)

RECORDS = [
    # lax_numpy_test.GRAD_TEST_RECORDS (dtypes float64 and complex64: float64 only)
    numpy_record("arcsinh", np.arcsinh, 1, 2, rand_positive),
    numpy_record("arccosh", np.arccosh, 1, 1, rand_positive),
    numpy_record("arctanh", np.arctanh, 1, 2, U09),
    numpy_record("logaddexp", np.logaddexp, 2, 1, U09),
    numpy_record("logaddexp2", np.logaddexp2, 2, 2, U09, numba=True),
    # lax_autodiff_test.LAX_GRAD_OPS_WITH_OUT_DTYPE: lax.mul(..., out_dtype) -> np.multiply(..., dtype=)
    lax_record("mul(out_dtype)", lambda x, y: np.multiply(x, y, dtype=np.float64), 2, 2, rand_default),
    # lax_autodiff_test.LAX_GRAD_OPS. Left out, complex only: real, imag, complex (complex output), and the
    # complex records of sqrt and rsqrt. lgamma is commented out in JAX's list.
    lax_record("neg", np.negative, 1, 2, rand_default),
    lax_record("floor", np.floor, 1, 2, U01_04),
    lax_record("ceil", np.ceil, 1, 2, U01_04),
    lax_record("round", np.round, 1, 2, U01_04),  # half away from zero vs to even: no halves in (0.1, 0.4)
    lax_record("exp", np.exp, 1, 2, rand_small),
    lax_record("exp2", np.exp2, 1, 2, rand_small),
    lax_record("expm1", np.expm1, 1, 2, rand_default),
    lax_record("log", np.log, 1, 2, rand_positive),
    lax_record("log1p", np.log1p, 1, 2, rand_positive),
    lax_record("sinh", np.sinh, 1, 2, rand_default),
    lax_record("cosh", np.cosh, 1, 2, rand_default),
    lax_record("tanh", np.tanh, 1, 2, rand_default),
    lax_record("sin", np.sin, 1, 2, rand_default),
    lax_record("cos", np.cos, 1, 2, rand_default),
    lax_record("tan", np.tan, 1, 2, U13),
    lax_record("asin", np.arcsin, 1, 2, U13),  # outside [-1, 1]: nan, in the value and its derivatives
    lax_record("acos", np.arccos, 1, 2, U13),
    lax_record("atan2", np.arctan2, 2, 2, rand_default, numba=True),
    lax_record("erf", sc.erf, 1, 2, rand_small),
    lax_record("erfc", sc.erfc, 1, 2, rand_small),
    lax_record("erf_inv", sc.erfinv, 1, 2, rand_small, numba=True),
    lax_record("bessel_i0e", sc.i0e, 1, 2, rand_default),
    lax_record("bessel_i1e", sc.i1e, 1, 2, rand_default, numba=True),
    lax_record("conj", np.conj, 1, 2, rand_default),
    lax_record("abs", np.abs, 1, 2, rand_positive),
    lax_record("pow", np.power, 2, 2, rand_positive, numba=True),
    lax_record("sqrt", np.sqrt, 1, 2, rand_positive),
    lax_record("rsqrt", rsqrt, 1, 2, rand_positive),
    lax_record("cbrt", np.cbrt, 1, 2, rand_not_small),
    lax_record("logistic", sc.expit, 1, 2, rand_default),
    lax_record("add", np.add, 2, 2, rand_default),
    lax_record("sub", np.subtract, 2, 2, rand_default),
    lax_record("mul", np.multiply, 2, 2, rand_default),
    lax_record("div", np.divide, 2, 1, rand_not_small),
    lax_record("max", np.maximum, 2, 2, rand_default),
    lax_record("min", np.minimum, 2, 2, rand_default),
    # testSortGrad (lax.sort along the last axis; is_stable False / True -> NumPy's default / kind="stable")
    sort_record("sort", lambda x: np.sort(x, axis=-1), numba=True),
    sort_record("sort(stable)", lambda x: np.sort(x, axis=-1, kind="stable")),
    # Not JAX's: NumPy's other sorting-based reductions, on testSortGrad's inputs. np.partition's order of the
    # entries other than the kth is NumPy's choice, so only the kth entry is compared.
    sort_record("median", lambda x: np.median(x, axis=-1)),
    sort_record("quantile", lambda x: np.quantile(x, 0.3, axis=-1)),
    sort_record("percentile", lambda x: np.percentile(x, 70, axis=-1)),
    sort_record("partition", lambda x: np.partition(x, 2, axis=-1)[..., 2]),
]
RECORD = {r.name: r for r in RECORDS}


def rolled(shapes) -> bool:
    return any(s not in (NP_SCALAR, PY_SCALAR) and math.prod(s) >= ROLLED_MIN for s in shapes)


def calls(record: Record, backend: str, size: str) -> list:
    """The argument shapes of one run: a size's shapes; on Numba, the largest small one only (compiles)."""
    shapes = [s for s in record.shapes if rolled(s) == (size == "rolled")]
    return shapes[-1:] if backend == "numba" and size == "small" else shapes


# ------------------------------------------------------------------------------------------- the check


class Wrong(AssertionError):
    """symgrad's number differs from NumPy's or from finite differences."""


def pack(args) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in args] + [np.zeros(0)])


def unpack(z: np.ndarray, like) -> list:
    """``z`` shaped as the arguments ``like``, keeping each one's kind (Python float, np.float64, array)."""
    out, pos = [], 0
    for a in like:
        n = np.size(a)
        chunk, pos = z[pos:pos + n], pos + n
        out.append(type(a)(chunk[0]) if isinstance(a, (float, np.float64)) else chunk.reshape(np.shape(a)))
    return out


def where_read(record: Record, args, out_shape) -> list:
    """Per packed input entry, a mask of the outputs that read it: a central difference sums over these only,
    so a nan output elsewhere (asin outside [-1, 1]) leaves the other entries' differences finite."""
    if not record.elementwise:
        return [np.ones(out_shape, bool)] * pack(args).size
    masks = []
    for a in args:
        index = np.broadcast_to(np.arange(np.size(a)).reshape(np.shape(a)), out_shape)
        masks += [index == k for k in range(np.size(a))]
    return masks


def assert_close(what: str, got, ref, atol, rtol: float = RTOL) -> None:
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        raise Wrong(f"{what}: shape {got.shape}, expected {ref.shape}")
    bad = ~(np.abs(got - ref) <= rtol * np.abs(ref) + atol) & ~(np.isnan(got) & np.isnan(ref)) & ~(got == ref)
    if bad.any():
        i = np.argwhere(bad)[0] if got.ndim else ()
        raise Wrong(f"{what}: {int(bad.sum())} of {got.size} entries differ; at {tuple(int(k) for k in i)}: "
                    f"{got[tuple(i)]!r}, expected {ref[tuple(i)]!r}")


def fd_gradient(record: Record, args, weights) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of sum(weights * fun(*args)), entry by entry, and a rounding-error bound for each."""
    z = pack(args)
    out_shape = weights.shape
    grad, atol = np.zeros(z.size), np.zeros(z.size)
    for k, read in enumerate(where_read(record, args, out_shape)):
        h = H * max(1.0, abs(z[k]))
        step = np.eye(1, z.size, k)[0] * h
        hi = np.broadcast_to(record.fun(*unpack(z + step, args)), out_shape)
        lo = np.broadcast_to(record.fun(*unpack(z - step, args)), out_shape)
        grad[k] = np.sum(weights[read] * (hi[read] - lo[read])) / (2 * h)
        # the rounding of fun's values, over 2h: ~1e-11 of their size; 1e-9 leaves a wide margin
        atol[k] = 1e-9 * (1 + np.sum(np.abs(weights[read] * hi[read])))
    return grad, atol


def check_jvp(record: Record, args: list, out: np.ndarray, backend: str) -> None:
    z = pack(args)
    u = np.random.default_rng(4).standard_normal(z.size)
    value, tangent = sg.jvp(record.fun, tuple(args), tuple(unpack(u, args)), backend=backend)
    h = H * max(1.0, np.max(np.abs(z), initial=0.0))
    with np.errstate(all="ignore"):
        hi, lo = record.fun(*unpack(z + h * u, args)), record.fun(*unpack(z - h * u, args))
        assert_close("jvp value", value, out, 1e-300, 1e-12)
        assert_close("jvp", tangent, (hi - lo) / (2 * h), 1e-9 * (1 + np.abs(out)))


def check_call(record: Record, args: list, backend: str, stages: list) -> None:
    """JAX's check_grads(fun, args, order) on symgrad's ``backend``; raises Wrong for a wrong number."""
    with np.errstate(all="ignore"):
        out = np.asarray(record.fun(*args), dtype=float)
    weights = np.random.default_rng(3).uniform(0.5, 1.5, out.shape)  # JAX: a random cotangent

    def F(*a):  # the function summed against fixed weights, traced by symgrad and run by NumPy
        return np.sum(weights * record.fun(*a))

    if backend == "python":  # the output itself, entry by entry: the trace's, the same on every backend
        stages.append("jit")
        assert_close("jit value", sg.jit(record.fun, backend=backend)(*args), out, 1e-300, 1e-12)
    stages.append("jvp")  # JAX's "fwd" mode: the output's derivative along a random direction, entry by entry
    check_jvp(record, args, out, backend)
    stages.append("value_and_grad")  # JAX's "rev" mode
    vg = sg.value_and_grad(F, argnums=tuple(range(len(args))), backend=backend)
    value, grads = vg(*args)
    with np.errstate(all="ignore"):
        assert_close("value", value, F(*args), 1e-12 * (1 + np.sum(np.abs(weights * out))))
        fd, atol = fd_gradient(record, args, weights)
    if [np.shape(g) for g in grads] != [np.shape(a) for a in args]:
        raise Wrong(f"gradient shapes {[np.shape(g) for g in grads]}, expected {[np.shape(a) for a in args]}")
    g = pack(grads)
    assert_close("gradient", g, fd, atol)
    if record.order < 2:
        return
    stages.append("hvp")
    z = pack(args)
    v = np.random.default_rng(5).standard_normal(z.size)
    hv = pack(sg.hvp(lambda t: F(*t), backend=backend)(tuple(args), tuple(unpack(v, args))))
    h = H * max(1.0, np.max(np.abs(z), initial=0.0))
    with np.errstate(all="ignore"):
        ref = (pack(vg(*unpack(z + h * v, args))[1]) - pack(vg(*unpack(z - h * v, args))[1])) / (2 * h)
    assert_close("hvp (second order)", hv, ref, 1e-9 * (1 + np.max(np.abs(np.nan_to_num(g)), initial=0.0)))


# ---------------------------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    status: str  # ok, WRONG, unsupported, crash
    detail: str = ""


RANK = {"ok": 0, "unsupported": 1, "crash": 2, "WRONG": 3}


def attempt(check: Callable, label: str) -> Outcome:
    stages: list = []
    try:
        check(stages)
    except Wrong as e:
        return Outcome("WRONG", f"({label}) {stages[-1:]}: {e}")
    except UNSUPPORTED_ERRORS as e:
        return Outcome("unsupported", f"({label}) {stages[-1:]}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - any other exception is a crash, reported with where it came from
        where = traceback.extract_tb(e.__traceback__)[-1]
        return Outcome("crash", f"({label}) {stages[-1:]}: {type(e).__name__}: {e} "
                       f"[{where.filename}:{where.lineno}]")
    return Outcome("ok")


def worst(results: list[Outcome]) -> Outcome:
    top = max(results, key=lambda r: RANK[r.status])
    return Outcome(top.status, "\n".join(r.detail for r in results if r.status == top.status))


def record_outcome(name: str, backend: str, size: str) -> Outcome:
    record = RECORD[name]
    rng = np.random.default_rng(0)  # as JAX's self.rng(): the same arguments on every backend
    results = []
    for shapes in calls(record, backend, size):
        args = [make_arg(record.rand, rng, s) for s in shapes]
        label = ", ".join(map(str, shapes))
        results.append(attempt(lambda stages, args=args: check_call(record, args, backend, stages), label))
    return worst(results)


# ----------------------------------------------------------------------------------------- special values
# lax_numpy_test.GRAD_SPECIAL_VALUE_TEST_RECORDS (op, values, order) and lax_autodiff_test's
# LAX_GRAD_SPECIAL_VALUE_TESTS (checked to order 2). JAX's check_grads compares with finite differences;
# here each derivative is compared with mpmath's at 50 digits, at the float point itself.


@dataclass(frozen=True)
class Special:
    name: str
    fun: Callable
    ref: Callable  # mpmath's namesake
    values: tuple
    order: int
    numba: bool = False


SPECIALS = [
    Special("lax_numpy/arcsinh", np.arcsinh, mpmath.asinh, (0.0, 1000.0), 2),
    Special("lax_numpy/arccosh", np.arccosh, mpmath.acosh, (1000.0,), 2),
    Special("lax_numpy/arctanh", np.arctanh, mpmath.atanh, (0.0,), 2),
    # order 1 in the record; testSincAtZero checks orders 2 to 4 at 0 too (0, -pi**2/3, 0, pi**4/5)
    Special("lax_numpy/sinc", np.sinc, mpmath.sincpi, (0.0,), 4, numba=True),
    Special("lax_autodiff/sinh", np.sinh, mpmath.sinh, (0.0,), 2),
    Special("lax_autodiff/cosh", np.cosh, mpmath.cosh, (0.0,), 2),
    Special("lax_autodiff/tanh", np.tanh, mpmath.tanh, (0.0, 1000.0), 2),
    Special("lax_autodiff/sin", np.sin, mpmath.sin, (0.0, np.pi, np.pi / 2, np.pi / 4), 2),
    Special("lax_autodiff/cos", np.cos, mpmath.cos, (0.0, np.pi, np.pi / 2, np.pi / 4), 2),
    Special("lax_autodiff/tan", np.tan, mpmath.tan, (0.0,), 2),
    Special("lax_autodiff/asin", np.arcsin, mpmath.asin, (0.0,), 2),
    Special("lax_autodiff/acos", np.arccos, mpmath.acos, (0.0,), 2),
    Special("lax_autodiff/atan", np.arctan, mpmath.atan, (0.0, 1000.0), 2),
    Special("lax_autodiff/erf", sc.erf, mpmath.erf, (0.0, 10.0), 2),
    Special("lax_autodiff/erfc", sc.erfc, mpmath.erfc, (0.0, 10.0), 2),
]
SPECIAL = {s.name: s for s in SPECIALS}
# Relative: the derivatives are closed forms evaluated in float64 (erfc(10) is 2e-45, tanh'(1000) 0); the
# absolute part only lets an exact 0 (sin''(0)) meet mpmath's 1e-50-sized numerical zero.
SPECIAL_RTOL, SPECIAL_ATOL = 1e-9, 1e-30


@cache
def mp_derivative(ref: Callable, value: float, k: int) -> float:
    with mpmath.workdps(50):
        return float(mpmath.diff(ref, mpmath.mpf(value), k))


def derivatives(fun: Callable, order: int, backend: str) -> list[Callable]:
    """[fun, fun', fun'', ...] elementwise: each the gradient of the sum of the one before (nested sg.grad)."""
    out = [fun]
    for _ in range(order):
        out.append(sg.grad(lambda x, d=out[-1]: np.sum(d(x)), backend=backend))
    return out


def check_special(special: Special, x, backend: str, stages: list) -> None:
    value = float(np.ravel(x)[0])
    stages.append("grad")
    for k, d in enumerate(derivatives(special.fun, special.order, backend)):
        got = sg.jit(lambda t, d=d: d(t), backend=backend)(x) if k == 0 else d(x)
        want = mp_derivative(special.ref, value, k)
        assert_close(f"derivative {k} at {value!r}", got, np.full(np.shape(x), want), SPECIAL_ATOL, SPECIAL_RTOL)
    stages.append("hvp")  # the second derivative once more, by forward over reverse mode
    hv = sg.hvp(lambda t: np.sum(special.fun(t)), backend=backend)(x, np.ones_like(x))
    want = mp_derivative(special.ref, value, 2)
    assert_close(f"hvp at {value!r}", hv, np.full(np.shape(x), want), SPECIAL_ATOL, SPECIAL_RTOL)


def special_outcome(name: str, backend: str, size: str) -> Outcome:
    special = SPECIAL[name]
    results = []
    for value in special.values:
        # small: a Python float and a 3-vector; rolled: an (8, 9) array, every entry the special value
        points = [value, np.full(3, value)] if size == "small" else [np.full((8, 9), value)]
        for x in points[-1:] if backend == "numba" else points:
            check = lambda stages, x=x: check_special(special, x, backend, stages)
            results.append(attempt(check, f"{value!r}, shape {np.shape(x)}"))
    return worst(results)


# ------------------------------------------------------------------------------------------- the runs


def runs() -> list[tuple[str, str, str]]:
    """Every record on the interpreter and the VM at both sizes; the few marked for Numba (each compile
    takes seconds) at one size each, in turn, and pow (the guarded points) at both."""
    out, k = [], 0
    for name, numba in [(r.name, r.numba) for r in RECORDS] + [(f"special/{s.name}", s.numba) for s in SPECIALS]:
        out += [(name, backend, size) for backend in BACKENDS for size in ("small", "rolled")]
        if numba:
            sizes = ("small", "rolled") if name.endswith("/pow") else (("small",), ("rolled",))[k % 2]
            out += [(name, "numba", size) for size in sizes]
            k += 1
    return out


# What symgrad refuses, with a part of the message: "record [backend-size]" (backend "*": every backend).
# Empty: every record ported runs. (The sorting-based ones run with the sorting work in progress,
# symgrad/expr/sorting.py; before it they were refused with "np.sort needs the values of its arguments".)
UNSUPPORTED: dict[str, str] = {}

# Known wrong answers and crashes in symgrad: "record [backend-size]" -> reason (see the report).
XFAIL: dict[str, str] = {}


def listed(table: dict[str, str], name: str, backend: str, size: str) -> str | None:
    return table.get(f"{name} [{backend}-{size}]", table.get(f"{name} [*-{size}]"))


def outcome(name: str, backend: str, size: str) -> Outcome:
    if name.startswith("special/"):
        return special_outcome(name.removeprefix("special/"), backend, size)
    return record_outcome(name, backend, size)


def params() -> list:
    out = []
    for run in runs():
        reason = listed(XFAIL, *run)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(*run, marks=marks, id="-".join(run)))
    return out


@pytest.mark.parametrize("name,backend,size", params())
def test_jax_grad_record(name, backend, size):
    result = outcome(name, backend, size)
    refused = listed(UNSUPPORTED, name, backend, size)
    if refused is None:
        assert result.status == "ok", f"{result.status}: {result.detail}"
    else:  # listed in UNSUPPORTED: must still be refused, with those words
        assert result.status == "unsupported", f"listed in UNSUPPORTED but {result.status}: {result.detail}"
        assert refused in result.detail, result.detail


def test_unsupported_and_xfail_name_runs():
    """Each UNSUPPORTED / XFAIL key names runs (a renamed record must not leave a stale entry behind)."""
    keys = {f"{n} [{b}-{s}]" for n, b, s in runs()} | {f"{n} [*-{s}]" for n, _, s in runs()}
    assert set(UNSUPPORTED) <= keys, set(UNSUPPORTED) - keys
    assert set(XFAIL) <= keys, set(XFAIL) - keys


# ------------------------------------------------------------------------------------ x ** y special points
# lax_autodiff_test.testPowSecondDerivative, testPowIntPowerAtZero, testPowIntPowerAtZero2 (lax.pow -> **).


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(), (8, 9)], ids=str)
def test_pow_second_derivative_at_y_zero(backend, shape):
    # jax issue 12033: the Hessian of x**y at (4, 0) is [[0, 1/x], [1/x, log(x)**2]], symmetric
    x, y = np.full(shape, 4.0), np.full(shape, 0.0)
    F = lambda x, y: np.sum(x ** y)
    with mpmath.workdps(50):
        orders = [[(2, 0), (1, 1)], [(1, 1), (0, 2)]]  # the partial derivatives' orders in (x, y)
        ref = [[float(mpmath.diff(lambda a, b: a ** b, (4, 0), n)) for n in row] for row in orders]
    np.testing.assert_allclose(ref, [[0, 1 / 4], [1 / 4, np.log(4) ** 2]], rtol=1e-12, atol=1e-14)
    for i, direction in enumerate([(1.0, 0.0), (0.0, 1.0)]):  # the Hessian's columns, by hvp
        v = tuple(np.full(shape, d) for d in direction)
        hv = sg.hvp(lambda t: F(*t), backend=backend)((x, y), v)
        for j in range(2):
            np.testing.assert_allclose(hv[j], np.full(shape, ref[j][i]), rtol=1e-12, atol=1e-14)
    if shape == ():
        H2 = sg.hessian(np.power, argnums=(0, 1), backend=backend)(4.0, 0.0)
        np.testing.assert_allclose(np.array(H2, dtype=float), ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(), (8, 9)], ids=str)
def test_pow_int_power_at_zero(backend, shape):
    # jax issue 14397: d/dx x**n at x = 0, n = 0 (an int argument) is 0, the limit of d/dx x**0 = 0
    x = np.zeros(shape) if shape else 0.0
    g = sg.grad(lambda x, n: np.sum(x ** n), backend=backend)(x, 0)
    np.testing.assert_array_equal(g, np.zeros(shape))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_int_power_at_zero_2(backend):
    # jax issue 17995: z**0 + z**1 in five spellings, each of derivative 1 at 3.14
    spellings = [
        lambda z: np.sum(z ** np.arange(0, 2, dtype=int)),
        lambda z: np.sum(z ** np.arange(0, 2, dtype=float)),
        lambda z: 1 + z,
        lambda z: z ** 0 + z,
        lambda z: z ** 0.0 + z,
    ]
    for f in spellings:
        assert sg.grad(f, backend=backend)(3.14) == pytest.approx(1.0, rel=1e-12)
