"""A long loop kernel split into functions of a few hundred lines, each compiled on its own.

Numba's compile time grows faster than a function's length (an RNN's Python loop of 10, 20, 40
steps: 2,600 lines in 16 s, 5,200 in 48 s, 10,400 in 285 s), so a long kernel is cut between its
top-level statements (whole loop nests, a scan's whole loop over its steps) into pieces. A piece
reads the arrays it uses as views of ``x``, ``p``, ``out`` and ``work`` (its view lines repeated:
they cost nothing), and the scalars computed at the top level of an earlier piece from ``sc``
(floats) and ``si`` (integers), where that piece stored them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

# Kernels longer than this many lines are split; a piece closes once it holds PIECE_LINES lines.
SPLIT_LINES = 1200
PIECE_LINES = 300

_NAME = re.compile(r"\b([vatbsc]\d+)\b")  # the emitter's names: values, accumulators, arrays
_ASSIGNED = re.compile(r"^\s*([vatbsc]\d+) = ")
_ARRAYS = "tbsc"  # buffers, scan carries, copies' views: arrays; v and a hold scalars


def statements(lines: list[str]) -> list[list[str]]:
    """The top-level statements of ``lines``: each unindented line with the deeper lines after it.

    >>> statements(["a = 1", "for i in range(3):", "    a = a + i", "out[0] = a"])
    [['a = 1'], ['for i in range(3):', '    a = a + i'], ['out[0] = a']]
    """
    out: list[list[str]] = []
    for line in lines:
        if line.startswith(" ") and out:
            out[-1].append(line)
        else:
            out.append([line])
    return out


def split(lines: list[str], integers: set[str], size: int | None = None) -> tuple[list[list[str]], int, int]:
    """``lines`` (a kernel's body, ending in its ``return``) as pieces of about ``size`` lines, each a
    function body of ``(x, p, out, work, sc, si)`` returning the kernel's value or 0.0; and how many
    floats ``sc`` and integers ``si`` hold. ``integers``: the scalar names holding integers.

    >>> body = ["t1 = work[0:3].reshape((3,))", "v2 = x[0] * 2.0", "for i3 in range(3):",
    ...         "    t1[i3] = v2", "return t1[2]"]
    >>> pieces, floats, ints = split(body, set(), size=2)
    >>> for piece in pieces:
    ...     print("\\n".join(piece), end="\\n--\\n")
    t1 = work[0:3].reshape((3,))
    v2 = x[0] * 2.0
    sc[0] = v2
    return 0.0
    --
    t1 = work[0:3].reshape((3,))
    v2 = sc[0]
    for i3 in range(3):
        t1[i3] = v2
    return 0.0
    --
    t1 = work[0:3].reshape((3,))
    return t1[2]
    --
    """
    size = PIECE_LINES if size is None else size
    chunks: list[list[list[str]]] = [[]]
    for statement in statements(lines):
        if sum(map(len, chunks[-1])) >= size:
            chunks.append([])
        chunks[-1].append(statement)
    views: dict[str, tuple[int, str]] = {}  # an array's name -> (its place, the top-level line making it)
    last: dict[str, int] = {}  # a scalar -> the last chunk assigning it
    used = [set(_NAME.findall("\n".join(line for s in chunk for line in s))) for chunk in chunks]
    last_use = {name: k for k, names in enumerate(used) for name in names}  # the last chunk using each name
    slots: dict[str, int] = {}
    counts = {"sc": 0, "si": 0}
    pieces = []
    for k, chunk in enumerate(chunks):
        head, loads = _views(used[k], views), []
        for name in sorted(n for n in used[k] if n[0] not in _ARRAYS and n in last):
            loads.append(f"{name} = {_slot(name, integers, slots, counts)}")
        body = [line for s in chunk for line in s]
        here: list[str] = []  # the scalars this chunk assigns that earlier ones may have (in order)
        for line in body:  # (a scalar first assigned inside a loop is that loop's own)
            m, top = _ASSIGNED.match(line), not line.startswith(" ")
            if m and m[1][0] in _ARRAYS and top:
                views[m[1]] = (len(views), line)
            elif m and m[1][0] not in _ARRAYS and (top or m[1] in last):
                last[m[1]] = k
                here.append(m[1])
        spills = [f"{_slot(n, integers, slots, counts)} = {n}" for n in dict.fromkeys(here) if last_use[n] > k]
        if not body[-1].startswith("return "):
            body = body + spills + ["return 0.0"]
        pieces.append(head + loads + body)
    return pieces, counts["sc"], counts["si"]


def _slot(name: str, integers: set[str], slots: dict, counts: dict) -> str:
    memory = "si" if name in integers else "sc"
    if name not in slots:
        slots[name] = counts[memory]
        counts[memory] += 1
    return f"{memory}[{slots[name]}]"


def _views(names: set[str], views: dict[str, tuple[int, str]]) -> list[str]:
    """The lines making the arrays ``names`` that earlier pieces made, and the arrays those read, in order
    (``views``: an array's name -> (its place among them, the top-level line making it))."""
    needed, stack = set(), [n for n in names if n in views]
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack += [n for n in _NAME.findall(views[name][1].split(" = ", 1)[1]) if n in views]
    return [line for _, line in sorted(views[name] for name in needed)]


@contextmanager
def sized(split_lines: int, piece_lines: int) -> Iterator[None]:
    """Split kernels longer than ``split_lines`` into pieces of ``piece_lines`` lines while inside (the
    fuzzer and the tests split small kernels to check the split ones against whole ones).

    >>> from symgrad.compile import pieces
    >>> with sized(0, 5):
    ...     pieces.SPLIT_LINES, pieces.PIECE_LINES
    (0, 5)
    """
    global SPLIT_LINES, PIECE_LINES
    before = SPLIT_LINES, PIECE_LINES
    SPLIT_LINES, PIECE_LINES = split_lines, piece_lines
    try:
        yield
    finally:
        SPLIT_LINES, PIECE_LINES = before
