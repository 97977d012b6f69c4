"""Lowering: expression DAG -> Program, the flat instruction list every backend walks.

One walk of the DAG (all outputs together) in topological order gives one instruction per
node still needed (dead code never enters), constants in a side table, constant integer
powers as multiplications, and a work slot per value, reused once the value is dead (a slot
goes back on a free stack after its last use), so the VM's work array stays small.
The straight-line code generator, the VM and the printout all read the same arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.compile.loop_program import LoopProgram
from symgrad.compile.program import LOAD_CONST, LOAD_P, LOAD_X, STORE, Program, _key, _label, _names
from symgrad.expr import custom
from symgrad.expr.node import Expr, float_bits, paused_gc
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import as_expr_list, topo_order
from symgrad.util.progress import CHUNK, progress

_MUL, _DIV, _POW, _SQRT = (OPS[name].code for name in ("mul", "div", "pow", "sqrt"))
_CONST = OPS["const"]
MAX_UNROLLED_POWER = 16  # x**k with |k| up to this becomes multiplications (as CasADi does)


class _Emitter:
    """Instruction list plus a slot allocator with a free stack."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int]] = []
        self.free: list[int] = []
        self.n_slots = 0

    def slot(self) -> int:
        if self.free:
            return self.free.pop()
        self.n_slots += 1
        return self.n_slots - 1

    def emit(self, op: int, a: int = 0, b: int = 0, c: int = 0) -> int:
        d = self.slot()
        self.rows.append((op, d, a, b, c))
        return d


def _special_power(node: Expr) -> float | None:
    """The exponent of x**k lowered without pow: integer k (multiplications) or 0.5 (sqrt,
    as NumPy does: sqrt(-inf) is nan where C's pow gives inf)."""
    if node.op.code != _POW or node.args[1].op is not _CONST:
        return None
    k = node.args[1].payload
    if k == 0.5 or k.is_integer() and 2 <= abs(k) <= MAX_UNROLLED_POWER:
        return k
    return None


def _emit_power(em: _Emitter, base: int, k: int, one: int | None) -> int:
    """x**k by squaring; 1/x**|k| for k < 0. ``base`` and ``one`` stay live."""
    result, square, n = None, base, abs(k)
    while True:
        if n & 1:
            if result is None:
                result = square
            else:
                prev, result = result, em.emit(_MUL, result, square)
                if prev != base:
                    em.free.append(prev)
        n >>= 1
        if not n:
            break
        prev, square = square, em.emit(_MUL, square, square)
        if prev != base and prev != result:
            em.free.append(prev)
    if square != base and square != result:
        em.free.append(square)
    if k > 0:
        return result
    inverse = em.emit(_DIV, one, result)
    if result != base:
        em.free.append(result)
    return inverse


@paused_gc()
def lower(outputs: Any, inputs: Any, params: Any = (), *, returns_value: bool | None = None) -> Any:
    """Lower expressions to a ``Program`` reading ``x`` (``inputs``) and ``p`` (``params``).

    ``returns_value`` (default: a single output) makes the first output the returned float.
    Rolled expressions (sums, arrays) are not flattened: they give a
    ``LoopProgram``, compiled to loops.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> lower(x**3, [x]).n_ops  # x*x, then *x
    2
    """
    roots = custom.plain(as_expr_list(outputs))
    xs, ps = _names(inputs, "inputs"), _names(params, "params")
    loads = {v: (LOAD_X, i) for i, v in enumerate(xs)}
    for i, v in enumerate(ps):
        if v in loads:
            raise ValueError(f"{_label(v)} is both an input and a param")
        loads[v] = (LOAD_P, i)
    if returns_value is None:
        returns_value = len(roots) == 1
    order = topo_order(roots)
    if any(n.op.kind == "rolled" for n in order) or any(v.op.name == "array" for v in loads):
        return LoopProgram.make(roots, xs, ps, returns_value, order)
    missing = [n.payload for n in order if n.op.name == "var" and n not in loads]
    if missing:
        raise ValueError(f"the outputs depend on variable {sorted(missing)[0]!r}, which is not among the "
                         f"inputs {[v.payload for v in xs]} or params {[v.payload for v in ps]}")
    program_rows, consts, n_slots = _schedule(order, roots, loads, returns_value)
    code = np.array(program_rows, dtype=np.int32).reshape(-1, 5)
    const_array = np.array(consts, dtype=np.float64)
    names = tuple(v.payload for v in xs), tuple(v.payload for v in ps)
    return Program(code, const_array, max(n_slots, 1), *names, len(roots) - returns_value, returns_value,
                   _key(code, const_array, names, returns_value, len(roots)))


def _schedule(order: list[Expr], roots: list[Expr], loads: dict, returns_value: bool):
    """Emit instructions in ``order``; free each slot after its value's last use."""
    alias = {}  # ops whose template is the identity (stop_gradient) reuse their argument
    uses: dict[Expr, int] = {}
    for node in order:
        if node.op.numba == "{0}":
            alias[node] = alias.get(node.args[0], node.args[0])
            continue
        for a in node.args[:1] if _special_power(node) else node.args:
            a = alias.get(a, a)
            uses[a] = uses.get(a, 0) + 1
    stores = {}
    for k, r in enumerate(roots):
        r = alias.get(r, r)
        stores.setdefault(r, []).append(k - returns_value)
        uses[r] = uses.get(r, 0) + 1
    em = _Emitter()
    slot: dict[Expr, int] = {}
    consts: list[float] = []
    const_index: dict[int, int] = {}  # float bits -> index in consts

    def load_const(v: float) -> int:
        if float_bits(v) not in const_index:
            const_index[float_bits(v)] = len(consts)
            consts.append(v)
        return em.emit(LOAD_CONST, const_index[float_bits(v)])

    one = None  # the slot of 1.0 for negative powers, kept for the whole program

    def use(a: Expr) -> int:
        s = slot[a]
        uses[a] -= 1
        if not uses[a]:
            em.free.append(s)
        return s

    with progress(len(order), "lowering") as update:
        for step, node in enumerate(order):
            if not step % CHUNK:
                update(min(CHUNK, len(order) - step))
            if node in alias or node not in uses:  # not in uses: only an unrolled power's exponent
                continue
            name = node.op.name
            if name == "var":
                slot[node] = em.emit(*loads[node])
            elif name == "const":
                slot[node] = load_const(node.payload)
            elif k := _special_power(node):
                base = alias.get(node.args[0], node.args[0])
                if k == 0.5:
                    slot[node] = em.emit(_SQRT, use(base))
                else:
                    if k < 0 and one is None:
                        one = load_const(1.0)
                    slot[node] = _emit_power(em, slot[base], int(k), one)
                    use(base)
            else:
                args = [use(alias.get(a, a)) for a in node.args]
                slot[node] = em.emit(node.op.code, *args)
            for index in stores.get(node, ()):
                em.rows.append((STORE, index, slot[node], 0, 0))
                use(node)
    return em.rows, consts, em.n_slots
