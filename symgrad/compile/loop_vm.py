"""The loop VM: one pre-compiled Numba interpreter that runs any LoopProgram, ready at once.

The same schedule as the loop compiler's (``schedule.schedule``) is lowered to rows of
instructions instead of source text. Registers hold ``BLOCK`` lanes each. A loop nest filling an
array (or a reduction at the top level) is a *nest*: its iterations, flattened in C order, run
``BLOCK`` at a time, one per lane, so each instruction's dispatch is paid once per block; an
index of the nest is computed from the lane's flat position. A reduction inside a nest is a
scalar *loop* whose counter is broadcast to the lanes. Outside nests every lane holds the same
value, so a value computed there serves any nest. Products call BLAS as in the compiled loops.
Nothing is compiled per program: the module is compiled once per machine (Numba's disk cache).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types

from symgrad.compile import cache, fastmath, special, vm
from symgrad.compile.kernels import Kernels, over_rows, register
from symgrad.compile.loop_emitter import POWERS, SLOTS, _Emitter, _Region, folded, interleaved
from symgrad.compile.loop_program import _ZERO, LoopProgram
from symgrad.compile.loop_source import _FASTMATH
from symgrad.compile.plan import read_as_matrix
from symgrad.compile.schedule import Schedule, Step, riders, riding, schedule, slots
from symgrad.expr.build import const
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.ops import OPS
from symgrad.expr.rolled import substitute_indices, value_range

BLOCK = 512  # lanes per register: past ~256 the dispatch per instruction is noise (measured)
X, P, OUT, WORK, TABLES = range(5)  # the memories a load or store names
# Pseudo-ops, past the op table's codes. Rows are (op, d, a, b, c, e).
(CONST, FLAT, COUNTER, LOAD, STORE, ADDTO, ACCINIT, ACC, FOLD, LOOP, ENDLOOP, NEST, ENDNEST, ZERO, COPY,
 DOT, RET, IDIV, IMOD, CLAMP, SCAN, ROWS, FOLDED, SORT) = range(1000, 1024)
_KINDS = {"sum": 0, "max": 1, "min": 2}
INTERLEAVED = 3  # a FOLD's kind: a sum into SLOTS accumulators (see loop_emitter.interleaved), FOLDED after

_MEMORY = """if {0} == 0:
    M = x
elif {0} == 1:
    M = p
elif {0} == 2:
    M = out
elif {0} == 3:
    M = work
