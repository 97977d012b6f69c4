"""Rolled expressions -> Numba loops, and the ``LoopProgram`` that ``Compiled`` runs them through.

One fused loop nest per materialised array (a ``tensor`` or ``scatter``) and for the scalar
outputs; a reduction is an inner loop with an accumulator. Each value is computed in the
outermost loop where every index it varies over is bound, so loop-invariant work is hoisted;
index arithmetic stays in integers. The kernel reads its inputs from flat vectors ``x`` and
``p`` (each input array raveled, scalars one entry each, in order) and writes its other
outputs, raveled, into ``out``. Compile time does not depend on the arrays' sizes.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types
from numba.core.registry import CPUDispatcher as Dispatcher

from symgrad.compile import cache, fastmath, kernels, pieces, special
from symgrad.compile.kernels import SIGNATURES, Kernels, make_kernels, register
from symgrad.compile.numba_backend import _literal
from symgrad.compile.plan import REDUCTIONS
from symgrad.compile.schedule import Schedule, ScheduleError, Step, riders, riding, schedule, slots
from symgrad.expr.build import apply, const
from symgrad.expr.dot import to_dot
from symgrad.expr.interp import run
from symgrad.expr.node import Expr, intern, paused_gc
from symgrad.expr.ops import OPS
from symgrad.expr.rolled import (
    affine,
    index,
    shape_of,
    substitute_indices,
    value_range,
)
from symgrad.expr.traverse import topo_order

_INTEGER_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "neg": "(-{0})",
                "mod": "({0} % {1})", "floor_divide": "({0} // {1})", "as_index": "fastmath.as_index({0}, {1})"}
_COMBINE = {"sum": "{0} + {1}", "max": OPS["maximum"].numba, "min": OPS["minimum"].numba}
_START = {"sum": "0.0", "max": "-math.inf", "min": "math.inf"}
SLOTS = 8  # the accumulators of a long sum at a kernel's top level (see interleaved)
INTERLEAVED_MIN = 128


def interleaved(node: Expr) -> bool:
    """Whether the reduction ``node``, at a kernel's top level, adds into ``SLOTS`` accumulators,
    element k into slot k % SLOTS, added ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)) at the end: one
    accumulator waits on each addition before, these on the one SLOTS elements before, and LLVM
    vectorises them (a sum of 1.28M: 0.64 -> 0.19 ms). The loop VM adds its lanes the same way."""
    return node.op.name == "sum" and node.args[1].payload[1] >= INTERLEAVED_MIN


def folded(slots: str) -> str:
    """The sum of an interleaved sum's accumulators, in pairs."""
    terms = [f"{slots}[{k}]" for k in range(SLOTS)]
    while len(terms) > 1:
        terms = [f"({a} + {b})" for a, b in zip(terms[::2], terms[1::2])]
    return terms[0][1:-1]


def _blocked(var: str, bounds: str, lines: list[str], fresh: Callable[[str], str], shift: int = 0) -> list[str]:
    """``for var in range(bounds)`` over ``lines``, which add into ``SLOT``, the slot of element
    ``var + shift`` of interleaved sums: whole blocks of SLOTS elements as a loop over the slots inside
    a loop over the blocks (vectorised), the elements before and after them one by one."""
    if not any("SLOT" in line for line in lines):
        return [f"for {var} in range({bounds}):", *("    " + line for line in lines)]
    span = range(*map(int, bounds.split(",")))
    lo, hi = span.start, span.stop
    start = min(hi, lo + (-(lo + shift)) % SLOTS)
    end = start + (hi - start) // SLOTS * SLOTS
    at = f"({var} + {shift})" if shift else var

    def alone(a: int, b: int) -> list[str]:
        return [f"for {var} in range({a}, {b}):",
                *("    " + line.replace("SLOT", f"{at} % {SLOTS}") for line in lines)]

    block, slot = fresh("i"), fresh("i")
    blocks = [f"for {block} in range({(end - start) // SLOTS}):", f"    for {slot} in range({SLOTS}):",
              f"        {var} = {start} + {SLOTS} * {block} + {slot}",
              *("        " + line.replace("SLOT", slot) for line in lines)]
    return (alone(lo, start) if lo < start else []) + (blocks if start < end else []) + \
        (alone(end, hi) if end < hi else [])


# Small constant powers as the loop VM computes them (the same bits): products, not a pow call, and sqrt.
POWERS = {2.0: "{0} * {0}", 3.0: "{0} * {0} * {0}", 0.5: OPS["sqrt"].numba}


class _Region:
    """A loop body (or the kernel's top level): the indices bound there, its lines, its names."""

    def __init__(self, parent: _Region | None, bound: frozenset, loops: dict) -> None:
        self.parent, self.bound, self.loops = parent, bound, loops  # loops: index -> loop variable
        self.lines: list[str] = []
        self.names: dict[Expr, str] = {}

    def chain(self) -> list[_Region]:
        out, r = [], self
        while r is not None:
            out.append(r)
            r = r.parent
        return out[::-1]  # outermost first

    def lookup(self, node: Expr) -> str | None:
        r = self
        while r is not None:
            if node in r.names:
                return r.names[node]
            r = r.parent
        return None


