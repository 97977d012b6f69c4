"""Lowering: expression DAG -> Program, the flat instruction list every backend walks.

One walk of the DAG (all outputs together) in topological order gives one instruction per
node still needed (dead code never enters), constants in a side table, constant integer
powers as multiplications, and a work slot per value, reused once the value is dead (a slot
goes back on a free stack after its last use), so the VM's work array stays small.
The straight-line code generator, the VM and the printout all read the same arrays.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.expr.dot import quote
from symgrad.expr.node import Expr, float_bits
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import as_expr_list, topo_order
from symgrad.progress import CHUNK, progress

# Pseudo-ops beyond the op table: load x[a], load p[a], load consts[a], store slot a as
# output d (d = -1: the returned value).
LOAD_X, LOAD_P, LOAD_CONST, STORE = range(len(OPS), len(OPS) + 4)
_OPS_BY_CODE = list(OPS.values())
_MUL, _DIV, _POW, _SQRT = (OPS[name].code for name in ("mul", "div", "pow", "sqrt"))
_CONST = OPS["const"]
# What a pickled Program's code means: the format and the op table its opcodes index.
PICKLE_VERSION = 1
OPS_ID = hashlib.blake2b(repr([(op.name, op.arity) for op in _OPS_BY_CODE]).encode(), digest_size=8).hexdigest()
MAX_UNROLLED_POWER = 16  # x**k with |k| up to this becomes multiplications (as CasADi does)


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered function: ``code`` rows are (opcode, dest slot, arg slots a, b, c).

    ``returns_value``: the first output is returned as a float (a scalar function, or the
    value of a value-and-gradient); the ``n_out`` others are written to an output array.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> print(lower([x * y + sg.sin(x)], [x, y]))
    { lambda x[2] = (x, y).
      s0 = x[0]
      s1 = x[1]
      s1 = mul s0 s1
      s0 = sin s0
      s0 = add s1 s0
      return s0 }
    """

    code: np.ndarray
    consts: np.ndarray
    n_slots: int
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    n_out: int
    returns_value: bool
    key: str  # structural hash of everything above: names the compiled module on disk

    @property
    def n_ops(self) -> int:
        """The number of computing instructions (loads and stores not counted)."""
        return int(np.count_nonzero(self.code[:, 0] < LOAD_X))

    def __len__(self) -> int:
        return len(self.code)

    def kernels(self, backend: str, roots: list[Expr] | None = None) -> Any:
        """The Kernels of the registered ``backend`` for this program (``roots``: the interpreter's)."""
        from symgrad.compile.backends import REGISTRY  # (backends import Program)

        return REGISTRY[backend].make(self, roots)

    def __str__(self) -> str:
        sig = f"x[{len(self.inputs)}] = ({', '.join(self.inputs)})"
        if self.params:
            sig += f"; p[{len(self.params)}] = ({', '.join(self.params)})"
        lines = [f"{{ lambda {sig}."]
        for op, d, a, b, c in self.code.tolist():
            if op == STORE:
                lines.append(f"  return s{a}" if d < 0 else f"  out[{d}] = s{a}")
            elif op == LOAD_CONST:
                lines.append(f"  s{d} = {float(self.consts[a])!r}")
            elif op >= LOAD_X:
                lines.append(f"  s{d} = {'x' if op == LOAD_X else 'p'}[{a}]")
            else:
                row = _OPS_BY_CODE[op]
                lines.append(f"  s{d} = {row.name} " + " ".join(f"s{s}" for s in (a, b, c)[: row.arity]))
        return "\n".join(lines) + " }"

    def to_dot(self) -> str:
        """Graphviz DOT of the instruction list: one node per instruction, an edge where a value flows.

        >>> import symgrad as sg
        >>> x = sg.Var("x")
        >>> print(lower(sg.sin(x) * x, [x]).to_dot())
        digraph "program" {
          node [shape=box, fontname="Helvetica"];
          i0 [label="s0 = x[0] (x)"];
          i1 [label="s1 = sin"];
          i0 -> i1;
          i2 [label="s1 = mul"];
          i0 -> i2;
          i1 -> i2;
          i3 [label="return s1", shape=house];
          i2 -> i3;
        }
        """
        lines = ['digraph "program" {', '  node [shape=box, fontname="Helvetica"];']
        writer: dict[int, int] = {}  # slot -> the instruction whose value it holds now
        for k, (op, d, a, b, c) in enumerate(self.code.tolist()):
            if op == STORE:
                label, reads, shape = ("return" if d < 0 else f"out[{d}] =") + f" s{a}", (a,), ", shape=house"
            elif op == LOAD_X or op == LOAD_P:
                which, names = ("x", self.inputs) if op == LOAD_X else ("p", self.params)
                label, reads, shape = f"s{d} = {which}[{a}] ({names[a]})", (), ""
            elif op == LOAD_CONST:
                label, reads, shape = f"s{d} = {float(self.consts[a])!r}", (), ", shape=plaintext"
            else:
                row = _OPS_BY_CODE[op]
                label, reads, shape = f"s{d} = {row.name}", (a, b, c)[:row.arity], ""
            lines.append(f"  i{k} [label={quote(label)}{shape}];")
            lines += [f"  i{writer[s]} -> i{k};" for s in reads]
            if op != STORE:
                writer[d] = k
        return "\n".join([*lines, "}"])

    def __reduce__(self) -> tuple:
        # The key is not sent: it names generated modules, so the receiver computes it itself.
        return _unpickled, (PICKLE_VERSION, OPS_ID, self.code, self.consts, self.n_slots, self.inputs,
                            self.params, self.n_out, self.returns_value)

    def __repr__(self) -> str:
        return f"<Program {len(self.code)} instructions, {self.n_slots} slots, key {self.key[:12]}>"


