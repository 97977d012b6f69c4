"""A long loop kernel split into functions of a few hundred lines, each compiled on its own.

Numba's compile time grows faster than a function's length (an RNN's Python loop of 10, 20, 40
steps: 2,600 lines in 16 s, 5,200 in 48 s, 10,400 in 285 s), so a long kernel is cut between its
top-level statements (whole loop nests, a scan's whole loop over its steps) into pieces. A piece
reads the arrays it uses as views of ``x``, ``p``, ``out`` and ``work`` (its view lines repeated:
they cost nothing), and the scalars computed at the top level of an earlier piece from ``sc``
(floats) and ``si`` (integers), where that piece stored them.

For the C compiler a long loop's body is cut too (``split(..., loops=True)``): a scan's loop over its
steps is one top-level statement, an ODE gradient's 1,400 lines of C in one function that gcc built on
one core; its pieces are called in turn inside the loop, which stores its counter in ``si`` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Kernels longer than this many lines are split; a piece closes once it holds PIECE_LINES lines.
SPLIT_LINES = 1200
PIECE_LINES = 300

_NAME = re.compile(r"\b([vatbsci]\d+)\b")  # the emitter's names: values, accumulators, arrays, counters
_ASSIGNED = re.compile(r"^\s*([vatbsci]\d+) = ")
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


@dataclass(frozen=True)
class Split:
    """A kernel cut into pieces: ``pieces``, the function bodies of ``(x, p, out, work, sc, si)``; ``driver``, the
    kernel's body calling them in turn (``piece{k}(x, p, out, work, sc, si)`` lines, inside a loop where that
    loop's body was cut, the last one returned); and how many ``floats`` ``sc`` and ``ints`` ``si`` hold."""

    pieces: list[list[str]]
    driver: list[str]
    floats: int
    ints: int


@dataclass
class _Chunk:
    """Whole statements of the kernel (or of the body of ``loop``, dedented) that become one piece."""

    statements: list[list[str]]
    loop: int | None = None  # its loop's place among the loops cut (``_chunked``'s headers)

    @property
    def lines(self) -> list[str]:
        return [line for s in self.statements for line in s]


def split(lines: list[str], integers: set[str], size: int | None = None, loops: bool = False) -> Split:
    """``lines`` (a kernel's body, ending in its ``return``) as pieces of about ``size`` lines; ``integers``:
    the scalar names holding integers. ``loops``: a top-level loop longer than ``size`` (a scan's loop over its
    steps) has its body cut too, its pieces called in turn inside the loop (its counter in ``si``).

    >>> body = ["t1 = work[0:3].reshape((3,))", "v2 = x[0] * 2.0", "for i3 in range(3):",
    ...         "    t1[i3] = v2", "return t1[2]"]
    >>> cut = split(body, set(), size=2)
    >>> for piece in cut.pieces:
    ...     print("\\n".join(piece), end="\\n--\\n")
    t1 = work[0:3].reshape((3,))
    v2 = x[0] * 2.0
    sc[0] = v2
    return 0.0
    --
    v2 = sc[0]
    t1 = work[0:3].reshape((3,))
    for i3 in range(3):
        t1[i3] = v2
    return 0.0
    --
    t1 = work[0:3].reshape((3,))
    return t1[2]
    --
    >>> cut.driver[-1]
    'return piece2(x, p, out, work, sc, si)'
    """
    size = PIECE_LINES if size is None else size
    chunks, headers = _chunked(lines, size, loops)
    used = [set(_NAME.findall("\n".join(c.lines))) for c in chunks]
    made = {m[1]: (0, line) for c in chunks for line in c.lines
            if (m := _ASSIGNED.match(line)) and m[1][0] in _ARRAYS and not line.startswith(" ")}
    used = [names | set(_NAME.findall("\n".join(_views(names, made)))) for names in used]  # (a view's scalars)
    last_use = {name: k for k, names in enumerate(used) for name in names}  # the last chunk using each name
    tops = [{m[1] for line in c.lines if (m := _ASSIGNED.match(line)) and not line.startswith(" ")}
            for c in chunks]  # the names each chunk assigns at its top level
    members: dict[int, list[int]] = {}  # a loop cut -> its chunks
    for k, chunk in enumerate(chunks):
        if chunk.loop is not None:
            members.setdefault(chunk.loop, []).append(k)
    views: dict[str, tuple[int, str]] = {}  # an array's name -> (its place, the top-level line making it)
    last: dict[str, int] = {}  # a scalar -> the last chunk assigning it
    slots: dict[str, int] = {}
    counts = {"sc": 0, "si": 0}
    pieces = []
    for k, chunk in enumerate(chunks):
        head = _views(used[k], views)
        counter = None if chunk.loop is None else _COUNTER.match(headers[chunk.loop])[1]
        # (in a loop cut: what a later chunk assigns is read from the step before; what an earlier one reads
        # of this chunk's, in the next step)
        mates = members.get(chunk.loop, []) if chunk.loop is not None else []
        later = set().union(*(tops[j] for j in mates if j > k))
        read_before = set().union(*(used[j] for j in mates if j < k))
        loads = [f"{name} = {_slot(name, integers, slots, counts)}"
                 for name in sorted(set(_NAME.findall("\n".join(head))) | used[k])
                 if name[0] not in _ARRAYS and (name in last or name == counter or name in later)]
        body = chunk.lines
        here: list[str] = []  # the scalars this chunk assigns that others may read (in order)
        for line in body:  # (a scalar first assigned inside a loop is that loop's own)
            m, top = _ASSIGNED.match(line), not line.startswith(" ")
            if m and m[1][0] in _ARRAYS and top:
                views[m[1]] = (len(views), line)
            elif m and m[1][0] not in _ARRAYS and (top or m[1] in last):
                last[m[1]] = k
                here.append(m[1])
        loaded = {line.split(" = ")[0] for line in loads}  # (in a loop: read in the next step, an accumulator)
        spills = [f"{_slot(n, integers, slots, counts)} = {n}" for n in dict.fromkeys(here)
                  if last_use[n] > k or n in read_before or chunk.loop is not None and n in loaded]
        if not body[-1].startswith("return "):
            body = body + spills + ["return 0.0"]
        pieces.append(loads + head + body)
    return Split(pieces, _driver(chunks, headers, slots), counts["sc"], counts["si"])