else:
    M = tables"""
_COMBINE = ("{0} + {1}", OPS["maximum"].numba, OPS["minimum"].numba)
_PSEUDO = [
    (CONST, "r[d, :] = consts[a]"),
    # ((base + j) // a) % b, counted up instead of divided (a division per lane costs 10x an add)
    (FLAT, "if a == 1 and b >= total:\n    for j in range(L):\n        rd[j] = base + j\nelse:\n"
           "    rem, v = base % a, (base // a) % b\n    for j in range(L):\n        rd[j] = v\n        rem += 1\n"
           "        if rem == a:\n            rem = 0\n            v = v + 1 if v + 1 < b else 0"),
    (CLAMP, "for j in range(L):\n    rd[j] = min(max(ra[j], 0.0), b)"),
    (COUNTER, "r[d, :] = counters[a]"),
    (LOAD, _MEMORY.format("a") + "\nfor j in range(L):\n    rd[j] = M[c + int(rb[j])]"),
    (STORE, _MEMORY.format("a") + "\nfor j in range(L):\n    M[c + int(rb[j])] = rd[j]"),
    (ADDTO, _MEMORY.format("a") + "\nfor j in range(L):\n    M[c + int(rb[j])] += rd[j]"),
    (ACCINIT, "r[d, :] = 0.0 if a == 0 else -math.inf if a == 1 else math.inf"),
    (ACC, "if b == 0:\n    for j in range(L):\n        rd[j] += ra[j]\n" + "".join(
        f"elif b == {k}:\n    for j in range(L):\n        rd[j] = {_COMBINE[k].format('rd[j]', 'ra[j]')}\n"
        for k in (1, 2))[:-1]),
    # a reduction over a nest's lanes in their order (the compiled loops' order: the same bits)
    (FOLD, "v = rd[0]\n" + "".join(
        f"{'if' if k == 0 else 'elif'} b == {k}:\n    for j in range(L):\n"
        f"        v = {_COMBINE[k].format('v', 'ra[j]')}\n" for k in range(3)) + "if b < 3:\n    rd[:] = v\n"
     f"else:\n    for j in range(L):\n        rd[(base + j) % {SLOTS}] += ra[j]"),
    (FOLDED, f"rd[:] = {folded('rd')}"),
    (LOOP, "counters[a] = 0\nif b <= 0:\n    pc = c"),
    (ENDLOOP, "counters[a] += 1\nif counters[a] < b:\n    pc = c"),
    (NEST, "base = 0\ntotal = a\nL = min(L0, total)\nif total <= 0:\n    pc = b"),
    (ENDNEST, "base += L0\nif base < total:\n    L = min(L0, total - base)\n    pc = a\nelse:\n    L = L0"),
    (ZERO, _MEMORY.format("a") + "\nM[b:b + c] = 0.0"),
    (COPY, _MEMORY.format("a") + "\nS = M\n" + _MEMORY.format("c") + "\nM[b:b + e] = S[d:d + e]"),
    (DOT, "dot(ints[a:a + 16], x, p, out, work, tables)"),
    (SCAN, "scan(ints[a:a + 8], x, p, out, work, tables)"),
    (SORT, "argsort(ints[a:a + 8], x, p, out, work, tables)"),
    # a row of a scan's carries, or of a stacked input, at the step a loop counter counts (ints:
    # source memory, offset, stride; destination memory, offset, stride; size; counter; then a phase
    # and a period: rows (counter + phase) % period, a scan keeping two rows of its carries)
    (ROWS, "g = ints[a:a + 10]\ns = counters[g[7]]\ns = (s + g[8]) % g[9] if g[9] > 0 else s\n" +
     _MEMORY.format("g[0]") + "\nS = M\n" + _MEMORY.format("g[3]") +
     "\nsrc, dst = g[1] + s * g[2], g[4] + s * g[5]\nM[dst:dst + g[6]] = S[src:src + g[6]]"),
    (RET, "ret = r[a, 0]"),
    (IDIV, "for j in range(L):\n    rd[j] = float(int(ra[j]) // int(rb[j]))"),
    (IMOD, "for j in range(L):\n    rd[j] = float(int(ra[j]) % int(rb[j]))"),
]

# Rows calling the C library where the compiled loops do (LoopProgram.library): for each op whose
# template calls fastmath functions, a variant for each set of them switched, as the loops switch them.
_CALLS = {op.name: sorted(set(_FASTMATH.findall(op.numba))) for op in OPS.values()
          if op.numba and _FASTMATH.search(op.numba)}
_LIBRARY = {(name, frozenset(switched)): 1100 + k for k, (name, switched) in enumerate(
    (name, switched) for name, calls in _CALLS.items() for n in range(1, len(calls) + 1)
    for switched in itertools.combinations(calls, n))}
_PSEUDO += [(code, "for j in range(L):\n    rd[j] = " + re.sub(
    rf"fastmath\.({'|'.join(switched)})\(", r"math.\1(", OPS[name].numba).format("ra[j]", "rb[j]", "rc[j]"))
    for (name, switched), code in _LIBRARY.items()]

HEADER = '''"""symgrad loop VM (generated from the op table; edits are overwritten)."""
import math

import numba
import numpy as np
''' + fastmath.IMPORT + '''
''' + special.IMPORT + '''

_jit = dict(error_model="numpy")


@numba.njit(**_jit)
def view(memory, offset, rows, cols):
    return memory[offset:offset + rows * cols].reshape((rows, cols))


@numba.njit(**_jit)
def dot(q, x, p, out, work, tables):
    # q: out memory, offset, rows, cols; P and Q as memory, offset, rows, cols, transposed; whether
    # a matrix-vector product; how many products, one after the other in each array
    mems = (x, p, out, work, tables)
    for b in range(q[15]):
        product(q, mems[q[0]], q[1] + b * q[2] * q[3], mems[q[4]], q[5] + b * q[6] * q[7],
                mems[q[9]], q[10] + b * q[11] * q[12])


@numba.njit(**_jit)
def product(q, o, at, a, at_a, b, at_b):
    A = view(a, at_a, q[6], q[7])
    if q[14] == 1:  # a vector second operand, a vector result
        v, r = b[at_b:at_b + q[11]], o[at:at + q[2]]
        if q[8]:
            np.dot(A.T, v, r)
        else:
            np.dot(A, v, r)
        return
    O, B = view(o, at, q[2], q[3]), view(b, at_b, q[11], q[12])
    if q[8] and q[13]:
        np.dot(A.T, B.T, O)
    elif q[8]:
        np.dot(A.T, B, O)
    elif q[13]:
        np.dot(A, B.T, O)
    else:
        np.dot(A, B, O)


@numba.njit(**_jit)
def along(q, x, p, out, work, tables):
    # q: source memory, offset; destination memory, offset; outer, axis and inner sizes: both as 3-D views
    mems = (x, p, out, work, tables)
    size = q[4] * q[5] * q[6]
    return (mems[q[0]][q[1]:q[1] + size].reshape((q[4], q[5], q[6])),
            mems[q[2]][q[3]:q[3] + size].reshape((q[4], q[5], q[6])))


@numba.njit(**_jit)
def scan(q, x, p, out, work, tables):
    # q: as along's, then whether reversed
    S, D = along(q, x, p, out, work, tables)
    n, inner = q[5], q[6]
    for o in range(q[4]):
        if inner == 1:  # along the last axis: the sum so far in a register
            acc = 0.0
            for k in range(n):
                at = n - 1 - k if q[7] else k
                acc += S[o, at, 0]
                D[o, at, 0] = acc
            continue
        for k in range(n):
            at = n - 1 - k if q[7] else k
            for j in range(inner):
                D[o, at, j] = S[o, at, j] + (D[o, at + 1 if q[7] else at - 1, j] if k > 0 else 0.0)


@numba.njit(**_jit)
def argsort(q, x, p, out, work, tables):
    # q: as along's; each row along the axis gets the positions sorting it (stable, nan last: NumPy's)
    S, D = along(q, x, p, out, work, tables)
    n, inner = q[5], q[6]
    row = np.empty(n)
    for o in range(q[4]):
        for j in range(inner):
            for k in range(n):
                row[k] = S[o, k, j]
            order = np.argsort(row, kind="mergesort")
            for k in range(n):
                D[o, k, j] = order[k]


@numba.njit(nogil=True, **_jit)
def rows(code, ints, consts, tables, dims, X, P, V, OUT, lo, hi, summed):
    # rows lo..hi of X and P (or their one row): the value into V[i], the outputs into OUT[i]; summed:
    # values and outputs added up into V[0] and OUT[0]. dims: registers, loop counters, work floats,
    # len(x), len(p), len(out). (One compiled function: each Numba function calling another compiles
    # the callee's code again, 5 s for this interpreter.)
    if X.shape[1] != dims[3] or P.shape[1] != dims[4] or OUT.shape[1] != dims[5]:
        raise ValueError("symgrad: wrong shape")
    work, part = np.empty(dims[2]), np.empty(dims[5] if summed else 0)
    r = np.empty((max(dims[0], 1), {block}))
    top = r.shape[0] - 1
    counters = np.zeros(dims[1] + 1, dtype=np.int64)
    if summed:
        V[0] = 0.0
        OUT[0, :] = 0.0
    L0 = {block}
    for i in range(lo, hi):
        x, p = X[i if X.shape[0] > 1 else 0], P[i if P.shape[0] > 1 else 0]
        out = part if summed else OUT[i]
        L = L0
        base = 0
        total = 0
        ret = 0.0
        pc = 0
        while pc < code.shape[0]:
            op = code[pc, 0]
            d = code[pc, 1]
            a = code[pc, 2]
            b = code[pc, 3]
            c = code[pc, 4]
            e = code[pc, 5]
            pc += 1
            # Register rows: the lane loops index one dimension. A pseudo-op's d, a, b, c may be a
            # memory or an offset, not a register: kept in range, so no view points outside them.
            rd, ra, rb, rc = r[min(d, top)], r[min(a, top)], r[min(b, top)], r[min(c, top)]
{dispatch}
        if summed:
            V[0] += ret
            OUT[0] += part
        elif V.shape[0]:
            V[i] = ret
'''


def source() -> str:
    """The loop VM module: ``rows``, the interpreter run on each row of its arguments.

    >>> "elif op == 1003:" in source()  # LOAD, among the op table's rows
    True
    """
    io = dict(arg="r{}[j]", loop="for j in range(L):\n")
    return HEADER.format(block=BLOCK, dispatch=vm.dispatch(io, " " * 12, _PSEUDO))


@functools.lru_cache(None)
def _module() -> Any:
    text = source()
    return cache.load(f"loopvm_{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}", text)


@functools.lru_cache(None)
def _rows() -> Any:
    """The VM's one compiled function, compiled once per machine (then loaded from the disk cache)."""
    code, ints, dims = types.int64[:, ::1], types.int64[::1], types.int64[::1]
    vec, mat, whole = types.float64[::1], types.float64[:, ::1], types.int64
    return cache.typed(_module(), "rows", (code, ints, vec, vec, dims, mat, mat, vec, mat, whole, whole,
                                            types.boolean))


