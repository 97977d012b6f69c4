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
    if t == math.inf or t == -math.inf:  # (pi x overflows: NumPy's sin(inf) / inf, nan; Python's sin raised)
        return math.nan
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
    order n (SciPy's ``ive``). Above |x| = 30 + n Hankel's asymptotic series where it converges with
    no term past 64 times the sum (large orders need |x| near n**2 / 2 or beyond); 0 where Debye's
    uniform estimate of the value is below the smallest double (e**-760: large orders near the
    argument); else the power series (positive terms: no cancellation), its partial products kept in
    range by exact powers of two and exp(-|x|) applied in 2**p equal parts (each part's argument
    exact); nan where it would take more than a million terms. Within 1.2e-12 of SciPy's everywhere,
    1e-14 below |x| = 4e4.

    >>> round(ive(0.0, 1.0), 15), ive(1.0, 0.0), ive(2000.0, 2030.0)
    (0.46575960759364, 0.0, 0.0)
    """
    if x != x or n != n or n == math.inf or n == -math.inf or n != math.floor(n):
        return math.nan
    k = abs(n)  # (I_-n = I_n for whole n; a float until the power series counts terms)
    a = abs(x)
    if a == math.inf or a == 0.0:
        return 0.0 if a > 0.0 or k > 0.0 else 1.0
    value = -1.0  # (none found yet)
    if a > 30.0 + k:  # exp(-a) I_k(a) ~ (2 pi a)**-.5 sum_j (-1)**j prod_{i<=j} (4k**2 - (2i-1)**2) / (j! (8a)**j)
        total, term, mu, peak = 1.0, 1.0, 4.0 * k * k, 1.0
        for j in range(1, 200):
            term *= -(mu - (2.0 * j - 1.0) ** 2) / (j * 8.0 * a)
            total += term
            peak = abs(term) if abs(term) > peak else peak
            if abs(term) <= 1e-17 * abs(total):  # (where cancelling, 6 bits lost at most)
                value = total / math.sqrt(2.0 * math.pi * a) if peak <= 64.0 * abs(total) else -1.0
                break
            if peak > 1e10:
                break
    if value < 0.0 and k > 1.0:  # (order 1: a/2 at tiny a, no underflow to foresee)
        z = a / k
        root = math.sqrt(1.0 + z * z)
        gap = 1.0 / (root + z)  # root - z
        if z == 0.0 or k * (gap - math.log1p((1.0 + gap) / z)) - 0.5 * math.log(2.0 * math.pi * k * root) < -760.0:
            value = 0.0
    if value < 0.0 and k + 0.5 * a > 1e6:  # (a million terms: |x| past 2e6 with n**2 past |x|)
        return math.nan
    if value < 0.0:
        m = int(k)
        term, scale = 1.0, 0  # (a/2)**k / k!, and the sum, times 2**(600 * scale)
        for j in range(1, m + 1):
            term *= 0.5 * a / j
            if term < 1e-150:
                term *= 4.149515568880993e+180  # 2**600
                scale -= 1
            if term > 1e150:
                term *= 2.409919865102884e-181  # 2**-600
                scale += 1
        total, j, h = term, 0, 0.5 * a
        while term > 1e-17 * total:
            j += 1
            term *= (h / j) * (h / (j + m))  # (not (a*a/4) / ...: a rounded a*a/4 would err in every term j times)
            total += term
            if total > 1e150:
                total *= 2.409919865102884e-181  # 2**-600
                term *= 2.409919865102884e-181
                scale += 1
        parts = 1
        while a / parts > 300.0:  # (each factor above 1e-131: no underflow before the powers of two)
            parts *= 2
        part = math.exp(-a / parts)
        value = total
        for _ in range(parts):
            value *= part
            if value < 1e-150 and scale > 0:
                value *= 4.149515568880993e+180
                scale -= 1
        while scale > 0:
            value *= 4.149515568880993e+180
            scale -= 1
        while scale < 0:
            value *= 2.409919865102884e-181
            scale += 1
    return -value if x < 0.0 and k - 2.0 * math.floor(0.5 * k) == 1.0 else value


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