class _Emitter:
    def __init__(self, buffers: dict[Expr, str], scalars: dict[Expr, str]) -> None:
        self.buffers, self.scalars = buffers, scalars  # array nodes -> buffer names; vars -> x[k]
        self.count = self.n_indices = 0
        self.children: dict[tuple, tuple] = {}
        self.integers: set[Expr] = set()  # nodes emitted as integer arithmetic
        self.integer_names: set[str] = set()  # and the names holding them
        self.work = 0  # floats of workspace taken so far

    def take(self, size: int) -> str:
        self.work += size
        return f"work[{self.work - size}:{self.work}]"

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def fresh_index(self, i: Expr) -> Expr:
        """A new index over ``i``'s range, named by this emitter's count (``i#L7``), not the process's:
        the same program gives the same nodes, so the same source (and disk cache entry) each time."""
        self.n_indices += 1
        return index(f"{i.payload[0].split('#')[0]}#L{self.n_indices}", i.payload[1])

    def value(self, root: Expr, region: _Region) -> str:
        """The name (or literal) of ``root``'s value in ``region``, emitting what it needs."""
        stack = [(root, region, False)]
        while stack:
            node, reg, expanded = stack.pop()
            if self._known(node, reg) is not None:
                continue
            home = next(r for r in reg.chain() if r.bound >= node.free)
            name = node.op.name
            if name in ("sum", "max", "min"):
                if not expanded:
                    body, i = node.args
                    if i in home.bound:  # the index is bound outside already: this loop gets its own
                        j = self.fresh_index(i)
                        body, i = substitute_indices(body, {i: j}), j
                    loops = {**home.loops, i: self.fresh("i")}
                    child = _Region(home, home.bound | {i}, loops)
                    self.children[(node, id(reg))] = (child, body, i)
                    stack += [(node, reg, True), (body, child, False)]
                else:
                    self._reduce(node, home, *self.children.pop((node, id(reg))))
                continue
            if not expanded:
                stack.append((node, reg, True))
                stack += [(a, reg, False) for a in node.args if not a.op.array_valued and
                          self._known(a, reg) is None]
                continue
            home.names[node] = self._emit(node, reg, home)
        return self._known(root, region)

    def _emit(self, node: Expr, reg: _Region, home: _Region) -> str:
        """Compute ``node`` (its arguments known in ``reg``) in ``home``: the name of its value."""
        name = self.fresh("v")
        home.lines.append(f"{name} = {self._expression(node, reg)}")
        if self._integral(node):  # (integer arithmetic, a table's entry)
            self.integer_names.add(name)
        return name

    def _known(self, node: Expr, reg: _Region) -> str | None:
        name = node.op.name
        if name == "const":
            return _literal(float(node.payload))
        if name == "index":
            return reg.loops.get(node)
        if name == "var":
            return self.scalars[node]
        return reg.lookup(node)

    def _expression(self, node: Expr, reg: _Region) -> str:
        args = [self._operand(a, reg) for a in node.args]
        name = node.op.name
        if name == "load":
            arr = self.buffers[node.args[0]]
            addresses = [self._clamped(a, n, reg) for a, n in zip(node.args[1:], node.args[0].shape)]
            return f"{arr}[{', '.join(addresses)}]"
        if name == "pow" and node.args[1].op.name == "const" and node.args[1].payload in POWERS:
            return POWERS[node.args[1].payload].format(args[0])
        if name == "as_index" or self._integer(node):
            self.integers.add(node)
            return _INTEGER_OPS[name].format(*(self._address(a, reg) for a in node.args))
        return node.op.numba.format(*args)

    def _integer(self, node: Expr) -> bool:
        """Whether ``node`` is computed in integers: an integer op of integral arguments, a remainder or
        quotient only by what is never 0 (``1 % j`` at j = 0 is nan, as NumPy's floats give)."""
        if node.op.name not in _INTEGER_OPS or not all(self._integral(a) for a in node.args):
            return False
        if node.op.name not in ("mod", "floor_divide"):
            return True
        try:
            lo, hi = value_range(node.args[1])
        except (TypeError, OverflowError):
            return False
        return lo > 0 or hi < 0

    def _integral(self, a: Expr) -> bool:
        """Index arithmetic: index symbols, integer constants, loads from tables, and integer ops of them."""
        name = a.op.name
        return name == "index" or name == "const" and float(a.payload).is_integer() or \
            name == "load" and a.args[0].op.name == "table" or a in self.integers

    def _operand(self, a: Expr, reg: _Region) -> str:
        return "" if a.op.array_valued else self._known(a, reg)

    def _clamped(self, a: Expr, n: int, reg: _Region) -> str:
        """A load's address, clamped into the array where its range leaves it: only derivatives make
        such loads, in the branch a guard does not take (users' loads are range-checked when built)."""
        text = self._address(a, reg)
        lo, hi = value_range(a)
        return text if 0 <= lo and hi < n else f"min(max({text}, 0), {n - 1})"

    def _address(self, a: Expr, reg: _Region) -> str:
        """An index expression as an integer (constants as int literals)."""
        if a.op.name == "const":
            return str(int(a.payload))
        return self._known(a, reg)

    def _reduce(self, node: Expr, home: _Region, child: _Region, body: Expr, i: Expr) -> None:
        value = self.value(body, child)
        acc = self.fresh("a")
        kind = node.op.name
        if home.parent is None and interleaved(node):
            slots = self.fresh("t")
            child.lines.append(f"{slots}[SLOT] = {slots}[SLOT] + {value}")
            home.lines += [f"{slots} = {self.take(SLOTS)}", f"{slots}[:] = 0.0",
                           *_blocked(child.loops[i], str(i.payload[1]), child.lines, self.fresh),
                           f"{acc} = {folded(slots)}"]
            home.names[node] = acc
            return
        child.lines.append(f"{acc} = {_COMBINE[kind].format(acc, value)}")
        home.lines.append(f"{acc} = {_START[kind]}")
        home.lines.append(f"for {child.loops[i]} in range({i.payload[1]}):")
        home.lines += ["    " + line for line in child.lines]
        home.names[node] = acc