def variant(name: str) -> Callable:
    """The VM's kernel ``name`` (point, batch, total), a call of its one compiled function."""
    return over_rows(_rows(), name)


class _Lanes(_Emitter):
    """Values as VM rows in the regions of the loop emitter: a name is a register."""

    def __init__(self, buffers: dict, scalars: dict, library: frozenset = frozenset()) -> None:
        super().__init__(buffers, scalars)  # arrays and variables -> (memory, offset)
        self.library = library  # the fastmath functions called from the C library
        self.consts: list[float] = []
        self.slots = 0  # loop counters

    def fresh(self, prefix: str = "") -> int:
        self.count += 1
        return self.count - 1

    def _known(self, node: Expr, reg: _Region) -> int | None:
        return reg.loops.get(node) if node.op.name == "index" else reg.lookup(node)

    def _emit(self, node: Expr, reg: _Region, home: _Region) -> int:
        d, name = self.fresh(), node.op.name
        if name == "const":
            self.consts.append(float(node.payload))
            home.lines.append((CONST, d, len(self.consts) - 1, 0, 0, 0))
        elif name == "var":
            memory, offset = self.scalars[node]
            home.lines.append((LOAD, d, memory, self.value(_ZERO, reg), offset, 0))
        elif name == "pow" and node.args[1].op.name == "const" and node.args[1].payload in _POWERS:
            a = self._known(node.args[0], reg)
            for row in _POWERS[node.args[1].payload](d, a, self):
                home.lines.append(row)
        elif name == "load":
            memory, offset = self.buffers[node.args[0]]
            at = self.address(node.args[0].shape, node.args[1:], reg, home)
            home.lines.append((LOAD, d, memory, at, offset, 0))
        else:
            args = [self._known(a, reg) for a in node.args]
            if name in ("mod", "floor_divide") and self._integer(node):
                home.lines.append((IMOD if name == "mod" else IDIV, d, *args, 0, 0))
            else:
                switched = self.library.intersection(_CALLS.get(name, ()))
                code = _LIBRARY[name, switched] if switched else node.op.code
                home.lines.append((code, d, *args, *(0,) * (4 - len(args))))
            if self._integer(node):
                self.integers.add(node)
        return d

    def address(self, shape: tuple, addresses: tuple, reg: _Region, home: _Region) -> int:
        """The register of the position of ``addresses`` in an array of ``shape`` raveled (C order),
        each clamped into the array where it can leave it (a guarded load's), computed in ``home``."""
        at, stride = None, 1
        for a, n in reversed(list(zip(addresses, shape))):
            k = self.value(a, reg)
            lo, hi = value_range(a)
            if lo < 0 or hi >= n:
                k = self._row(home, CLAMP, k, n - 1)
            if stride != 1:
                k = self._row(home, OPS["mul"].code, k, self.value(const(float(stride)), reg))
            at = k if at is None else self._row(home, OPS["add"].code, at, k)
            stride *= n
        return at

    def _row(self, home: _Region, op: int, a: int, b: int) -> int:
        d = self.fresh()
        home.lines.append((op, d, a, b, 0, 0))
        return d

    def _reduce(self, node: Expr, home: _Region, child: _Region, body: Expr, i: Expr) -> None:
        value, acc, kind, size = self.value(body, child), self.fresh(), _KINDS[node.op.name], i.payload[1]
        home.lines.append((ACCINIT, acc, kind, 0, 0, 0))
        home.names[node] = acc
        if home.parent is None:  # at the top level: a nest, one iteration per lane, folded in order
            kind = INTERLEAVED if interleaved(node) else kind
            home.lines.append(("nest", size, [(FLAT, child.loops[i], 1, size, 0, 0), *child.lines,
                                              (FOLD, acc, value, kind, 0, 0)]))
            if kind == INTERLEAVED:
                home.lines.append((FOLDED, acc, 0, 0, 0, 0))
        else:
            self.slots += 1
            home.lines.append(("loop", self.slots, size, [(COUNTER, child.loops[i], self.slots, 0, 0, 0),
                                                          *child.lines, (ACC, acc, value, kind, 0, 0)]))


