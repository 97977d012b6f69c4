"""symgrad checked the way an autograd user would check it: with autograd's own test suite.

The cases (tests/autograd_cases.py) are those of HIPS/autograd's tests/test_numpy.py, test_systematic.py,
test_scalar_ops.py, test_binary_ops.py, the small dense part of test_linalg.py and the grad / jacobian /
hessian / hvp part of test_wrappers.py (https://github.com/HIPS/autograd, MIT licence), ported mechanically:
``autograd.numpy`` is plain ``numpy`` and ``check_grads`` is the one below. For a function and its arguments
it differentiates with respect to every float argument (``sg.value_and_grad``; a non-scalar output is summed
against fixed random weights, as autograd's check contracts it with a random cotangent), compares the value
with NumPy's and the gradient with central finite differences of the NumPy function, compares ``sg.jit``'s
outputs with NumPy's, and, where autograd checks to order 2, ``sg.hvp`` along a random direction with finite
differences of the gradient. Each case runs on the interpreter ("python") and the VM ("vm"), a few on Numba,
at autograd's shapes and at a size of 64 elements or more (traced onto rolled loops, the other code path).

Outcomes: "ok"; "WRONG" (a value or a derivative silently wrong); "unsupported" (symgrad refuses with a
clear exception: TracingError, NotImplementedError, TypeError, a LinAlgError for symbolic linear algebra);
"crash" (any other exception, from deep inside). WRONG and crash fail their test; the unsupported ones are
listed in ``UNSUPPORTED``, which ``test_unsupported_cases_are_exactly_these`` compares with what happens.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pytest
from autograd_cases import CASES, Call, Case, R

import symgrad as sg

BACKENDS = ("python", "vm")
ROLLED_MIN = 64  # symgrad.trace.ROLLED_MIN: an array argument this large is traced onto indexed expressions
UNSUPPORTED_ERRORS = (sg.TracingError, NotImplementedError, TypeError, np.linalg.LinAlgError)
H = 1e-5  # the finite-difference step
RTOL = 1e-5

# Every test here runs autograd's cases (outcome, cached: whichever test comes first), many through NumPy
# functions that have no rolled form: the element trace, and its warning, are expected for them.
pytestmark = pytest.mark.filterwarnings("ignore:.*array elements one by one instead:UserWarning")


# ------------------------------------------------------------------------------------------ pytrees


def is_float(a: Any) -> bool:
    """A differentiated argument: a float, a float array, or a non-empty list / tuple of them."""
    if isinstance(a, (list, tuple)):
        return len(a) > 0 and all(is_float(x) for x in a)
    if isinstance(a, np.ndarray):
        return a.dtype.kind == "f"
    return isinstance(a, (float, np.floating))


def leaves(t: Any) -> list:
    return [x for item in t for x in leaves(item)] if isinstance(t, (list, tuple)) else [t]


def pack(t: Any) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, dtype=float)) for x in leaves(t)] + [np.zeros(0)])


def unpack(flat: np.ndarray, like: Any) -> Any:
    """The tree shaped like ``like`` holding ``flat``'s numbers (floats where ``like`` has floats)."""
    out, pos = [], 0

    def build(t):
        nonlocal pos
        if isinstance(t, (list, tuple)):
            return type(t)(build(x) for x in t)
        n = np.size(t)
        chunk, pos = flat[pos:pos + n], pos + n
        return chunk.reshape(np.shape(t)) if isinstance(t, np.ndarray) else float(chunk[0])

    out = build(like)
    return out


def size_of(call: Call) -> str:
    big = any(isinstance(x, np.ndarray) and x.size >= ROLLED_MIN for x in leaves(list(call.args)))
    return "rolled" if big else "small"


# ------------------------------------------------------------------------------------- check_grads


class Wrong(AssertionError):
    """symgrad's number differs from NumPy's or from finite differences."""


def assert_close(what: str, got: Any, ref: Any, rtol: float, scale: float) -> None:
    got_leaves, ref_leaves = leaves(got), leaves(ref)
    if len(got_leaves) != len(ref_leaves):
        raise Wrong(f"{what}: {len(got_leaves)} arrays, expected {len(ref_leaves)}")
    for g, r in zip(got_leaves, ref_leaves):
        g, r = np.asarray(g, dtype=float), np.asarray(r, dtype=float)
        if g.shape != r.shape:
            raise Wrong(f"{what}: shape {g.shape}, expected {r.shape}")
        bad = ~(np.abs(g - r) <= rtol * np.abs(r) + 1e-6 * scale) & ~(np.isnan(g) & np.isnan(r)) & ~(g == r)
        if bad.any():
            i = np.argwhere(bad)[0] if g.ndim else ()
            raise Wrong(f"{what}: {int(bad.sum())} of {g.size} entries differ; at {tuple(int(k) for k in i)}: "
                        f"{g[tuple(i)]!r}, expected {r[tuple(i)]!r}")