@paused_gc()
def source(outputs: list[Expr], inputs: list[Expr], params: list[Expr] = ()) -> str:
    """A Numba module whose ``kernel(x, p, out, work)`` returns ``outputs[0]`` (a scalar) and writes
    the others (scalars or arrays, raveled, in order) into ``out``; ``x`` holds ``inputs`` and ``p``
    ``params`` (arrays raveled, scalars) in order; ``work`` (``WORK`` floats, one per thread) holds
    the temporary arrays. ``point(x, p, out)`` is the same code checking the sizes and allocating
    its workspace (one function: a call compiles once, not a kernel and a wrapper).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> print(source([sg.sum(x[i] ** 2, i)], [x]).split("def kernel")[1].split("@numba")[0].strip())
    (x, p, out, work):
        b1 = x[0:3].reshape((3,))
        a5 = 0.0
        for i2 in range(3):
            v3 = b1[i2]
            v4 = v3 * v3
            a5 = a5 + v4
        return a5
    """
    for k, r in enumerate(outputs):
        if r.free:
            raise ValueError(f"compiling: the output {str(r)[:60]} varies over {sorted(map(str, r.free))}: reduce "
                             "it or make it a tensor")
        if r.op.array_valued and (k == 0 or r.op.name == "table"):
            raise ValueError(f"compiling: output {k} is the array {str(r)[:60]}; the first output must be a "
                             "scalar, and a constant table is no output")
    lines, buffers, scalars, head = [], {}, {}, []
    emitter = _Emitter(buffers, scalars)
    for vector, group in (("x", inputs), ("p", params)):
        for v, start, size in Layout(group).blocks():
            if v.op.name == "array":
                buffers[v] = emitter.fresh("b")
                lines.append(f"{buffers[v]} = {vector}[{start}:{start + size}].reshape({v.shape!r})")
            else:
                scalars[v] = f"{vector}[{start}]"
    planned = schedule(outputs)
    outputs = planned.outputs
    missing = sorted(str(n) for n in planned.order if n.op.name in ("var", "array") and n not in scalars | buffers)
    if missing:
        raise ValueError(f"compiling: the outputs depend on {missing[:5]}, which are not among the inputs")
    places, out_offsets, offset = slots(outputs)
    top = _Region(None, frozenset(), {})
    filler = _Filler(emitter, head, out_offsets)
    filler.arrays(planned, top)
    for r, start in places:
        if not r.op.array_valued:
            top.lines.append(f"out[{start}] = {emitter.value(r, top)}")
        elif r.op.name in ("array", "scan"):  # an input as it is (the gradient of a linear function)
            top.lines += _copied(emitter, "out", start, buffers[r], math.prod(r.shape))
        elif start != out_offsets[r]:  # the same array again: a copy of where it was computed
            size, first = math.prod(r.shape), out_offsets[r]
            top.lines += _copied(emitter, "out", start, f"out[{first}:{first + size}]", size)
    ret = emitter.value(outputs[0], top) if not outputs[0].op.array_valued else "0.0"
    body = _library_where_scalar(lines + top.lines + [f"return {ret}"])
    nx, np_ = len(Layout(inputs)), len(Layout(params))
    sizes = f"x.shape[0] != {nx} or p.shape[0] != {np_} or out.shape[0] != {offset}"
    checks = f"    if {sizes}:\n        raise ValueError(\"symgrad: wrong shape\")\n"
    header = f"import math\n\nimport numba\nimport numpy as np\n{fastmath.IMPORT}\n{special.IMPORT}\n\n"
    entries = _ENTRIES.format(nx=nx, np=np_, nout=offset)
    text = (header + "".join(h + "\n" for h in head) +
            f"WORK = {emitter.work}  # floats of workspace its temporary arrays take\n")
    split = len(body) > pieces.SPLIT_LINES
    if split:
        text += _split_kernel(body, emitter.integer_names)
    else:
        text += f"\n\n{_JIT}def kernel(x, p, out, work):\n{_indented(body)}\n"
    if split or emitter.work >= kernels.OWN_WORK:  # a workspace from Python (see kernels.take)
        return text + _OWN_POINT.format(checks=checks) + (entries.replace(_JIT, "") if split else entries)
    point = f"\n\n{_JIT}def point(x, p, out):\n{checks}    work = np.empty(WORK)\n{_indented(body)}\n"
    return text + point + entries


def _indented(lines: list[str]) -> str:
    return "\n".join("    " + line for line in lines)


def _split_kernel(body: list[str], integers: set[str]) -> str:
    """The kernel as Numba pieces (see symgrad.compile.pieces) that a plain Python function calls in turn."""
    parts, floats, ints = pieces.split(body, integers)
    defs = "".join(f"\n\n{_JIT}def piece{k}(x, p, out, work, sc, si):\n{_indented(part)}\n"
                   for k, part in enumerate(parts))
    calls = "".join(f"    piece{k}(x, p, out, work, sc, si)\n" for k in range(len(parts) - 1))
    return (defs + f"\n\nPIECES = {len(parts)}\n\n\ndef kernel(x, p, out, work):\n"
            f"    sc, si = np.empty({floats}), np.empty({ints}, dtype=np.int64)\n{calls}"
            f"    return piece{len(parts) - 1}(x, p, out, work, sc, si)\n")


# ``point`` of a kernel with a large workspace (or split): plain Python, the workspace from kernels.take.
_OWN_POINT = """

from symgrad.compile.kernels import give, take  # noqa: E402


def point(x, p, out):
{checks}    work = take(WORK)
    try:
        return kernel(x, p, out, work)
    finally:
        give(work)
"""


