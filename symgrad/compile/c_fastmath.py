"""fastmath.py's exp, expm1, tanh, log and log1p for the C loops (c_loops.py), transcribed operation for
operation: the same constants (read from fastmath.py), the same order, every branch a select, so under
the C backend's flags (no fused multiply-adds) the C loops give the Numba loops' bits, whichever tier of
a function runs (tests/test_c_tier.py checks them against each other), and gcc vectorises loops over them.
"""

from __future__ import annotations

import re

from symgrad.compile import fastmath

SOURCE = """/* fastmath.py's functions (fdlibm's, Cephes' tanh) as selects: the Numba loops' bits */
#include <string.h>
static inline double sg_bits_double(unsigned long long b) { double d; memcpy(&d, &b, 8); return d; }
static inline unsigned long long sg_double_bits(double d) { unsigned long long b; memcpy(&b, &d, 8); return b; }
static inline double sg_scaled(double y, double k) {
    long long n = (long long)(sg_double_bits(k + 6755399441055744.0) - 0x4338000000000000ULL), half = n >> 1;
    return y * sg_bits_double((unsigned long long)(half + 1023) << 52)
             * sg_bits_double((unsigned long long)(n - half + 1023) << 52);
}
static inline double sg_fexp(double x) {
    double k = floor(x * %(INV_LN2)r + 0.5);
    k = k > -1080.0 ? k : -1080.0;
    k = k < 1080.0 ? k : 1080.0;
    double hi = x - k * %(LN2_HI)r, lo = k * %(LN2_LO)r, r = hi - lo, rr = r * r;
    double c = r - rr * (%(P1)r + rr * (%(P2)r + rr * (%(P3)r + rr * (%(P4)r + rr * %(P5)r))));
    double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    double out = sg_scaled(y, k);
    out = x > %(EXP_MAX)r ? INFINITY : out;
    out = x < %(EXP_MIN)r ? 0.0 : out;
    return x == x ? out : x;
}
static inline double sg_fexpm1(double x) {
    double a = x > -40.0 ? x : -40.0;
    a = a < 710.0 ? a : 710.0;
    double k = trunc(a * %(INV_LN2)r + (a >= 0.0 ? 0.5 : -0.5));
    k = fabs(a) <= 0.34657359027997264 ? 0.0 : k;
    double hi = a - k * %(LN2_HI)r, lo = k * %(LN2_LO)r, r = hi - lo, c = (hi - r) - lo;
    double hfx = 0.5 * r, hxs = r * hfx;
    double r1 = 1.0 + hxs * (%(Q1)r + hxs * (%(Q2)r + hxs * (%(Q3)r + hxs * (%(Q4)r + hxs * %(Q5)r))));
    double t = 3.0 - r1 * hfx, e = hxs * ((r1 - t) / (6.0 - r * t));
    double near = r - (r * e - hxs);
    e = (r * (e - c) - c) - hxs;
    double out = sg_scaled((r - (e + sg_scaled(1.0, -k))) + 1.0, k);
    out = k < 20.0 ? sg_scaled((1.0 - sg_scaled(1.0, -k)) - (e - r), k) : out;
    out = k <= -2.0 || k > 56.0 ? sg_scaled(1.0 - (e - r), k) - 1.0 : out;
    out = k == 1.0 ? (r < -0.25 ? -2.0 * (e - (r + 0.5)) : 1.0 + 2.0 * (r - e)) : out;
    out = k == -1.0 ? 0.5 * (r - e) - 0.5 : out;
    out = k == 0.0 ? near : out;
    out = x > %(EXP_MAX)r ? INFINITY : out;
    return x == x ? out : x;
}
static inline double sg_ftanh(double x) {
    double a = fabs(x), s = sg_fexp(2.0 * (a < 20.0 ? a : 20.0)), z = a * a;
    double small = a + a * (z * ((%(TP0)r * z + %(TP1)r) * z + %(TP2)r)
                            / (((z + %(TQ0)r) * z + %(TQ1)r) * z + %(TQ2)r));
    double out = copysign(a >= 0.625 ? 1.0 - 2.0 / (s + 1.0) : small, x);
    return x == x ? out : x;
}
static inline double sg_log_reduced(double f, double k, double c) {
    double hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s, w = z * z;
    double r = z * (%(L1)r + w * (%(L3)r + w * (%(L5)r + w * %(L7)r))) + w * (%(L2)r + w * (%(L4)r + w * %(L6)r));
    return k * %(LN2_HI)r - ((hfsq - (s * (hfsq + r) + (k * %(LN2_LO)r + c))) - f);
}
static inline double sg_split(double u, double* k) {
    unsigned long long bits = sg_double_bits(u), hi = bits >> 32;
    long long e = (long long)(hi >> 20) - 1023;
    hi = hi & 0x000FFFFFULL;
    unsigned long long up = (hi + 0x95F64ULL) & 0x100000ULL;
    double m = sg_bits_double(((hi | (up ^ 0x3FF00000ULL)) << 32) | (bits & 0xFFFFFFFFULL));
    *k = (double)(e + (long long)(up >> 20));
    return m - 1.0;
}
static inline double sg_flog(double x) {
    int sub = x < %(TINY)r;
    double k, f = sg_split(sub ? x * 18014398509481984.0 : x, &k);
    double out = sg_log_reduced(f, k - (sub ? 54.0 : 0.0), 0.0);
    out = x == 0.0 ? -INFINITY : out;
    out = x < 0.0 ? NAN : out;
    return x == INFINITY || x != x ? x + x : out;
}
static inline double sg_flog1p(double x) {
    double u = 1.0 + x;
    double c = (u > 2.0 ? (1.0 - (u - x)) : (x - (u - 1.0))) / u;
    double k, f = sg_split(u > 0.0 ? u : 1.0, &k);
    int small = fabs(x) < 0.2;
    double out = sg_log_reduced(small ? x : f, small ? 0.0 : k, small ? 0.0 : c);
    out = fabs(x) < 1.1102230246251565e-16 ? x : out;
    out = x == -1.0 ? -INFINITY : out;
    out = x < -1.0 ? NAN : out;
    return x == INFINITY || x != x ? x + x : out;
}
""" % {name[1:]: getattr(fastmath, name) for name in dir(fastmath) if re.fullmatch(r"_[A-Z][A-Z0-9_]*", name)}