def _square(d: int, a: int, emitter: _Lanes) -> list:
    return [(OPS["mul"].code, d, a, a, 0, 0)]


def _cube(d: int, a: int, emitter: _Lanes) -> list:
    t = emitter.fresh()
    return [(OPS["mul"].code, t, a, a, 0, 0), (OPS["mul"].code, d, t, a, 0, 0)]


# Small constant powers as products (a pow call costs 20x a mul), as the compiled loops compute them.
_POWERS = {2.0: _square, 3.0: _cube, 0.5: lambda d, a, emitter: [(OPS["sqrt"].code, d, a, 0, 0, 0)]}
assert _POWERS.keys() == POWERS.keys()


@paused_gc()
def lower(program: LoopProgram) -> dict:
    """``program`` as VM arrays: ``code`` rows, ``ints`` (products' operands), ``consts``, ``tables``,
    ``dims`` (registers, loop counters, workspace floats, sizes of x, p and out)."""
    outputs = list(program.roots) if program.returns_value else [_ZERO, *program.roots]
    buffers: dict[Expr, tuple] = {}
    scalars: dict[Expr, tuple] = {}
    for memory, layout in ((X, program.inputs), (P, program.params)):
        for v, start, _ in layout.blocks():
            (buffers if v.op.name == "array" else scalars)[v] = (memory, start)
    planned = schedule(outputs)
    outputs = planned.outputs
    places, out_offsets, _ = slots(outputs)
    lowering, top = _Lowering(buffers, scalars, out_offsets, program.library), _Region(None, frozenset(), {})
    lowering.arrays(planned, top)
    emitter = lowering.emitter
    zero = emitter.value(_ZERO, top)
    for r, start in places:
        size = math.prod(r.shape) if r.op.array_valued else 1
        if not r.op.array_valued:
            top.lines.append((STORE, emitter.value(r, top), OUT, zero, start, 0))
        elif buffers[r] != (OUT, start):  # an input as it is, or the same array again
            top.lines.append((COPY, buffers[r][1], buffers[r][0], start, OUT, size))
    if not outputs[0].op.array_valued:
        top.lines.append((RET, 0, emitter.value(outputs[0], top), 0, 0, 0))
    code = np.array(_flatten(top.lines), dtype=np.int64).reshape(-1, 6)
    dims = [emitter.count, emitter.slots, lowering.work, len(program.inputs), len(program.params), program.n_out]
    return dict(code=code, ints=np.array(lowering.ints or [0], dtype=np.int64),
                consts=np.array(emitter.consts or [0.0]), tables=np.array(lowering.tables or [0.0]),
                dims=np.array(dims, dtype=np.int64))