_COUNTER = re.compile(r"^for (i\d+) in range\(-?\d+(?:, -?\d+)*\):$")  # (bounds the driver knows)
_SORTS = re.compile(r"\b[ro]\d+\b")  # a sort's row and positions (loop_source._sort_source): never remade


def _chunked(lines: list[str], size: int, loops: bool) -> tuple[list[_Chunk], list[str]]:
    """The chunks of ``lines``: runs of whole top-level statements of ``size`` lines or more, and where
    ``loops``, a long loop's body cut likewise; and the headers of the loops cut."""
    chunks: list[_Chunk] = []
    headers: list[str] = []
    run: list[list[str]] = []  # the top-level statements since the last loop cut
    for statement in statements(lines):
        body = [line[4:] for line in statement[1:]]
        cuts = _grouped(statements(body), size, True) if loops and _cuttable(statement, size) else []
        if len(cuts) > 1 and not _remade(cuts):
            chunks += [_Chunk(group) for group in _grouped(run, size) if group]
            chunks += [_Chunk(c, len(headers)) for c in cuts]
            headers.append(statement[0])
            run = []
        else:
            run.append(statement)
    return chunks + [_Chunk(group) for group in _grouped(run, size) if group], headers


def _cuttable(statement: list[str], size: int) -> bool:
    """Whether ``statement`` is a loop over a range, longer than ``size``, whose body runs to its end every
    time (no return, break or continue), its lines indented by four spaces or more."""
    return (len(statement) > size + 1 and _COUNTER.match(statement[0]) is not None
            and all(line.startswith("    ") for line in statement[1:])
            and not any(line.split()[0] in ("return", "break", "continue") for line in statement[1:]))


def _grouped(statements: list[list[str]], size: int, step: bool = False) -> list[list[list[str]]]:
    """``statements`` in groups of ``size`` lines or more, except that a statement reading a sort's row made
    in its group joins it (an array of the workspace a later piece would make anew); ``step``: a loop's
    body, whose groups each hold a loop of their own (a piece called in every step does a loop's work, not a
    few lines': a bundle adjustment's rows, 2,200 lines of scalars a row, stay whole)."""
    groups: list[list[list[str]]] = [[]]
    length, looped, sorts = 0, False, set()
    for statement in statements:
        names = set(_SORTS.findall("\n".join(statement)))
        if length >= size and (looped or not step) and not names & sorts:
            groups.append([])
            length, looped, sorts = 0, False, set()
        groups[-1].append(statement)
        length, looped, sorts = length + len(statement), looped or statement[0].startswith("for "), sorts | names
    return groups


def _remade(groups: list[list[list[str]]]) -> bool:
    """Whether a group of a loop's body reads an array that only a later group makes (the one of the step
    before, which a piece making its views anew cannot see): such a loop is not cut."""
    texts = ["\n".join(line for s in group for line in s) for group in groups]
    made = [{m[1] for line in text.splitlines() if (m := _ASSIGNED.match(line)) and m[1][0] in _ARRAYS}
            for text in texts]
    return any(set(_NAME.findall(text)) & set().union(*made[k + 1:]) - set().union(*made[:k + 1])
               for k, text in enumerate(texts))


def _driver(chunks: list[_Chunk], headers: list[str], slots: dict[str, int]) -> list[str]:
    """The kernel's body calling the pieces of ``chunks`` in turn, a loop's inside its loop, which first
    stores its counter where its pieces read it."""
    lines: list[str] = []
    for k, chunk in enumerate(chunks):
        call = f"piece{k}(x, p, out, work, sc, si)"
        if chunk.loop is None:
            lines.append(call if k < len(chunks) - 1 else f"return {call}")
            continue
        if k == 0 or chunks[k - 1].loop != chunk.loop:
            counter = _COUNTER.match(headers[chunk.loop])[1]
            lines.append(headers[chunk.loop])
            if counter in slots:
                lines.append(f"    si[{slots[counter]}] = {counter}")
        lines.append(f"    {call}")
    return lines


def _slot(name: str, integers: set[str], slots: dict, counts: dict) -> str:
    memory = "si" if name in integers or name[0] == "i" else "sc"  # (i: a loop's counter)
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
