"""Expression nodes: one immutable, hash-consed class for every op.

Equal structure means the same object, so identity is equality and ``hash`` is
O(1).  Nodes live in a weak intern table: a graph nobody references is freed.
"""

from __future__ import annotations

import gc
import hashlib
import struct
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from symgrad.expr import tracing

_MASK = (1 << 64) - 1


def _mix(h: int, v: int) -> int:
    """One round of a 64-bit multiply-xorshift mix (stable across processes)."""
    h = ((h ^ v) * 0x9E3779B97F4A7C15) & _MASK
    return h ^ (h >> 29)


_bits = struct.Struct("<q")
_pack = struct.Struct("<d").pack


def float_bits(v: float) -> int:
    """The IEEE-754 bits of ``v`` (constants' keys: 0.0 and -0.0 differ)."""
    return _bits.unpack(_pack(v))[0]


def const_key(v: float) -> Any:
    """The intern key of a constant: the float itself, its bits for zeros (0.0 and -0.0 differ),
    one key for every NaN (their sign and payload bits are no value: NumPy ops give NaN alike, and
    saved graphs write them "nan")."""
    return v if v == v and v != 0.0 else float_bits(v) if v == 0.0 else "nan"


# The truth value of a traced condition while a call with numbers is traced (None: undecidable);
# installed by symgrad.trace.guards, which this module cannot import.
decide: Any = None


class TracingError(TypeError):
    """A symbolic value was used where Python or NumPy needs a concrete number.

    Raised for ``if x > 0:`` on an expression, ``float(x)``, ``math.sin(x)`` and NumPy
    functions that cannot build expressions; the message names the construct and the
    symbolic alternative.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if tracing.context.refusals is not None:  # (a rolled trace checks none was caught by the traced code)
            tracing.context.refusals.append(self)


class Name(str):
    """A placeholder's name. It equals only another placeholder's name (and hashes and prints its
    repr apart), never the plain ``str`` of an ``sg.array`` or of an array in a document: a user's
    array called ``scan#c`` is another node than a step's carry, so no program input can stand in
    for a placeholder. Printed (``str``, f-strings) it reads as its text."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is Name and str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("scan placeholder", str(self)))

    def __repr__(self) -> str:  # (a node's payload hash reads the repr: apart from a user's array)
        return f"placeholder({str.__repr__(self)})"


class Expr:
    """A node of the expression DAG; build it with operators and ``sg.*`` functions.

    Nodes are never constructed directly: ``sg.Var``, ``sg.const`` and the op
    functions return the unique node for a given structure.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> (x * y) is (y * x)
    True
    """

    __slots__ = ("op", "args", "payload", "shash", "order_key", "free", "__weakref__")
    # Let Expr's reflected operators win over NumPy scalars (np.float64(2) * x).
    __array_priority__ = 1000

    op: Any
    args: tuple[Expr, ...]
    payload: Any
    shash: int
    order_key: tuple  # canonical order of commutative arguments (see intern)
    free: frozenset  # the index symbols this node varies over (rolled expressions; empty for scalars)

    # Operators, printing, pickling and NumPy's hooks need the rest of the symbolic layer: they
    # are installed on this class in one place, methods.py.

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("symgrad expressions are immutable")

    def __bool__(self) -> bool:
        if self.op.name == "const":  # a folded condition (x*0 == 0) has a value
            return self.payload != 0.0
        if decide is not None and (decided := decide(self)) is not None:
            return decided  # (a call traced with numbers: symgrad.trace.guards)
        raise TracingError(
            f"the truth value of the symbolic expression {_short(self)} is unknown until it is "
            "evaluated: a Python if / and / or / max / min on a traced value cannot be compiled; use "
            "sg.where(cond, a, b) (or sg.maximum / sg.minimum / sg.abs, np.where / np.maximum on arrays)"
        )

    def __float__(self) -> float:
        if self.op.name == "const":
            return self.payload
        raise TracingError(f"cannot convert the symbolic expression {_short(self)} to float (math.* "
                           "functions and float() need numbers): use sg.sin / np.sin ... on expressions, "
                           "sg.evaluate for a value")

    def __index__(self) -> int:
        raise TracingError(f"the symbolic expression {_short(self)} cannot be used as an integer "
                           "(an index, a range or a shape); pass such values as static arguments")

    @property
    def name(self) -> str:
        """The name of a variable (``Var`` nodes only)."""
        if self.op.name != "var":
            raise AttributeError(f"only variables have a name, not {self.op.name} nodes")
        return self.payload

    @property
    def value(self) -> float:
        """The value of a constant (``Const`` nodes only)."""
        if self.op.name != "const":
            raise AttributeError(f"only constants have a value, not {self.op.name} nodes")
        return self.payload


