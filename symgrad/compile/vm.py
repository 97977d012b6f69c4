"""The VM: one pre-compiled Numba interpreter that runs any Program's instruction arrays.

Its dispatch (an ``if``/``elif`` chain over opcodes, which LLVM turns into a jump table)
is generated from the op table's Numba templates, so adding an op adds a branch here too.
Nothing is compiled per graph: the module is compiled once per machine and loaded from
Numba's disk cache afterwards. ``rows`` (behind ``batch`` and ``total``: rows ``first:last``;
the caller runs slices on threads) runs each instruction over a block of ``BLOCK`` points
with a work array of slots x points that fits in cache: the dispatch is paid once per block,
not per point.
"""

from __future__ import annotations

from symgrad.compile import fastmath, special
from symgrad.compile.program import LOAD_CONST, LOAD_P, LOAD_X, STORE
from symgrad.expr.ops import OPS

BLOCK = 128

HEADER = '''"""symgrad VM (generated from the op table; edits are overwritten)."""
import math

import numba
import numpy as np
''' + fastmath.IMPORT + '''
''' + special.IMPORT + '''

_jit = dict(error_model="numpy")


@numba.njit(**_jit)
def check(dims, nx, np_, nout):
    # dims: n_slots, len(x), len(p), n_out, returns_value
    if nx != dims[1] or np_ != dims[2] or nout != dims[3]:
        raise ValueError("symgrad: wrong shape")
'''

POINT = '''

@numba.njit(**_jit)
def point(code, consts, dims, x, p, out):
    check(dims, x.shape[0], p.shape[0], out.shape[0])
    w = np.empty(dims[0])
    ret = 0.0
{loop}
    return ret
'''

ROWS = '''

@numba.njit(nogil=True, **_jit)
def rows(code, consts, dims, X, P, V, OUT, first, last, summed):
    # rows first..last of X and P (a single row is broadcast), {block} points at a time: the values into V
    # and the outputs into OUT; summed: all added up into V[0] and OUT[0]. (One compiled function: each
    # Numba function calling another compiles the callee's code again.)
    n = X.shape[0]
    check(dims, X.shape[1], P.shape[1], OUT.shape[1])
    if not summed and ((P.shape[0] != n and P.shape[0] != 1) or V.shape[0] != n * dims[4] or OUT.shape[0] != n):
        raise ValueError("symgrad: wrong shape")
    xs = 1 if X.shape[0] > 1 else 0
    ps = 1 if P.shape[0] > 1 else 0
    w = np.empty((dims[0], {block}))
    ob = np.empty((dims[3] + 1, {block}))
    if summed:
        V[0] = 0.0
        OUT[0, :] = 0.0
    for lo in range(first, last, {block}):
        m = min({block}, last - lo)
{{loop}}
        if summed:
            V[0] += np.sum(ob[0, :m])
            for j in range(dims[3]):
                OUT[0, j] += np.sum(ob[j + 1, :m])
            continue
        if dims[4]:
            V[lo:lo + m] = ob[0, :m]
        for j in range(dims[3]):
            OUT[lo:lo + m, j] = ob[j + 1, :m]
'''

# The interpreter loop: decode each row, then the dispatch.
LOOP = """    for i in range(code.shape[0]):
        op = code[i, 0]
        d = code[i, 1]
        a = code[i, 2]
        b = code[i, 3]
        c = code[i, 4]
{dispatch}"""

# Per variant: how an operand reads, and the statements of the pseudo-ops.
_POINT = dict(
    arg="w[{}]", loop="",
    x="w[d] = x[a]", p="w[d] = p[a]", const="w[d] = consts[a]",
    store="if d < 0:\n    ret = w[a]\nelse:\n    out[d] = w[a]",
)
_BLOCK = dict(
    arg="w[{}, j]", loop="for j in range(m):\n",
    x="for j in range(m):\n    w[d, j] = X[(lo + j) * xs, a]",
    p="for j in range(m):\n    w[d, j] = P[(lo + j) * ps, a]",
    const="w[d, :m] = consts[a]",
    store="ob[d + 1, :m] = w[a, :m]",
)


def _indent(text: str, by: str) -> str:
    return "\n".join(by + line for line in text.split("\n"))


def dispatch(io: dict, indent: str, pseudo: list | None = None) -> str:
    """The ``if``/``elif`` chain over every opcode, statements from the op table, then the
    ``pseudo`` ops' (code, statement) (by default loads and stores of Programs, from ``io``).

    >>> print(dispatch(_POINT, "").splitlines()[:2])
    ['if op == 2:', '    w[d] = w[a] + w[b]']
    """
    branches = []
    for op in OPS.values():
        if op.numba is None:
            continue
        args = [io["arg"].format(s) for s in "abc"[: op.arity]]
        target = io["arg"].format("d")
        stmt = f"{target} = {op.numba.format(*args)}"
        if io["loop"]:
            stmt = io["loop"] + "    " + stmt
        branches.append((op.code, stmt))
    branches += pseudo if pseudo is not None else [(LOAD_X, io["x"]), (LOAD_P, io["p"]), (LOAD_CONST, io["const"]),
                                                    (STORE, io["store"])]
    parts = []
    for k, (code, stmt) in enumerate(branches):
        parts.append(f"{'if' if k == 0 else 'elif'} op == {code}:\n{_indent(stmt, '    ')}")
    return _indent("\n".join(parts), indent)


def source() -> str:
    """The VM module's source: ``point``, and ``rows`` (``batch`` and ``total`` call it: backends.vm_variant).

    >>> "elif op == 3:" in source()  # one branch per op-table row
    True
    """
    return "".join([
        HEADER,
        POINT.format(loop=LOOP.format(dispatch=dispatch(_POINT, " " * 8))),
        ROWS.format(block=BLOCK).format(loop=_indent(LOOP.format(dispatch=dispatch(_BLOCK, " " * 8)), "    ")),
    ])