class _Filler:
    """Emits the loops filling a program's arrays, each in its buffer (a slice of ``out``, or of the
    workspace), and a scan's step inside its loop over the steps."""

    def __init__(self, emitter: _Emitter, head: list[str], out_offsets: dict) -> None:
        self.emitter, self.buffers, self.head, self.out_offsets = emitter, emitter.buffers, head, out_offsets

    def place(self, node: Expr, sched: Schedule, top: _Region, homes: dict) -> None:
        """The buffer of the array ``node``: its owner's (schedule.home), a scan's row (``homes``), its
        slice of ``out``, or of the workspace."""
        owner = sched.owner(node)
        if owner not in self.buffers:
            self.buffers[owner] = self.emitter.fresh("t")
            size, start = math.prod(owner.shape), self.out_offsets.get(owner)
            where = homes.get(owner)
            if where is None:
                view = self.emitter.take(size) if start is None else f"out[{start}:{start + size}]"
                where = f"{view}.reshape({owner.shape!r})"
            top.lines.append(f"{self.buffers[owner]} = {where}")
        self.buffers[node] = self.buffers[owner]

    def arrays(self, sched: Schedule, top: _Region, homes: dict | None = None) -> None:
        """The loops of the steps of ``sched``, filling its arrays."""
        buffers, emitter, homes = self.buffers, self.emitter, homes or {}
        for t in (n for n in sched.order if n.op.name == "table" and n not in buffers):
            buffers[t] = f"TABLE{len(self.head)}"
            self.head.append(f"{buffers[t]} = np.array({list(t.payload[1])}, dtype=np.int64).reshape("
                             f"{tuple(t.payload[0])!r})")
        ride = riders(sched.order)
        for step in sched.steps:
            nodes = [n for n in step.nodes if n not in sched.fused]  # (computed in the running sums' loop)
            if step.kind == "scan":
                self.scan(step, top)
                continue
            for node in nodes:
                self.place(node, sched, top, homes)
            if step.kind == "dot":
                top.lines += _dot(nodes[0], buffers, emitter)
            elif step.kind == "running":
                _running(nodes[0], buffers, emitter, top, sched.fused)
            elif step.kind == "zero":
                top.lines.append(f"{buffers[nodes[0]]}[...] = 0.0")
            elif nodes:  # fill, add
                _materialise(nodes + riding(ride, nodes), buffers, emitter, top)

    def scan(self, scan_step: Step, top: _Region) -> None:
        """A loop over the steps around the step's loops: row 0 of the carries holds the initial one
        (row n reversed), the step reads the row before and writes the next (rows views)."""
        node, inner = scan_step.nodes[0], scan_step.inner
        length, reverse, step = node.payload
        init, rows, consts = node.args[0], node.args[1:1 + len(step.xs)], node.args[1 + len(step.xs):]
        size, emitter, buffers = math.prod(init.shape), self.emitter, self.buffers
        at, full = emitter.work, emitter.fresh("s")
        buffers[node] = full
        top.lines.append(f"{full} = {emitter.take((length + 1) * size)}.reshape({node.shape!r})")
        top.lines += _copied(emitter, "work", at + length * size if reverse else at, buffers[init], size)
        for n in inner.order:  # a step equal to an earlier scan's (hash-consed) fills this scan's rows
            if n.op.name != "table":
                buffers.pop(n, None)
        t, body = emitter.fresh("i"), _Region(None, frozenset(), {})
        before, after = (f"{t} + 1", t) if reverse else (t, f"{t} + 1")
        for placeholder, source in ((step.carry, f"{full}[{before}]"),
                                    *((p, f"{buffers[a]}[{t}]") for p, a in zip(step.xs, rows))):
            buffers[placeholder] = emitter.fresh("b")
            body.lines.append(f"{buffers[placeholder]} = {source}")
        buffers.update(zip(step.consts, (buffers[a] for a in consts)))
        result = inner.outputs[0]
        self.arrays(inner, body, {result: f"{full}[{after}]"})
        if result.op.name in ("array", "table"):  # planned away (a copy of a row or of the carry)
            body.lines += _copied(emitter, "work", f"{at} + ({after}) * {size}", buffers[result], size)
        elif f"{buffers[result]} = {full}[{after}]" not in body.lines:
            raise ScheduleError(f"the loops of {str(node)[:80]} do not write its rows (its step fills "
                                f"{buffers[result]})")
        if reverse:  # counted up, the step read through a max LLVM cannot see through: over a loop
            # counting down, LLVM (22) hoists the step loops' alias checks out of it, they fail, and
            # the loops run unvectorised (an ODE's gradient: 4.1 ms where 0.55)
            k = emitter.fresh("i")
            top.lines += [f"for {k} in range({length}):", f"    {t} = max({length - 1} - {k}, -work.shape[0])"]
        else:
            top.lines.append(f"for {t} in range({length}):")
        top.lines += ["    " + line for line in body.lines]


def _copied(emitter: _Emitter, memory: str, start: int | str, source: str, size: int) -> list[str]:
    """Lines copying the array ``source`` (C order) into ``memory`` from ``start``: a loop, which
    Numba compiles in milliseconds (an assignment of an array to a slice takes it 0.5-3 s)."""
    flat, k = emitter.fresh("c"), emitter.fresh("i")
    return [f"{flat} = {source}.reshape(({size},))", f"for {k} in range({size}):",
            f"    {memory}[{start} + {k}] = {flat}[{k}]"]


_LIBRARY_CALL = re.compile(r"(?<![\w.])math\.\w+\(")  # a C library call (not fastmath's)
_ACCUMULATES = re.compile(r"^\s*a\d+ = ")  # the emitter's reduction accumulators: a loop-carried sum
_FASTMATH = fastmath.CALLS
_LIBRARY_NAMES = re.compile(rf"(?<![\w.])math\.({'|'.join(fastmath.FUNCTIONS)})\(")


def _library_where_scalar(lines: list[str]) -> list[str]:
    """The kernel's lines with a ``fastmath.`` function turned into the C library's wherever LLVM
    will not vectorise one of its calls: outside innermost loops, and in innermost loops that also
    call the library (sin, cos) or carry a reduction (no reassociation without fast-math flags).
    Run one element at a time, fastmath's select-only code is ~2x slower than the library's
    branches (P5: 1.46x the hand-written loop with fastmath, 1.0x without). A function is switched
    in every line or none: the same node computed in two loops must give the same bits (a max's
    derivative finds its ties by comparing them)."""
    depth = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    vectorised: set[int] = set()
    for k, line in enumerate(lines):
        if not line.lstrip().startswith("for "):
            continue
        end = k + 1
        while end < len(lines) and depth(lines[end]) > depth(line):
            end += 1
        scalar = (b for b in lines[k + 1:end] if b.lstrip().startswith("for ") or _LIBRARY_CALL.search(b)
                  or _ACCUMULATES.match(b))
        if next(scalar, None) is None:
            vectorised.update(range(k + 1, end))
    library = {name for k, line in enumerate(lines) if k not in vectorised for name in _FASTMATH.findall(line)}
    if not library:
        return lines
    switch = re.compile(rf"fastmath\.({'|'.join(sorted(library))})\(")
    return [switch.sub(r"math.\1(", line) for line in lines]


def _dot(node: Expr, buffers: dict, emitter: _Emitter) -> list[str]:
    """``np.dot`` filling the product tensor ``node`` (see plan._product), transposing views as
    needed; batched, one ``np.dot`` for each value of the batch index, its first axis everywhere."""
    (body, c), axes = node.args[0].args, node.args[1:]
    batch = axes[0] if all(axes[0] in f.free for f in body.args) else None
    at = "" if batch is None else f"[{emitter.fresh('i')}]"
    if batch is not None:
        axes = axes[1:]
    first, second = sorted(body.args, key=lambda f: axes[0] not in f.free)

    def view(load: Expr, leading: Expr) -> str:
        name = buffers[load.args[0]] + at
        own = load.args[1 + (batch is not None):]
        return name if len(own) == 1 or own[0] is leading else f"{name}.T"

    call = f"np.dot({view(first, axes[0])}, {view(second, c)}, {buffers[node]}{at})"
    return [call] if batch is None else [f"for {at[1:-1]} in range({node.shape[0]}):", f"    {call}"]