def _key(code: np.ndarray, consts: np.ndarray, names: tuple, returns_value: bool, n_roots: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in (code.tobytes(), consts.tobytes(), repr((names, returns_value, n_roots)).encode()):
        h.update(part)
    return h.hexdigest()


def _unpickled(version: Any, ops_id: Any, code: Any, consts: Any, n_slots: Any, inputs: Any, params: Any,
               n_out: Any, returns_value: Any) -> Program:
    """A Program from a pickle, checked: its format, its op table, and every index in its code."""
    if version != PICKLE_VERSION or ops_id != OPS_ID:
        raise ValueError(f"this pickled symgrad program has format {version!r} and op table {ops_id!r}; this "
                         f"symgrad reads format {PICKLE_VERSION}, op table {OPS_ID}: compile it again here")
    code, consts = np.asarray(code), np.asarray(consts)
    names = tuple(map(str, inputs)), tuple(map(str, params))
    n_slots, n_out, returns_value = int(n_slots), int(n_out), bool(returns_value)
    if code.dtype != np.int32 or code.ndim != 2 or code.shape[1] != 5 or consts.dtype != np.float64 \
            or consts.ndim != 1 or not _indices_in_range(code, len(consts), names, n_slots, n_out):
        raise ValueError("this pickled symgrad program is malformed (code or constants out of range)")
    key = _key(code, consts, names, returns_value, n_out + returns_value)
    return Program(code, consts, n_slots, *names, n_out, returns_value, key)


def _indices_in_range(code: np.ndarray, n_consts: int, names: tuple, n_slots: int, n_out: int) -> bool:
    op, d, args = code[:, 0], code[:, 1], code[:, 2:]
    store, load = op == STORE, (op >= LOAD_X) & (op < STORE)
    limit = np.select([op == LOAD_X, op == LOAD_P, op == LOAD_CONST],
                      [len(names[0]), len(names[1]), n_consts], n_slots)
    return bool(((op >= 0) & (op <= STORE)).all() and ((d >= 0) & (d < n_slots) | store).all()
                and ((d[store] >= -1) & (d[store] < n_out)).all()
                and ((args >= 0) & (args < np.where(load, limit, n_slots)[:, None])).all())


def _names(spec: Any, what: str) -> list[Expr]:
    flat = [] if spec is None else as_expr_list(spec)
    for v in flat:
        if v.op.name not in ("var", "array"):
            raise TypeError(f"{what} must be variables or arrays (sg.array), got the expression {v}")
    seen: set[Expr] = set()
    for v in flat:
        if v in seen:
            raise ValueError(f"{what}: {_label(v)} is listed twice")
        seen.add(v)
    return flat


def _label(v: Expr) -> str:
    return f"variable {v.payload!r}" if v.op.name == "var" else f"array {v.payload[0]!r}"


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


def lower(outputs: Any, inputs: Any, params: Any = (), *, returns_value: bool | None = None) -> Any:
    """Lower expressions to a :class:`Program` reading ``x`` (``inputs``) and ``p`` (``params``).

    ``returns_value`` (default: a single output) makes the first output the returned float.
    Rolled expressions (sums, arrays) are not flattened: they give a
    :class:`~symgrad.compile.loops.LoopProgram`, compiled to loops.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> lower(x**3, [x]).n_ops  # x*x, then *x
    2
    """
    roots = as_expr_list(outputs)
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
        from symgrad.compile.loops import LoopProgram  # (it imports the backends, which import this)

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