def scalarized(fun: Callable, args: tuple) -> tuple[Callable, Callable, list]:
    """(F, bound, dargs): F(*dargs) = sum(w * fun(...)) over fixed random weights ``w`` (fun itself for a
    scalar output), bound(*dargs) = fun(...), with the arguments that are not floats bound as they are."""
    diff = [i for i, a in enumerate(args) if is_float(a)]

    def bound(*dargs):
        full = list(args)
        for i, d in zip(diff, dargs):
            full[i] = d
        return fun(*full)

    out = fun(*args)
    if not isinstance(out, (list, tuple)) and np.ndim(out) == 0:
        return bound, bound, [args[i] for i in diff]
    weights_rng = np.random.default_rng(3)
    weights = [weights_rng.uniform(0.5, 1.5, np.shape(o)) for o in leaves(out)]

    def F(*dargs):
        outs = leaves(bound(*dargs))
        shapes = [getattr(o, "shape", ()) for o in outs]  # np.shape would make the trace element by element
        if shapes != [w.shape for w in weights]:
            raise Wrong(f"output shapes {shapes}, expected {[w.shape for w in weights]}")
        return sum(np.sum(w * o) for w, o in zip(weights, outs))

    return F, bound, [args[i] for i in diff]


def along(f: Callable, z: np.ndarray, v: np.ndarray, h: float) -> Any:
    """The derivative of f at z in the direction v: fourth-order central differences."""
    return (8 * (f(z + h * v) - f(z - h * v)) - (f(z + 2 * h * v) - f(z - 2 * h * v))) / (12 * h)


def fd_gradient(F: Callable, dargs: list, h: float) -> np.ndarray:
    """Every partial derivative (to say which entry is wrong)."""
    z = pack(dargs)
    return np.array([along(lambda t: F(*unpack(t, dargs)), z, np.eye(1, z.size, k)[0], h) for k in range(z.size)])


def check_grads(fun: Callable, args: tuple, backend: str, order: int = 2, stages: list | None = None,
                rolled: list | None = None) -> None:
    """autograd's check_grads(fun)(*args) on symgrad's ``backend``; raises Wrong for a wrong number. As autograd's,
    it compares derivatives along a random direction with finite differences of the function (steps h, then
    h / 100 where the first step crossed a kink); ``stages`` collects the step reached, for messages, ``rolled``
    whether the trace was rolled (indexed expressions) or element by element."""
    stages = [] if stages is None else stages
    F, bound, dargs = scalarized(fun, args)
    if not dargs:
        return
    value_ref = F(*dargs)
    if backend == "python":  # the outputs' shapes and values: the trace's, the same on every backend
        stages.append("jit")
        out = sg.jit(bound, backend=backend)(*dargs)
        assert_close("jit value", out, fun(*args), 1e-9, 1.0)
    stages.append("value_and_grad")
    vg = sg.value_and_grad(F, argnums=tuple(range(len(dargs))), backend=backend)
    value, grads = vg(*dargs)
    assert_close("value", value, value_ref, 1e-9, 1.0)
    if rolled is not None:
        rolled.append(vg.trace(*dargs).indexed)
    if [np.shape(x) for x in leaves(list(grads))] != [np.shape(x) for x in leaves(dargs)]:
        raise Wrong(f"gradient shapes {[np.shape(x) for x in leaves(list(grads))]}, "
                    f"expected {[np.shape(x) for x in leaves(dargs)]}")
    g, z = pack(list(grads)), pack(dargs)
    u, v = np.random.default_rng(5).standard_normal((2, z.size))
    exact = g @ u
    scale = 1 + abs(value_ref) + np.abs(g) @ np.abs(u)
    f = lambda t: F(*unpack(t, dargs))
    if not any(abs(along(f, z, u, h) - exact) <= RTOL * scale for h in (H, H / 100)):
        for h in (H, H / 100):  # say which entry
            fd = fd_gradient(F, dargs, h)
            assert_close("gradient", g, fd, RTOL, 1 + abs(value_ref) + np.max(np.abs(fd), initial=0.0))
        raise Wrong(f"gradient along a random direction: {exact!r}, expected {along(f, z, u, H)!r}")
    if order < 2:
        return
    stages.append("hvp")
    hv = pack(list(sg.hvp(lambda t: F(*t), backend=backend)(tuple(dargs), tuple(unpack(v, dargs)))))
    grad_at = lambda t: pack(list(vg(*unpack(t, dargs))[1]))
    for h in (H, H / 100):
        ref = along(grad_at, z, v, h)
        try:
            assert_close("hvp (second order)", hv, ref, RTOL, 1 + np.max(np.abs(g), initial=0.0)
                         + np.max(np.abs(ref), initial=0.0))
            return
        except Wrong:
            if h != H:
                raise


