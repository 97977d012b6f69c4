"""``sg.scan``: a loop carrying a state from step to step (``jax.lax.scan``), one node for any length.

The step function is traced once, on placeholders: the carry (every leaf of the carry's pytree
packed into one vector), one row of each stacked input, and every outer array the step reads
(closure conversion, as a jaxpr's constants). The node ``scan(init, stacks..., consts...)`` is
the array of every carry (the initial one in row 0, or last if reversed, then the one after each
step); the step's outputs ``ys`` are not in the loop:
each is a function of (carry before the step, row t), so all of them are one ordinary rolled
array over ``t`` (vmap's rewrite, ``batching.batch``), computed after the loop at array speed.

Derivatives follow the same split. Reverse mode (``vjp``) is a scan running the other way whose
carry is each carry's whole adjoint; the adjoints of the rows and of the outer arrays are then
one reverse sweep of every step at once (the step batched over ``t``), which sums over the steps
as it goes. Forward mode (``jvp``) is a scan carrying the tangent. Both are scans of the same
kind, so derivatives of derivatives (hvp: forward over reverse) need nothing more.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import (
    batching,
    diff,
    gathers,
    ndarrays,
    ops,
    reductions,
    reshaping,
    rolled,
    serialize,
    sparsity,
)
from symgrad.expr.build import apply, const
from symgrad.expr.node import Expr, Name, TracingError, intern
from symgrad.expr.traverse import substitute, topo_order

_raw = itertools.count()  # placeholders while a step is built (renamed when it is closed)


class Step:
    """A scan's step: ``body``, the carry after the step, a closed function of the placeholders
    ``carry`` (the carry before), ``xs`` (a row of each stacked input) and ``consts`` (the arrays
    read whole). Compared by identity of its parts (hash-consed like a node's arguments)."""

    __slots__ = ("body", "carry", "xs", "consts")

    def __init__(self, body: Expr, carry: Expr, xs: tuple, consts: tuple) -> None:
        self.body, self.carry, self.xs, self.consts = body, carry, xs, consts

    def parts(self) -> tuple:
        return (self.body, self.carry, *self.xs, *self.consts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Step) and len(other.xs) == len(self.xs) and len(other.parts()) == len(
            self.parts()) and all(a is b for a, b in zip(self.parts(), other.parts()))

    def __hash__(self) -> int:
        return hash(tuple(p.shash for p in self.parts()))

    def __repr__(self) -> str:  # a node's payload hash reads it: short, and the same in every process
        return f"step#{self.body.shash:016x}:{len(self.xs)}:{len(self.consts)}"

    def __str__(self) -> str:
        text = str(self.body)
        return f"{self.carry} -> {text if len(text) <= 200 else text[:197] + '...'}"


def reserved(name: str, shape: tuple) -> Expr:
    """The placeholder array ``name`` of ``shape`` (a role: ``scan#c``, ``scan#x0``, ``scan#k0``; or
    ``scan#7`` while a step is built)."""
    return intern(ops.array, (), (Name(name), tuple(int(d) for d in shape)))


def is_placeholder(node: Expr) -> bool:
    return node.op.name == "array" and type(node.payload[0]) is Name


def placeholder(shape: tuple) -> Expr:
    """A new placeholder array for a step being built."""
    return reserved(f"scan#{next(_raw)}", shape)


def make(body: Expr, carry: Expr, init: Expr, stacked: list, bound: list, reverse: bool = False,
         length: int | None = None) -> Expr:
    """The scan node of a step whose carry after is ``body``, a function of the placeholders
    ``carry`` (starting as ``init``), ``stacked`` ((placeholder, array whose row t it is at step t))
    and ``bound`` ((placeholder, array it is)); anything else the body reads is bound too. With
    nothing stacked, ``length`` counts the steps.

    >>> c, x = placeholder((2,)), placeholder((2,))
    >>> R = make(c * x, c, rolled.array("c0", 2), [(x, rolled.array("X", (5, 2)))], [])
    >>> R.shape  # every carry: the initial one, then one a step
    (6, 2)
    """
    length = stacked[0][1].shape[0] if stacked and stacked[0][1].shape else length
    for ph, arr in stacked:
        if arr.shape != (length, *ph.shape):
            raise ValueError(f"scan: the stacked inputs have shapes {[a.shape for _, a in stacked]}: each must be "
                             f"(steps, ...) with the same number of steps")
    if init.shape != carry.shape or body.shape != carry.shape or not body.op.array_valued:
        raise ValueError(f"scan: the carry has shape {carry.shape}, the initial one {init.shape}, the one after a "
                         f"step {body.shape}")
    rows = {ph: _same_row(arr) for ph, arr in stacked}
    if any(r is not None for r in rows.values()):
        body = substitute(body, {ph: r for ph, r in rows.items() if r is not None})
        stacked = [(ph, arr) for ph, arr in stacked if rows[ph] is None]
    return _node(body, carry, init, stacked, bound, length, reverse)


def _same_row(arr: Expr) -> Expr | None:
    """The row of ``arr`` where every row is it (a broadcast over the steps, as ``np.cumprod`` of a
    ``full`` array stacks), else None: the step reads it whole, and no array of a copy per step is
    stored (at least once the step's rows are arrays: a placeholder is never a scalar)."""
    if arr.op.name != "tensor" or len(arr.args) < 3 or arr.args[1] in arr.args[0].free:
        return None
    return rolled.tensor(arr.args[0], *arr.args[2:])


def _node(body: Expr, carry: Expr, init: Expr, stacked: list, bound: list, length: int, reverse: bool) -> Expr:
    """Closure conversion, then every placeholder renamed by its role (``scan#c``, ``scan#x0``, ...,
    ``scan#k0``, ...): a step is the same node wherever it is built."""
    if body.op.name in ("array", "table"):  # the step computes its carry: a copy of an array read
        body = _copy(body)
    names = {carry: reserved("scan#c", carry.shape)}
    names.update((p, reserved(f"scan#x{k}", p.shape)) for k, (p, _) in enumerate(stacked))
    names.update((p, reserved(f"scan#k{k}", p.shape)) for k, (p, _) in enumerate(bound))
    consts = [names[p] for p, _ in bound]
    args = [init, *(a for _, a in stacked), *(a for _, a in bound)]
    for a in _outer(body, [carry, *(p for p, _ in stacked), *(p for p, _ in bound)]):
        k = len(consts)
        if a.op.array_valued:
            consts.append(reserved(f"scan#k{k}", a.shape))
            names[a] = consts[-1]
            args.append(a)
        else:  # a scalar: a one-element array, read at 0
            consts.append(reserved(f"scan#k{k}", (1,)))
            names[a] = apply(ops.load, (consts[-1], const(0.0)))
            args.append(rolled.tensor(a, rolled.index("scan#one", 1)))
    body = substitute(body, names)
    # (after closure conversion: another scan's result the step reads is a const, not a scan inside it)
    inner = {n.op.name for n in topo_order([body])}
    if "scan" in inner:
        raise TracingError("sg.scan inside the step of another sg.scan has no rolled form yet: write the inner "
                           "loop with NumPy (or a Python loop)")
    if "custom" in inner:  # (the node's rule would live in a payload no derivative reads)
        raise TracingError("a custom_jvp / custom_vjp function inside the step of an sg.scan has no rolled "
                           "form yet")
    step = Step(body, names[carry], tuple(names[p] for p, _ in stacked), tuple(consts))
    return intern(ops.scan, tuple(args), (length, bool(reverse), step))


def _outer(body: Expr, placeholders: list) -> list[Expr]:
    """What ``body`` reads from outside the step: arrays and variables, or what it computes from
    them alone (the largest such parts that do not vary over an index the body binds)."""
    order = topo_order([body])
    marks = set(placeholders)
    inner = set(marks)  # depends on a placeholder
    leafy = set()  # reads an array or a variable
    for node in order:
        if node in inner or any(a in inner for a in node.args):
            inner.add(node)
        if node.op.name in ("var", "array") or any(a in leafy for a in node.args):
            leafy.add(node)
    found: dict[Expr, None] = {}
    stack, seen = [body], {body}
    while stack:
        node = stack.pop()
        for a in node.args:
            if a in seen or a not in leafy or a in marks:
                continue
            seen.add(a)
            if a not in inner and (a.op.array_valued or not a.free):
                found[a] = None
            else:  # depends on the carry, or varies over a bound index: what it reads may be outer
                stack.append(a)
    return list(found)


def _copy(e: Expr) -> Expr:
    """The array ``e`` as a tensor (a step's carry must be computed by the step)."""
    J = ndarrays.fresh(e.shape)
    return rolled.tensor(apply(ops.load, (e, *J)), *J)


def carries(R: Expr, reverse: bool, after: bool) -> Expr:
    """Of a scan's carries (the initial one in row 0, in the last row if ``reverse``), those after
    each step (``after``) or before it, in the steps' order: a slice, no guard."""
    return R[1:] if after != reverse else R[:-1]


def _seeded_at(adjoint: Expr, row: int) -> bool:
    """Whether the carries' ``adjoint`` is zero but in ``row``: scatters of the loss's reads of that carry
    alone, summed element by element (GradBench's ODE: the gradient of y[-1])."""
    stack: list[tuple[Expr, tuple | None]] = [(adjoint, None)]
    while stack:
        node, at = stack.pop()
        name = node.op.name
        if name == "scatter" and rolled.value_range(node.args[1]) == (row, row):
            continue
        if name == "tensor" and at is None:
            stack.append((node.args[0], node.args[1:]))
        elif name == "add" and at is not None:
            stack += [(a, at) for a in node.args]
        elif name == "load" and at is not None and node.payload is None and len(node.args) == len(at) + 1 and all(
                a is i for a, i in zip(node.args[1:], at)):
            stack.append((node.args[0], None))
        else:
            return False
    return True


def _parts(node: Expr) -> tuple:
    """A scan node's (length, reverse, step, init, stacked inputs, arrays read whole)."""
    length, reverse, step = node.payload
    k = 1 + len(step.xs)
    return length, reverse, step, node.args[0], node.args[1:k], node.args[k:]


def _bound(e: Expr, step: Step, consts: tuple, values: Expr, more: dict) -> Expr:
    """``e``, a function of the step's placeholders, reading ``values`` (the stored carries after
    the step) where it computes the step's body again, with the placeholders of the arrays read
    whole replaced by them and those of ``more`` as it says. One substitution: a second rebuild
    would fold a read of the body back into its formula, the step's own placeholders and all."""
    return substitute(_reading(e, step.body, values),
                      {**dict(zip(step.consts, consts)), step.body: values, **more})


def vjp(node: Expr, adjoint: Expr, wanted: list[bool], grad: Callable, outer: tuple = ()) -> list[Expr | None]:
    """The adjoints of the scan ``node``'s arguments (those ``wanted``; None for others) given
    ``adjoint``, the array of its carries' adjoints (rows as the node's). A scan the other way
    carries G, each carry's whole adjoint: G[r] = adjoint[r] + J^T G[r+1] (J: the step from carry r
    to carry r+1), starting from the adjoint of the last carry; the initial carry's is G's last.
    Rows' and outer arrays' adjoints read the adjoint of each step's result (G but its first row):
    rolled arrays over the steps, the outer ones summed over them. ``grad``: diff.grad (reverse
    mode of the step's graph; passed in, as diff is what calls this). ``outer``: the indices of a
    Jacobian's rows, leading axes of ``adjoint`` and of the adjoints returned (vmap's rewrite of the
    adjoints of one row, an index at a time)."""
    if outer:
        one = placeholder(node.shape)
        bars = vjp(node, one, wanted, grad)
        for depth in range(len(outer) - 1, -1, -1):
            whole = adjoint if depth == 0 else placeholder(adjoint.shape[depth:])
            o = rolled.fresh_index(outer[depth])
            bars = [None if e is None else batching.place(*batching.batch([e], {one: (whole, 0)}, o)[0], 0,
                                                          o.payload[1]) for e in bars]
            one = whole
        return bars
    length, reverse, step, init, stacks, consts = _parts(node)
    # A row or an array the step never reads has no adjoint (not zeros, which a nan partial would spoil).
    read = set(topo_order([step.body]))
    wanted = [wanted[0], *(w and p in read for w, p in zip(wanted[1:], (*step.xs, *step.consts)))]
    carried = _carried(step, wanted[1 + len(step.xs):])
    g = placeholder(step.carry.shape)
    back = grad(reductions.reduce("sum", g * step.body), [step.carry, *carried])
    before, after = carries(node, reverse, after=False), carries(node, reverse, after=True)
    a = placeholder(step.carry.shape)
    done = placeholder(step.body.shape)
    # A loss reading the last carry only seeds G's start: no row of zeros is read (nor stored) at each step.
    seeded = _seeded_at(adjoint, 0 if reverse else length)
    rows = [*([] if seeded else [(a, carries(adjoint, reverse, after=False))]), (step.carry, before),
            (done, after), *zip(step.xs, stacks)]
    shapes = [step.carry.shape, *(k.shape for k in carried)]
    kc = placeholder((sum(math.prod(s) for s in shapes),))
    parts = _unpacked(kc, shapes)  # (the carry's adjoint, then each carried const's running sum)
    back = [_bound(e, step, consts, done, {g: parts[0]}) for e in back]
    new = _flat([back[0] if seeded else a + back[0], *(acc + e for acc, e in zip(parts[1:], back[1:]))])
    start = _flat([adjoint[0 if reverse else length], *(rolled.zeros_like(k) for k in carried)])
    G = make(new, kc, start, rows, [], not reverse)
    last = _unpacked(G[length if reverse else 0], shapes)
    out: list[Expr | None] = [last[0] if wanted[0] else None]
    summed = dict(zip(carried, last[1:]))
    swept = [w and p not in summed for w, p in zip(wanted[1:], (*step.xs, *step.consts))]
    if not any(swept):
        return out + [summed.get(p) for p in (*step.xs, *step.consts)]
    # The rest: one reverse sweep of every step at once (the step batched over t, weighted by the
    # adjoint of each step's result), which sums over the steps as it goes.
    t = rolled.fresh_index(rolled.index("t", length))
    whole = [placeholder((length, *p.shape)) for p in step.xs]
    mapped = {step.carry: (before, 0), **{p: (w, 0) for p, w in zip(step.xs, whole)}}
    steps = batching.place(*batching.batch([step.body], mapped, t)[0], 0, length)
    size = math.prod(step.carry.shape)
    adjoints = carries(G, reverse, after=True)[:, :size].reshape((length, *step.carry.shape))
    total = reductions.reduce("sum", adjoints * steps)
    wrt = [p for p, want in zip((*whole, *step.consts), swept) if want]
    found = iter(grad(total, wrt))
    inputs = {**dict(zip(whole, stacks)), **dict(zip(step.consts, consts))}
    for want, p in zip(swept, (*step.xs, *step.consts)):
        out.append(substitute(_reading(next(found), steps, after), inputs) if want else summed.get(p))
    return out


def _carried(step: Step, wanted: list[bool]) -> list[Expr]:
    """The arrays read whole whose adjoints the reverse scan sums in its carry, step by step (as
    JAX's transpose of a scan): those wanted, while they add at most ``CARRIED`` times the carry's
    size to it (every carry is stored; a large matrix read by each step is summed by the sweep, one
    product over the steps), and the carry is one concatenation of at most ``reshaping.MAX_PIECES`` parts
    (a step reading 16 scalars of an array traced element by element raised, from that limit)."""
    room, out = CARRIED * max(math.prod(step.carry.shape), 64), []
    for k, want in zip(step.consts, wanted):
        if want and math.prod(k.shape) <= room and len(out) < reshaping.MAX_PIECES - 1:
            out.append(k)
            room -= math.prod(k.shape)
    return out


CARRIED = 4


def _unpacked(flat: Expr, shapes: list[tuple]) -> list[Expr]:
    """The arrays of ``shapes`` packed one after another in the vector ``flat``."""
    cuts = np.cumsum([0, *(math.prod(s) for s in shapes)]).tolist()
    return [flat[a:b].reshape(s) for a, b, s in zip(cuts, cuts[1:], shapes)]


def _flat(arrays: list[Expr]) -> Expr:
    """``arrays`` raveled into one vector."""
    flat = [e.reshape(-1) for e in arrays]
    return flat[0] if len(flat) == 1 else reshaping.concatenate(flat)


def _reading(e: Expr, body: Expr, values: Expr) -> Expr:
    """``e`` reading the array ``values`` where it computes ``body``'s element again: a derivative
    uses the forward values (``1 - tanh(u)**2`` reads ``tanh(u)``, the step's result), which the
    scan stores."""
    if body.op.name != "tensor" or not body.args[0].args or body.args[0].op.name == "load":
        return e
    # (an index of one value is read at 0: the element may also be used where that index is not bound,
    # a scalar carry's tanh(c[0]) in a derivative summed over it; vmap of the grad of such a scan raised)
    at = tuple(const(0.0) if i.payload[1] == 1 else i for i in body.args[1:])
    return substitute(e, {body.args[0]: apply(ops.load, (values, *at)), body: body})


def jvp(node: Expr, tangents: list[Expr | None], forward: Callable) -> Expr:
    """The tangent of the scan ``node`` (the array of its carries' tangents) from its arguments'
    (None: no tangent): a scan carrying the tangent, reading the carries before each step.
    ``forward``: diff.jvp (forward mode of the step's graph)."""
    length, reverse, step, init, stacks, consts = _parts(node)
    wrt, dots, stacked, bound = [step.carry], [placeholder(step.carry.shape)], [], {}
    for k, (p, dot) in enumerate(zip((*step.xs, *step.consts), tangents[1:])):
        if dot is not None:
            wrt.append(p)
            dots.append(placeholder(p.shape))
            if k < len(step.xs):
                stacked.append((dots[-1], dot))
            else:
                bound[dots[-1]] = dot
    done = placeholder(step.body.shape)
    body = _bound(forward(step.body, wrt, dots), step, consts, done, bound)
    start = tangents[0] if tangents[0] is not None else rolled.zeros_like(init)
    rows = [(step.carry, carries(node, reverse, after=False)), (done, carries(node, reverse, after=True)),
            *zip(step.xs, stacks), *stacked]
    return make(body, dots[0], start, rows, [], reverse)


def _batched(node: Expr, args: tuple, lifted: list, b: Expr) -> tuple[Expr, int] | None:
    """vmap of a scan (``batching.RULES``): the same loop over a batch of carries, the batch a
    leading axis of the carry, of each row that varies over it and of each array read whole that
    does; the carries stacked (steps, batch, ...). None where nothing it reads varies."""
    if all(v is None for v in lifted):
        return None
    length, reverse, step = node.payload
    n = b.payload[1]
    carry = placeholder((n, *step.carry.shape))
    mapped, stacked, bound = {step.carry: (carry, 0)}, [], []
    for j, (p, arg, v) in enumerate(zip((*step.xs, *step.consts), args[1:], lifted[1:])):
        row = j < len(step.xs)  # a stacked input: (steps, batch, ...); one read whole: (batch, ...)
        if v is not None:
            p_batch = placeholder((n, *p.shape))
            mapped[p] = (p_batch, 0)
            p, arg = p_batch, batching.place(*v, 1 if row else 0, n)
        (stacked if row else bound).append((p, arg))
    body, axis = batching.batch([step.body], mapped, rolled.fresh_index(b))[0]
    init = batching.place(*(lifted[0] or (args[0], None)), 0, n)
    return make(batching.place(body, axis, 0, n), carry, init, stacked, bound, reverse, length), 1


batching.RULES["scan"] = _batched


def _adjoint(node: Expr, sites: list, adj: dict, outer: tuple, tidied: dict, all_sites: dict,
             active: set) -> None:
    """Reverse mode of a scan (``diff.ADJOINTS``): its arguments get what a scan the other way gives (``vjp``),
    read at every element (over a Jacobian's rows too: those are leading axes)."""
    at = rolled.fresh_indices(node)
    back = rolled.tensor(gathers.gather(node, sites, at, outer, tidied), *outer, *at)
    for arg, bar in zip(node.args, vjp(node, back, [a in active for a in node.args], diff.grad, outer)):
        if bar is not None:
            every = rolled.fresh_indices(arg)
            site = (apply(ops.load, (arg, *every)), apply(ops.load, (bar, *outer, *every)))
            all_sites.setdefault(arg, []).append(site)


def _tangent(node: Expr, tangent: dict) -> None:
    """Forward mode of a scan (``diff.TANGENTS``): a scan carrying the tangent (``jvp``)."""
    tangents = [tangent.get(a) for a in node.args]
    if any(t is not None for t in tangents):
        tangent[node] = jvp(node, tangents, diff.jvp)


def _pattern(node: Expr, deps: dict, n: int) -> Any:
    """The dependencies of a scan's elements (``sparsity.PATTERNS``): every carry on everything the scan reads
    (no finer pattern yet)."""
    import scipy.sparse  # (here: importing SciPy's sparse costs 70 ms at symgrad's import)

    read = sparsity.as_bool(sum((scipy.sparse.csr_matrix(deps[a].sum(axis=0) > 0) for a in node.args),
                                scipy.sparse.csr_matrix((1, n), dtype=bool)))
    every = scipy.sparse.csr_matrix(np.ones((int(np.prod(node.shape)), 1), dtype=bool))
    return sparsity.as_bool(every @ read)


def _document(payload: tuple) -> list:
    """A scan's payload as saved (``serialize.PAYLOADS``): length, reversed, the step's graph (a document
    of its own: body, carry placeholder, then the stacked and the whole inputs' placeholders) and how
    many are stacked. Placeholders are written by their roles' names (``scan#c``, ``scan#x0``, ``scan#k0``)."""
    length, reverse, step = payload
    return [length, reverse, json.loads(serialize.dumps(list(step.parts()))), len(step.xs)]


_FORM = ("a scan's payload is [length >= 1, reversed, the step's document (body, carry, placeholders), "
         "number of stacked inputs], matching its arguments")
_ROLE = re.compile(r"scan#(c|x[0-9]{1,6}|k[0-9]{1,6})")


def _role(name: str, shape: tuple) -> Expr:
    """An array in a step's document: one of the step's placeholders, named by its role."""
    rolled.array(name, shape)  # (the checks of any array's name and shape)
    if not _ROLE.fullmatch(name):
        raise ValueError(f"a scan's step reads only its placeholders (scan#c, scan#x0, scan#k0, ...), not the "
                         f"array {name[:40]!r}")
    return reserved(name, shape)


def _read(k: int, payload: Any, arguments: tuple) -> Expr:
    """A scan node read back (``serialize.PAYLOADS``): its step's document loaded (placeholders by role
    only) and the node built by ``make``, the constructor sg.scan uses, which checks the shapes."""
    if not (isinstance(payload, list) and len(payload) == 4 and type(payload[0]) is int and payload[0] >= 1
            and type(payload[1]) is bool and isinstance(payload[2], dict) and type(payload[3]) is int
            and 0 <= payload[3] < len(arguments)):
        raise serialize.FormatError(f"symgrad JSON: node {k} is malformed: {_FORM}")
    length, reverse, n = payload[0], payload[1], payload[3]
    parts = serialize.load_graph(json.dumps(payload[2]), _role)
    roles = ["scan#c", *(f"scan#x{j}" for j in range(n)), *(f"scan#k{j}" for j in range(len(arguments) - 1 - n))]
    if not isinstance(parts, list) or len(parts) != len(arguments) + 1 or any(
            not is_placeholder(p) or p.payload[0] != Name(r) for p, r in zip(parts[1:], roles)):
        raise serialize.FormatError(f"symgrad JSON: node {k}: the step's document must list its body, then the "
                                    f"placeholders {roles[:4]}{'...' if len(roles) > 4 else ''} in that order")
    body, carry, places = parts[0], parts[1], parts[2:]
    bound = list(zip(places[n:], arguments[1 + n:]))
    for p, a in bound:
        if p.shape != a.shape:
            raise serialize.FormatError(f"symgrad JSON: node {k}: the step reads {p} of shape {p.shape} as "
                                        f"{serialize.one_line(a)} of shape {a.shape}")
    try:
        node = make(body, carry, arguments[0], list(zip(places[:n], arguments[1:1 + n])), bound, reverse, length)
    except (ValueError, TypeError, TracingError) as e:
        raise serialize.FormatError(f"symgrad JSON: node {k} (scan): {serialize.one_line(e, 200)}") from None
    # A stack whose rows are all one, saved before make read it whole, is at most one const now.
    folded = any(_same_row(a) is not None for a in arguments[1:1 + n])
    count = len(node.args) > len(arguments) if folded else len(node.args) != len(arguments)
    if node.payload[0] != length or count:
        raise serialize.FormatError(f"symgrad JSON: node {k} is malformed: {_FORM}")
    return node


diff.ADJOINTS["scan"] = _adjoint
diff.TANGENTS["scan"] = _tangent
sparsity.PATTERNS["scan"] = _pattern
diff.MASKING.add("scan")  # (a step may never read some rows, or read them into a carry a later step drops)
serialize.PAYLOADS["scan"] = (_document, _read)
