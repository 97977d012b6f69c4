"""How the checker compares: mismatches at a tolerance, the rounding noise another math library would add
(``_observe``, ``_capped``), and whether finite differences settle (``_settled``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr.node import float_bits


def _mismatch(got: Any, ref: Any, rtol: float, floor: float = 0.0) -> str | None:
    """None where ``got`` matches ``ref`` to ``rtol`` of the entry plus ``rtol`` of the largest entry (at least 1:
    the inputs are of order 1, so rounding errors are too) plus ``floor`` (the reference's own rounding noise,
    see oracle._Checker._noise), else how it differs.

    >>> _mismatch([1.0, 2.0], [1.0, 2.0 + 1e-13], 1e-10) is None
    True
    >>> _mismatch(3.0, 1.5, 1e-10)
    '1 of 1 entries differ; at (): 3 vs 1.5 (error 1.00e+00 of the largest), got/expected 2'
    """
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        if got.size == ref.size:
            got = got.reshape(ref.shape)
        else:
            return f"shape {got.shape} instead of {ref.shape}"
    both_nan = np.isnan(got) & np.isnan(ref)
    err = np.where(both_nan, 0.0, np.abs(got - ref))
    scale = max(float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0.0)), initial=0.0)), 1.0)
    bad = ~(err <= rtol * (np.abs(ref) + scale) + floor) & ~both_nan & ~((got == ref) & np.isinf(ref))
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), ref.shape) if ref.ndim else ()
    rel = float(err[worst] / max(scale, 1e-300))
    ratio = ""
    if ref.ndim == 0 and ref != 0:
        ratio = f", got/expected {float(got / ref):.6g}"
    return (f"{int(bad.sum())} of {ref.size} entries differ; at {tuple(int(i) for i in worst)}: "
            f"{float(got[worst]):.10g} vs {float(ref[worst]):.10g} (error {rel:.2e} of the largest){ratio}")


def _nan_only(got: Any, ref: Any, rtol: float) -> bool:
    """Whether ``got`` and ``ref`` differ only where one is nan and the other is not.

    >>> _nan_only([np.nan, 1.0], [0.0, 1.0], 1e-12), _nan_only([np.nan, 1.0], [0.0, 2.0], 1e-12)
    (True, False)
    """
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.size != ref.size:
        return False
    got = got.reshape(ref.shape)
    one = np.isnan(got) != np.isnan(ref)
    return bool(one.any()) and _mismatch(np.where(one, ref, got), ref, rtol) is None


# The ops whose results a math library rounds (not IEEE arithmetic): the compiled tiers' are within an ulp
# or two of NumPy's, another implementation (symgrad.compile.fastmath) or another order of additions.
_ROUNDED = frozenset({"pow", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
                      "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "logaddexp", "erf", "sigmoid", "softplus",
                      "hypot", "sum", "cumsum"})  # (running sums: gradients reverse them, in another order)


def _nudged(value: Any, operands: list, salt: int) -> Any:
    """``value`` moved by -1, 0 or +1 ulp per entry, chosen by a hash of the operands' bits (the same
    operands move alike, as a function of them would: exact ties stay, near ties may round apart).

    >>> a = np.array([1.4, 1.4, np.nextafter(1.4, 0)])
    >>> v = _nudged(np.tanh(a), [a], 0)
    >>> bool(v[0] == v[1]), bool(np.all(np.abs(v - np.tanh(a)) <= np.spacing(np.tanh(a))))
    (True, True)
    """
    if isinstance(value, float) and all(isinstance(a, float | int) for a in operands):
        return _nudged_scalar(value, operands, salt)
    value = np.asarray(value, dtype=float)
    key = np.full(value.size, 0x9E3779B97F4A7C15 * (salt + 1) & (2**64 - 1), dtype=np.uint64)
    for a in operands:  # (1-d arrays: NumPy wraps their integer products silently, not scalars')
        a = np.asarray(a)
        if a.dtype != float or a.ndim > value.ndim or any(
                d not in (1, n) for d, n in zip(a.shape[::-1], value.shape[::-1])):
            a = value  # (reductions, indices: the result's own bits)
        key = (key ^ np.broadcast_to(a, value.shape).ravel().view(np.uint64)) * np.uint64(0xBF58476D1CE4E5B9)
    step = ((key >> np.uint64(62)).astype(np.int64) % 3 - 1).reshape(value.shape)
    moved = np.where(step == 0, value, np.nextafter(value, np.where(step > 0, np.inf, -np.inf)))
    return moved if moved.ndim else np.float64(moved)


def _nudged_scalar(value: float, operands: list, salt: int) -> np.float64:
    """``_nudged`` of one float, in Python's integers (an element trace's half a million nodes: NumPy's
    arrays of one entry each cost 40 us, most of a check)."""
    key = 0x9E3779B97F4A7C15 * (salt + 1) & _WORD
    for a in operands:
        bits = float_bits(a if isinstance(a, float) else value) & _WORD
        key = (key ^ bits) * 0xBF58476D1CE4E5B9 & _WORD
    step = (key >> 62) % 3 - 1
    return np.float64(value if step == 0 else math.nextafter(value, math.inf if step > 0 else -math.inf))


_WORD = 2**64 - 1


def _another_library(node: Any, value: Any, operands: list, salt: int) -> Any:
    """The interpreter's ``value`` of ``node`` as another math library might give it: nudged (``_nudged``)
    where ``node`` is a library function or a sum of real values, else as it is."""
    if node.op.name in _ROUNDED and isinstance(value, np.ndarray | float) and np.isrealobj(value):
        return _nudged(value, operands, salt)
    return value


def _magnitude(node: Any, value: Any, operands: list) -> float:
    """A bound on the sum of the magnitudes of the terms one value of ``node`` adds up: for a sum or a
    running sum, the largest term times how many (the interpreter's arrays of a rolled graph have an
    axis per index symbol, broadcast: the sum of every entry counted terms of other sums, over and
    over: 1e20 for a scan's 44 axes, a floor above any error); else the largest entry.

    >>> from symgrad.expr import rolled
    >>> i = rolled.index("i", 8)
    >>> _magnitude(rolled.reduce("sum", rolled.subscript(rolled.array("x", 8), (i,)), i), 0.0, [np.ones(8), None])
    8.0
    """
    def largest(v: Any) -> float:
        if isinstance(v, float):
            return abs(v) if math.isfinite(v) else 0.0
        v = np.abs(np.asarray(v, dtype=float))
        return float(np.max(v, where=np.isfinite(v), initial=0.0))
    name = node.op.name
    if name == "sum":
        return largest(operands[0]) * node.args[1].payload[1]
    if name == "cumsum":
        return largest(operands[0]) * node.args[0].shape[node.payload[0]]
    return largest(value)


def _settled(fds: dict[float, float], exact: float, tol: Callable[[float], float]) -> bool:
    """Whether central differences ``fds`` (step -> difference) settle somewhere away from ``exact``.

    Settled: four steps in a row whose differences agree within their tolerance ``tol(h)``, or shrink
    as truncation (~ h**2) predicts, twice in a row (then extrapolated, Richardson); of those, the
    tightest bound decides. Programs with a curvature scale below the steps (sin of 1e8) pass through
    plateaus that look settled once; never settled, they give no verdict, right or wrong.

    >>> _settled({1e-2: 2.0001, 1e-3: 2.000001, 1e-4: 2.00000001, 1e-5: 2.0000000001}, 3.0, lambda h: 1e-6)
    True
    >>> _settled({1e-2: 5.0, 1e-3: -40.0, 1e-4: 700.0, 1e-5: 3.0}, 3.0, lambda h: 1e-6)
    False
    """
    steps = sorted(fds, reverse=True)
    fits = [_fit(fds[a], fds[b], fds[c], a, b, c, tol(c)) for a, b, c in zip(steps, steps[1:], steps[2:])]
    settled = [later for earlier, later in zip(fits, fits[1:]) if earlier and later]
    if not settled:
        return False
    bound, limit = min(settled)
    return not abs(limit - exact) <= bound


def _fit(f1: float, f2: float, f3: float, h1: float, h2: float, h3: float, t: float) -> tuple | None:
    """(error bound, limit) of three central differences at falling steps, if they agree within ``t``
    or their differences shrink within 25% of the ratio truncation (~ h**2) predicts; else None."""
    d1, d2 = f2 - f1, f3 - f2
    if abs(d1) <= t and abs(d2) <= t:
        return 2 * t, f3
    q = (h2 * h2 - h3 * h3) / (h1 * h1 - h2 * h2)
    if d1 * d2 > 0 and abs(d2 / d1 - q) <= q / 4:
        return t + 2 * abs(d2 - q * d1), f3 + d2 * h3 * h3 / (h2 * h2 - h3 * h3)
    return None


def _observe(node: Any, value: Any, operands: list, terms: list, salt: int) -> Any:
    """The interpreter's observer for the noise estimates: keeps the largest terms' magnitude in
    ``terms[0]``, and moves library results by an ulp as another library would."""
    if isinstance(value, np.ndarray | float) and np.isrealobj(value):
        terms[0] = max(terms[0], _magnitude(node, value, operands))
    return _another_library(node, value, operands, salt)


def _capped(moved: float, ref: Any, terms: float) -> float:
    """A noise floor: 8 times how far a result moved, at least the rounding of the largest terms
    (``terms``: terms of 1e19 cancelling to 0 round to 1e3), at most 1e-6 of the result's largest
    entry (or twice the move itself, seen: sin of a chain of squares reaching 2e6 moves its
    gradient by 1.35e-6 of it, float64's own error there) plus four times that rounding."""
    top = float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0.0)), initial=0.0))
    rounding = 16 * 2.0 ** -52 * terms
    noise = min(max(8 * moved, rounding), max(1e-6 * max(top, 1.0), 2 * moved) + 4 * rounding)
    return noise if np.isfinite(noise) else 0.0
