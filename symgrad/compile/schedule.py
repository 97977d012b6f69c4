"""The schedule: the steps filling a planned program's arrays, in an order that computes what each
reads first, each array in a buffer (its own, or, for the scatters adding into a gradient's tensor,
that tensor's), and the checker every schedule passes before any backend runs it.

Steps: "fill" (tensors over the same ranges in one loop nest), "zero" (a buffer scatters add into),
"add" (scatters over the same ranges in one nest, adding at their addresses), "dot" (a BLAS
product), "running" (running sums), "sort" (an argsort: the positions sorting each row), "scan" (a
loop over a scan's steps around its step's own schedule, registered in scan_loops.py). The compiled
loops (loop_source.py) and the loop VM (loop_vm.py) translate the same steps, each kind by a row of
its table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from symgrad.compile.plan import REDUCTIONS, loop_body, plan, read_at_row
from symgrad.expr.node import Expr
from symgrad.expr.rolled import affine, costly, tensor, value_range
from symgrad.expr.traverse import scalar_graph, terms, topo_order, total


class ScheduleError(RuntimeError):
    """A schedule that would compute a wrong value (a bug in symgrad's planner), caught before it runs."""


@dataclass(frozen=True, eq=False)
class Step:
    """One step: its kind, the arrays it computes, and a scan's step's own schedule (``inner``)."""

    kind: str
    nodes: tuple[Expr, ...]
    inner: Schedule | None = None


@dataclass(eq=False)
class Schedule:
    """The planned ``outputs``, their topological ``order``, the ``steps`` filling their arrays, ``home``
    (an array written in another's buffer -> that array), ``fused``: tensors of cheap arithmetic
    only running sums read, which the compiled loops compute inside the running sums' loop, and
    ``last_only``: reversed scans of which only the last carry (row 0) is read, whose other rows
    the compiled loops need not keep."""

    outputs: list[Expr]
    order: list[Expr]
    steps: list[Step]
    home: dict[Expr, Expr] = field(default_factory=dict)
    fused: set[Expr] = field(default_factory=set)
    last_only: set[Expr] = field(default_factory=set)

    def owner(self, node: Expr) -> Expr:
        """The array whose buffer holds ``node``."""
        return self.home.get(node, node)


def schedule(outputs: list[Expr]) -> Schedule:
    """The checked schedule of ``outputs`` (rolled expressions), planned for loops (plan.py).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> f = sg.sum(x[i] ** 2, i)
    >>> [(s.kind, len(s.nodes)) for s in schedule([f, *sg.grad(f, [x])]).steps]
    [('fill', 1)]
    """
    outputs, products = plan(outputs)
    order = topo_order(outputs)
    units = _units(order, products, outputs)
    steps, home = [], {}
    for kind, nodes in units:
        if kind in ("tensors", "product"):
            steps.append(Step("fill" if kind == "tensors" else "dot", tuple(nodes)))
        elif kind in OWN_STEPS:
            steps += OWN_STEPS[kind](nodes[0])
        else:  # a tensor whose body adds scatters: the rest of its body first (or zeros), then each adds
            total, rest, scatters = nodes[0], nodes[1], nodes[2:]
            if rest is None:
                steps.append(Step("zero", (total,)))
            else:
                home[rest] = total
                steps.append(Step("fill", (rest,)))
            for nest in _nests(scatters):
                home.update(dict.fromkeys(nest, total))
                steps.append(Step("add", tuple(nest)))
    done = Schedule(outputs, order, steps, home, _fused(order, outputs, units), _last_only(order, outputs))
    verify(done)
    return done


# An array op filled by steps of its own rather than by a tensor's loop nest: its name -> its steps. Each
# backend translates a kind of step by its own table (loop_source.STEP_SOURCE, loop_vm.STEP_ROWS); a
# scan's rows are registered with its backends' in scan_loops.py.
OWN_STEPS: dict[str, Callable[[Expr], list[Step]]] = {
    "scatter": lambda node: [Step("zero", (node,)), Step("add", (node,))],
    "cumsum": lambda node: [Step("running", (node,))],
    "argsort": lambda node: [Step("sort", (node,))],
}


def _reads(step: Step) -> set:
    """The arrays ``step`` reads."""
    return set().union(*(loaded(n) for n in step.nodes)) if step.kind != "zero" else set()


def verify(s: Schedule) -> None:
    """Raise ``ScheduleError`` unless every array is computed once, before anything reads it; no
    buffer is written while the array it holds is still to be read; every buffer scatters add into
    is zeroed (or filled) once before the first adds; every output is complete at the end; and every
    address a step reads or writes is inside its array (OverflowError past 2**53). A scan's step's
    schedule is checked the same way. Linear in the steps' sizes: it runs on every compile.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> s = schedule([sg.sum(sg.tensor(sg.sin(x[i]), i)[i], i)])
    >>> s.steps.reverse()
    >>> verify(Schedule(s.outputs, s.order, s.steps * 2))
    Traceback (most recent call last):
    ...
    symgrad.compile.schedule.ScheduleError: step 1 (fill) computes tensor(sin(x[i]), i=0..2) a second time
    """
    if not s.last_only <= _last_only(s.order, s.outputs):
        raise ScheduleError(f"rows of the scan {_brief(next(iter(s.last_only - _last_only(s.order, s.outputs))))} "
                            "but its last are read, and not kept")
    at_end = set(s.outputs).union(*(_scalar_reads(r) for r in s.outputs if not r.op.array_valued))
    last = {a: k for k, step in enumerate(s.steps) for a in _reads(step)}
    last.update((a, len(s.steps)) for a in at_end)
    pending: dict[Expr, int] = {}
    for step in s.steps:
        if step.kind == "add":
            for n in step.nodes:
                pending[s.owner(n)] = pending.get(s.owner(n), 0) + 1
    holds: dict[Expr, object] = {}  # buffer (its owner) -> the array it holds, or ("zeroed", owner)
    done: set[Expr] = set()
    for k, step in enumerate(s.steps):
        where = f"step {k} ({step.kind})"
        for a in _reads(step):
            if a.op.name not in ("array", "table") and holds.get(s.owner(a)) is not a:
                raise ScheduleError(f"{where} reads {_brief(a)} " + (
                    "after its buffer was overwritten" if a in done else "before it is computed"))
        for n in step.nodes:
            _check_addresses(n, where)
            h, held = s.owner(n), holds.get(s.owner(n))
            if n.shape != h.shape:
                raise ScheduleError(f"{where} writes {_brief(n)} of shape {n.shape} into the buffer of "
                                    f"{_brief(h)}, of shape {h.shape}")
            if step.kind == "add":
                if held != ("zeroed", h) and not (isinstance(held, Expr) and held is not h and s.owner(held) is h):
                    raise ScheduleError(f"{where} adds {_brief(n)} into a buffer that was not zeroed or filled")
                if isinstance(held, Expr) and last.get(held, -1) > k:
                    raise ScheduleError(f"{where} adds {_brief(n)} into the buffer of {_brief(held)}, which "
                                        f"step {last[held]} still reads")
                pending[h] -= 1
                holds[h] = ("zeroed", h)
                if pending[h] == 0:  # the last scatter adding into it: complete
                    holds[h] = h
                    done.add(h)
                continue
            if n in done or held == ("zeroed", h):
                raise ScheduleError(f"{where} " + (f"computes {_brief(n)} a second time" if n in done else
                                                   f"zeroes the buffer of {_brief(h)} twice"))
            if isinstance(held, Expr) and last.get(held, -1) > k:
                raise ScheduleError(f"{where} writes {_brief(n)} into the buffer of {_brief(held)}, which "
                                    f"step {last[held]} still reads")
            holds[h] = ("zeroed", h) if step.kind == "zero" else n
            if step.kind != "zero":
                done.add(n)
        if step.inner is not None:
            verify(step.inner)
    for r in at_end:
        if r.op.array_valued and r.op.name not in ("array", "table") and holds.get(s.owner(r)) is not r:
            raise ScheduleError(f"the output {_brief(r)} (or an array it reads) is not complete when the "
                                "schedule ends")


def _brief(node: Expr) -> str:
    """``node`` printed on one line, cut at 100 characters."""
    text = str(node).replace("\n", "; ")
    return text if len(text) <= 100 else text[:97] + "..."


def _scalar_reads(root: Expr) -> set:
    """The arrays a scalar output reads (computed after the steps, at the top level)."""
    seen, stack, found = {root}, [root], set()
    while stack:
        for a in stack.pop().args:
            if a.op.array_valued:
                found.add(a)
            elif a not in seen:
                seen.add(a)
                stack.append(a)
    return found


def _check_addresses(node: Expr, where: str) -> None:
    """Every load the body of ``node`` reads (but guarded ones, clamped where they run) and every
    address it scatters to lies inside its array, over the whole range of its indices."""
    if node.op.name not in ("tensor", "scatter"):
        return
    sites = [(n.args[0].shape, n.args[1:]) for n in loop_body(node) if n.op.name == "load" and n.payload is None]
    if node.op.name == "scatter":
        sites.append((node.shape, node.args[1:1 + node.payload[1]]))
    for shape, addresses in sites:
        for a, n in zip(addresses, shape):
            lo, hi = value_range(a)
            if lo < 0 or hi >= n:
                raise ScheduleError(f"{where}: the address {_brief(a)} takes values {lo}..{hi}, outside "
                                    f"0..{n - 1}")


def _fused(order: list[Expr], outputs: list[Expr], units: list[tuple[str, list]]) -> set:
    """Tensors of cheap arithmetic that only running sums read (not outputs): computed in the
    running sums' loop instead of filling an array first (the compiled loops; the VM fills it).
    Only tensors filled by a plain nest: one that scatters add into ("accumulate") is its
    buffer's only complete value."""
    uses = _uses(order)
    plain = {n for kind, nodes in units if kind == "tensors" for n in nodes}
    kept = set(outputs)
    return {n.args[0] for n in order if n.op.name == "cumsum" and n.args[0] in plain and uses[n.args[0]] == 1
            and n.args[0] not in kept and not any(costly(m) for m in loop_body(n.args[0]))}


def _uses(order: list[Expr]) -> dict[Expr, int]:
    """How many times each node is an argument in ``order``."""
    uses: dict[Expr, int] = {}
    for node in order:
        for a in node.args:
            uses[a] = uses.get(a, 0) + 1
    return uses


def _units(order: list[Expr], products: set, kept: Sequence[Expr]) -> list[tuple[str, list]]:
    """The loop nests filling the arrays, in an order that computes what each reads first.

    "tensors": tensors over the same ranges, one loop nest filling them all (sharing what their
    bodies share), each placed in the first such nest after those of the arrays it reads;
    "product": a BLAS product; "scatter": a scatter alone; "accumulate": [a tensor, the tensor of
    its body's other terms (or None), the scatters its body adds], which add in place: no
    buffer of their own, and scatters over the same ranges in one loop (a gradient through
    strided or table addresses is then one pass, as written by hand)."""
    uses, present, kept = _uses(order), set(order), set(kept)
    accumulating, hidden = {}, _windows(order, uses, kept)
    for t in order:
        if t.op.name == "tensor" and t not in products:
            summed = terms(t.args[0])
            added = [m for m in summed if m.op.name == "load" and m.args[0].op.name == "scatter"
                     and m.payload is None and len(m.args) == len(t.args)  # (read at all its indices,
                     and all(a is b for a, b in zip(m.args[1:], t.args[1:]))  # each entry: t[:1] of a
                     and m.args[0].shape == t.shape  # scatter of 8 is not the scatter adding into t)
                     and uses[m.args[0]] == uses[m] == 1 and m.args[0] not in kept]
            while True:  # a scatter the other terms read too (abs's partial: where(w == 0, 0, -sign(w)*adj))
                rest = [m for m in summed if all(m is not a for a in added)]  # keeps a buffer of its own
                read = {n.args[0] for n in scalar_graph(total(rest)) if n.op.name == "load"} if rest else set()
                if not any(m.args[0] in read for m in added):
                    break
                added = [m for m in added if m.args[0] not in read]
            rest = tensor(total(rest), *t.args[1:]) if rest and added else None
            if added and rest not in present:  # (else the rest is an array others read: it keeps its buffer)
                accumulating[t] = [rest, *(m.args[0] for m in added)]
                hidden.update(m.args[0] for m in added)
    units: list[tuple[str, list]] = []
    unit_of: dict[Expr, int] = {}
    for node in order:
        if not (node.op.name == "tensor" or node.op.name in OWN_STEPS) or node in hidden:
            continue
        parts = [node, *(p for p in accumulating.get(node, ()) if p is not None)]
        after = max((unit_of.get(a, -1) for p in parts for a in loaded(p)), default=-1)
        alone = node.op.name != "tensor" or node in products or node in accumulating
        home = None if alone else next((k for k in range(after + 1, len(units)) if units[k][0] == "tensors"
                                        and units[k][1][0].shape == node.shape), None)
        if home is not None:
            units[home][1].append(node)
        else:
            kind = ("product" if node in products else "accumulate" if node in accumulating else
                    node.op.name if node.op.name in OWN_STEPS else "tensors")
            units.append((kind, [node, *accumulating.get(node, ())]))
            home = len(units) - 1
        unit_of[node] = home
    return units


def _nests(scatters: list[Expr]) -> list[list[Expr]]:
    """The scatters adding into one tensor in loop nests: over the same ranges, each nest's scatters
    reaching no element in common (disjoint boxes of addresses: the gates of a concatenation's
    adjoint, one loop). Two that may reach one element are in nests of their own: the loop VM runs a
    nest's rows a block of lanes at a time, and added such two in another order than the compiled
    loops (a gradient of two np.rolls, the last bit of 8 entries in 72)."""
    nests: list[tuple[tuple, list[Expr], list[list[tuple[int, int]]]]] = []
    for sc in scatters:
        box = [value_range(a) for a in sc.args[1:1 + sc.payload[1]]]
        for size, nest, boxes in nests:
            if size == ranges(sc) and all(any(hi < lo2 or hi2 < lo for (lo, hi), (lo2, hi2) in zip(box, other))
                                          for other in boxes):
                nest.append(sc)
                boxes.append(box)
                break
        else:
            nests.append((ranges(sc), [sc], [box]))
    return [nest for _, nest, _ in nests]


def ranges(node: Expr) -> tuple:
    """The sizes of the loops filling a tensor or scatter (a reduction: of its index)."""
    k = 0 if node.op.name == "tensor" else node.payload[1] if node.op.name == "scatter" else 0
    return tuple(i.payload[1] for i in node.args[1 + k:])


def slots(outputs: list[Expr]) -> tuple[list, dict, int]:
    """Where the outputs after the first go in ``out``: (output, offset) in order (an output may be
    there twice), each output's first offset, and the size of ``out``."""
    slots, offset = [], 0
    for r in outputs[1:]:
        slots.append((r, offset))
        offset += math.prod(r.shape) if r.op.array_valued else 1
    first: dict[Expr, int] = {}
    for r, start in slots:
        first.setdefault(r, start)
    return slots, first, offset


def riding(riders: list[Expr], nodes: Sequence[Expr]) -> list[Expr]:
    """The riders that join the loop nest filling ``nodes`` (one-dimensional, over their index's
    range; one reading a tensor, the nest filling it), taken off the list."""
    sizes = ranges(nodes[0])
    riding = [r for r in riders if len(sizes) == 1 and r.args[1].payload[1] == sizes[0] and
              ((row := row_read(r)) is None or any(row is n for n in nodes))]
    riders[:] = [r for r in riders if all(r is not q for q in riding)]  # (== on Exprs builds nodes)
    return riding


def riders(order: list[Expr]) -> list[Expr]:
    """Scalar reductions over plain inputs, which may join a 1-D loop over the same range: the
    loop computing the adjoints accumulates the value too, sharing what their bodies share. Also
    a scalar reduction reading a 1-D tensor at its own index (lse's sum of exponentials), which
    joins the loop filling the tensor, reading each element as it is stored."""
    in_arrays = {m for a in order if a.op.name in ("tensor", "scatter") for m in loop_body(a)}
    scalar = [n for n in order if n.op.name in REDUCTIONS and not n.free]
    return [n for n in scalar if n not in in_arrays and not any(
        m.op.name in REDUCTIONS or m.op.name == "load" and m.args[0].op.name not in ("array", "table")
        for m in loop_body(n))] + [n for n in scalar if row_read(n) is not None]


def row_read(n: Expr) -> Expr | None:
    """The 1-D tensor ``t`` that the reduction ``n`` over ``i`` reads as ``t[i]``, reading otherwise
    plain inputs only (no other reduction: one riding the same loop would be incomplete), or None."""
    i, body = n.args[1], loop_body(n)
    read = {m.args[0] for m in body if m.op.name == "load" and m.args[0].op.name not in ("array", "table")}
    if len(read) != 1 or any(m.op.name in REDUCTIONS for m in body):
        return None
    t = read.pop()
    if t.op.name != "tensor" or t.shape != (i.payload[1],) or not all(
            len(m.args) == 2 and m.args[1] is i for m in body if m.op.name == "load" and m.args[0] is t):
        return None
    return t


def loaded(node: Expr) -> set:
    """The arrays a tensor's or scatter's body reads (not through other arrays: those have their own
    loops); the arrays another array op (running sums, a scan) reads whole, a scan's stacked rows of
    another array (``window``) that array."""
    if node.op.name == "scan":
        return {(window(a) or (a,))[0] for a in node.args}
    if node.op.name not in ("tensor", "scatter"):
        return set(node.args)
    return {n.args[0] for n in loop_body(node) if n.op.name == "load"}


def window(a: Expr) -> tuple[Expr, int, int] | None:
    """``(N, c, s)`` where the tensor ``a`` is the rows ``c, c + s, ...`` of the array ``N`` as they are
    (``s`` 1 or -1: a scan's carries before or after each step, which its reverse scan stacks; a
    stack's rows reversed, ``plan._last_carries``), else None: a scan stacking ``a`` reads those rows
    where they are (no copy; 16 MB for GradBench's ODE gradient)."""
    if a.op.name != "tensor" or a.args[0].op.name != "load" or a.args[0].payload is not None:
        return None
    (n, first, *rest), at = a.args[0].args, a.args[1:]
    if len(rest) != len(at) - 1 or n.shape[1:] != a.shape[1:] or n.op.name == "table" or any(
            r is not i for r, i in zip(rest, at[1:])):
        return None
    form = affine(first)
    if form is None or len(form[0]) != 1 or form[0].get(at[0]) not in (1, -1):
        return None
    c, step = form[1], form[0][at[0]]
    return (n, c, step) if 0 <= min(c, c + step * (a.shape[0] - 1)) and max(c, c + step * (a.shape[0] - 1)) < \
        n.shape[0] else None


def _windows(order: list[Expr], uses: dict, kept: set) -> set:
    """The ``window`` tensors only scans stack: not copied into buffers of their own."""
    stacked: dict[Expr, int] = {}
    for n in order:
        if n.op.name == "scan":
            for a in n.args[1:1 + len(n.payload[2].xs)]:
                stacked[a] = stacked.get(a, 0) + 1
    return {a for a, k in stacked.items() if k == uses[a] and a not in kept and window(a) is not None}


def _last_only(order: list[Expr], outputs: list[Expr]) -> set:
    """The reversed scans (not outputs) read by loads of row 0 alone: their last carry."""
    kept = set(outputs)
    return read_at_row(order, {n: 0 for n in order if n.op.name == "scan" and n.payload[1] and n not in kept})
