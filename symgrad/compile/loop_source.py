"""Rolled expressions -> Numba loops: the source of a ``LoopProgram``'s module (its kernel and
the point / batch / total entries around it).

One fused loop nest per materialised array (a ``tensor`` or ``scatter``) and for the scalar
outputs; a reduction is an inner loop with an accumulator. Each value is computed in the
outermost loop where every index it varies over is bound, so loop-invariant work is hoisted;
index arithmetic stays in integers. The kernel reads its inputs from flat vectors ``x`` and
``p`` (each input array raveled, scalars one entry each, in order) and writes its other
outputs, raveled, into ``out``. Compile time does not depend on the arrays' sizes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from symgrad.compile import fastmath, kernels, pieces, special
from symgrad.compile.layout import Layout
from symgrad.compile.loop_emitter import _COMBINE, _START, SLOTS, _blocked, _Emitter, _Region, folded, interleaved
from symgrad.compile.loop_ranges import _partition, _within
from symgrad.compile.plan import REDUCTIONS, read_as_matrix
from symgrad.compile.schedule import Schedule, Step, riders, riding, schedule, slots
from symgrad.expr.build import _is
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.rolled import index, substitute_indices


@dataclass(frozen=True)
class KernelParts:
    """A loop kernel before it is a module: the module-level lines (constant tables), the body's lines
    (Python over ``x``, ``p``, ``out``, ``work``), the floats of workspace, the names holding integers,
    and the sizes of ``x``, ``p`` and ``out``. The Numba module (``source``) and the C translation
    (c_loops.py) are both made from them."""

    head: tuple[str, ...]
    body: tuple[str, ...]
    work: int
    integers: frozenset[str]
    nx: int
    n_p: int
    n_out: int


@paused_gc()
def parts(outputs: list[Expr], inputs: list[Expr], params: list[Expr] = ()) -> KernelParts:
    """The parts of the loop kernel returning ``outputs[0]`` and writing the others (see ``source``).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> parts([sg.sum(x[i] ** 2, i)], [x]).body[0]
    'b1 = x[0:3].reshape((3,))'
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
        elif filler.at_out.get(r) != start:  # an input as it is (a linear function's gradient), an array
            # in a buffer of its own (a scan's carries) or the same array again: a copy
            top.lines += _copied(emitter, "out", start, buffers[r], math.prod(r.shape))
    ret = emitter.value(outputs[0], top) if not outputs[0].op.array_valued else "0.0"
    body = _library_where_scalar(lines + top.lines + [f"return {ret}"])
    return KernelParts(tuple(head), tuple(body), emitter.work, frozenset(emitter.integer_names),
                       len(Layout(inputs)), len(Layout(params)), offset)


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
    return module(parts(outputs, inputs, params))


def module(kernel: KernelParts) -> str:
    """The Numba module of a loop kernel's parts."""
    body, nx, np_, offset = list(kernel.body), kernel.nx, kernel.n_p, kernel.n_out
    sizes = f"x.shape[0] != {nx} or p.shape[0] != {np_} or out.shape[0] != {offset}"
    checks = f"    if {sizes}:\n        raise ValueError(\"symgrad: wrong shape\")\n"
    header = f"import math\n\nimport numba\nimport numpy as np\n{fastmath.IMPORT}\n{special.IMPORT}\n\n"
    entries = _ENTRIES.format(nx=nx, np=np_, nout=offset)
    text = (header + "".join(h + "\n" for h in kernel.head) +
            f"WORK = {kernel.work}  # floats of workspace its temporary arrays take\n")
    split = len(body) > pieces.SPLIT_LINES
    if split:
        text += _split_kernel(body, set(kernel.integers))
    else:
        text += f"\n\n{_JIT}def kernel(x, p, out, work):\n{_indented(body)}\n"
    if split or kernel.work >= kernels.OWN_WORK:  # a workspace from Python (see kernels.take)
        return text + _OWN_POINT.format(checks=checks) + (entries.replace(_JIT, "") if split else entries)
    point = f"\n\n{_JIT}def point(x, p, out):\n{checks}    work = np.empty(WORK)\n{_indented(body)}\n"
    return text + point + entries


def _indented(lines: list[str]) -> str:
    return "\n".join("    " + line for line in lines)


