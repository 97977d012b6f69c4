"""Saving graphs as JSON: the flat form (one entry per shared node), a format name and a version.

Constants are written as ``float.hex`` strings, so every value (-0.0, nan, inf, the
last bit) comes back exactly. Loading checks everything it reads and raises
``FormatError`` naming the node at fault; a file from a newer format version is
refused with the version numbers, not misread.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import rolled
from symgrad.expr.build import apply
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import _like, to_flat

FORMAT, VERSION = "symgrad", 1


class FormatError(ValueError):
    """A JSON document that is not a graph this version of symgrad can read."""


def dumps(exprs: Any, indent: int | None = None) -> str:
    """Save an expression, a list or array of them, or a dict of named ones as JSON text.

    >>> import symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> text = sg.dumps({"f": x * y, "g": sg.sin(x)})
    >>> sg.loads(text)
    {'f': x*y, 'g': sin(x)}
    """
    kind = "dict" if isinstance(exprs, dict) else "expr" if isinstance(exprs, Expr) else \
        "array" if isinstance(exprs, np.ndarray) else "list"
    nodes, outputs = to_flat(list(exprs.values()) if kind == "dict" else exprs)
    if any(name == "custom" for name, _, _ in nodes):
        raise FormatError("a custom_jvp / custom_vjp function's rule is Python code, which a document cannot "
                          "hold: save its derivatives (sg.grad ...) or sg.compile the function")
    doc = {"format": FORMAT, "version": VERSION, "kind": kind,
           "nodes": [[name, float(p).hex() if name == "const" else PAYLOADS[name][0](p) if name in PAYLOADS else p,
                      list(args)] for name, p, args in nodes],
           "outputs": outputs}
    if kind == "dict":
        doc["names"] = list(map(str, exprs))
    if kind == "array":
        doc["shape"] = list(exprs.shape)
    return json.dumps(doc, indent=indent, ensure_ascii=False)


# An op whose payload is a graph of its own (a scan's step) -> (write, read): the entry's payload from
# the node's, and the node from (its position, the entry's payload, its arguments). Its module registers it.
PAYLOADS: dict[str, tuple[Callable[[Any], Any], Callable[[int, Any, tuple], Expr]]] = {}


def loads(text: str | bytes) -> Any:
    """Load what ``dumps`` saved: the same expressions (the same nodes, by hash-consing).

    Any other input raises ``FormatError`` naming what is wrong. Nodes are built as
    they are read (memory stays near the size of the graph itself), and no count or shape
    in the document makes the loader allocate more than the document's size implies.

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> sg.loads(sg.dumps(x ** 2 + 1)) is x ** 2 + 1
    True
    """
    return load_graph(text)


def load_graph(text: Any, placeholder: Callable[[str, tuple], Expr] | None = None) -> Any:
    """``loads``, or with ``placeholder`` a graph nested in a node's payload (a scan's step), whose
    arrays are made by ``placeholder(name, shape)`` and which holds no variable nor nested graph.

    >>> import symgrad as sg
    >>> load_graph(sg.dumps(sg.Var("x") + 1))
    x + 1
    """
    try:
        if isinstance(text, bytes | bytearray):
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"expected str or bytes, got {type(text).__name__}")
        doc, built = _Reader(text, placeholder).document()
    except FormatError:
        raise
    except (ValueError, TypeError, UnicodeError, OverflowError) as e:
        raise FormatError(f"not a symgrad JSON document: {str(e)[:200]}") from None
    except RecursionError:
        raise FormatError("not a symgrad JSON document: nested too deeply") from None
    except MemoryError:
        raise FormatError("symgrad JSON: the document does not fit in memory") from None
    return _outputs(doc, built)


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > 18:
        raise FormatError(f"symgrad JSON: the integer {digits[:30]}... is too large to be an index or size")
    return int(digits)


_WS = re.compile(r"[ \t\n\r]*")
_HEX = re.compile(r"-?(0x[0-9a-f]+(\.[0-9a-f]*)?p[+-]?[0-9]{1,5}|inf|nan)")


class _Reader:
    """The document's top-level object read key by key, its ``nodes`` entry node by node."""

    def __init__(self, text: str, placeholder: Callable | None = None) -> None:
        self.text, self.pos, self.placeholder = text, 0, placeholder
        self.decoder = json.JSONDecoder(parse_int=_bounded_int)

    def skip(self, char: str | None = None) -> str:
        self.pos = _WS.match(self.text, self.pos).end()
        got = self.text[self.pos:self.pos + 1]
        if char is not None:
            if got not in char:
                raise ValueError(f"expected {' or '.join(map(repr, char))} at character {self.pos}, got {got!r}")
            self.pos += 1
        return got

    def value(self) -> Any:
        self.skip()
        value, self.pos = self.decoder.raw_decode(self.text, self.pos)
        return value

    def document(self) -> tuple[dict, list[Expr]]:
        doc: dict[str, Any] = {}
        built: list[Expr] = []
        self.skip("{")
        while self.skip() != "}":
            if doc:
                self.skip(",")
            key = self.value()
            self.skip(":")
            if key == "nodes" and self.skip() == "[":
                _check_header(doc)
                self.nodes(built)
                doc[key] = True
            else:
                doc[key] = self.value()
        self.skip("}")
        if self.skip() != "":
            raise ValueError(f"extra text after the document at character {self.pos}")
        if "nodes" not in doc:
            _check_header(doc)
            raise FormatError("symgrad JSON: \"nodes\" must be a list")
        return doc, built

    def nodes(self, built: list[Expr]) -> None:
        self.skip("[")
        while self.skip() != "]":
            if built:
                self.skip(",")
            built.append(_node(len(built), self.value(), built, self.placeholder))
        self.skip("]")