# ---------------------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    status: str  # ok, WRONG, unsupported, crash
    detail: str = ""
    element_by_element: tuple = ()  # the labels of the rolled-size calls whose trace fell back to elements


RANK = {"ok": 0, "unsupported": 1, "crash": 2, "WRONG": 3}


def run_call(call: Call, backend: str, order: int) -> Outcome:
    stages: list = []
    rolled: list = []
    try:
        check_grads(call.fun, call.args, backend, order, stages, rolled)
    except Wrong as e:
        return Outcome("WRONG", f"({call.label}) {stages[-1]}: {e}")
    except UNSUPPORTED_ERRORS as e:
        return Outcome("unsupported", f"({call.label}) {stages[-1:]}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - any other exception is a crash, reported with where it came from
        where = traceback.extract_tb(e.__traceback__)[-1]
        return Outcome("crash", f"({call.label}) {stages[-1:]}: {type(e).__name__}: {e} "
                       f"[{where.filename}:{where.lineno}]")
    fell_back = size_of(call) == "rolled" and rolled == [False]
    return Outcome("ok", element_by_element=(call.label,) if fell_back else ())


@cache
def outcome(name: str, backend: str, size: str) -> Outcome:
    case = CASE[name]
    calls = [c for c in case.calls if size_of(c) == size]
    if backend == "vm" and len(calls) > 6:  # for the time it takes: the VM runs every other combination
        calls = calls[::2]
    # Second order at the first call of each size (autograd: at every call; the time it takes, again), none
    # on Numba (each compile takes 0.5 s or more)
    results = [run_call(c, backend, 1 if i or backend == "numba" else case.order) for i, c in enumerate(calls)]
    worst = max(results, key=lambda r: RANK[r.status])
    return Outcome(worst.status, "\n".join(r.detail for r in results if r.status == worst.status),
                   tuple(label for r in results for label in r.element_by_element))


CASE: dict[str, Case] = {c.name: c for c in CASES}


def runs() -> list[tuple[str, str, str]]:
    out = []
    for c in CASES:
        sizes = sorted({size_of(call) for call in c.calls}, reverse=True)
        for backend in BACKENDS + (("numba",) if c.numba else ()):
            out += [(c.name, backend, s) for s in sizes]
    return out


@pytest.mark.parametrize("name,backend,size", runs(), ids=lambda x: x)
def test_autograd_case(name, backend, size):
    result = outcome(name, backend, size)
    assert result.status in ("ok", "unsupported"), f"{result.status}: {result.detail}"


# What symgrad refuses, with the reason (a part of the message): "case [backend-size]" (backend "*": all).
UNSUPPORTED: dict[str, str] = {
    # np.int64(W[:, -1]): traced values used as indices
    "numpy/cast to int [*-small]": "cannot be used as an integer (an index, a range or a shape)",
    "numpy/cast to int [*-rolled]": "cannot be used as an integer (an index, a range or a shape)",
    # (np.max / np.min of np.array([x, x, ...]), a NumPy object array whose reductions compare its entries in
    # Python, work: the comparisons are decided by the call's values, as guards of the trace)
}


def test_unsupported_cases_are_exactly_these():
    found = {}
    for name, backend, size in runs():
        result = outcome(name, backend, size)
        if result.status == "unsupported":
            found[f"{name} [{backend}-{size}]"] = result.detail
    expected = {}
    for key, reason in UNSUPPORTED.items():
        name, where = key.rsplit(" [", 1)
        backend, size = where.rstrip("]").split("-")
        for b in BACKENDS + ("numba",) if backend == "*" else (backend,):
            if (name, b, size) in set(runs()):
                expected[f"{name} [{b}-{size}]"] = reason
    assert sorted(found) == sorted(expected), "\n".join(f"{k}: {v}" for k, v in sorted(found.items()))
    for key, reason in expected.items():
        assert reason in found[key], f"{key}: {found[key]}"


# ------------------------------------------------------------------------- test_wrappers.py (equivalences)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrappers_value_and_grad_agree_with_grad(backend):
    fun = lambda x: np.sum(np.sin(x) ** 2)
    for x in (R(5), R(70)):
        value, grad = sg.value_and_grad(fun, backend=backend)(x)
        np.testing.assert_allclose(value, fun(x), rtol=1e-12)
        np.testing.assert_allclose(grad, sg.grad(fun, backend=backend)(x), rtol=1e-12)
        np.testing.assert_allclose(grad, 2 * np.sin(x) * np.cos(x), rtol=1e-12)
        # check_grads of a function calling value_and_grad: a transform traced inside a trace
        inner = sg.value_and_grad(fun, backend=backend)
        check_grads(lambda x, inner=inner: inner(x)[0], (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrappers_hessian_of_quadratic_form(backend):
    for d in (5, 70):
        H, x = R(d, d), R(d)
        np.testing.assert_allclose(sg.hessian(lambda x, H=H: np.dot(np.dot(x, H), x), backend=backend)(x), H + H.T,
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrappers_multigrad_argnums_order(backend):
    def fun(a, b, c, d, e, f=1.1, g=9.0):
        return a + np.sin(b) + np.cosh(c) + np.cos(d) + np.tan(e) + f + g

    args = (0.5, -0.3, 0.2, -1.1, 0.7)
    wrapped = sg.grad(fun, argnums=(3, 1), backend=backend)(*args, f=0.6, g=-0.1)
    explicit = sg.grad(lambda db: fun(0.5, db[1], 0.2, db[0], 0.7, f=0.6, g=-0.1), backend=backend)((-1.1, -0.3))
    np.testing.assert_allclose(wrapped, explicit, rtol=1e-12)
    np.testing.assert_allclose(wrapped, (np.sin(1.1), np.cos(-0.3)), rtol=1e-12)
    value, grads = sg.value_and_grad(fun, argnums=(3, 1), backend=backend)(*args, f=0.6, g=-0.1)
    np.testing.assert_allclose(value, fun(*args, f=0.6, g=-0.1), rtol=1e-12)
    np.testing.assert_allclose(grads, wrapped, rtol=1e-12)
    A, B = R(3), R(3)
    one = sg.grad(lambda x, y: np.sum(x + np.sin(y)), argnums=(0,), backend=backend)(A, B)
    packed = sg.grad(lambda xy: np.sum(xy[0] + np.sin(xy[1])), backend=backend)((A, B))
    np.testing.assert_allclose(one[0], packed[0], rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrappers_elementwise_grad(backend):
    simple = lambda a: a + np.sin(a) + np.cosh(a)
    for A in (R(10), R(70)):
        wrapped = sg.vmap(sg.grad(simple, backend=backend))(A)
        explicit = np.array([sg.grad(simple, backend=backend)(a) for a in A[:10]])
        np.testing.assert_allclose(wrapped[:10], explicit, rtol=1e-12)
        np.testing.assert_allclose(wrapped, 1 + np.cos(A) + np.sinh(A), rtol=1e-12)
    B = R(10)
    wrapped = sg.vmap(sg.grad(lambda a, b: a + np.sin(a) + np.cosh(b), argnums=1, backend=backend),
                      in_axes=(None, 0))(0.9, B)
    np.testing.assert_allclose(wrapped, np.sinh(B), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(5,), (5, 4), (5, 4, 3), (8, 9)], ids=str)
def test_wrappers_hessian_tensor_product_and_hvp(backend, shape):
    fun = lambda a: np.sum(np.sin(a))
    a, V = R(*shape), R(*shape)
    H = sg.hessian(fun, backend=backend)(a)
    assert H.shape == shape * 2
    np.testing.assert_allclose(H.reshape(a.size, a.size), np.diag(-np.sin(a).ravel()), atol=1e-12)
    HV = np.tensordot(H, V, axes=V.ndim)
    np.testing.assert_allclose(sg.hvp(fun, backend=backend)(a, V), HV, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shapes", [((5,), (5,)), ((5, 4), (5, 4)), ((5, 4, 3), (5, 4)), ((8, 9), (8, 9))],
                         ids=str)
def test_wrappers_tensor_jacobian_product(backend, shapes):
    fun = lambda a: np.roll(np.sin(a), 1)
    a, V = R(*shapes[0]), R(*shapes[1])
    J = sg.jacobian(fun, backend=backend)(a)
    assert J.shape == shapes[0] * 2
    ref = np.roll(np.diag(np.cos(a).ravel()), 1, axis=0).reshape(a.shape * 2)  # roll without an axis: raveled
    np.testing.assert_allclose(J, ref, atol=1e-12)
    vjp_value, vjp = sg.vjp(fun, a)
    np.testing.assert_allclose(vjp_value, fun(a), rtol=1e-12)
    np.testing.assert_allclose(np.tensordot(V, J, axes=V.ndim), np.tensordot(V, ref, axes=V.ndim), atol=1e-12)
    if V.shape == a.shape:
        np.testing.assert_allclose(vjp(V)[0] if isinstance(vjp(V), tuple) else vjp(V),
                                   np.tensordot(V, ref, axes=V.ndim), atol=1e-12)
