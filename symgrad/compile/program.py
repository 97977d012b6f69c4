"""The Program: a lowered function as a flat instruction list (rows of opcode, destination slot and
argument slots), its constants and names, the one form the straight-line backends (numba_backend.py,
vm.py) and the printout read. lower.py makes Programs; pickles of them are checked here on arrival.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.compile.kernels import make_kernels
from symgrad.expr.dot import quote
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import as_expr_list

# Pseudo-ops beyond the op table: load x[a], load p[a], load consts[a], store slot a as
# output d (d = -1: the returned value).
LOAD_X, LOAD_P, LOAD_CONST, STORE = range(len(OPS), len(OPS) + 4)
_OPS_BY_CODE = list(OPS.values())
# What a pickled Program's code means: the format and the op table its opcodes index.
PICKLE_VERSION = 1
OPS_ID = hashlib.blake2b(repr([(op.name, op.arity) for op in _OPS_BY_CODE]).encode(), digest_size=8).hexdigest()




@dataclass(frozen=True, eq=False)
class Program:
    """A lowered function: ``code`` rows are (opcode, dest slot, arg slots a, b, c).

    ``returns_value``: the first output is returned as a float (a scalar function, or the
    value of a value-and-gradient); the ``n_out`` others are written to an output array.

    >>> import symgrad as sg
    >>> from symgrad.compile.lower import lower
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
        return make_kernels("program", self, backend, roots)

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
        >>> from symgrad.compile.lower import lower
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