def _running(node: Expr, buffers: dict, emitter: _Emitter, top: _Region, fused: set) -> None:
    """The loops filling the running sums ``node`` (axes in order, its axis backwards if reversed):
    each element adds the one before it along the axis (np.cumsum's order of additions). Along
    the last axis the sum so far is kept in a register (one add per element); along another, the
    row before is read back, each element of a row independent of the others (vectorised). An
    operand in ``fused`` (cheap arithmetic read by nothing else) is computed in the loop itself."""
    (axis, reverse), shape, operand = node.payload, node.shape, node.args[0]
    indices = tuple(emitter.fresh_index(index("s", n)) for n in shape)
    levels, region = [], top
    for i in indices:
        region = _Region(region, region.bound | {i}, {**region.loops, i: emitter.fresh("i")})
        levels.append(region)
    names = [region.loops[i] for i in indices]
    here = ", ".join(names)
    if operand in fused:
        value = emitter.value(substitute_indices(operand.args[0], dict(zip(operand.args[1:], indices))), region)
    else:
        value = f"{buffers[operand]}[{here}]"
    dst = buffers[node]
    if axis == len(shape) - 1:
        acc = emitter.fresh("a")
        (levels[axis - 1] if axis else top).lines.append(f"{acc} = 0.0")
        region.lines += [f"{acc} = {acc} + {value}", f"{dst}[{here}] = {acc}"]
    else:
        at = names[axis]
        before = ", ".join([*names[:axis], f"{at} + 1" if reverse else f"{at} - 1", *names[axis + 1:]])
        first = f"{at} < {shape[axis] - 1}" if reverse else f"{at} > 0"
        region.lines.append(f"{dst}[{here}] = {value} + ({dst}[{before}] if {first} else 0.0)")
    for depth, (name, n, level) in enumerate(zip(names, shape, levels)):
        steps = f"{n - 1}, -1, -1" if depth == axis and reverse else f"{n}"
        top.lines.append("    " * depth + f"for {name} in range({steps}):")
        top.lines += ["    " * (depth + 1) + line for line in level.lines]


def _materialise(group: list[Expr], buffers: dict, emitter: _Emitter, top: _Region) -> None:
    """The loop nest filling tensors (element at their indices, the group sharing the first one's
    indices) or a scatter (adding at its addresses)."""
    first = group[0]
    k = 0 if first.op.name == "tensor" else first.payload[1]
    indices = tuple(emitter.fresh_index(i) for i in first.args[1 + k:])  # fresh: no body binds them
    levels, region = [], top  # one region per loop: what varies over the outer indices only is hoisted
    for i in indices:
        region = _Region(region, region.bound | {i}, {**region.loops, i: emitter.fresh("i")})
        levels.append(region)
    renamed = [_renamed(node, indices) for node in group]
    accumulators: dict[Expr, str] = {}
    _fill(group, renamed, indices, region, buffers, emitter, top, accumulators)
    if len(indices) == 1:  # the iterations where every guarded read is inside its array, apart
        i = indices[0]
        for lo, hi, alone in _partition(i, [b for b, _ in renamed]):
            special = _within(renamed, i, lo, hi) if alone else None
            if special is None:  # (the few iterations between runs: as they are)
                top.lines += _blocked(levels[0].loops[i], f"{lo}, {hi}", levels[0].lines, emitter.fresh)
                continue
            j, found = special  # the bodies with i = j + lo, the conditions on i this range decides decided
            inner = _Region(top, frozenset({j}), {j: emitter.fresh("i")})
            _fill(group, found, (j,), inner, buffers, emitter, top, accumulators, f" + {lo}")
            top.lines += _blocked(inner.loops[j], str(hi - lo), inner.lines, emitter.fresh, lo)
        for node, slots in accumulators.items():
            if interleaved(node):
                top.names[node] = emitter.fresh("a")
                top.lines.append(f"{top.names[node]} = {folded(slots)}")
        return
    for depth, (i, level) in enumerate(zip(indices, levels)):
        top.lines.append("    " * depth + f"for {level.loops[i]} in range({i.payload[1]}):")
        top.lines += ["    " * (depth + 1) + line for line in level.lines]


def _renamed(node: Expr, indices: tuple) -> tuple[Expr, list[Expr]]:
    """``node``'s body and (a scatter's) addresses over ``indices`` instead of its own."""
    k = node.payload[1] if node.op.name == "scatter" else 0
    own = dict(zip(node.args[1 + k:], indices))
    return substitute_indices(node.args[0], own), [substitute_indices(a, own) for a in node.args[1:1 + k]]


def _fill(group: list[Expr], renamed: list, indices: tuple, inner: _Region, buffers: dict, emitter: _Emitter,
          top: _Region, accumulators: dict, shift: str = "") -> None:
    """The lines of a nest's innermost loop (in ``inner``): each tensor's element stored, each scatter's
    added, each reduction riding along accumulated (``accumulators``: their names, made once)."""
    for node, (body, addresses) in zip(group, renamed):
        value = emitter.value(body, inner)
        if node.op.name in REDUCTIONS and interleaved(node):  # a long sum riding along: its slots
            if node not in accumulators:
                accumulators[node] = emitter.fresh("t")
                top.lines += [f"{accumulators[node]} = {emitter.take(SLOTS)}", f"{accumulators[node]}[:] = 0.0"]
            inner.lines.append(f"{accumulators[node]}[SLOT] = {accumulators[node]}[SLOT] + {value}")
        elif node.op.name in REDUCTIONS:  # a scalar reduction riding along: its accumulator
            if node not in accumulators:
                accumulators[node] = top.names[node] = emitter.fresh("a")
                top.lines.append(f"{accumulators[node]} = {_START[node.op.name]}")
            acc = accumulators[node]
            inner.lines.append(f"{acc} = {_COMBINE[node.op.name].format(acc, value)}")
        elif node.op.name == "tensor":
            inner.lines.append(f"{buffers[node]}[{', '.join(inner.loops[i] + shift for i in indices)}] = {value}")
        else:
            at = ", ".join(emitter._address(a, inner) if a.op.name == "const" else emitter.value(a, inner)
                           for a in addresses)
            inner.lines.append(f"{buffers[node]}[{at}] += {value}")


