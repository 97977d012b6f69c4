"""The checker: one program's value and gradient against NumPy, finite differences, the element trace and
the other backends (``check``), and the extra transforms (``EXTRAS``)."""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import symgrad as sg
from symgrad.compile.kernels import REGISTRY
from symgrad.expr import interp
from symgrad.fuzz.generator import _valid
from symgrad.fuzz.noise import _capped, _mismatch, _nan_only, _observe, _settled
from symgrad.fuzz.program import Disagreement, Program
from symgrad.trace import limits

# Relative tolerances. A backend against the interpreter: the same formulas, so only rounding (the
# compiled transcendental functions are within 3 ulp of NumPy's) separates them; errors are scaled by
# the largest entry of the reference (an absolute floor relative to the magnitude).
BACKEND_RTOL = 1e-10
VALUE_RTOL = 1e-9  # the interpreter against NumPy: another order of additions
FD_RTOL = 1e-5  # the gradient against finite differences (loose: truncation and rounding)
FD_STEPS = (1e-4, 1e-6, 1e-7)  # central differences at each; one within FD_RTOL passes (steep programs need 1e-7)
FD_LADDER = tuple(10.0 ** (-k / 2) for k in range(8, 21))  # 1e-4 ... 1e-10, where all miss: settled?
ELEMENT_MAX = 400  # the element trace only for arguments this small in all (it builds a node per element)
UNSUPPORTED = (sg.TracingError, NotImplementedError)  # constructs the tracer refuses: not bugs
# What the interpreter refuses by design (it gives every index symbol of a rolled graph a NumPy axis)
LIMITS = ("evaluate it compiled",)  # (64 axes; more values at once than it holds)


def _unsupported(e: BaseException) -> bool:
    return isinstance(e, UNSUPPORTED) or any(text in str(e) for text in LIMITS)


@contextlib.contextmanager
def element_trace() -> Iterator[None]:
    """Trace arrays element by element whatever their size and however long their loops (``limits.ROLLED_MIN``
    and ``limits.LONG_LOOP`` raised while inside).

    >>> with element_trace():
    ...     sg.value_and_grad(lambda x: np.sum(x ** 2), backend="python").trace(np.ones(100)).indexed
    False
    """
    old = limits.ROLLED_MIN, limits.LONG_LOOP
    limits.ROLLED_MIN = limits.LONG_LOOP = sys.maxsize
    try:
        yield
    finally:
        limits.ROLLED_MIN, limits.LONG_LOOP = old


def _error(e: BaseException) -> str:
    lines = (str(e) or "").strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _grads(result: Any, argnums: tuple[int, ...]) -> list[np.ndarray]:
    return [np.asarray(g) for g in (result if len(argnums) > 1 else (result,))]


def _vg(program: Program, f: Callable, inputs: list, backend: str,
        F: Callable | None = None) -> tuple[float, list[np.ndarray], bool, str]:
    """Value, gradients, whether it traced rolled, and the backend that actually ran (by ``F``, a
    value_and_grad of ``f`` on that backend, where given: its traces are kept)."""
    argnums = program.argnums[0] if len(program.argnums) == 1 else program.argnums
    F = F or sg.value_and_grad(f, argnums=argnums, backend=backend)
    value, g = F(*inputs)
    t = F.trace(*inputs)
    return float(value), _grads(g, program.argnums), t.indexed, t.compiled.backend


