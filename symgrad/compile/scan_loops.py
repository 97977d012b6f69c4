"""A scan in the loop compiler: its schedule step (a loop over the steps around its step's own
schedule) and that step in each loop backend, the compiled loops' source and the loop VM's rows,
registered in their tables (schedule.OWN_STEPS, loop_source.STEP_SOURCE, loop_vm.STEP_ROWS).
The scan op itself, its derivatives and batching live in expr/scans.py.
"""

from __future__ import annotations

import math

from symgrad.compile import loop_source, loop_vm
from symgrad.compile.loop_emitter import _Region
from symgrad.compile.loop_source import _copied, _Filler, _Scope
from symgrad.compile.loop_vm import COPY, ROWS, WORK, _Lowering
from symgrad.compile.schedule import OWN_STEPS, Schedule, ScheduleError, Step, schedule, window
from symgrad.expr.node import Expr


def _steps(node: Expr) -> list[Step]:
    """The scan's one step, holding the schedule of its step's body."""
    return [Step("scan", (node,), schedule([node.payload[2].body]))]


def _source(filler: _Filler, scan_step: Step, at: _Scope) -> None:
    """A loop over the steps around the step's loops: row 0 of the carries holds the initial one
    (row n reversed), the step reads the row before and writes the next (rows views). A reversed
    scan of which only the last carry is read (``Schedule.last_only``) keeps two rows, row t % 2
    after step t (the last in row 0)."""
    node, inner, top = scan_step.nodes[0], scan_step.inner, at.top
    length, reverse, step = node.payload
    init, rows, consts = node.args[0], node.args[1:1 + len(step.xs)], node.args[1 + len(step.xs):]
    size, emitter, buffers = math.prod(init.shape), filler.emitter, filler.buffers
    kept = 2 if node in at.sched.last_only else length + 1
    start, full = emitter.work, emitter.fresh("s")
    buffers[node] = full
    top.lines.append(f"{full} = {emitter.take(kept * size)}.reshape({(kept, *node.shape[1:])!r})")
    top.lines += _copied(emitter, "work", start + length % kept * size if reverse else start, buffers[init], size)
    for n in inner.order:  # a step equal to an earlier scan's (hash-consed) fills this scan's rows
        if n.op.name != "table":
            buffers.pop(n, None)
    t, body = emitter.fresh("i"), _Region(None, frozenset(), {})
    before, after = (f"{t} + 1", t) if reverse else (t, f"{t} + 1")
    if kept == 2:
        before, after = f"({before}) % 2", f"{after} % 2"
    for placeholder, source in ((step.carry, f"{full}[{before}]"),
                                *((p, _stacked(buffers, a, t)) for p, a in zip(step.xs, rows))):
        buffers[placeholder] = emitter.fresh("b")
        body.lines.append(f"{buffers[placeholder]} = {source}")
    buffers.update(zip(step.consts, (buffers[a] for a in consts)))
    result = inner.outputs[0]
    filler.arrays(inner, body, {result: f"{full}[{after}]"})
    if result.op.name in ("array", "table"):  # planned away (a copy of a row or of the carry)
        body.lines += _copied(emitter, "work", f"{start} + ({after}) * {size}", buffers[result], size)
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


def _stacked(buffers: dict, a: Expr, t: str) -> str:
    """Row ``t`` of the stacked input ``a``: of the array it is rows of, where it is (``window``)."""
    rows = window(a)
    if rows is None:
        return f"{buffers[a]}[{t}]"
    n, c, step = rows
    return f"{buffers[n]}[{c} + {t}]" if step == 1 else f"{buffers[n]}[{c} - {t}]"


def _rows(lowering: _Lowering, scan_step: Step, sched: Schedule, top: _Region, along: list) -> None:
    """A loop over the steps: the carry before and each stacked input's row copied into the
    step's buffers, the step's rows, the carry after copied into its row (rows 1..n of the
    carries, row 0 the initial one; reversed: rows n-1..0, row n the initial one; reversed and
    ``Schedule.last_only``: two rows, row t % 2 after step t, as in the compiled loops)."""
    node, inner = scan_step.nodes[0], scan_step.inner
    length, reverse, step = node.payload
    init, stacks, consts = node.args[0], node.args[1:1 + len(step.xs)], node.args[1 + len(step.xs):]
    size, buffers = math.prod(init.shape), lowering.buffers
    two = node in sched.last_only  # (step s: t = n-1-s reads row (t+1) % 2 = (s + n) % 2, writes (s + n - 1) % 2)
    _, w = lowering.take((2 if two else length + 1) * size)
    buffers[node] = (WORK, w)
    first = w + length % 2 * size if two else w + length * size if reverse else w
    top.lines.append((COPY, buffers[init][1], buffers[init][0], first, WORK, size))
    lowering.emitter.slots += 1
    counter, body = lowering.emitter.slots, _Region(None, frozenset(), {})

    def row(source: tuple, stride: int, destination: tuple, stride_to: int, n: int, phase: int = 0,
            period: int = 0) -> None:
        lowering.ints += [*source, stride, *destination, stride_to, n, counter, phase, period]
        body.lines.append((ROWS, 0, len(lowering.ints) - 10, 0, 0, 0))

    def step_row(base: tuple, n: int) -> tuple:  # (memory, offset of the row of step 0, stride)
        return ((base[0], base[1] + (length - 1) * n), -n) if reverse else (base, n)

    carries = ((WORK, w), size) if two else step_row((WORK, w + size if reverse else w), size)
    rows = [(p, step_row(*_stacked_at(buffers, a, math.prod(p.shape)))) for p, a in zip(step.xs, stacks)]
    for k, (placeholder, (src, stride)) in enumerate([(step.carry, carries), *rows]):
        buffers[placeholder] = lowering.take(math.prod(placeholder.shape))
        row(src, stride, buffers[placeholder], 0, math.prod(placeholder.shape), *((length % 2, 2) if two and k == 0
                                                                                  else ()))
    buffers.update(zip(step.consts, (buffers[a] for a in consts)))
    lowering.arrays(inner, body)
    after, stride = ((WORK, w), size) if two else step_row((WORK, w if reverse else w + size), size)
    row(buffers[inner.outputs[0]], 0, after, stride, size, *(((length - 1) % 2, 2) if two else ()))
    top.lines.append(("loop", counter, length, body.lines))


def _stacked_at(buffers: dict, a: Expr, n: int) -> tuple[tuple, int]:
    """Where row 0 of the stacked input ``a`` (rows of ``n``) is, and the stride to the next row: in the
    array it is rows of (``window``)."""
    rows = window(a)
    if rows is None:
        return buffers[a], n
    memory, offset = buffers[rows[0]]
    return (memory, offset + rows[1] * n), rows[2] * n


OWN_STEPS["scan"] = _steps
loop_source.STEP_SOURCE["scan"] = _source
loop_vm.STEP_ROWS["scan"] = _rows