def _within(renamed: list, i: Expr, lo: int, hi: int) -> tuple[Expr, list] | None:
    """The bodies (and addresses) over ``lo <= i < hi`` as functions of a new index ``j`` (i = j + lo),
    with the comparisons of ``i`` that range decides folded (``where(i < 1, a, b)`` is ``b`` past the
    first iteration: the read ``a`` needs, guarded, is gone); None where none is decided."""
    j = index(f"{i.payload[0].split('#')[0]}#{lo}", hi - lo)
    shift = {i: j + lo}
    shifted = [substitute_indices(b, shift) for b, _ in renamed]
    found = [_decided(b) for b in shifted]
    if all(f is b for f, b in zip(found, shifted)):
        return None
    return j, [(f, [substitute_indices(a, shift) for a in addresses]) for f, (_, addresses) in zip(found, renamed)]


def _decided(e: Expr) -> Expr:
    """``e`` with each comparison of index arithmetic whose sides' ranges settle it as 1 or 0."""
    new: dict[Expr, Expr] = {}
    for node in topo_order([e], _ARRAYS):  # (the arrays it reads are computed elsewhere, as they are)
        args = tuple(new.get(a, a) for a in node.args)
        if node.op.name in _ORDERINGS:
            try:
                (a_lo, a_hi), (b_lo, b_hi) = value_range(args[0]), value_range(args[1])
            except (TypeError, OverflowError):  # (not index arithmetic)
                a_lo = None
            # an ordering of a and b is settled where it holds alike at a - b's extremes
            if a_lo is not None and (value := node.op.impl(a_lo, b_hi)) == node.op.impl(a_hi, b_lo):
                new[node] = const(float(value))
                continue
        if any(a is not b for a, b in zip(args, node.args)):
            new[node] = apply(node.op, args, node.payload)
    return new.get(e, e)


def _index_form(a: Expr) -> tuple | None:
    """``a`` as (affine's (coefficients, constant), d) where it is index arithmetic, an affine one
    or one floor-divided by a positive constant d (``i // 14 < 3``: the layers of a stack), else
    None (a comparison may compare values: ``x[i] < 0.5``)."""
    try:
        value_range(a)
    except (TypeError, OverflowError):
        return None
    divisor = 1
    if a.op.name == "floor_divide" and a.args[1].op.name == "const" and a.args[1].payload > 0:
        a, divisor = a.args[0], int(a.args[1].payload)
    form = affine(a)
    return None if form is None else (form, divisor)


class _Arrays:
    """Array-valued nodes, as topo_order's ``known``: a walk of a loop's body stops at the arrays it reads."""

    def __contains__(self, node: Expr) -> bool:
        return node.op.array_valued


_ARRAYS = _Arrays()
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}  # k op (i + c) is (i + c) flipped k
_ORDERINGS = frozenset(_FLIPPED)  # comparisons monotone in a - b: settled by its range's ends


def _partition(i: Expr, bodies: list[Expr]) -> list[tuple[int, int, bool]]:
    """The ranges a one-dimensional loop over ``i`` runs in, each with whether it is a run of its
    own: the runs of iterations between the points where a guarded read at ``i + c`` enters or
    leaves its array (``x[i - 1]``, ``x[i + 1]``: all but the first and the last) or a comparison of
    ``i + c`` with a constant flips (a concatenation's parts), of at least ``RUN`` iterations (the
    ``RUNS`` longest), apart from the iterations between them. In a run the guards hold by its
    range (LLVM removes them and vectorises, where otherwise it peels iterations off: LLVM 22 can
    abort doing that), and the comparisons it settles are folded (_within). One range when there
    is nothing to split (a run if it compares ``i``: its comparisons may all be settled)."""
    n = i.payload[1]
    cuts, compared = {0, n}, False
    for node in topo_order(bodies, _ARRAYS):
        if node.op.name == "load" and node.payload == "guarded":
            for a, size in zip(node.args[1:], node.args[0].shape):
                form = affine(a)
                if form is not None and len(form[0]) == 1 and form[0].get(i) == 1:
                    cuts |= {-form[1], size - form[1]}
        elif node.op.name in _ORDERINGS:
            forms = [_index_form(a) for a in node.args]
            if all(f is not None for f in forms) and [len(f[0][0]) for f in forms] in ([1, 0], [0, 1]):
                op = node.op.name if forms[0][0][0] else _FLIPPED[node.op.name]  # as (i + c) // d op k
                (form, divisor), ((_, k), _) = forms if forms[0][0][0] else forms[::-1]
                if form[0].get(i) == 1:  # true for i < k*d - c (lt), i < (k + 1)*d - c (le), ...: flips at
                    cuts.add((k + (op in ("le", "gt"))) * divisor - form[1])
                    compared = True
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    if len(cuts) == 2:  # (its comparisons may still be settled: gates[28:42] of a concatenation of four)
        return [(0, n, compared)]
    runs = sorted((r for r in zip(cuts, cuts[1:]) if r[1] - r[0] >= RUN), key=lambda r: r[0] - r[1])[:RUNS]
    runs = sorted(runs or [max(zip(cuts, cuts[1:]), key=lambda r: r[1] - r[0])])
    ranges, at = [], 0
    for lo, hi in runs:
        ranges += [(at, lo, False)] * (at < lo) + [(lo, hi, True)]
        at = hi
    return ranges + [(at, n, False)] * (at < n)


RUN, RUNS = 8, 8  # (each run is a copy of the loop's body: a concatenation of parts has one a part)