def _short(e: Expr) -> str:
    text = str(e)
    return text if len(text) <= 60 else text[:57] + "..."


# key -> weak reference; a reference's callback drops its key when the node dies.
_table: dict[tuple, weakref.ref] = {}
# Reentrant: a node dying during an insert (the GC can run there) calls _drop in the same thread.
_lock = threading.RLock()
_new = object.__new__
# The slots' own setters (Expr.__setattr__ refuses: nodes are immutable once made).
_set_op, _set_args, _set_payload, _set_shash, _set_order, _set_free = (
    getattr(Expr, name).__set__ for name in ("op", "args", "payload", "shash", "order_key", "free"))


def intern(op: Any, args: tuple[Expr, ...], payload: Any = None) -> Expr:
    """Return the unique node ``(op, payload, args)``, creating it if needed.

    This is the raw constructor: no simplification, no argument checks.
    """
    key = (op, const_key(payload) if op.arity == 0 and op.name == "const" else payload, args)
    ref = _table.get(key)
    node = ref() if ref is not None else None
    if node is not None:
        return node
    h = ((op.code + 1) * 0x9E3779B97F4A7C15 ^ (0 if payload is None else _payload_hash(op.name, payload))) & _MASK
    for a in args:
        h = _mix(h, a.shash)
    rank = _RANK.get(op.name, 3)
    free = _NONE
    for a in args:
        if a.free:
            free = None  # (found from the node: a binder's indices are its arguments)
            break
    with _lock:
        ref = _table.get(key)
        node = ref() if ref is not None else None
        if node is None:
            node = _new(Expr)
            _set_op(node, op)
            _set_args(node, args)
            _set_payload(node, payload)
            _set_shash(node, h)
            # The canonical order of commutative arguments, stable across processes and readable:
            # constants first, then variables by name, products before sums.
            _set_order(node, (rank, name_order(payload) if rank == 1 else (), h))
            _set_free(node, _free(node) if free is None or op.name == "index" else free)
            ref = _KeyedRef(node, _drop)
            ref.key = key
            _table[key] = ref
    return node


_NONE: frozenset = frozenset()


def _free(node: Expr) -> frozenset:
    """An index symbol is free in itself; a reduction or tensor binds its index arguments (op.binds)."""
    if node.op.name == "index":
        return frozenset((node,))
    args = node.args
    if not args or not any(a.free for a in args):
        return _NONE
    if node.op.binds:
        return args[0].free.difference(args[1:])
    return frozenset().union(*(a.free for a in args))


_RANK = {"const": 0, "var": 1, "mul": 2, "div": 2, "pow": 2, "neg": 2, "add": 4, "sub": 4}


def name_order(name: str) -> tuple:
    """A sort key of names that no counter moves: a name made fresh (``x#12``, by a trace inside
    another, or a derivative's index) sorts by the name it came from, then by when it was made
    (``x#9`` before ``x#10``), and its hash ignores the count, so a trace's graph (the order of
    commutative arguments, of sums) is the same whenever it is made.

    >>> sorted(["x#10", "y", "x#9", "x"], key=name_order)
    ['x', 'x#9', 'x#10', 'y']
    """
    base, _, count = name.partition("#")
    return base, len(count), count


def _base(name: str) -> str:
    return name.partition("#")[0]


class _KeyedRef(weakref.ref):
    __slots__ = ("key",)


def _drop(ref: _KeyedRef) -> None:
    # A node for this key may have been made again before the old one's callback ran.
    with _lock:
        if _table.get(ref.key) is ref:
            del _table[ref.key]


def _payload_hash(kind: str, payload: Any) -> int:
    if payload is None:
        return 0
    if kind == "const":
        return float_bits(payload) & _MASK
    if kind in ("var", "index", "array"):  # a name made fresh (x#7) hashes as the one it came from (x)
        payload = _base(payload) if kind == "var" else (_base(payload[0]), *payload[1:])
    text = payload.encode() if isinstance(payload, str) else repr(payload).encode()  # rolled: tuples
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic GC while a bulk walk builds many nodes.

    Nodes never form cycles (arguments exist before their users) and are freed
    by reference counting, but each one is a GC-tracked object, and the collector's
    passes over millions of them cost several times the building itself.

    >>> with paused_gc():
    ...     pass
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def table_size() -> int:
    """How many live nodes the intern table holds (for tests and diagnostics).

    >>> table_size() >= 0
    True
    """
    return len(_table)
