"""Saving graphs as JSON: the flat form (one entry per shared node), a format name and a version.

Constants are written as ``float.hex`` strings, so every value (-0.0, nan, inf, the
last bit) comes back exactly. Loading checks everything it reads and raises
:class:`FormatError` naming the node at fault; a file from a newer format version is
refused with the version numbers, not misread.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import _like, from_flat, to_flat

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
    doc = {"format": FORMAT, "version": VERSION, "kind": kind,
           "nodes": [[name, float(p).hex() if name == "const" else p, list(args)] for name, p, args in nodes],
           "outputs": outputs}
    if kind == "dict":
        doc["names"] = list(map(str, exprs))
    if kind == "array":
        doc["shape"] = list(exprs.shape)
    return json.dumps(doc, indent=indent, ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    """Load what :func:`dumps` saved: the same expressions (the same nodes, by hash-consing).

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> sg.loads(sg.dumps(x ** 2 + 1)) is x ** 2 + 1
    True
    """
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
        raise FormatError(f"not a symgrad JSON document: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError("not a symgrad JSON document: no \"format\": \"symgrad\" field")
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise FormatError(f"symgrad JSON: bad version field {version!r}")
    if version > VERSION:
        raise FormatError(f"this file has symgrad format version {version}, newer than this symgrad reads "
                          f"(up to {VERSION}): upgrade symgrad to load it")
    built = _nodes(doc.get("nodes"))
    outputs = doc.get("outputs")
    if not isinstance(outputs, list) or not all(isinstance(i, int) and 0 <= i < len(built) for i in outputs):
        raise FormatError(f"symgrad JSON: outputs must be indices of nodes (0 to {len(built) - 1})")
    roots = [built[i] for i in outputs]
    kind = doc.get("kind")
    try:
        if kind == "dict":
            names = doc["names"]
            if len(names) != len(roots):
                raise ValueError(f"{len(names)} names for {len(roots)} outputs")
            return dict(zip(names, roots))
        if kind == "array":
            return _like(np.empty(doc["shape"], dtype=object), roots)
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"symgrad JSON: a {kind} needs matching names / shape ({e})") from None
    if kind == "expr" and len(roots) == 1:
        return roots[0]
    if kind == "list":
        return roots
    raise FormatError(f"symgrad JSON: kind {kind!r} with {len(roots)} outputs is not something dumps writes")


def _nodes(entries: Any) -> list[Expr]:
    """Check every entry, then build them all with :func:`from_flat`."""
    if not isinstance(entries, list):
        raise FormatError("symgrad JSON: \"nodes\" must be a list")
    flat = []
    for k, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], list)):
            raise FormatError(f"symgrad JSON: node {k} is malformed ({entry!r}): expected [op, payload, [args]]")
        name, payload, args = entry
        op = OPS.get(name) if isinstance(name, str) else None
        if op is None:
            raise FormatError(f"symgrad JSON: node {k} has the unknown op {name!r}")
        if not all(isinstance(i, int) and 0 <= i < k for i in args):
            raise FormatError(f"symgrad JSON: node {k} ({name}) refers to arguments {args} that are not "
                              "earlier nodes")
        if len(args) != op.arity:
            raise FormatError(f"symgrad JSON: node {k} is malformed ({entry!r}): {name} takes {op.arity} "
                              f"argument(s), got {len(args)}")
        if name == "const":
            try:
                payload = float.fromhex(payload)
            except (TypeError, ValueError) as e:
                raise FormatError(f"symgrad JSON: node {k} is malformed ({entry!r}): {e}") from None
        elif name == "var" and not (isinstance(payload, str) and payload):
            raise FormatError(f"symgrad JSON: node {k} is malformed ({entry!r}): a variable needs a name")
        flat.append((name, payload, tuple(args)))
    return from_flat(flat, list(range(len(flat))))