class Layout(Sequence):
    """The entries of a flat argument vector: each array raveled, then one per scalar, in order.
    Named like ``x[0, 1]`` on demand (an array may have 10**6 elements: no list of names is made).

    >>> import symgrad as sg
    >>> v = Layout([sg.array("x", (2, 2)), sg.Var("a")])
    >>> len(v), v[1], v[-1], v[:2]
    (5, 'x[0, 1]', 'a', ['x[0, 0]', 'x[0, 1]'])
    """

    def __init__(self, exprs: Sequence[Expr]) -> None:
        self.exprs = tuple(exprs)
        sizes = [math.prod(shape_of(v)) if v.op.name == "array" else 1 for v in self.exprs]
        self.starts = [0, *itertools.accumulate(sizes)]
        # One array: calls may pass it in its own shape (the gradient comes back raveled).
        self.shape = self.exprs[0].shape if len(self.exprs) == 1 and self.exprs[0].op.name == "array" else None

    def blocks(self) -> list[tuple[Expr, int, int]]:
        """(input, its first entry, its number of entries), in order."""
        return [(v, a, b - a) for v, a, b in zip(self.exprs, self.starts, self.starts[1:])]

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        k = k + len(self) if k < 0 else k
        if not 0 <= k < len(self):
            raise IndexError(k)
        block = bisect.bisect_right(self.starts, k) - 1
        v = self.exprs[block]
        if v.op.name != "array":
            return v.payload
        where = np.unravel_index(k - self.starts[block], v.shape)
        return f"{v.payload[0]}[{', '.join(str(int(w)) for w in where)}]"

    def __repr__(self) -> str:
        names = (f"{v.payload[0]}{list(v.shape)}" if v.op.name == "array" else v.payload for v in self.exprs)
        return f"({', '.join(names)})"


_ZERO = intern(OPS["const"], (), 0.0)


@dataclass(frozen=True, eq=False)
class LoopProgram:
    """A compiled function's plan when its expressions are rolled: the roots themselves (a few
    nodes, whatever the arrays' sizes), read by the loop generator or the interpreter.

    ``returns_value``: the first root is returned as a float; the others (``n_out`` floats, arrays
    raveled) are written to an output array. ``inputs`` and ``params`` are the layouts of ``x``, ``p``.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 4), sg.index("i", 4)
    >>> f = sg.sum(x[i] ** 2, i)
    >>> print(LoopProgram.make([f, *sg.grad(f, [x])], [x], [], True))
    { lambda x[4] = (x[4]).
      return sum(x[i]**2, i=0..3)
      out[0:4] = tensor(2*x[j], j=0..3) }
    """

    roots: tuple[Expr, ...]
    inputs: Layout
    params: Layout
    n_out: int
    returns_value: bool

    @classmethod
    def make(cls, roots: list[Expr], inputs: list[Expr], params: list[Expr], returns_value: bool,
             order: list[Expr] | None = None) -> LoopProgram:
        """The program for ``roots`` (``order``: their topological order, when the caller has it),
        checked: every array or variable it reads is an input or a param."""
        have = set(inputs).union(params)
        order = topo_order(roots) if order is None else order
        missing = sorted(str(n) for n in order if n.op.name in ("var", "array") and n not in have)
        if missing:
            raise ValueError(f"the outputs depend on {', '.join(missing[:5])}, which are not among the inputs "
                             f"{Layout(inputs)!r} or params {Layout(params)!r}")
        for r in roots:
            if r.free:
                raise ValueError(f"compiling: the output {str(r)[:60]} varies over {sorted(map(str, r.free))}: "
                                 "reduce it (sg.sum) or make it an array (sg.tensor)")
        n_out = sum(math.prod(r.shape) for r in roots[returns_value:])
        return cls(tuple(roots), Layout(inputs), Layout(params), n_out, returns_value)

    @functools.cached_property
    def source(self) -> str:
        """The generated Numba module: the loop kernel and its point / batch / total entries."""
        outputs = list(self.roots) if self.returns_value else [_ZERO, *self.roots]
        return source(outputs, self.inputs.exprs, self.params.exprs)

    @property
    def split(self) -> bool:
        """Whether the kernel is long enough to be compiled in pieces (see symgrad.compile.pieces)."""
        return "\nPIECES = " in self.source

    @property
    def key(self) -> str:
        return hashlib.blake2b(self.source.encode(), digest_size=12).hexdigest()

    @functools.cached_property
    def library(self) -> frozenset[str]:
        """The fastmath functions the compiled loops call from the C library (see _library_where_scalar):
        the loop VM calls the same, so both give the same bits."""
        return frozenset(_LIBRARY_NAMES.findall(self.source))

    @property
    def n_ops(self) -> int:
        """The number of arithmetic nodes in the rolled graph (its size, not the arrays')."""
        return sum(1 for n in topo_order(list(self.roots)) if n.op.kind != "rolled" and n.args)

    def __len__(self) -> int:
        return len(topo_order(list(self.roots)))

    def kernels(self, backend: str, roots: Any = None) -> Kernels:
        """The kernels running this program on ``backend`` ("numba" loops, the "vm" loop VM, or the
        "python" interpreter)."""
        return make_kernels("loops", self, backend)

    def to_dot(self) -> str:
        """Graphviz DOT of the rolled expressions the program computes."""
        return to_dot(list(self.roots), "program")

    def __str__(self) -> str:
        sig = f"x[{len(self.inputs)}] = {self.inputs!r}"
        if self.params.exprs:
            sig += f"; p[{len(self.params)}] = {self.params!r}"
        lines, at = [f"{{ lambda {sig}."], 0
        for k, r in enumerate(self.roots):
            if k == 0 and self.returns_value:
                lines.append(f"  return {r}")
                continue
            size = math.prod(r.shape)
            lines.append(f"  out[{at}:{at + size}] = {r}" if r.op.array_valued else f"  out[{at}] = {r}")
            at += size
        return "\n".join(lines) + " }"

    def __repr__(self) -> str:
        return f"<LoopProgram {len(self.roots)} outputs, x[{len(self.inputs)}], p[{len(self.params)}]>"

    def __reduce__(self) -> tuple:
        # The graph travels as a sg.dumps document (checked node by node where it lands), never the
        # generated source or its key: the receiver generates both again, as Program's pickles do.
        from symgrad.compile.program import OPS_ID, PICKLE_VERSION
        from symgrad.expr.serialize import dumps

        roles = (len(self.roots), len(self.inputs.exprs), len(self.params.exprs))
        graph = dumps([*self.roots, *self.inputs.exprs, *self.params.exprs])
        return LoopProgram._unpickled, (PICKLE_VERSION, OPS_ID, graph, roles, self.returns_value)

    def __setstate__(self, state: Any) -> None:
        # Only a forged pickle sets state (ours call _unpickled): one carrying "source" would run it.
        raise ValueError("this pickled symgrad loop program carries its state (generated source?) instead of its "
                         "graph: refused; pickle it again with this symgrad")

    @classmethod
    def _unpickled(cls, version: Any, ops_id: Any, graph: Any, roles: Any, returns_value: Any) -> LoopProgram:
        """A LoopProgram from a pickle: format and op table checked, the graph loaded by sg.loads (a
        FormatError for anything sg.dumps does not write), the program made again from it."""
        from symgrad.compile.program import OPS_ID, PICKLE_VERSION, _names
        from symgrad.expr.serialize import loads

        if version != PICKLE_VERSION or ops_id != OPS_ID:
            raise ValueError(f"this pickled symgrad loop program has format {version!r} and op table {ops_id!r}; "
                             f"this symgrad reads format {PICKLE_VERSION}, op table {OPS_ID}: compile it again")
        exprs = loads(graph)
        if not (isinstance(exprs, list) and isinstance(roles, tuple) and len(roles) == 3
                and all(type(n) is int and n >= 0 for n in roles) and sum(roles) == len(exprs) and roles[0]
                and type(returns_value) is bool):
            raise ValueError("this pickled symgrad loop program is malformed (its roots, inputs and params)")
        a, b = roles[0], roles[0] + roles[1]
        return cls.make(exprs[:a], _names(exprs[a:b], "inputs"), _names(exprs[b:], "params"), returns_value)