def _check_header(doc: dict) -> None:
    """The format and version, checked before any node is built (they must come first, as dumps writes)."""
    if doc.get("format") != FORMAT:
        raise FormatError("not a symgrad JSON document: no \"format\": \"symgrad\" field before the nodes")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(f"symgrad JSON: bad version field {version!r}")
    if version > VERSION:
        raise FormatError(f"this file has symgrad format version {version}, newer than this symgrad reads "
                          f"(up to {VERSION}): upgrade symgrad to load it")


def _outputs(doc: dict, built: list[Expr]) -> Any:
    outputs = doc.get("outputs")
    if not isinstance(outputs, list) or not all(type(i) is int and 0 <= i < len(built) for i in outputs):
        raise FormatError(f"symgrad JSON: outputs must be indices of nodes (0 to {len(built) - 1})")
    roots = [built[i] for i in outputs]
    kind = doc.get("kind")
    if kind == "dict":
        names = doc.get("names")
        if not isinstance(names, list) or len(names) != len(roots) or not all(isinstance(n, str) for n in names):
            raise FormatError(f"symgrad JSON: a dict needs one name (a string) per output, {len(roots)} in all")
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})[:5]
            raise FormatError(f"symgrad JSON: the dict names {twice} more than once")
        return dict(zip(names, roots))
    if kind == "array":
        shape = doc.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) \
                or math.prod(shape) != len(roots):
            raise FormatError(f"symgrad JSON: an array's shape must be sizes whose product is the number of "
                              f"outputs ({len(roots)}), got {str(shape)[:80]}")
        return _like(np.empty(shape, dtype=object), roots)
    if kind == "expr" and len(roots) == 1:
        return roots[0]
    if kind == "list":
        return roots
    raise FormatError(f"symgrad JSON: kind {str(kind)[:40]!r} with {len(roots)} outputs is not something dumps "
                      "writes")


def _node(k: int, entry: Any, built: list[Expr], placeholder: Callable | None = None) -> Expr:
    """Node ``k``, checked and built from earlier ones (``placeholder``: in a nested graph's document)."""
    if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], list)):
        raise FormatError(f"symgrad JSON: node {k} is malformed ({str(entry)[:80]}): expected "
                          "[op, payload, [args]]")
    name, payload, args = entry
    op = OPS.get(name) if isinstance(name, str) else None
    if op is None:
        raise FormatError(f"symgrad JSON: node {k} has the unknown op {str(name)[:40]!r}")
    if name == "custom":  # (dumps never writes one: a rule is Python code)
        raise FormatError(f"symgrad JSON: node {k}: a custom_jvp / custom_vjp node, which a document cannot hold")
    if not all(type(i) is int and 0 <= i < k for i in args):
        raise FormatError(f"symgrad JSON: node {k} ({name}) refers to arguments {str(args)[:80]} that are not "
                          "earlier nodes")
    if len(args) != op.arity if op.arity >= 0 else len(args) < _MIN_ARGS.get(name, 2):
        raise FormatError(f"symgrad JSON: node {k} is malformed ({str(entry)[:80]}): {name} takes "
                          f"{op.arity if op.arity >= 0 else f'{_MIN_ARGS.get(name, 2)} or more'} argument(s), "
                          f"got {len(args)}")
    if placeholder and (name == "var" or name in PAYLOADS):  # (what it reads from outside: its placeholders)
        raise FormatError(f"symgrad JSON: node {k}: a scan's step holds no {name}: it reads only its placeholders")
    arguments = tuple(built[i] for i in args)
    _check_arguments(k, name, arguments)
    if name == "const":
        return _const(k, payload)
    if name == "var":
        if not (isinstance(payload, str) and payload and payload.isprintable()):
            raise FormatError(f"symgrad JSON: node {k} is malformed ({str(entry)[:80]}): a variable needs a "
                              "printable name")
    elif name in PAYLOADS:
        return PAYLOADS[name][1](k, payload, arguments)
    elif name in _ROLLED_FORMS:
        payload = _rolled_payload(k, name, payload)
    elif payload is not None and not (name == "load" and payload == "guarded"):
        raise FormatError(f"symgrad JSON: node {k} ({name}) has a payload {str(payload)[:40]}; only var, const, "
                          "index, array, table, scatter, cumsum, scan and guarded loads have one")
    try:  # rolled nodes are built through their checked constructors: ranges, bound indices
        return _built(name, op, arguments, payload, placeholder)
    except (TypeError, ValueError, IndexError, OverflowError) as e:
        raise FormatError(f"symgrad JSON: node {k} ({name}): {one_line(e, 200)}") from None