class _Lowering:
    """The rows filling a program's arrays, each in its buffer ((memory, offset)), and a scan's
    step inside a loop over the steps."""

    def __init__(self, buffers: dict, scalars: dict, out_offsets: dict, library: frozenset) -> None:
        self.emitter, self.buffers, self.out_offsets = _Lanes(buffers, scalars, library), buffers, out_offsets
        self.ints: list[int] = []
        self.tables: list[float] = []
        self.work = 0  # floats of workspace taken so far

    def take(self, size: int) -> tuple:
        self.work += size
        return WORK, self.work - size

    def place(self, node: Expr, sched: Schedule) -> None:
        """The buffer of the array ``node``: its owner's (schedule.home), its part of ``out``, or of the
        workspace."""
        owner = sched.owner(node)
        if owner not in self.buffers:
            self.buffers[owner] = (OUT, self.out_offsets[owner]) if owner in self.out_offsets else \
                self.take(math.prod(owner.shape))
        self.buffers[node] = self.buffers[owner]

    def arrays(self, sched: Schedule, top: _Region) -> None:
        """The rows of the steps of ``sched``, filling its arrays."""
        for t in (n for n in sched.order if n.op.name == "table" and n not in self.buffers):
            self.buffers[t] = (TABLES, len(self.tables))
            self.tables += map(float, t.payload[1])
        along = riders(sched.order)
        for step in sched.steps:
            STEP_ROWS[step.kind](self, step, sched, top, along)

    def placed(self, step: Step, sched: Schedule) -> Expr:
        """The first array ``step`` computes, each given its buffer."""
        for n in step.nodes:
            self.place(n, sched)
        return step.nodes[0]