def _split_kernel(body: list[str], integers: set[str]) -> str:
    """The kernel as Numba pieces (see symgrad.compile.pieces) that a plain Python function calls in turn."""
    cut = pieces.split(body, integers)
    defs = "".join(f"\n\n{_JIT}def piece{k}(x, p, out, work, sc, si):\n{_indented(part)}\n"
                   for k, part in enumerate(cut.pieces))
    spills = f"    sc, si = np.zeros({cut.floats}), np.zeros({cut.ints}, dtype=np.int64)\n"
    kernel = f"def kernel(x, p, out, work):\n{spills}{_indented(cut.driver)}\n"
    return defs + f"\n\nPIECES = {len(cut.pieces)}\n\n\n{kernel}"


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
        self.at_out: dict[Expr, int] = {}  # an array computed in its slice of out -> where that starts

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
                if start is not None:
                    self.at_out[owner] = start
                where = f"{view}.reshape({owner.shape!r})"
            top.lines.append(f"{self.buffers[owner]} = {where}")
        self.buffers[node] = self.buffers[owner]

    def arrays(self, sched: Schedule, top: _Region, homes: dict | None = None) -> None:
        """The loops of the steps of ``sched``, filling its arrays."""
        buffers, homes = self.buffers, homes or {}
        for t in (n for n in sched.order if n.op.name == "table" and n not in buffers):
            buffers[t] = f"TABLE{len(self.head)}"
            self.head.append(f"{buffers[t]} = np.array({list(t.payload[1])}, dtype=np.int64).reshape("
                             f"{tuple(t.payload[0])!r})")
        ride = riders(sched.order)
        for step in sched.steps:
            STEP_SOURCE[step.kind](self, step, _Scope(sched, top, homes, ride))

    def placed(self, step: Step, at: _Scope) -> list[Expr]:
        """The arrays ``step`` computes, each given its buffer, but those the running sums' loop
        computes itself (schedule.fused)."""
        nodes = [n for n in step.nodes if n not in at.sched.fused]
        for node in nodes:
            self.place(node, at.sched, at.top, at.homes)
        return nodes


@dataclass(frozen=True)
class _Scope:
    """Where a step's loops go: its schedule, the region of its lines, the rows of a scan's
    carries (``homes``) and the scalar reductions still to join a loop (``ride``)."""

    sched: Schedule
    top: _Region
    homes: dict
    ride: list


def _nest_source(filler: _Filler, step: Step, at: _Scope) -> None:
    """A fill's or an add's loop nest, with the reductions that ride along."""
    nodes = filler.placed(step, at)
    if nodes:
        _materialise(nodes + riding(at.ride, nodes), filler.buffers, filler.emitter, at.top)


def _zero_source(filler: _Filler, step: Step, at: _Scope) -> None:
    at.top.lines += [f"{filler.buffers[n]}[...] = 0.0" for n in filler.placed(step, at)]


def _dot_source(filler: _Filler, step: Step, at: _Scope) -> None:
    at.top.lines += _dot(filler.placed(step, at)[0], filler.buffers, filler.emitter)


def _running_source(filler: _Filler, step: Step, at: _Scope) -> None:
    nodes = filler.placed(step, at)
    _running(nodes[0], filler.buffers, filler.emitter, at.top, at.sched.fused)


def _sort_source(filler: _Filler, step: Step, at: _Scope) -> None:
    """An argsort: each row along its axis copied out, sorted by Numba's stable sort (NumPy's order,
    nan last), its positions stored."""
    node = filler.placed(step, at)[0]
    axis, shape, fresh = node.payload, node.shape, filler.emitter.fresh
    names, row, order, k = [fresh("i") for _ in shape], fresh("r"), fresh("o"), fresh("i")
    names[axis] = k
    here = ", ".join(names)
    outer = [(name, n) for d, (name, n) in enumerate(zip(names, shape)) if d != axis]
    pad = "    " * len(outer)
    at.top.lines.append(f"{row} = np.empty({shape[axis]})")
    at.top.lines += ["    " * d + f"for {name} in range({n}):" for d, (name, n) in enumerate(outer)]
    at.top.lines += [pad + f"for {k} in range({shape[axis]}):",
                     pad + f"    {row}[{k}] = {filler.buffers[node.args[0]]}[{here}]",
                     pad + f"{order} = np.argsort({row}, kind=\"mergesort\")",
                     pad + f"for {k} in range({shape[axis]}):",
                     pad + f"    {filler.buffers[node]}[{here}] = {order}[{k}]"]


# A step's kind -> the lines computing it (the scan's row: scan_loops.py).
STEP_SOURCE: dict[str, Callable[[_Filler, Step, _Scope], None]] = {
    "fill": _nest_source, "add": _nest_source, "zero": _zero_source, "dot": _dot_source,
    "running": _running_source, "sort": _sort_source}


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
        own, shape = read_as_matrix(load)
        name = buffers[load.args[0]] + (at if len(shape) == len(load.args[0].shape) else f".reshape({shape!r})")
        own = own[batch is not None:]
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
    first = group[0]  # (its loops: also where its body is an adjoint settled to 0 and others ride on them)
    group = [n for n in group if n.op.name != "scatter" or not _is(n.args[0], 0.0)]
    if not group:
        return
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
            if inner.lines:
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
        if node.op.name == "scatter" and _is(body, 0.0):
            continue  # (a range in which its comparisons settle it to 0: a concatenation's other parts)
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
