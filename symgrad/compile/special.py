"""log-gamma, digamma, polygamma, sinc's derivatives, ive and erfinv for compiled code (the op table's
``special.`` templates; the last three are expr/special_series.py's functions, compiled).

Numba has ``math.lgamma`` but no digamma or polygamma. These follow SciPy (the interpreter's
reference): the recurrence ``psi_n(x) = psi_n(x + 1) - (-n)! / x**(n + 1)`` up to x >= 20 + n, then
the asymptotic series in Bernoulli numbers (ten terms: below 1e-17 relative there for n <= 10);
digamma of x < 0 by reflection (``psi(1 - x) - pi / tan(pi x)``); SciPy's values at the poles
(``psi(+-0) = -+inf``, nan at the negative integers, ``psi_n`` there ``(-1)**(n+1) inf``). Against
SciPy on 10**5 points in -30 .. 1e6 (``tests/test_special.py``): within 1e-13 relative, or 1e-15
absolute near digamma's root.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numba
import numpy as np

from symgrad.expr import special_series

# What generated modules write to use these (the hash: a changed file never meets stale machine code).
_SOURCES = (Path(__file__), Path(special_series.__file__))
IMPORT = "from symgrad.compile import special  # " + \
    hashlib.blake2b(b"".join(p.read_bytes() for p in _SOURCES)).hexdigest()[:16]

# B_2, B_4, ..., B_20: the asymptotic series' coefficients
_BERNOULLI = np.array([1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798,
                       -174611 / 330])


@numba.njit(error_model="numpy")
def gammaln(x: float) -> float:
    """log |Gamma(x)| (SciPy's gammaln: -inf at -inf, where the C library gives inf)."""
    return -math.inf if x == -math.inf else math.lgamma(x)


@numba.njit(error_model="numpy")
def digamma(x: float) -> float:
    """psi(x), the derivative of log |Gamma(x)|."""
    if x == 0.0:
        return -math.copysign(math.inf, x)
    reflected = 0.0
    if x < 0.0:
        if x == -math.inf or x == np.floor(x):
            return math.nan
        reflected, x = math.pi / math.tan(math.pi * (x - np.round(x))), 1.0 - x  # (reduced exactly: tan's period)
    if x == math.inf or x != x:
        return x
    total = 0.0
    while x < 20.0:
        total -= 1.0 / x
        x += 1.0
    series, power, inverse_square = 0.0, 1.0, 1.0 / (x * x)
    for j in range(_BERNOULLI.shape[0]):
        power *= inverse_square
        series += _BERNOULLI[j] / (2 * j + 2) * power
    return total + math.log(x) - 0.5 / x - series - reflected


@numba.njit(error_model="numpy")
def polygamma(n: float, x: float) -> float:
    """psi_n(x), the n-th derivative of digamma (n a whole number; nan otherwise); below 0 from three
    positive points, in time independent of |x| (SciPy sums up from x: psi_1(-1e15) never returns)."""
    if n != np.floor(n) or n < 0.0 or x != x:
        return math.nan
    if n == 0.0:
        return digamma(x)
    sign = 1.0 if n == math.inf or np.fmod(n, 2.0) == 1.0 else -1.0
    if n > 170.0:  # n! overflows: SciPy's n! * zeta(n + 1, x) is inf times x**-(n+1) (nan where it underflows)
        return sign * math.inf if x <= 1.0 or (n + 1.0) * math.log(x) < 744.0 else math.nan
    k = int(n)
    if x <= 0.0 and x == np.floor(x):
        return sign * math.inf
    if x == math.inf:  # (a zero of the sign the series has: SciPy's -0.0 for even n)
        return sign * 0.0
    factorial = math.gamma(k + 1.0)
    # Below 0, from three positive points (the terms 1/(x+j)**(k+1) below 0 summed as the difference of two
    # series), in time independent of |x|: psi_k(x) = psi_k(f) + sign (psi_k(1-f) - psi_k(1-x)), f = x - floor x
    f, g = x - np.floor(x), -np.floor(-x) - x  # (g = 1 - f, exact where x is near 0: -x)
    value = 0.0
    for which in range(1 if x > 0.0 else 3):
        y = x if x > 0.0 else (f if which == 0 else (g if which == 1 else 1.0 - x))
        total = 0.0
        while y < 20.0 + k:
            total += factorial / y ** (k + 1)
            y += 1.0
        # (k-1)!/y**k + k!/(2 y**(k+1)) + sum_j B_2j (2j+k-1)! / ((2j)! y**(2j+k))
        series = factorial / k / y ** k + factorial / (2.0 * y ** (k + 1))
        ratio, power, inverse_square = factorial / k, y ** -k, 1.0 / (y * y)
        for j in range(_BERNOULLI.shape[0]):
            ratio *= (2 * j + k) * (2 * j + k + 1) / ((2 * j + 1) * (2 * j + 2))  # (2j+k+1)!/(2j+2)! over j's
            power *= inverse_square
            series += _BERNOULLI[j] * ratio * power
        value += (1.0 if which == 0 else (sign if which == 1 else -sign)) * (total + series)
    return sign * value


sinc_derivative = numba.njit(error_model="numpy")(special_series.sinc_derivative)
ive = numba.njit(error_model="numpy")(special_series.ive)
erfinv = numba.njit(error_model="numpy")(special_series.erfinv)