def _nest_rows(lowering: _Lowering, step: Step, sched: Schedule, top: _Region, along: list) -> None:
    lowering.placed(step, sched)
    _nest(list(step.nodes), lowering.emitter, top, along)


def _zero_rows(lowering: _Lowering, step: Step, sched: Schedule, top: _Region, along: list) -> None:
    node = lowering.placed(step, sched)
    top.lines.append((ZERO, 0, *lowering.buffers[node], math.prod(node.shape), 0))


def _dot_rows(lowering: _Lowering, step: Step, sched: Schedule, top: _Region, along: list) -> None:
    lowering.ints += _dot_operands(lowering.placed(step, sched), lowering.buffers)
    top.lines.append((DOT, 0, len(lowering.ints) - 16, 0, 0, 0))


def _running_rows(lowering: _Lowering, step: Step, sched: Schedule, top: _Region, along: list) -> None:
    node = lowering.placed(step, sched)
    lowering.ints += _along_axis(node, *node.payload, lowering.buffers)
    top.lines.append((SCAN, 0, len(lowering.ints) - 8, 0, 0, 0))


def _sort_rows(lowering: _Lowering, step: Step, sched: Schedule, top: _Region, along: list) -> None:
    node = lowering.placed(step, sched)
    lowering.ints += _along_axis(node, node.payload, False, lowering.buffers)
    top.lines.append((SORT, 0, len(lowering.ints) - 8, 0, 0, 0))


# A step's kind -> the rows computing it (the scan's row: scan_loops.py).
STEP_ROWS: dict[str, Callable[[_Lowering, Step, Schedule, _Region, list], None]] = {
    "fill": _nest_rows, "add": _nest_rows, "zero": _zero_rows, "dot": _dot_rows, "running": _running_rows,
    "sort": _sort_rows}


def _nest(group: list[Expr], emitter: _Lanes, top: _Region, riders: list) -> None:
    """One nest filling tensors (at their flat position) or adding scatters (at their addresses),
    with the scalar reductions that ride along when it is one-dimensional."""
    first = group[0]
    k = first.payload[1] if first.op.name == "scatter" else 0
    indices = tuple(emitter.fresh_index(i) for i in first.args[1 + k:])
    sizes = [i.payload[1] for i in indices]
    joining = riding(riders, group)
    region = _Region(top, frozenset(indices), {i: emitter.fresh() for i in indices})
    rows = [(FLAT, region.loops[i], math.prod(sizes[n + 1:]), sizes[n], 0, 0) for n, i in enumerate(indices)]
    flat = region.loops[indices[0]] if len(indices) == 1 else emitter.fresh()  # the position in the nest
    if len(indices) > 1:
        rows.append((FLAT, flat, 1, math.prod(sizes), 0, 0))
    for node in group + joining:
        k = node.payload[1] if node.op.name == "scatter" else 0
        own = node.args[1 + k:]
        body = substitute_indices(node.args[0], dict(zip(own, indices)))
        value = emitter.value(body, region)
        if node.op.name in _KINDS:
            acc, kind = emitter.fresh(), _KINDS[node.op.name]
            top.lines.append((ACCINIT, acc, kind, 0, 0, 0))
            region.lines.append((FOLD, acc, value, INTERLEAVED if interleaved(node) else kind, 0, 0))
            top.names[node] = acc
        elif node.op.name == "tensor":
            region.lines.append((STORE, value, *emitter.buffers[node][:1], flat, emitter.buffers[node][1], 0))
        else:
            addresses = [substitute_indices(a, dict(zip(own, indices))) for a in node.args[1:1 + k]]
            at = emitter.address(node.shape, tuple(addresses), region, region)
            memory, offset = emitter.buffers[node]
            region.lines.append((ADDTO, value, memory, at, offset, 0))
    top.lines.append(("nest", math.prod(sizes), rows + region.lines))
    top.lines += [(FOLDED, top.names[n], 0, 0, 0, 0) for n in group + joining if interleaved(n)]


