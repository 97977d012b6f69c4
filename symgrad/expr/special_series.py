"""Special functions in plain Python on floats, which Numba compiles as they are (compile/special.py):
each one function with no helpers, so that one source serves the compiled code (and, for sinc, the
interpreter too).

``sinc_derivative``: NumPy's ``sinc(x) = sin(pi x) / (pi x)`` (1 at 0) and its derivatives of every
order, exact at 0 and near it. The n-th derivative is ``pi**n s_n(pi x)`` with ``s_n`` the n-th
derivative of ``s(t) = sin(t) / t``. The quotient's derivatives by Leibniz's rule cancel
catastrophically near 0 (at t = 1e-8, the fourth one's terms are 1e32 where it is 0.2), so there
``s_n`` is its Maclaurin series ``sum_m (-1)**m t**(2m - n) / ((2m - n)! (2m + 1))``: at 0 exactly the
series' first coefficient (``(-1)**(n/2) / (n + 1)`` for even n, else 0), as JAX's rule gives.

``ive``: SciPy's for whole orders (the interpreter runs it too: SciPy's gives nan past |x| = 1e9, where
it is 0 at infinity and the asymptotic series' value before); ``erfinv``: SciPy's, for compiled code.
"""

from __future__ import annotations

import math


def sinc_derivative(n: float, x: float) -> float:
    """The n-th derivative of ``np.sinc`` at ``x`` (n a whole number; nan otherwise). One function, no
    helpers: Numba compiles it as it is.

    >>> sinc_derivative(0.0, 0.5) == 2 / math.pi, math.isclose(sinc_derivative(2.0, 0.0), -math.pi ** 2 / 3)
    (True, True)
    """
    if x != x or n != n or n < 0.0 or n > 170.0 or n != math.floor(n):
        return math.nan
    if x == math.inf or x == -math.inf:
        return 0.0
    k, t = int(n), math.pi * x
    total = 0.0
    if abs(t) < 2.0 + k:  # the Maclaurin series (its terms stay below e**(2 + n))
        m = (k + 1) // 2
        j = 2 * m - k  # the power of t in the first term (0 or 1)
        power = t if j == 1 else 1.0  # t**j / j!
        for _ in range(200):
            term = power / (2 * m + 1)
            total += -term if m % 2 else term
            if abs(term) <= 1e-17 * abs(total) or power == 0.0:
                break
            power *= t * t / ((j + 1) * (j + 2))
            j += 2
            m += 1
    else:  # Leibniz: sum_j C(k, j) sin^(j)(t) (-1)**(k-j) (k-j)! / t**(k-j+1)
        sin, cos, binomial = math.sin(t), math.cos(t), 1.0
        for j in range(k + 1):
            r = j % 4
            d = sin if r == 0 else cos if r == 1 else -sin if r == 2 else -cos  # sin's j-th derivative
            factorial = 1.0
            for i in range(2, k - j + 1):
                factorial *= i
            total += binomial * d * (-factorial if (k - j) % 2 else factorial) / t ** (k - j + 1)
            binomial = binomial * (k - j) / (j + 1)
    return math.pi ** k * total


def ive(n: float, x: float) -> float:
    """exp(-|x|) I_n(x), the exponentially scaled modified Bessel function of the first kind of whole
    order n (SciPy's ``ive``): its power series below |x| = 30 (positive terms: no cancellation), the
    asymptotic series above (its terms fall below 1e-17 long before they grow).

    >>> round(ive(0.0, 1.0), 15), ive(1.0, 0.0)
    (0.46575960759364, 0.0)
    """
    if x != x or n != n or n == math.inf or n == -math.inf or n != math.floor(n):
        return math.nan
    k = int(abs(n))  # (I_-n = I_n for whole n)
    a = abs(x)
    if a == math.inf:
        return 0.0
    if a <= 30.0 + k:
        term = 1.0
        for j in range(1, k + 1):
            term *= 0.5 * a / j  # (a/2)**k / k!
        total, j, q = 0.0, 0, 0.25 * a * a
        for _ in range(500):
            total += term
            j += 1
            term *= q / (j * (j + k))
            if term <= 1e-17 * total:
                break
        value = total * math.exp(-a)
    else:  # exp(-a) I_k(a) ~ (2 pi a)**-0.5 sum_j (-1)**j prod_{i<=j} (4k**2 - (2i-1)**2) / (j! (8a)**j)
        total, term, mu = 1.0, 1.0, 4.0 * k * k
        for j in range(1, 200):
            term *= -(mu - (2 * j - 1) ** 2) / (j * 8.0 * a)
            total += term
            if abs(term) <= 1e-17 * abs(total):
                break
        value = total / math.sqrt(2.0 * math.pi * a)
    return -value if x < 0.0 and k % 2 else value


def erfinv(y: float) -> float:
    """The inverse of erf on (-1, 1) (SciPy's ``erfinv``: +-inf at +-1, nan outside): Giles' single-precision
    approximation, then Newton steps on erf (on erfc in the tails, where 1 - |y| is exact).

    >>> round(erfinv(0.5), 15), erfinv(1.0)
    (0.47693627620447, inf)
    """
    if y != y or y < -1.0 or y > 1.0:
        return math.nan
    if y == 1.0 or y == -1.0:
        return y * math.inf
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                  0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    x = p * y
    a = abs(y)
    for _ in range(4):  # Newton: erf(x) = y; past |y| = 0.5 on log erfc(|x|) = log(1 - |y|), exact there
        slope = 1.1283791670955126 * math.exp(-x * x)
        if a > 0.5:
            tail = math.erfc(abs(x))
            step = (math.log(tail) - math.log(1.0 - a)) * tail / slope
            x = x + step if x > 0.0 else x - step
        else:
            x -= (math.erf(x) - y) / slope
    return x
