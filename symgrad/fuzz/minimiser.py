"""The minimiser: a disagreement's program shrunk while it still disagrees the same way (``minimise``)."""

from __future__ import annotations

import ast
import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np

from symgrad.fuzz.generator import _prune, _tie
from symgrad.fuzz.oracle import EXTRAS, check
from symgrad.fuzz.program import Disagreement, Program


def _statements(fn: ast.FunctionDef) -> list[tuple[list, int]]:
    """Every (body, position) of a statement that could go: the function's and its steps' (not returns)."""
    out = []
    bodies = [fn.body] + [s.body for s in ast.walk(fn) if isinstance(s, ast.FunctionDef) and s is not fn]
    for body in bodies:
        out += [(body, i) for i, s in enumerate(body) if not isinstance(s, ast.Return)]
    return out


def _candidates(program: Program) -> Iterator[Program]:
    """Smaller programs: statements dropped, expressions replaced by a part or an argument, shapes shrunk."""
    names = program.names
    source = program.source
    n_statements = len(_statements(ast.parse(source).body[0]))
    for k in range(n_statements):  # drop a statement
        tree = ast.parse(source)
        body, i = _statements(tree.body[0])[k]
        del body[i]
        yield dataclasses.replace(program, source=_prune(ast.unparse(tree) + "\n"))
    for k in range(n_statements):  # inline a variable defined once: its uses get the expression
        tree = ast.parse(source)
        body, i = _statements(tree.body[0])[k]
        stmt = body[i]
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name, value = stmt.targets[0].id, stmt.value
        del body[i]
        for node in ast.walk(tree):
            for field, child in ast.iter_fields(node):
                if isinstance(child, ast.Name) and child.id == name:
                    setattr(node, field, value)
                elif isinstance(child, list):
                    child[:] = [value if isinstance(c, ast.Name) and c.id == name else c for c in child]
        yield from _unparsed(program, tree)
    n_nodes = sum(1 for _ in ast.walk(ast.parse(source)))
    for k in range(n_nodes):  # replace an expression by one of its parts, or by an argument
        node = list(ast.walk(ast.parse(source)))[k]
        if isinstance(node, ast.Call):
            parts = list(node.args) + [kw.value for kw in node.keywords if kw.arg != "axis"]
            replacements = [ast.unparse(a) for a in parts if not isinstance(a, ast.Constant | ast.Lambda)]
            for j in range(len(node.keywords)):  # a keyword dropped (reverse=True, keepdims=True)
                yield from _with_node(program, k, lambda n, j=j: _drop_keyword(n, j))
        elif isinstance(node, ast.BinOp):
            replacements = [ast.unparse(node.left), ast.unparse(node.right)]
        elif isinstance(node, ast.UnaryOp):
            replacements = [ast.unparse(node.operand)]
        elif isinstance(node, ast.Subscript):
            replacements = [ast.unparse(node.value)]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in ("np", "sg"):
            replacements = [n for n in names if n != node.id]
        elif isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value not in (0.0, 1.0):
            replacements = ["1.0", "0.0"]
        else:
            continue
        for text in replacements:
            yield from _with_node(program, k, lambda n, text=text: ast.parse(text, mode="eval").body)
    yield from _without_unused_arguments(program)
    if len(program.argnums) > 1:  # differentiate one argument only
        for a in program.argnums:
            yield dataclasses.replace(program, argnums=(a,))
    for i, shape in enumerate(program.shapes):  # smaller arguments
        for smaller in _smaller(shape):
            shapes = list(program.shapes)
            shapes[i] = smaller
            yield dataclasses.replace(program, shapes=tuple(shapes))
    for seed in (0, 1):
        if program.seed != seed:
            yield dataclasses.replace(program, seed=seed)


def _without_unused_arguments(program: Program) -> Iterator[Program]:
    """The program without an argument its body never reads (and not the only one differentiated)."""
    tree = ast.parse(program.source)
    fn = tree.body[0]
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    for k, arg in enumerate(fn.args.args):
        if arg.arg in read or program.argnums == (k,) or len(fn.args.args) == 1:
            continue
        del fn.args.args[k]
        argnums = tuple(a - (a > k) for a in program.argnums if a != k)
        shapes = program.shapes[:k] + program.shapes[k + 1:]
        yield dataclasses.replace(program, source=ast.unparse(tree) + "\n", shapes=shapes, argnums=argnums)
        return


def _drop_keyword(node: ast.Call, j: int) -> ast.Call:
    del node.keywords[j]
    return node


def _with_node(program: Program, k: int, replace: Callable[[ast.AST], ast.AST]) -> Iterator[Program]:
    """The program with its k-th node (in ``ast.walk`` order) replaced (by ``replace(node)``)."""
    tree = ast.parse(program.source)
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for j, child in enumerate(value):
                    if isinstance(child, ast.AST) and _index(tree, child) == k:
                        value[j] = replace(child)
                        yield from _unparsed(program, tree)
                        return
            elif isinstance(value, ast.AST) and _index(tree, value) == k:
                setattr(parent, field, replace(value))
                yield from _unparsed(program, tree)
                return


def _index(tree: ast.AST, node: ast.AST) -> int:
    if not hasattr(tree, "_order"):
        tree._order = {id(n): i for i, n in enumerate(ast.walk(tree))}
    return tree._order.get(id(node), -1)


def _unparsed(program: Program, tree: ast.AST) -> Iterator[Program]:
    try:
        source = _prune(ast.unparse(tree) + "\n")
    except Exception:
        return
    if source != program.source and not _tie(source):
        yield dataclasses.replace(program, source=source)


def _smaller(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    if len(shape) == 1:
        n = shape[0]
        return [(m,) for m in (64, 72, 80, 96, 128) if m < n] + ([(n // 2,)] if n < 64 and n >= 4 else [])
    r, c = shape
    return [s for s in ((r // 2, c), (r, c // 2), (8, 8)) if s[0] * s[1] >= 64 and s != shape and min(s) >= 1]


def _size(program: Program) -> tuple[int, int, int]:
    return (len(program.source), sum(int(np.prod(s)) for s in program.shapes), len(program.argnums))


def minimise(d: Disagreement, backends: tuple[str, ...] = ("python", "vm"), seconds: float = 60.0,
             runners: dict | None = None) -> Disagreement:
    """The smallest program found (within ``seconds``) that still shows ``d``'s disagreement (same key).

    >>> p = Program("def f(x):\\n    v1 = np.sin(x)\\n    return np.sum(v1 * x)\\n", ((64,),), (0,))
    >>> bad = lambda prog, f, xs: (0.0, [np.zeros(64)], True, "vm")   # a planted bug: everything 0
    >>> (d, *_), status = check(p, runners={"vm": bad})
    >>> minimise(d, runners={"vm": bad}).program.source
    'def f(x):\\n    return np.sum(x)\\n'
    """
    backends = tuple(dict.fromkeys(("python", *backends, *([d.probe] if d.probe in ("vm", "numba") else []))))
    extras = tuple(e for e in EXTRAS if d.probe.startswith(e + ":"))
    best, found = d.program, d
    deadline = time.monotonic() + seconds
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _candidates(best):
            if time.monotonic() > deadline:
                break
            if _size(candidate) >= _size(best):
                continue
            results = check(candidate, backends, extras, only=d.probe, runners=runners)[0]
            same = [x for x in results if x.key == d.key]
            if same:
                best, found, improved = candidate, same[0], True
                break
    return dataclasses.replace(found, program=best, original=d.program)