class _Checker:
    """Runs the probes of one program; ``only`` restricts them to one probe (for the minimiser)."""

    def __init__(self, program: Program, backends: tuple[str, ...], extras: tuple[str, ...] = (),
                 only: str | None = None, runners: dict | None = None, element: bool = True) -> None:
        self.program, self.backends, self.extras, self.only = program, backends, extras, only
        self.element = element  # whether to compare the element trace (the slowest probe)
        self.runners = runners or {}  # probe name -> replacement for value_and_grad (planted bugs in tests)
        self.found: list[Disagreement] = []
        self.status = "ok"  # or "invalid" (NumPy fails), "unsupported" (the tracer refuses), "fallback"
        self.note = ""
        self._interpreter: Callable | None = None  # value_and_grad on the interpreter (traced once, called thrice)

    def wanted(self, probe: str) -> bool:
        return self.only is None or self.only == probe

    def add(self, probe: str, quantity: str, kind: str, detail: str) -> None:
        self.found.append(Disagreement(probe, quantity, kind, detail, self.program))

    def compare(self, probe: str, quantity: str, got: Any, ref: Any, rtol: float, floor: float = 0.0) -> None:
        if self.program.guarded:  # (at sqrt's or log's exact 0 a derivative is inf or nan by its terms' order;
            # inf against -inf stays a disagreement)
            got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
            singular = np.isnan(got) & np.isinf(ref) | np.isinf(got) & np.isnan(ref)
            got, ref = np.where(singular, np.nan, got), np.where(singular, np.nan, ref)
        detail = _mismatch(got, ref, rtol, floor)
        if detail:
            self.add(probe, quantity, "nan" if _nan_only(got, ref, rtol) else "wrong", detail)

    def run(self) -> list[Disagreement]:
        p = self.program
        try:
            f, inputs = p.function(), p.inputs()
        except Exception as e:  # the minimiser's candidates may not even compile
            self.status, self.note = "invalid", _error(e)
            return []
        if not _valid(p):
            self.status = "invalid"
            return []
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = float(f(*inputs))
            names = [p.names[k] for k in p.argnums]
            try:
                value, grads, rolled, _ = self._value_and_grad("python", f, inputs)
            except Exception as e:
                if _unsupported(e):
                    self.status, self.note = "unsupported", _error(e)
                    return []
                if self.wanted("python"):
                    self.add("python", "value", "error", _error(e))
                return []
            if not rolled and max(np.size(a) for a in inputs) >= limits.ROLLED_MIN:
                self.status, self.note = "fallback", self._why_not_rolled(f, inputs)
            self.reference = value, grads
            self.noise = self._noise(f, inputs, value, grads, expected)
            if self.wanted("python"):  # (NumPy adds terms of 1e62 in another order: their rounding)
                self.compare("python", "value", value, expected, VALUE_RTOL, self.noise[0])
            if self.wanted("fd"):
                self._finite_differences(f, inputs, grads)
            small = sum(map(np.size, inputs)) <= ELEMENT_MAX
            if rolled and small and self.element and self.wanted("element"):
                self._element(f, inputs, value, grads, names)
            for b in self.backends:
                if b != "python" and self.wanted(b):
                    self._backend(b, f, inputs, value, grads, names)
            for extra in self.extras:
                getattr(self, "_" + extra)(f, inputs, grads)
        return self.found

    def _value_and_grad(self, probe: str, f: Callable, inputs: list) -> tuple:
        if probe in self.runners:
            return self.runners[probe](self.program, f, inputs)
        if probe == "python" and self._interpreter is None:
            argnums = self.program.argnums
            self._interpreter = sg.value_and_grad(f, argnums=argnums[0] if len(argnums) == 1 else argnums,
                                                  backend="python")
        return _vg(self.program, f, inputs, probe if probe in REGISTRY["program"] else "python",
                   self._interpreter if probe == "python" else None)

    def _noise(self, f: Callable, inputs: list, value: float, grads: list,
               expected: float) -> tuple[float, list[float]]:
        """How far the interpreter's value and gradients move when each differentiated input moves by an
        ulp or two and the library functions' results by one (and its value from NumPy's), times 8, and the
        rounding of the largest terms it adds: the noise of terms that cancel (a sum of deviations is 0 to
        within the terms' rounding, not the result's). Ties (an element read twice), signs and orders stay;
        near ties that another implementation of tanh rounds apart (or together) move (a max of saturated
        values splits its gradient among the entries that tie). At most 1e-6 of the largest entry plus the
        terms' rounding, so no real error hides under it.
        """
        moved_v, moved_g = abs(expected - value), [0.0] * len(grads)
        terms = [0.0]  # the largest sum of |entries| of any value the interpreter computes
        rng = np.random.default_rng(self.program.seed + 2)
        for salt in range(2):
            scaled = [a * (1 + rng.choice([-2.0, 2.0], np.shape(a)) * 2.0 ** -52) if k in self.program.argnums
                      else a for k, a in enumerate(inputs)]
            token = interp.OBSERVER.set(functools.partial(_observe, terms=terms, salt=salt))
            try:
                v, gs, _, _ = self._value_and_grad("python", f, scaled)
            except Exception:
                return 0.0, [0.0] * len(grads)
            finally:
                interp.OBSERVER.reset(token)
            moved_v = max(moved_v, abs(v - value))
            moved_g = [max(m, float(np.max(np.abs(g - r), initial=0.0))) for m, g, r in zip(moved_g, gs, grads)]
        return _capped(moved_v, value, terms[0]), [_capped(m, g, terms[0]) for m, g in zip(moved_g, grads)]

    def _why_not_rolled(self, f: Callable, inputs: list) -> str:
        F = sg.value_and_grad(f, argnums=self.program.argnums, backend="python")
        F._fallback = False  # raise instead of tracing element by element
        try:
            F(*inputs)
        except Exception as e:
            return _error(e)
        return "?"

    def _moved(self, f: Callable, inputs: list, dirs: list, step: float) -> float:
        """f at the inputs moved by ``step`` along ``dirs`` (one per differentiated argument)."""
        moved = list(inputs)
        for k, d in zip(self.program.argnums, dirs):
            moved[k] = inputs[k] + step * d
        return float(f(*moved))

    def _finite_differences(self, f: Callable, inputs: list, grads: list) -> None:
        """The gradient along random directions against central differences at three step sizes; where all
        three miss, a verdict only once the differences have settled (``_settled``)."""
        rng = np.random.default_rng(self.program.seed + 1)
        special = self.program.special()  # (kinks: moved along the other entries only)
        for _ in range(2):
            dirs = [rng.normal(size=np.shape(inputs[k])) * ~special[k] for k in self.program.argnums]
            norm = np.sqrt(sum(np.sum(d * d) for d in dirs))
            miss = self._along(f, inputs, grads, [d / norm for d in dirs])
            if miss:
                self.add("fd", "grad", *miss)
                return

    def _along(self, f: Callable, inputs: list, grads: list, dirs: list) -> tuple[str, str] | None:
        """(kind, detail) of what is wrong with the gradient along ``dirs`` by central differences."""
        exact = sum(float(np.sum(g * d)) for g, d in zip(grads, dirs))
        gnorm = np.sqrt(sum(float(np.sum(g * g)) for g in grads))
        rounding = 1e-12 * max(1.0, abs(float(f(*inputs)))) + self.noise[0]

        def tol(h: float) -> float:
            return FD_RTOL * (gnorm + abs(exact)) + rounding / h

        def fd(h: float) -> float:
            return (self._moved(f, inputs, dirs, h) - self._moved(f, inputs, dirs, -h)) / (2 * h)
        fds = [fd(h) for h in FD_STEPS]
        for k, (h, d) in enumerate(zip(FD_STEPS, fds)):
            t = tol(h)
            if k:  # central differences' truncation error ~ h**2: estimated from the step before
                t += 2 * abs(d - fds[k - 1]) * (h / FD_STEPS[k - 1]) ** 2
            if abs(d - exact) <= t:  # (a nan gradient misses)
                return None
        if not _settled({h: fd(h) for h in FD_LADDER}, exact, tol):
            return None
        return "nan" if np.isnan(exact) else "wrong", (f"directional derivative {exact:.10g}, finite differences "
                + ", ".join(f"{d:.10g} (h={h:g})" for d, h in zip(fds, FD_STEPS)) + f"; |grad| {gnorm:.3g}")

    def _element(self, f: Callable, inputs: list, value: float, grads: list, names: list) -> None:
        try:
            with element_trace():
                v, gs, _, _ = self._value_and_grad("element", f, inputs)
        except Exception as e:
            self.add("element", "value", "error", _error(e))
            return
        self.compare("element", "value", value, v, BACKEND_RTOL, self.noise[0])  # (the element trace as reference)
        for name, got, ref, floor in zip(names, grads, gs, self.noise[1]):
            self.compare("element", f"d/d{name}", got, ref, BACKEND_RTOL, floor)

    def _backend(self, b: str, f: Callable, inputs: list, value: float, grads: list, names: list) -> None:
        try:
            v, gs, _, actual = self._value_and_grad(b, f, inputs)
        except Exception as e:
            self.add(b, "value", "error", _error(e))
            return
        if actual != b and b not in self.runners:
            self.note = f"{b} ran as {actual}"
            return
        self.compare(b, "value", v, value, BACKEND_RTOL, self.noise[0])
        for name, got, ref, floor in zip(names, gs, grads, self.noise[1]):
            self.compare(b, f"d/d{name}", got, ref, BACKEND_RTOL, floor)

    # extras: other transforms on every backend, the interpreter's checked against the gradient

    def _each(self, kind: str, compute: Callable[[str], Any], check: Callable[[Any, list], None],
              rtol: float = BACKEND_RTOL) -> None:
        """``compute(backend)`` on the interpreter (checked by ``check(results, their noise)``) and on each
        other backend."""
        if not any(self.wanted(f"{kind}:{b}") for b in self.backends):
            return
        try:
            ref = compute("python")
        except Exception as e:
            if not _unsupported(e):
                self.add(f"{kind}:python", kind, "error", _error(e))
            return
        own = self._own_noise(compute, ref)
        if self.wanted(f"{kind}:python"):
            check(ref, own)
        for b in self.backends:
            if b == "python" or b == "numba" and self.only is None or not self.wanted(f"{kind}:{b}"):
                continue  # (Numba compiles a Hessian's loops for minutes: only where asked for by name)
            try:
                got = compute(b)
            except Exception as e:
                self.add(f"{kind}:{b}", kind, "error", _error(e))
                continue
            floor = max(self.noise[0], *self.noise[1])  # (the rounding of the value's and gradients' terms)
            for i, (g, r) in enumerate(zip(got, ref)):
                self.compare(f"{kind}:{b}", f"{kind}[{i}]", g, r, rtol, max(floor, own[i]))

    def _own_noise(self, compute: Callable[[str], Any], ref: Any) -> list[float]:
        """How far each of the interpreter's results moves when its library results move by an ulp (see
        ``_noise``), times 8, at most 1e-6 of its largest entry plus the rounding of the largest terms it
        adds: a second derivative can be far more sensitive to rounding than the value and gradient (cos
        of 1e12 in an hvp), and a jvp of terms near 1e12 that cancel to 10 is as exact as they are."""
        moved, terms = [0.0] * len(ref), [0.0]
        for salt in range(2):
            token = interp.OBSERVER.set(functools.partial(_observe, terms=terms, salt=salt))
            try:
                again = compute("python")
            except Exception:
                return [0.0] * len(ref)
            finally:
                interp.OBSERVER.reset(token)
            moved = [max(m, float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(r, dtype=float)),
                                         initial=0.0))) for m, a, r in zip(moved, again, ref)]
        return [_capped(m, r, terms[0]) for m, r in zip(moved, ref)]

    def _tangents(self, inputs: list) -> list:
        rng = np.random.default_rng(self.program.seed + 2)
        return [rng.normal(size=np.shape(a)) for a in inputs]

    def _jvp(self, f: Callable, inputs: list, grads: list) -> None:
        tangents = self._tangents(inputs)
        expected = sum(float(np.sum(g * tangents[k])) for g, k in zip(grads, self.program.argnums))
        fixed = [k for k in range(len(inputs)) if k not in self.program.argnums]
        for k in fixed:
            tangents[k] = np.zeros_like(inputs[k])

        def compute(b: str) -> tuple:
            return sg.jvp(f, tuple(inputs), tuple(tangents), backend=b)

        def check(ref: Any, own: list) -> None:
            self.compare("jvp:python", "jvp value", ref[0], self.reference[0], BACKEND_RTOL)
            scale = sum(float(np.sum(np.abs(g * tangents[k]))) for g, k in zip(grads, self.program.argnums))
            rounding = 1e-13 * sum(float(np.sum(np.abs(tangents[k]))) for k in self.program.argnums) + own[1]
            if abs(float(ref[1]) - expected) > 1e-9 * scale + rounding:  # (terms cancelling to 0 leave rounding)
                self.add("jvp:python", "jvp", "wrong", f"{float(ref[1]):.12g} vs grad . tangent {expected:.12g}")

        self._each("jvp", compute, check)

    def _hvp(self, f: Callable, inputs: list, grads: list) -> None:
        k = self.program.argnums[0]
        v = self._tangents(inputs)[k] * ~self.program.special()[k]  # (differences across a kink say nothing)

        def compute(b: str) -> tuple:
            return (sg.hvp(f, argnums=k, backend=b)(*inputs, v),)

        def check(ref: Any, own: list) -> None:  # against central differences of the interpreter's gradient
            G = sg.grad(f, argnums=k, backend="python")
            moved = lambda h: [a + h * v if i == k else a for i, a in enumerate(inputs)]  # noqa: E731
            g0, g1 = np.asarray(G(*moved(0.0))), np.asarray(G(*moved(1e-9)))
            if not np.max(np.abs(g1 - g0), initial=0.0) < 1e-5 * (1.0 + np.max(np.abs(g0), initial=0.0)):
                return  # a gradient moved by 1e-9 of the inputs by more: differences of it say nothing
            steps = (1e-5, 1e-6, 1e-7)  # (steeply curved programs need the small steps)
            fds = [(np.asarray(G(*moved(h))) - np.asarray(G(*moved(-h)))) / (2 * h) for h in steps]
            # each step's truncation error ~ h**2, estimated from the step before (as in _finite_differences)
            floors = [0.0] + [2 * float(np.max(np.abs(fds[j] - fds[j - 1]))) * (steps[j] / steps[j - 1]) ** 2
                              for j in range(1, len(steps))]
            details = [_mismatch(ref[0], fd, 1e-4, floor) for fd, floor in zip(fds, floors)]
            if all(details):
                self.add("hvp:python", "hvp", "wrong", "against differences of the gradient: " + details[0])

        self._each("hvp", compute, check)

    def _hessian(self, f: Callable, inputs: list, grads: list) -> None:
        k = self.program.argnums[0]
        if np.size(inputs[k]) > 160:
            return
        v = self._tangents(inputs)[k]

        def compute(b: str) -> tuple:
            return (sg.hessian(f, argnums=k, backend=b)(*inputs),)

        def check(ref: Any, own: list) -> None:
            H = np.asarray(ref[0]).reshape(np.size(v), np.size(v))
            hv = sg.hvp(f, argnums=k, backend="python")(*inputs, v)
            # (each entry of H @ v adds n entries of H, each as uncertain as H's own noise)
            floor = 2 * own[0] * float(np.sum(np.abs(v)))
            self.compare("hessian:python", "hessian @ v", H @ v.ravel(), np.ravel(hv), 1e-9, floor)

        self._each("hessian", compute, check)

    def _jacobian(self, f: Callable, inputs: list, grads: list) -> None:
        fvec, k = self.program.vector_function(), self.program.argnums[0]
        if fvec is None:
            return

        def compute(b: str) -> tuple:
            return (sg.jacobian(fvec, argnums=k, backend=b)(*inputs),)

        def check(ref: Any, own: list) -> None:  # the outputs' sum: the gradient
            J = np.asarray(ref[0])
            total = J.reshape(-1, *np.shape(inputs[k])).sum(axis=0)
            self.compare("jacobian:python", "sum of jacobian rows", total, grads[0], 1e-9, self.noise[1][0])

        self._each("jacobian", compute, check)

    def _vmap(self, f: Callable, inputs: list, grads: list) -> None:
        if len(inputs) != 1:
            return
        rng = np.random.default_rng(self.program.seed + 3)
        X = np.stack([inputs[0], rng.normal(size=np.shape(inputs[0])), rng.normal(size=np.shape(inputs[0]))])

        def compute(b: str) -> tuple:
            return (sg.vmap(sg.grad(f, backend=b), backend=b)(X),)

        def check(ref: Any, own: list) -> None:
            G = sg.grad(f, backend="python")
            for i in range(len(X)):  # (at the batch's own noise: it may sum in another order)
                self.compare("vmap:python", f"vmap grad row {i}", np.asarray(ref[0])[i], G(X[i]), 1e-9, own[0])

        # (rows 1 and 2 are new inputs: the batch's own noise covers them, the value's does not)
        self._each("vmap", compute, check, VALUE_RTOL)


EXTRAS = ("jvp", "hvp", "hessian", "jacobian", "vmap")


def check(program: Program, backends: tuple[str, ...] = ("python", "vm"), extras: tuple[str, ...] = (),
          only: str | None = None, runners: dict | None = None) -> tuple[list[Disagreement], str]:
    """The disagreements of one program and its status ("ok", "invalid", "unsupported", "fallback").

    ``extras``: names from ``EXTRAS`` (other transforms); ``only``: run this probe alone; ``runners``:
    a probe name mapped to a function ``(program, f, inputs) -> (value, grads, rolled, backend)``
    used instead of ``sg.value_and_grad`` (tests plant bugs this way).

    >>> found, status = check(Program("def f(x):\\n    return np.sum(np.sin(x) * x[::-1])\\n", ((64,),), (0,)))
    >>> found, status
    ([], 'ok')
    """
    c = _Checker(program, tuple(backends), tuple(extras), only, runners)
    return c.run(), c.status