def one_line(thing: Any, width: int = 60) -> str:
    """``thing`` (an expression, an error) printed on one line (a let-form's lines joined), cut at
    ``width`` characters: a message's part.

    >>> one_line(ValueError("not  a   graph"), 9)
    'not a gra'
    """
    return " ".join(str(thing).split())[:width]


_MIN_ARGS = {"scan": 1, "scatter": 2}  # (other ops of any arity: loads, tensors take at least 2)


def _const(k: int, payload: Any) -> Expr:
    if not (isinstance(payload, str) and _HEX.fullmatch(payload)):
        raise FormatError(f"symgrad JSON: node {k}: a constant is written as float.hex() gives it "
                          f"(such as '0x1.8p+0'), got {str(payload)[:40]!r}")
    try:
        return apply(OPS["const"], (), float.fromhex(payload))
    except OverflowError:
        raise FormatError(f"symgrad JSON: node {k}: the constant {payload[:40]} is too large for a float") \
            from None


def _check_arguments(k: int, name: str, arguments: tuple) -> None:
    """What the rolled constructors leave to their callers: an array where a scalar goes (a tensor,
    a reduction or a scatter of arrays, an array as an address, as_index of one) or a bound that is
    not a positive integer constant. (``apply`` refuses scalar ops on whole arrays itself.)"""
    scalars = arguments if name == "as_index" else arguments[1:] if name == "load" else arguments[:1] \
        if name in ("tensor", "scatter", "sum", "max", "min") else ()
    for a in scalars:
        if a.op.array_valued:
            raise FormatError(f"symgrad JSON: node {k} ({name}) takes scalars, got the array {one_line(a)}")
    if name == "as_index" and not (arguments[1].op.name == "const" and float(arguments[1].payload).is_integer()
                                   and 1 <= arguments[1].payload < 2 ** 62):
        raise FormatError(f"symgrad JSON: node {k} (as_index) needs a positive integer bound, got "
                          f"{one_line(arguments[1])}")


def _built(name: str, op: Any, arguments: tuple, payload: Any, placeholder: Callable | None) -> Expr:
    """A node built by the constructor that checks it (rolled nodes), else by ``apply``."""
    if name == "load":
        return rolled.subscript(arguments[0], arguments[1:], guarded=payload == "guarded")
    if name == "tensor":
        return rolled.tensor(*arguments)
    if name in ("sum", "max", "min"):
        return rolled.reduce(name, *arguments)
    if name == "cumsum":
        return rolled.cumsum(arguments[0], *payload)
    if name == "scatter":
        shape, n_addresses = payload
        if not shape or n_addresses != len(shape) or min(shape) < 1:
            raise ValueError(f"a scatter's shape must be positive sizes, one per address, got {list(shape)}")
        return rolled.scatter(arguments[0], arguments[1:1 + n_addresses], arguments[1 + n_addresses:], shape)
    if name == "array" and placeholder:
        return placeholder(*payload)
    if name in _ROLLED_LEAVES:
        return _ROLLED_LEAVES[name](*payload)
    return apply(op, arguments, payload)


_ROLLED_LEAVES = {"index": rolled.index, "array": rolled.array,
                  "table": lambda shape, values: rolled.table(np.array(values, dtype=np.int64).reshape(shape))}


def _rolled_payload(k: int, name: str, payload: Any) -> tuple:
    """An index's (name, size), an array's (name, shape), a table's (shape, values), a scatter's
    (shape, number of addresses) or running sums' (axis, reversed), as written."""
    ok = isinstance(payload, list) and len(payload) == 2
    if ok and name == "cumsum":
        ok = type(payload[0]) is int and type(payload[1]) is bool
    elif ok and name == "scatter":
        ok = isinstance(payload[0], list) and all(type(d) is int for d in payload[0]) and type(payload[1]) is int
        if ok:
            return tuple(payload[0]), payload[1]
    elif ok and name == "index":
        ok = isinstance(payload[0], str) and type(payload[1]) is int
    elif ok and name == "array":
        shape = payload[1]
        ok = isinstance(payload[0], str) and isinstance(shape, list) and all(type(d) is int for d in shape)
    elif ok:
        shape, values = payload
        ok = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape) and \
            isinstance(values, list) and all(type(v) is int for v in values) and math.prod(shape) == len(values)
    if not ok:
        raise FormatError(f"symgrad JSON: node {k} is malformed: the payload of {name} is "
                          f"{_ROLLED_FORMS[name]}, got {str(payload)[:60]}")
    return tuple(payload)


_ROLLED_FORMS = {"index": "[name, size]", "array": "[name, [shape]]", "table": "[[shape], [integer values]]",
                 "scatter": "[[shape], number of addresses]", "cumsum": "[axis, reversed]"}

