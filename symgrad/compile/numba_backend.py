"""Program -> readable straight-line Python source -> Numba kernels.

Each instruction becomes one statement on a fresh name (flat SSA; constants inline),
written from the op table's Numba templates. One module holds three kernels that share
the body: ``point`` (one x), ``batch`` (rows ``lo:hi`` of X) and ``total`` (the sum over
rows ``lo:hi`` of P, in one local accumulator per output); the caller runs row slices on
threads (the kernels release the GIL). Numba compiles each on first use; the module lives
in the disk cache, so a second process loads machine code instead.
"""

from __future__ import annotations

import math

from symgrad.compile import fastmath, special
from symgrad.compile.program import LOAD_CONST, LOAD_P, LOAD_X, STORE, Program
from symgrad.expr.ops import OPS

# Straight-line code has no loop to vectorise: fastmath's exp ... are the C library's here (fastmath's
# selects and comparisons stay: branches there took Numba minutes).
_TEMPLATES = [op.numba and fastmath.CALLS.sub(r"math.\1(", op.numba) for op in OPS.values()]
GENERATOR_VERSION = 5

HEADER = '''"""symgrad kernels for program {key} (generated; edits are overwritten)."""
import math

import numba
import numpy as np
''' + fastmath.IMPORT + '''
''' + special.IMPORT + '''

_jit = dict(error_model="numpy")
'''

POINT = '''

@numba.njit(**_jit)
def point(x, p, out):
    if x.shape[0] != {nx} or p.shape[0] != {np_} or out.shape[0] != {nout}:
        raise ValueError("symgrad: wrong shape")
    ret = 0.0
{body}
    return ret
'''

BATCH = '''

@numba.njit(nogil=True, **_jit)
def batch(X, P, V, OUT, lo, hi):
    n = X.shape[0]
    if (X.shape[1] != {nx} or P.shape[1] != {np_} or (P.shape[0] != n and P.shape[0] != 1)
            or V.shape[0] != n * {value} or OUT.shape[0] != n or OUT.shape[1] != {nout}):
        raise ValueError("symgrad: wrong shape")
    ps = 1 if P.shape[0] > 1 else 0
    for i in range(lo, hi):
        ip = i * ps
{body}
'''

TOTAL = '''

@numba.njit(nogil=True, **_jit)
def total(x, P, acc, lo, hi):
    if x.shape[0] != {nx} or P.shape[1] != {np_} or acc.shape[0] != {nout} + 1:
        raise ValueError("symgrad: wrong shape")
{zero}
    for i in range(lo, hi):
{body}
{keep}
'''

# How each variant reads inputs and writes outputs (d = -1: the returned value).
_POINT = dict(x="x[{a}]", p="p[{a}]", ret="ret = {v}", out="out[{d}] = {v}")
_BATCH = dict(x="X[i, {a}]", p="P[ip, {a}]", ret="V[i] = {v}", out="OUT[i, {d}] = {v}")
_TOTAL = dict(x="x[{a}]", p="P[i, {a}]", ret="a0 += {v}", out="a{d1} += {v}")


def _literal(v: float) -> str:
    if math.isnan(v):
        return "math.nan"
    if math.isinf(v):
        return "math.inf" if v > 0 else "(-math.inf)"
    return f"({v!r})" if math.copysign(1.0, v) < 0 else repr(v)


def body(program: Program, io: dict, indent: str) -> str:
    """The statements of ``program`` with ``io``'s loads and stores, one per line."""
    lines = []
    names: list[str] = [""] * program.n_slots  # the name a slot's value currently has
    consts = [_literal(float(c)) for c in program.consts]
    for i, (op, d, a, b, c) in enumerate(program.code.tolist()):
        if op == STORE:
            key = "ret" if d < 0 else "out"
            lines.append(io[key].format(v=names[a], d=d, d1=d + 1))
            continue
        if op == LOAD_CONST:
            names[d] = consts[a]
            continue
        if op == LOAD_X or op == LOAD_P:
            rhs = io["x" if op == LOAD_X else "p"].format(a=a)
        else:
            rhs = _TEMPLATES[op].format(names[a], names[b], names[c])
        names[d] = f"v{i}"
        lines.append(f"v{i} = {rhs}")
    return "\n".join(indent + line for line in lines) or indent + "pass"


def source(program: Program) -> str:
    """The generated module for ``program``: kernels ``point``, ``batch`` and ``total``.

    >>> import symgrad as sg
    >>> from symgrad.compile.lower import lower
    >>> x = sg.Var("x")
    >>> print(body(lower(sg.sin(x) * x, [x]), _POINT, ""))
    v0 = x[0]
    v1 = math.sin(v0)
    v2 = v0 * v1
    ret = v2
    """
    dims = dict(nx=len(program.inputs), np_=len(program.params), nout=program.n_out,
                value=int(program.returns_value))
    accs = range(program.n_out + 1)
    return "".join([
        HEADER.format(key=program.key),
        POINT.format(body=body(program, _POINT, "    "), **dims),
        BATCH.format(body=body(program, _BATCH, "        "), **dims),
        TOTAL.format(body=body(program, _TOTAL, "        "), **dims,
                     zero="\n".join(f"    a{k} = 0.0" for k in accs),
                     keep="\n".join(f"    acc[{k}] = a{k}" for k in accs)),
    ])