def _dot_operands(node: Expr, buffers: dict) -> list[int]:
    """The 16 integers of a DOT row (see the module's ``dot``) for the product tensor ``node``."""
    (body, c), axes = node.args[0].args, node.args[1:]
    batched = all(axes[0] in f.free for f in body.args)
    axes = axes[batched:]
    first, second = sorted(body.args, key=lambda f: axes[0] not in f.free)
    shape = node.shape[batched:]
    out = [*buffers[node], shape[0], shape[1] if len(shape) > 1 else 1]

    def operand(load: Expr, leading: Expr) -> list[int]:
        own, shape = read_as_matrix(load)
        own, shape = own[batched:], shape[batched:]
        return [*buffers[load.args[0]], shape[0], shape[1] if len(shape) > 1 else 1,
                int(len(shape) > 1 and own[0] is not leading)]

    return out + operand(first, axes[0]) + operand(second, c) + [int(len(axes) == 1),
                                                                  node.shape[0] if batched else 1]


def _along_axis(node: Expr, axis: int, reverse: bool, buffers: dict) -> list[int]:
    """The 8 integers of a SCAN or SORT row (see the module's ``scan``) for ``node`` (running sums, an
    argsort) of its argument along ``axis``."""
    shape = node.shape
    return [*buffers[node.args[0]], *buffers[node], math.prod(shape[:axis]), shape[axis],
            math.prod(shape[axis + 1:]), int(reverse)]


def _flatten(items: list, rows: list | None = None) -> list:
    """Rows with nests and loops turned into jumps (their nesting is a few levels deep)."""
    rows = [] if rows is None else rows
    for item in items:
        if item[0] in ("nest", "loop"):
            start = len(rows)
            rows.append(None)
            _flatten(item[-1], rows)
            if item[0] == "nest":
                rows.append((ENDNEST, 0, start + 1, 0, 0, 0))
                rows[start] = (NEST, 0, item[1], len(rows), 0, 0)
            else:
                rows.append((ENDLOOP, 0, item[1], item[2], start + 1, 0))
                rows[start] = (LOOP, 0, item[1], item[2], len(rows), 0)
        else:
            rows.append(item)
    return rows


_NAMES = {code: name for name, code in globals().items()
          if isinstance(code, int) and code >= 1000 and name.isupper()}


def listing(arrays: dict) -> str:
    """The VM rows, one per line (``r3 = mul r1 r2``, ``LOAD r4 memory 0 at r2 + 7``)."""
    ops = {op.code: op for op in OPS.values()}
    lines = []
    for k, (op, d, a, b, c, e) in enumerate(arrays["code"].tolist()):
        if op in ops:
            lines.append(f"{k:4d}  r{d} = {ops[op].name} " + " ".join(f"r{s}" for s in (a, b, c)[:ops[op].arity]))
        else:
            lines.append(f"{k:4d}  {_NAMES[op]} {d} {a} {b} {c} {e}")
    return "\n".join(lines)


def at_hand() -> bool:
    """Whether the VM is loaded or in the disk cache (else its first use compiles it: 40 s on 2 cores).

    >>> at_hand() in (True, False)
    True
    """
    return _rows.cache_info().currsize > 0 or cache.on_disk(_module(), "rows")


@register("loops", "vm")
def vm_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """The loop VM's kernels bound to ``program``'s arrays: nothing is compiled per program."""
    arrays = lower(program)
    parts = (arrays["code"], arrays["ints"], arrays["consts"], arrays["tables"], arrays["dims"])
    bind = lambda name: functools.partial(variant(name), *parts)  # noqa: E731
    return Kernels("vm", functools.lru_cache(None)(bind), lambda: listing(arrays))