# The batch and sum entries around the loop kernel: sizes checked (a longer vector would be read
# silently otherwise), the workspace allocated once per thread's rows.
_JIT = "@numba.njit(nogil=True, error_model='numpy')\n"
_ENTRIES = """

@numba.njit(nogil=True, error_model='numpy')
def batch(X, P, V, OUT, lo, hi):
    if X.shape[1] != {nx} or P.shape[1] != {np} or OUT.shape[1] != {nout}:
        raise ValueError("symgrad: wrong shape")
    work = np.empty(WORK)
    for r in range(lo, hi):
        v = kernel(X[r], P[r if P.shape[0] > 1 else 0], OUT[r], work)
        if V.shape[0]:
            V[r] = v


@numba.njit(nogil=True, error_model='numpy')
def total(x, P, acc, lo, hi):
    if x.shape[0] != {nx} or P.shape[1] != {np}:
        raise ValueError("symgrad: wrong shape")
    work, part = np.empty(WORK), np.empty({nout})
    acc[:] = 0.0
    for r in range(lo, hi):
        acc[0] += kernel(x, P[r], part, work)
        acc[1:] += part
"""


@register("loops", "numba")
def numba_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """Numba loop kernels for ``program`` (the loop VM's past ``$SYMGRAD_MAX_PROGRAMS``)."""
    name = _module_name(program)
    if not cache.has_room(name):
        cache.warn_once("loop programs", f"{cache.max_programs()} programs are compiled with Numba in this "
                        "process (its machine code is never freed; $SYMGRAD_MAX_PROGRAMS): new rolled ones run "
                        "on the loop VM")
        return program.kernels("vm")
    module = cache.load(name, program.source)

    def kernel(variant: str) -> Any:
        if not hasattr(module, "PIECES"):
            if variant == "point" and not isinstance(module.point, Dispatcher):  # its workspace from Python
                cache.typed(module, "kernel", _KERNEL)
                return module.point
            return cache.typed(module, variant, SIGNATURES[variant])
        for piece in _compiled_functions(module):  # a split kernel: plain Python calling its pieces
            cache.typed(module, piece, _PIECE)
        return getattr(module, variant)

    return Kernels("numba", functools.lru_cache(None)(kernel), program.source)


_PIECE = (*(types.float64[::1],) * 5, types.int64[::1])
_KERNEL = (types.float64[::1],) * 4


def numba_on_disk(program: LoopProgram) -> bool:
    """Whether Numba's machine code for ``program`` is in the disk cache (ready in a moment)."""
    name = _module_name(program)
    if not cache.has_room(name) or not cache.indexed(name):  # (not loaded to find it is not there)
        return False
    module = cache.load(name, program.source)
    return all(cache.on_disk(module, f) for f in _compiled_functions(module))


def _compiled_functions(module: Any) -> list[str]:
    if hasattr(module, "PIECES"):
        return [f"piece{k}" for k in range(module.PIECES)]
    return ["point"] if isinstance(module.point, Dispatcher) else ["kernel"]


def _module_name(program: LoopProgram) -> str:
    return f"loops_{program.key}"


@register("loops", "python")
def python_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """The reference interpreter (NumPy, vectorised over each index) behind the kernel interface."""
    order = topo_order(list(program.roots))

    def values(x: np.ndarray, p: np.ndarray) -> list:
        given = {}
        for layout, vector in ((program.inputs, x), (program.params, p)):
            for v, start, size in layout.blocks():
                if v.op.name == "array":
                    given[v.payload[0]] = vector[start:start + size].reshape(v.shape)
                else:
                    given[v.payload] = vector[start]
        got = run(order, given, set(program.roots))
        return [np.ravel(got[r]) for r in program.roots]

    def point(x, p, out):
        if len(x) != len(program.inputs) or len(p) != len(program.params) or len(out) != program.n_out:
            raise ValueError("symgrad: wrong shape")
        got = values(x, p)
        if program.n_out:
            out[:] = np.concatenate(got[program.returns_value:])
        return float(got[0][0]) if program.returns_value else 0.0

    def batch(X, P, V, OUT, lo, hi):
        for r in range(lo, hi):
            v = point(X[r], P[r if len(P) > 1 else 0], OUT[r])
            if len(V):
                V[r] = v

    def total(x, P, acc, lo, hi):
        acc[:], part = 0.0, np.empty(program.n_out)
        for r in range(lo, hi):
            acc[0] += point(x, P[r], part)
            acc[1:] += part

    return Kernels("python", dict(point=point, batch=batch, total=total).__getitem__, program.__str__)
