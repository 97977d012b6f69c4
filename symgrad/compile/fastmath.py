"""exp, expm1, tanh, log and log1p for compiled loops, in arithmetic LLVM vectorises.

Numba calls the C library for ``math.exp``, ``math.tanh``, ``math.log1p``: one call per element,
which LLVM cannot vectorise without a vector math library (this llvmlite has no SVML), so a loop
of 8192 ``tanh`` took 65 µs where NumPy's SIMD loop takes 6.6 µs: the whole gap between a traced
MLP and NumPy by hand. These are fdlibm's algorithms (``e_exp.c``, ``s_expm1.c``, ``e_log.c``,
``s_log1p.c``) and Cephes' ``tanh`` (on this exp) with every branch a select and no conversion to an
integer (AVX2 has none in vector registers), so a loop over them vectorises. 8192 values on a 2-core
AVX2 machine: exp 19 µs (the C library 43; 32 with its exponent converted by np.int64), expm1 48
(89), tanh 32 (132), log 25 (37), log1p 27 (75). Against the C library, on millions of points
from subnormals to the overflow thresholds (``tests/test_fastmath.py``; fdlibm's own bound
against the exact value is < 1 ulp): within 1 ulp, tanh within 2; zeros keep their sign, infinities and nan are the
library's. Generated loops (compiled loops, the loop VM, the VM's lanes) call them as
``fastmath.exp(...)`` (the op table's templates). Straight-line kernels bind the name
``fastmath`` to the C library instead: with no loop to vectorise, inlining these at every call
site only slowed Numba's compile (a 342-instruction gradient: 0.6 s to 25 s). The interpreter
keeps NumPy's.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# What generated modules write to use these (the hash: a changed file never meets stale machine code).
IMPORT = f"from symgrad.compile import fastmath  # {hashlib.blake2b(Path(__file__).read_bytes()).hexdigest()[:16]}"

_LN2_HI, _LN2_LO, _INV_LN2 = 6.93147180369123816490e-01, 1.90821492927058770002e-10, 1.44269504088896338700e+00
_P1, _P2, _P3, _P4, _P5 = (1.66666666666666019037e-01, -2.77777777770155933842e-03, 6.61375632143793436117e-05,
                           -1.65339022054652515390e-06, 4.13813679705723846039e-08)
_Q1, _Q2, _Q3, _Q4, _Q5 = (-3.33333333333331316428e-02, 1.58730158725481460165e-03, -7.93650757867487942473e-05,
                           4.00821782732936239552e-06, -2.01099218183624371326e-07)
_L1, _L2, _L3, _L4, _L5, _L6, _L7 = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
                                    2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
                                    1.479819860511658591e-01)
_TP0, _TP1, _TP2 = -9.64399179425052238628e-01, -9.92877231001918586564e+01, -1.61468768441708447952e+03
_TQ0, _TQ1, _TQ2 = 1.12811678491632931402e+02, 2.23548839060100448583e+03, 4.84406305325125486048e+03
_EXP_MAX, _EXP_MIN = 709.782712893383973096, -745.13321910194110842
_TINY = 2.2250738585072014e-308  # the smallest normal double
_ROUNDER, _ROUNDER_BITS = 6755399441055744.0, 0x4338000000000000  # 1.5 * 2 ** 52 and its bit pattern
FUNCTIONS = ("exp", "expm1", "tanh", "log", "log1p")  # the math functions (as_index, select ... are not)
CALLS = re.compile(rf"fastmath\.({'|'.join(FUNCTIONS)})\(")  # a call of one in generated code


@intrinsic
def _bits_as_float(typingctx: Any, bits: Any) -> Any:
    """The float64 whose bit pattern is the int64 ``bits`` (a no-op in machine code)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _float_bits(typingctx: Any, value: Any) -> Any:
    """The int64 bit pattern of the float64 ``value``."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@numba.njit(inline="always")
def _scaled(y: float, k: float) -> float:
    """y * 2.0 ** k for an integer-valued k in -1074 .. 1024, by two normal factors in turn (no
    library call; 2 ** 1024 itself overflows, y * 2 ** 512 * 2 ** 512 need not). k as an integer from
    the low bits of k + 1.5 * 2 ** 52: AVX2 has no vector conversion to int64 (np.int64(k) took the loop
    out of vector registers and back, element by element)."""
    n = _float_bits(k + _ROUNDER) - _ROUNDER_BITS
    half = n >> 1
    return y * _bits_as_float((half + 1023) << 52) * _bits_as_float((n - half + 1023) << 52)


@numba.njit(inline="always", error_model="numpy")
def exp(x: float) -> float:
    """e ** x (fdlibm's e_exp.c: x = k ln2 + r, a rational approximation of e ** r, times 2 ** k).

    >>> bool(abs(exp(1.0) - np.e) <= np.spacing(np.e)), exp(-800.0), exp(800.0)  # within 1 ulp
    (True, 0.0, inf)
    """
    k = np.floor(x * _INV_LN2 + 0.5)  # (math.floor is an int64: a conversion there and back, not vectorised)
    k = min(max(k, -1080.0), 1080.0)
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    rr = r * r
    c = r - rr * (_P1 + rr * (_P2 + rr * (_P3 + rr * (_P4 + rr * _P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    out = _scaled(y, k)
    out = math.inf if x > _EXP_MAX else out
    out = 0.0 if x < _EXP_MIN else out
    return out if x == x else x


@numba.njit(inline="always", error_model="numpy")
def expm1(x: float) -> float:
    """e ** x - 1, accurate near 0 (fdlibm's s_expm1.c, each case computed and one selected).

    >>> expm1(1e-20), expm1(-0.0), bool(abs(expm1(1.0) - (np.e - 1)) <= np.spacing(1.7))
    (1e-20, -0.0, True)
    >>> expm1(-800.0), expm1(800.0)
    (-1.0, inf)
    """
    a = min(max(x, -40.0), 710.0)  # e ** -40 - 1 is -1 in doubles; beyond 710 it overflows
    k = np.trunc(a * _INV_LN2 + (0.5 if a >= 0.0 else -0.5))  # C's conversion to int, as fdlibm
    k = 0.0 if abs(a) <= 0.34657359027997264 else k  # |x| <= ln2 / 2: no reduction
    hi = a - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (_Q1 + hxs * (_Q2 + hxs * (_Q3 + hxs * (_Q4 + hxs * _Q5))))
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    near = r - (r * e - hxs)  # k == 0
    e = (r * (e - c) - c) - hxs
    out = _scaled((r - (e + _scaled(1.0, -k))) + 1.0, k)  # 20 <= k <= 56
    out = _scaled((1.0 - _scaled(1.0, -k)) - (e - r), k) if k < 20.0 else out  # 2 <= k < 20
    out = _scaled(1.0 - (e - r), k) - 1.0 if k <= -2.0 or k > 56.0 else out
    out = (-2.0 * (e - (r + 0.5)) if r < -0.25 else 1.0 + 2.0 * (r - e)) if k == 1.0 else out
    out = 0.5 * (r - e) - 0.5 if k == -1.0 else out
    out = near if k == 0.0 else out
    out = math.inf if x > _EXP_MAX else out
    return out if x == x else x


@numba.njit(inline="always", error_model="numpy")
def tanh(x: float) -> float:
    """tanh x (Cephes' tanh.c): 1 - 2 / (e ** 2|x| + 1) from |x| = 0.625 on, below it a rational
    approximation in x ** 2 (one exp, not musl's expm1: half the time, and within 2 ulp).

    >>> tanh(-0.0), tanh(1e-300), bool(tanh(0.5) == np.tanh(0.5)), tanh(-30.0), tanh(np.inf)
    (-0.0, 1e-300, True, -1.0, 1.0)
    """
    a = abs(x)
    s = exp(2.0 * min(a, 20.0))  # tanh 20 is 1 in doubles
    z = a * a
    small = a + a * (z * ((_TP0 * z + _TP1) * z + _TP2) / (((z + _TQ0) * z + _TQ1) * z + _TQ2))
    out = math.copysign(1.0 - 2.0 / (s + 1.0) if a >= 0.625 else small, x)
    return out if x == x else x


# Selections and comparisons as LLVM selects (the op table's where, lt ... ne, maximum, minimum): Python's
# `a if c else b` is a branch, and straight-line kernels with thousands of them took Numba minutes (2000
# wheres: 115 s; a Hessian's 7104 instructions: over 10 minutes and 9 GB). Every operand of a
# straight-line kernel is computed already, so a select is the same value. Integer operands (index
# arithmetic in loops) are converted to float64 first, as Python compares them.


def _doubles(context: Any, builder: Any, signature: Any, args: Any) -> list:
    return [context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)]


def _numbers(*tys: Any) -> bool:
    return all(isinstance(t, types.Float | types.Integer | types.Boolean) for t in tys)


def _comparison(name: str, op: str, ordered: bool) -> Any:
    def compare(typingctx: Any, a: Any, b: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            x, y = _doubles(context, builder, signature, args)
            test = (builder.fcmp_ordered if ordered else builder.fcmp_unordered)(op, x, y)
            return builder.uitofp(test, ir.DoubleType())
        return (types.float64(a, b), codegen) if _numbers(a, b) else None
    compare.__name__ = compare.__qualname__ = name
    return intrinsic(compare)


lt, le, gt, ge = (_comparison(n, o, True) for n, o in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")))
eq, ne = _comparison("eq", "==", True), _comparison("ne", "!=", False)  # (nan != x holds, as in Python)


@intrinsic
def select(typingctx: Any, c: Any, a: Any, b: Any) -> Any:
    """``a`` where ``c`` is nonzero (nan included), else ``b``: the op ``where``."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        c, a, b = _doubles(context, builder, signature, args)
        return builder.select(builder.fcmp_unordered("!=", c, ir.Constant(ir.DoubleType(), 0.0)), a, b)
    return (types.float64(c, a, b), codegen) if _numbers(c, a, b) else None


def _extremum(name: str) -> Any:
    def extremum(typingctx: Any, a: Any, b: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            double = ir.DoubleType()
            fn = builder.module.declare_intrinsic(f"llvm.{name}", [double], ir.FunctionType(double, [double] * 2))
            return builder.call(fn, _doubles(context, builder, signature, args))
        return (types.float64(a, b), codegen) if _numbers(a, b) else None
    extremum.__name__ = extremum.__qualname__ = name
    return intrinsic(extremum)


# LLVM's maximum and minimum: nan propagates (as NumPy's) and -0 < +0, so either order of the
# arguments gives the same bits, and LLVM vectorises a reduction of them (a max over 1.28M
# entries: 0.17 ms, where selects computing the same took 3.6 ms one element at a time).
maximum, minimum = _extremum("maximum"), _extremum("minimum")


@numba.njit(inline="always", error_model="numpy")
def as_index(v: float, n: float) -> int:
    """The index an integer data array's value ``v`` gives on an axis of size ``n`` (negative ones
    count from the end, as in NumPy); any other value raises, so a gather never reads outside
    its array (the op ``as_index``: not a math function, but imported by the same modules).

    >>> as_index(3.0, 5.0), as_index(-1.0, 5.0)
    (3, 4)
    """
    if not (-n <= v < n) or v != math.floor(v):
        raise IndexError("symgrad: an index read from a traced integer argument is out of bounds for the "
                         "axis it indexes")
    return int(v) % int(n)


@numba.njit(inline="always", error_model="numpy")
def _log_reduced(f: float, k: float, c: float) -> float:
    """log(2 ** k * (1 + f) + c') for 1 + f in [sqrt(2)/2, sqrt(2)) and a correction c (fdlibm's tail)."""
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (_L1 + w * (_L3 + w * (_L5 + w * _L7))) + w * (_L2 + w * (_L4 + w * _L6))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + (k * _LN2_LO + c))) - f)


@numba.njit(inline="always", error_model="numpy")
def _split(u: float) -> tuple:
    """(f, k) with u = 2 ** k * (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), for a positive normal u."""
    bits = _float_bits(u)
    hi = bits >> 32
    k = (hi >> 20) - 1023
    hi = hi & 0x000FFFFF
    up = (hi + 0x95F64) & 0x100000  # the mantissa past sqrt(2): halve it and count one more
    m = _bits_as_float(((hi | (up ^ 0x3FF00000)) << 32) | (bits & 0xFFFFFFFF))
    return m - 1.0, float(k + (up >> 20))


@numba.njit(inline="always", error_model="numpy")
def log(x: float) -> float:
    """The natural logarithm (fdlibm's e_log.c, branches as selects).

    >>> log(1.0), log(0.0), log(-1.0), log(np.inf), bool(abs(log(10.0) - np.log(10.0)) <= np.spacing(2.3))
    (0.0, -inf, nan, inf, True)
    """
    sub = x < _TINY
    f, k = _split(x * 18014398509481984.0 if sub else x)  # subnormals scaled by 2 ** 54 first
    out = _log_reduced(f, k - (54.0 if sub else 0.0), 0.0)
    out = -math.inf if x == 0.0 else out
    out = math.nan if x < 0.0 else out
    return x + x if x == math.inf or x != x else out


@numba.njit(inline="always", error_model="numpy")
def log1p(x: float) -> float:
    """log(1 + x), accurate near 0 (fdlibm's s_log1p.c: 1 + x split, its rounding error carried).

    >>> log1p(1e-20), log1p(-0.0), log1p(-1.0), log1p(-2.0), bool(abs(log1p(0.5) - np.log1p(0.5)) <= 1e-16)
    (1e-20, -0.0, -inf, nan, True)
    """
    u = 1.0 + x
    c = ((1.0 - (u - x)) if u > 2.0 else (x - (u - 1.0))) / u  # the rounding of 1 + x, relative
    f, k = _split(u if u > 0.0 else 1.0)
    small = abs(x) < 0.2  # no reduction: f = x itself (fdlibm: -0.2929 < x < 0.41422)
    out = _log_reduced(x if small else f, 0.0 if small else k, 0.0 if small else c)
    out = x if abs(x) < 1.1102230246251565e-16 else out  # 2 ** -53: log1p(x) is x, signed zeros kept
    out = -math.inf if x == -1.0 else out
    out = math.nan if x < -1.0 else out
    return x + x if x == math.inf or x != x else out
