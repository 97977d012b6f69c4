"""A differential fuzzer: random NumPy programs, run on every backend and checked against each other.

Each program is a short Python function (source text, so a failing one can be printed and pasted)
of one or two float arrays, built from elementwise ops, gathers (permutations, integer tables,
``//`` and ``%`` index arithmetic), slices, ``np.minimum`` / ``np.where`` / ``np.clip``,
reductions, reshapes, joins, ``@`` / ``np.einsum``, ``np.cumsum`` and ``sg.scan``; it returns
``np.sum`` of something. For each program the fuzzer compares

- the value of ``sg.value_and_grad(backend="python")`` (the reference interpreter, rolled where
  the arrays have 64 elements or more) with NumPy's, and its gradient with central finite
  differences of the NumPy function along random directions;
- the element-by-element trace (``trace.ROLLED_MIN`` raised for the call) with the rolled one;
- the value and gradient on the other backends (``vm``, ``numba``) with the interpreter's;
- sometimes ``sg.jvp``, ``sg.hvp``, ``sg.hessian``, ``sg.jacobian`` and ``sg.vmap(sg.grad(f))``.

A disagreement is minimised (statements dropped, subexpressions replaced by their operands,
variables by arguments, sizes shrunk) while it still disagrees the same way.

Command line: ``python -m symgrad.fuzz --minutes 5 --backends python,vm,numba --numba-every 20``
(``--jobs 2``: two processes, seeds ``seed`` and ``seed + 1``, their counts added).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import dataclasses
import functools
import multiprocessing
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import symgrad as sg
from symgrad import trace
from symgrad.compile import pieces
from symgrad.expr import interp

# Relative tolerances. A backend against the interpreter: the same formulas, so only rounding (the
# compiled transcendental functions are within 3 ulp of NumPy's) separates them; errors are scaled by
# the largest entry of the reference (an absolute floor relative to the magnitude).
BACKEND_RTOL = 1e-10
VALUE_RTOL = 1e-9  # the interpreter against NumPy: another order of additions
FD_RTOL = 1e-5  # the gradient against finite differences (loose: truncation and rounding)
FD_STEPS = (1e-4, 1e-6, 1e-7)  # central differences at each; one within FD_RTOL passes (steep programs need 1e-7)
FD_LADDER = tuple(10.0 ** (-k / 2) for k in range(8, 21))  # 1e-4 ... 1e-10, where all miss: settled?
ELEMENT_MAX = 400  # the element trace only for arguments this small in all (it builds a node per element)
UNSUPPORTED = (sg.TracingError, NotImplementedError)  # constructs the tracer refuses: not bugs
# What the interpreter refuses by design (it gives every index symbol of a rolled graph a NumPy axis)
LIMITS = ("evaluate it compiled",)  # (64 axes; more values at once than it holds)


def _unsupported(e: BaseException) -> bool:
    return isinstance(e, UNSUPPORTED) or any(text in str(e) for text in LIMITS)


@dataclasses.dataclass(frozen=True)
class Program:
    """A random function ``f`` as source text, the shapes of its arguments and what to differentiate.

    >>> p = Program("def f(x):\\n    return np.sum(np.sin(x))\\n", ((64,),), (0,), seed=1)
    >>> float(p.function()(*p.inputs())) == float(np.sum(np.sin(p.inputs()[0])))
    True
    """

    source: str
    shapes: tuple[tuple[int, ...], ...]
    argnums: tuple[int, ...]
    seed: int = 0

    @property
    def names(self) -> list[str]:
        """The argument names, as the source's ``def`` line gives them."""
        fn = ast.parse(self.source).body[0]
        return [a.arg for a in fn.args.args]

    def function(self, source: str | None = None) -> Callable:
        """The function the source defines (executed in a namespace holding ``np`` and ``sg``)."""
        namespace: dict = {"np": np, "sg": sg}
        exec(compile(source or self.source, "<fuzz>", "exec"), namespace)
        return namespace["f"]

    def vector_function(self) -> Callable | None:
        """``f`` returning the array it sums (for Jacobians), or None when it does not end ``return np.sum(e)``."""
        tree = ast.parse(self.source)
        ret = tree.body[0].body[-1]
        call = ret.value if isinstance(ret, ast.Return) else None
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "np.sum" and len(call.args) == 1
                and not call.keywords):
            return None
        ret.value = ret.value.args[0]
        return self.function(ast.unparse(tree))

    def inputs(self) -> list[np.ndarray]:
        """The arguments: standard normal arrays from ``seed``."""
        rng = np.random.default_rng(self.seed)
        return [rng.normal(size=s) for s in self.shapes]

    def snippet(self, probe: str = "vm") -> str:
        """A script that rebuilds the inputs and prints what ``probe`` compares (see ``Disagreement``).

        >>> p = Program("def f(x):\\n    return np.sum(x)\\n", ((64,),), (0,))
        >>> print(p.snippet("vm"))  # doctest: +ELLIPSIS
        import numpy as np
        ...
        print(sg.value_and_grad(f, argnums=0, backend='vm')(x))
        <BLANKLINE>
        """
        names = self.names
        argnums = self.argnums[0] if len(self.argnums) == 1 else self.argnums
        lines = ["import numpy as np", "import symgrad as sg", "", self.source.rstrip(), "",
                 f"rng = np.random.default_rng({self.seed})"]
        lines += [f"{n} = rng.normal(size={s if len(s) > 1 else s[0]})" for n, s in zip(names, self.shapes)]
        args = ", ".join(names)
        kind, _, backend = probe.rpartition(":")
        backend = backend if backend in ("vm", "numba", "python") else "python"
        lines.append(f"print(f({args}), sg.value_and_grad(f, argnums={argnums}, backend='python')({args}))")
        k = self.argnums[0]
        call = {"jvp": f"sg.jvp(f, ({args},), tuple(np.ones_like(a) for a in ({args},)), backend={backend!r})",
                "hvp": f"sg.hvp(f, argnums={k}, backend={backend!r})({args}, np.ones_like({names[k]}))",
                "hessian": f"sg.hessian(f, argnums={k}, backend={backend!r})({args})",
                "jacobian": f"sg.jacobian(f_vec, argnums={k}, backend={backend!r})({args})  # f without np.sum",
                "vmap": f"sg.vmap(sg.grad(f, backend={backend!r}), backend={backend!r})(np.stack([{args}] * 3))"}
        if probe == "element":
            lines += ["from symgrad import trace", "trace.ROLLED_MIN = 10**9  # traced element by element"]
        if probe in ("element", "vm", "numba"):
            lines.append(f"print(sg.value_and_grad(f, argnums={argnums}, backend={backend!r})({args}))")
        elif kind in call:
            if kind != "jvp" and backend != "python":
                lines.append(f"print({call[kind].replace(repr(backend), repr('python'))})")
            lines.append(f"print({call[kind]})")
        return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Disagreement:
    """Two computations of one quantity that differ (``kind`` "wrong"; "nan" where the only differences
    are nan against a number: a nan partial of an unused or untaken value times a zero adjoint,
    see docs/guide.md) or one that raises ("error").

    ``probe`` names the computation checked (``"vm"``: value_and_grad on the loop VM against the
    interpreter, ``"element"``: the element trace against the rolled one, ``"fd"``: the interpreter's
    gradient against finite differences, ``"hvp:vm"`` ...), ``quantity`` what differs (``"value"``,
    ``"d/dx"``, ...), ``detail`` by how much or the exception.

    >>> p = Program("def f(x):\\n    return 0.0\\n", ((64,),), (0,))
    >>> Disagreement("vm", "value", "wrong", "max error 1.0", p).key
    ('vm', 'value', 'wrong')
    """

    probe: str
    quantity: str
    kind: str
    detail: str
    program: Program
    original: Program | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What the minimiser keeps: the same probe, quantity and kind."""
        return self.probe, self.quantity, self.kind

    def __str__(self) -> str:
        return f"[{self.probe}] {self.quantity} {self.kind}: {self.detail}\n{self.program.snippet(self.probe)}"


# ----------------------------------------------------------------------------------------------
# The generator


class _Gen:
    """The state of one program being generated: the arrays defined so far (name, shape), the lines."""

    def __init__(self, rng: np.random.Generator, names: list[str], shapes: list[tuple[int, ...]]) -> None:
        self.rng = rng
        self.pool: list[tuple[str, tuple[int, ...]]] = list(zip(names, shapes))
        self.lines: list[str] = []
        self.count = 0

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def coin(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, seq: list | tuple) -> Any:
        return seq[int(self.rng.integers(len(seq)))]

    def pick(self, ok: Callable[[tuple[int, ...]], bool] = lambda s: True) -> tuple[str, tuple[int, ...]] | None:
        """An array of the pool whose shape passes ``ok``: the newest one half the time (programs are chains)."""
        fits = [v for v in self.pool if ok(v[1])]
        if not fits:
            return None
        return fits[-1] if self.coin(0.7) else self.choice(fits)

    def table(self, text: str) -> str:
        """A line defining an integer table; its name."""
        name = self.fresh("t")
        self.lines.append(f"{name} = {text}")
        return name


_UNARY = ["np.sin({a})", "np.cos({a})", "np.tanh({a})", "np.exp(-{a} ** 2)", "np.exp(0.2 * {a})",
          "np.log(1.0 + {a} ** 2)", "np.square({a})", "{a} ** 3", "np.sqrt(1.0 + {a} ** 2)", "np.abs({a})",
          "2.0 * {a} - 1.0", "1.0 / (1.0 + {a} ** 2)", "-{a}", "np.maximum({a}, 0.0)", "np.minimum({a}, 0.5)",
          "np.clip({a}, -0.5, 0.7)", "np.where({a} > 0.3, {a}, 0.5 * {a})", "{a} * {a}",
          "np.where({a} > 0.1, np.sqrt({a}), 0.0)", "np.abs({a}) ** 1.5"]
_BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / (1.0 + {b} ** 2)", "np.minimum({a}, {b})",
           "np.maximum({a}, {b})", "np.where({a} > {b}, {a}, {b} * {b})",
           "np.where({a} < {b}, {a} * {b}, {a} - {b})",
           "np.logaddexp({a}, {b})", "{a} * np.sin({b})"]


def _unary(g: _Gen) -> tuple[str, tuple] | None:
    a, shape = g.pick()
    return g.choice(_UNARY).format(a=a), shape


def _binary(g: _Gen) -> tuple[str, tuple] | None:
    a, sa = g.pick(lambda s: s != ())
    template = g.choice(_BINARY)
    if _tie(template.format(a="a", b="a")):
        template = g.choice(_BINARY[:4])
    if g.coin(0.15):  # a scalar of the pool, or a number
        b = g.pick(lambda s: s == ())
        return template.format(a=a, b=b[0] if b else "0.3"), sa
    same = g.pick(lambda s: s == sa)
    if same and same[0] != a and g.coin(0.6):
        return template.format(a=a, b=same[0]), sa
    if len(sa) == 1:  # another vector: both cut to the shorter length
        b, sb = g.pick(lambda s: len(s) == 1)
        m = min(sa[0], sb[0])
        cut = lambda name, n: name if n == m else f"{name}[:{m}]"  # noqa: E731
        return template.format(a=cut(a, sa[0]), b=cut(b, sb[0])), (m,)
    rows, cols = sa[0], sa[-1]
    b = g.pick(lambda s: s in ((cols,), (rows,), (rows, 1), (1, cols)))
    if b is None:
        return None
    name, sb = b
    if sb == (rows,) and rows != cols:
        name = f"{name}[:, None]"
    return template.format(a=a, b=name), sa


def _gather(g: _Gen) -> tuple[str, tuple] | None:
    a, (m,) = g.pick(lambda s: len(s) == 1 and s[0] >= 4) or (None, (0,))
    if a is None:
        return None
    seed = int(g.rng.integers(100))
    kind = g.choice(["perm", "perm", "table", "half", "mod", "tile", "reverse"])
    if kind == "perm":
        return f"{a}[{g.table(f'np.random.default_rng({seed}).permutation({a}.shape[0])')}]", (m,)
    if kind == "table":
        k = int(g.choice([m, m, 64, 100]))
        return f"{a}[{g.table(f'np.random.default_rng({seed}).integers(0, {a}.shape[0], size={k})')}]", (k,)
    if kind == "half":
        return f"{a}[np.arange({a}.shape[0]) // 2]", (m,)
    if kind == "mod":
        k, c = g.choice([3, 5, 7]), int(g.rng.integers(1, 9))
        return f"{a}[({k} * np.arange({a}.shape[0]) + {c}) % {a}.shape[0]]", (m,)
    if kind == "tile":
        k = int(g.choice([m + 16, 2 * m, 64]))
        return f"{a}[np.arange({k}) % {a}.shape[0]]", (k,)
    return f"{a}[np.arange({a}.shape[0])[::-1]]", (m,)


_SLICES = [("[::2]", lambda m: (m + 1) // 2), ("[::-1]", lambda m: m), ("[3:-2]", lambda m: m - 5),
           ("[1::3]", lambda m: (m - 1 + 2) // 3), ("[-2::-2]", lambda m: (m - 2) // 2 + 1),
           ("[1:]", lambda m: m - 1), ("[:-1]", lambda m: m - 1), ("[5:]", lambda m: m - 5)]


def _slice(g: _Gen) -> tuple[str, tuple] | None:
    v = g.pick(lambda s: len(s) >= 1 and s[0] >= 8)
    if v is None:
        return None
    a, s = v
    if len(s) == 2 and g.coin(0.5):
        kind = g.choice(["[:, ::-1]", "[:, 1:]", "[::2]", "[1:, ::2]"])
        r, c = s
        shape = {"[:, ::-1]": (r, c), "[:, 1:]": (r, c - 1), "[::2]": ((r + 1) // 2, c),
                 "[1:, ::2]": (r - 1, (c + 1) // 2)}[kind]
        if 0 in shape:
            return None
        return f"{a}{kind}", shape
    if len(s) == 2:
        return f"{a}[1:] - {a}[:-1]", (s[0] - 1, s[1])
    if g.coin(0.25):
        return f"{a}[1:] * {a}[:-1]", (s[0] - 1,)
    text, size = g.choice(_SLICES)
    return f"{a}{text}", (size(s[0]),)


def _pad(g: _Gen) -> tuple[str, tuple] | None:
    """np.pad (zeros, or wrapping around), np.split; rarely np.roll / np.diff (no rolled form: element traces)."""
    v = g.pick(lambda s: len(s) == 1 and s[0] >= 4)
    if v is None:
        return None
    a, (m,) = v
    kind = g.choice(["zeros", "wrap", "split", "zeros", "wrap", "split", "roll", "diff"])
    if kind == "zeros":
        return f"np.pad({a}, (2, 3))", (m + 5,)
    if kind == "wrap":
        return f"np.pad({a}, 1, mode='wrap')", (m + 2,)
    if kind == "split" and m % 2 == 0:
        return f"np.split({a}, 2)[{int(g.rng.integers(2))}]", (m // 2,)
    if kind == "roll":
        return f"np.roll({a}, 3)", (m,)
    return f"np.diff({a})", (m - 1,)


def _reshape(g: _Gen) -> tuple[str, tuple] | None:
    v = g.pick(lambda s: len(s) in (1, 2) and int(np.prod(s)) >= 4)
    if v is None:
        return None
    a, s = v
    if len(s) == 2:
        if g.coin(0.5):
            return f"{a}.T", (s[1], s[0])
        return f"{a}.ravel()", (s[0] * s[1],)
    rows = [r for r in (2, 3, 4, 6, 8, 12, 16) if s[0] % r == 0 and s[0] // r >= 2]
    if not rows:
        return None
    r = g.choice(rows)
    return f"{a}.reshape({r}, -1)", (r, s[0] // r)


def _join(g: _Gen) -> tuple[str, tuple] | None:
    a, sa = g.pick(lambda s: len(s) >= 1)
    b = g.pick(lambda s: s == sa)
    if g.coin(0.4) and b is not None:
        if len(sa) == 1 and g.coin(0.5):
            return f"np.stack([{a}, {b[0]}], axis=1)", (sa[0], 2)
        return f"np.stack([{a}, {b[0]}])", (2, *sa)
    if len(sa) == 1:
        b, sb = g.pick(lambda s: len(s) == 1 and s[0] + sa[0] <= 512) or (None, None)
        if b is None:
            return None
        return f"np.concatenate([{a}, {b}])", (sa[0] + sb[0],)
    axis = int(g.rng.integers(2))
    other = g.pick(lambda s: len(s) == 2 and s[1 - axis] == sa[1 - axis])
    b, sb = other if other else (a, sa)
    shape = (sa[0] + sb[0], sa[1]) if axis == 0 else (sa[0], sa[1] + sb[1])
    return f"np.concatenate([{a}, {b}], axis={axis})", shape


def _reduce(g: _Gen) -> tuple[str, tuple] | None:
    a, s = g.pick(lambda s: len(s) >= 1)
    op = g.choice(["np.sum", "np.max", "np.min", "np.mean", "np.sum"])
    if len(s) == 1 or g.coin(0.15):
        return f"{op}({a})", ()
    axis = int(g.rng.integers(2))
    if g.coin(0.4):
        shape = (1, s[1]) if axis == 0 else (s[0], 1)
        if g.coin(0.5):
            return f"{a} - {op}({a}, axis={axis}, keepdims=True)", s
        if g.coin(0.5):
            return f"np.exp({a} - np.max({a}, axis={axis}, keepdims=True))", s
        return f"{op}({a}, axis={axis}, keepdims=True)", shape
    return f"{op}({a}, axis={axis})", (s[1 - axis],)


def _product(g: _Gen) -> tuple[str, tuple] | None:
    v = g.pick(lambda s: len(s) == 2)
    if v is None:
        return None
    a, (r, c) = v
    kind = g.choice(["mv", "aat", "ata", "atb", "einsum_rows", "einsum_outer", "batched_mv", "batched_mm"])
    if kind == "mv":
        b = g.pick(lambda s: len(s) == 1 and s[0] >= c)
        if b is not None:
            return f"{a} @ {b[0] if b[1][0] == c else f'{b[0]}[:{c}]'}", (r,)
        kind = "aat"
    if kind == "aat":
        return f"{a} @ {a}.T", (r, r)
    if kind == "ata":
        return f"{a}.T @ {a}", (c, c)
    if kind == "atb":
        b, sb = g.pick(lambda s: len(s) == 2 and s[0] == r) or (a, (r, c))
        return f"{a}.T @ {b}", (c, sb[1])
    b, _ = g.pick(lambda s: s == (r, c)) or (a, (r, c))
    stacked = f"({a}[:, :, None] * {b}[:, None, :])"  # (r, c, c): a matrix for each row
    if kind == "batched_mv":
        return f"np.einsum('kij,kj->ki', {stacked}, {b})", (r, c)
    if kind == "batched_mm":
        return f"np.einsum('kij,kjl->kil', {stacked}, np.sin({stacked}))[:, 1 % {c}]", (r, c)
    if kind == "einsum_rows":
        return f"np.einsum('ij,ij->i', {a}, {b})", (r,)
    return f"np.einsum('ij,kj->ik', {a}, {b})", (r, r)


def _composed(g: _Gen) -> tuple[str, tuple] | None:
    """NumPy's flips, rolls, differences, tiles, repeats, takes, triangles, traces, cumulative products
    and running extrema (rolled as gathers and scans: symgrad/expr/composed.py)."""
    v = g.pick(lambda s: 1 <= len(s) <= 2 and s[-1] >= 4)
    if v is None:
        return None
    a, s = v
    k = int(g.rng.integers(1, 4))
    if len(s) == 2:
        r, c = s
        options = [(f"np.flip({a}, axis={k % 2})", s), (f"np.roll({a}, {k}, axis=1)", s),
                   (f"np.roll({a}, ({k}, -1), axis=(0, 1))", s), (f"np.diff({a}, axis=0)", (r - 1, c)),
                   (f"np.tile({a}, (1, 2))", (r, 2 * c)), (f"np.repeat({a}, 2, axis=1)", (r, 2 * c)),
                   (f"np.take({a}, [0, {c - 1}, 1], axis=1)", (r, 3)), (f"np.maximum.accumulate({a}, axis=1)", s),
                   (f"np.cumprod(0.9 + 0.1 * np.tanh({a}), axis=0)", s)]
        if r == c:
            options += [(f"np.triu({a}, {k - 2})", s), (f"np.trace({a}) + {a}[0]", (c,))]
        return g.choice([o for o in options if 0 not in o[1]])
    m = s[0]
    return g.choice([(f"np.flip({a})", s), (f"np.roll({a}, {k})", s),
                     (f"np.diff({a}, n={k % 2 + 1})", (m - k % 2 - 1,)),
                     (f"np.tile({a}, 2)", (2 * m,)), (f"np.repeat({a}[:{m // 2}], 2)", (2 * (m // 2),)),
                     (f"np.take({a}, [{m - 1}, 0, 2, 2])", (4,)), (f"np.minimum.accumulate({a})", s),
                     (f"np.cumprod(1.0 + 0.1 * np.sin({a}))", s), (f"np.append({a}, 0.5)", (m + 1,)),
                     (f"np.kron({a}[:3], {a}[-2:])", (6,)), (f"np.cross({a}[:3], {a}[-3:])", (3,))])


def _control(g: _Gen) -> tuple[str, tuple] | None:
    """Control flow as JAX code writes it (symgrad/control.py): fori_loop whose counter indexes and
    updates arrays (``.at[i]``, ``(i + k) % m``: gathers by a scan's integer rows), cond on a traced
    condition, a bounded while_loop, ``.at[idx].add`` at repeated positions."""
    v = g.pick(lambda s: len(s) == 1 and 3 <= s[0] <= 96)
    if v is None:
        return None
    a, (m,) = v
    k = int(g.rng.integers(1, m))
    at = f"sg.numpy.asarray({a})"
    return g.choice([
        (f"sg.fori_loop(0, {m}, lambda i, y: y.at[i].set(np.tanh(y[i]) + 0.5 * y[(i + {k}) % {m}]), {at})", (m,)),
        (f"sg.fori_loop(1, {m}, lambda i, s: s * 0.9 + {a}[i] * {a}[(i * {k}) % {m}], 0.1)", ()),
        (f"sg.fori_loop(0, 3, lambda i, y: y.at[i + 1].add(y[i] ** 2), {at})", (m,)),
        (f"sg.cond(np.sum({a}) > 0, lambda u: u * 2.0, lambda u: np.sin(u), {a})", (m,)),
        (f"sg.while_loop(lambda u: np.sum(u * u) > 0.3, lambda u: u * 0.8 + 0.01, {a}, max_steps=5)", (m,)),
        (f"{at}.at[np.array([0, 2, 0])].add(np.sin({a}[:3]))", (m,)),
        (f"{at}.at[1:].multiply(np.cos({a}[:-1]))", (m,)),
    ])


def _branches(g: _Gen) -> tuple[str, tuple] | None:
    """Python ``if``, conditional expressions, ``while`` / ``break`` and ``max`` on traced values,
    decided by the call's values (symgrad/guards.py): each backend must run the branch NumPy runs."""
    v = g.pick(lambda s: len(s) == 1 and 3 <= s[0])
    if v is None:
        return None
    a, (m,) = v
    i, j = (int(k) for k in g.rng.integers(0, m, 2))
    c = round(float(g.rng.normal()), 2)
    u = g.fresh("u")
    loop = (f"{u} = {a}\nfor _ in range({int(g.rng.integers(1, 5))}):\n    if np.max(np.abs({u})) < {abs(c)}:\n"
            f"        break\n    {u} = np.tanh({u}) * 1.5 - 0.1")
    text, shape = g.choice([
        (f"{a} * 2.0 if np.sum({a}) > {c} else np.sin({a})", (m,)),
        (f"{a} * {a}[{i}] if {a}[{i}] > {a}[{j}] else {a} + 1.0", (m,)),
        (f"max(np.sum({a} ** 2), {abs(c) * m}) * {a}", (m,)),
        (loop, (m,)),
    ])
    if text is loop:
        g.lines.append(loop)
        return u, shape
    return text, shape


def _cumsum(g: _Gen) -> tuple[str, tuple] | None:
    a, s = g.pick(lambda s: len(s) >= 1)
    if len(s) == 1:
        return g.choice([f"np.cumsum({a})", f"np.cumsum({a}[::-1])"]), s
    axis = int(g.rng.integers(2))
    return f"np.cumsum({a}, axis={axis})", s


def _scan(g: _Gen) -> tuple[str, tuple] | None:
    """``sg.scan`` over the rows of a pool array (or ``length=``): a carry of 1..16 elements, a scalar, a pair."""
    stack = g.pick(lambda s: (len(s) == 2 and 2 <= s[0] <= 48) or (len(s) == 1 and 2 <= s[0] <= 160))
    c = int(g.choice([1, 2, 3, 4, 8, 16, 5]))
    kind = g.choice(["vector", "vector", "scalar", "pair"])
    if kind == "scalar":
        c = 0
    row_term = "0.5"
    if stack is not None and not g.coin(0.1):
        xs, ss = stack
        steps = ss[0]
        if len(ss) == 1:
            row_term = "r"
        elif ss[1] >= c and c > 0:
            row_term = f"r[:{c}]"
        else:
            row_term = g.choice(["np.sum(r)", "np.mean(r ** 2)", "r[0]"])
        call_tail = f", {xs}"
    else:
        steps = int(g.choice([3, 5, 8]))
        call_tail = f", length={steps}"
        row_term = "0.5"
    # the carry's initial value, maybe read from the pool (then it depends on the arguments)
    if c:
        src = g.pick(lambda s: len(s) == 1 and s[0] >= c)
        init = f"{src[0]}[:{c}]" if src is not None and g.coin(0.6) else f"np.zeros({c})"
    else:
        src = g.pick(lambda s: s == ())
        init = src[0] if src is not None and g.coin(0.5) else "0.0"
    closure = g.pick(lambda s: len(s) == 1 and s[0] >= c) if c else g.pick(lambda s: s == ())
    w = "0.8"
    if closure is not None and g.coin(0.6):
        w = f"{closure[0]}[:{c}]" if c else closure[0]
    h = "h"
    updates = [f"np.tanh({h} * {w} + {row_term})", f"0.9 * {h} + np.sin({row_term})", f"{h} + {row_term} * {w}",
               f"np.maximum({h}, {row_term}) * 0.9", f"{h} * np.cos({row_term}) + 0.1"]
    if c > 1:
        updates += [f"{h}[::-1] * 0.5 + {row_term}", f"{h} * 0.7 + np.sum({h} * {w}) * 0.1 + {row_term}"]
    update = g.choice(updates)
    ys = g.choice(["None", "h", "np.sum(h * h)", f"h * {row_term}"])
    step = g.fresh("step")
    lines = [f"def {step}(carry, r):"]
    if kind == "pair":
        lines += ["    h, s = carry", f"    h = {update}", "    s = 0.5 * s + np.sum(h * h)"]
        ys = g.choice([ys, "s", "(h, s)"])
        lines.append(f"    return (h, s), {ys}")
        init = f"({init}, 0.1)"
    else:
        lines += ["    h = carry", f"    h = {update}", f"    return h, {ys}"]
    reverse = ", reverse=True" if g.coin(0.25) else ""
    last, out = g.fresh(), g.fresh()
    lhs = f"({last}, {g.fresh()}), {out}" if kind == "pair" else f"{last}, {out}"
    g.lines.append("\n".join(lines))
    g.lines.append(f"{lhs} = sg.scan({step}, {init}{call_tail}{reverse})")
    carry_shape = (c,) if c else ()
    if kind == "pair":
        s_name = lhs.split(",")[1].strip(" ()")
        g.pool.append((s_name, ()))
    g.pool.append((last, carry_shape))
    if ys == "None":
        return None
    one = {"h": carry_shape, "np.sum(h * h)": (), f"h * {row_term}": carry_shape, "s": ()}
    if ys == "(h, s)":
        g.pool.append((out, None))  # a tuple: not an array (only its parts are)
        g.lines.append(f"{g.fresh()}, {g.fresh()} = {out}")
        g.pool.pop()
        first, second = g.lines[-1].split(" = ")[0].split(", ")
        g.pool += [(first, (steps, *carry_shape)), (second, (steps,))]
        return None
    shape = (steps, *one[ys])
    if row_term != "r" and ys == f"h * {row_term}" and c == 0:
        shape = (steps,)
    g.pool.append((out, shape))
    return None


def _gather2d(g: _Gen) -> tuple[str, tuple] | None:
    """Gathers on a 2-D array: rows or columns through a permutation or a table, a 2-D table into a vector."""
    seed = int(g.rng.integers(100))
    v = g.pick(lambda s: len(s) == 2)
    if v is None or g.coin(0.3):
        v = g.pick(lambda s: len(s) == 1 and s[0] >= 8)
        if v is None:
            return None
        a, (m,) = v
        r = g.choice([2, 4, 8])
        t = g.table(f"np.random.default_rng({seed}).integers(0, {a}.shape[0], size=({r}, {m // r}))")
        return f"{a}[{t}]", (r, m // r)
    a, (r, c) = v
    if g.coin(0.5):
        t = g.table(f"np.random.default_rng({seed}).permutation({a}.shape[1])")
        return f"{a}[:, {t}]", (r, c)
    if g.coin(0.5):
        t = g.table(f"np.random.default_rng({seed}).permutation({a}.shape[0])")
        return f"{a}[{t}]", (r, c)
    return f"{a}[np.arange({a}.shape[0])[:, None], ({a}.shape[1] - 1 - np.arange({a}.shape[1]))[None, :]]", (r, c)


def _outer(g: _Gen) -> tuple[str, tuple] | None:
    """A broadcast outer operation of two vectors cut to at most 16 elements: a 2-D array."""
    a, sa = g.pick(lambda s: len(s) == 1) or (None, None)
    b, sb = g.pick(lambda s: len(s) == 1) or (None, None)
    if a is None:
        return None
    m, k = min(sa[0], int(g.choice([4, 8, 16]))), min(sb[0], int(g.choice([4, 8, 16])))
    op = g.choice(["*", "+", "-"])
    if g.coin(0.3):
        return f"np.outer({a}[:{m}], {b}[:{k}])", (m, k)
    return f"{a}[:{m}, None] {op} {b}[None, :{k}]", (m, k)


def _nested(g: _Gen) -> tuple[str, tuple] | None:
    """A transform inside the function: sg.grad of a function of a vector, sg.vmap over rows."""
    v = g.pick(lambda s: len(s) in (1, 2))
    a, s = v
    inner = g.choice(["np.sum(np.sin(u) * u)", "np.sum(u[1:] * u[:-1] ** 2)", "np.sum(np.tanh(u)) * np.sum(u)",
                      "np.max(u) + np.sum(u ** 3)"])
    if len(s) == 1 and s[0] % 4 == 0 and s[0] >= 8 and g.coin(0.5):
        a, s = f"{a}.reshape(4, -1)", (4, s[0] // 4)
    if len(s) == 2 and g.coin(0.7):
        if g.coin(0.5):
            return f"sg.vmap(sg.grad(lambda u: {inner}))({a})", s
        return f"sg.vmap(lambda u: {inner})({a})", (s[0],)
    return f"sg.grad(lambda u: {inner})({a})", s


def _statistic(g: _Gen) -> tuple[str, tuple] | None:
    """np.var / np.std / np.linalg.norm / np.prod (of a short slice) / np.mean of a vector or along an axis."""
    a, s = g.pick(lambda s: len(s) >= 1)
    kind = g.choice(["np.var", "np.std", "norm", "prod", "np.mean"])
    if kind == "prod":
        if len(s) == 2 and s[1] <= 16:
            return f"np.prod(1.0 + 0.1 * {a}, axis=1)", (s[0],)
        return f"np.prod(1.0 + 0.1 * {a}.ravel()[:8])", ()
    if kind == "norm":
        return g.choice([f"np.linalg.norm({a})", f"np.linalg.norm({a}.ravel(), 1)"]), ()
    if len(s) == 2 and g.coin(0.6):
        axis = int(g.rng.integers(2))
        return f"{kind}({a}, axis={axis})", (s[1 - axis],)
    return f"{kind}({a})", ()


_MOVES = [(_unary, 4), (_binary, 5), (_gather, 3), (_slice, 2), (_reshape, 2), (_join, 1), (_reduce, 2),
          (_product, 1.5), (_cumsum, 1), (_scan, 1), (_gather2d, 1), (_outer, 0.7), (_nested, 0.7),
          (_statistic, 0.7), (_pad, 0.7), (_composed, 1.5), (_control, 1), (_branches, 1)]


def _tie(text: str) -> bool:
    """Whether a comparison, np.minimum / np.maximum or np.where compares an operand with itself, or ``a - a``
    makes zeros: ties everywhere, where the derivative is a convention (an even share among the tied
    entries, the same in every trace and backend) that finite differences, which see a kink, need not
    agree with. The generator and the minimiser avoid them.

    >>> _tie("np.maximum(v1, v1) + 1.0"), _tie("np.maximum(v1, v2)")
    (True, False)
    """
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == ast.unparse(node.comparators[0]):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and ast.unparse(node.left) == ast.unparse(
                node.right):  # x - x: every entry ties with every other
            return True
        if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("np.minimum", "np.maximum")
                and len(node.args) == 2 and ast.unparse(node.args[0]) == ast.unparse(node.args[1])):
            return True
    return False


def _arguments(rng: np.random.Generator) -> list[tuple[int, ...]]:
    """One or two argument shapes: mostly 64..160 elements (rolled), sometimes 2-D, small or large."""
    small = [(4,), (6,), (12,), (24,), (48,)]
    matrices = [(8, 8), (8, 12), (16, 6), (12, 10), (4, 24)]
    large = [(384,), (520,), (640,), (1040,), (32, 16), (24, 40)]  # past the VM's 512 lanes, BLAS_MIN
    usual = [(64,), (64,), (72,), (80,), (96,), (120,), (128,), (160,)]
    shapes = []
    for _ in range(1 if rng.random() < 0.6 else 2):
        u = rng.random()
        kind = small if u < 0.1 else matrices if u < 0.25 else large if u < 0.33 else usual
        shapes.append(kind[int(rng.integers(len(kind)))])
    return shapes


def generate(rng: np.random.Generator | int) -> Program:
    """A random program (NumPy code, one or two float arguments, a scalar result).

    >>> p = generate(3)
    >>> p.source.startswith("def f(") and "return np.sum(" in p.source
    True
    """
    rng = np.random.default_rng(rng) if isinstance(rng, int | np.integer) else rng
    while True:
        shapes = _arguments(rng)
        names = ["x", "w"][:len(shapes)]
        g = _Gen(rng, names, shapes)
        moves, weights = zip(*_MOVES)
        p = np.array(weights) / sum(weights)
        for _ in range(int(rng.integers(3, 9))):
            move = moves[int(rng.choice(len(moves), p=p))]
            made = move(g)
            if made is None:
                continue
            text, shape = made
            if shape is None or 0 in shape or int(np.prod(shape)) > 4096 or _tie(text):
                continue
            name = g.fresh()
            g.lines.append(f"{name} = {text}")
            g.pool.append((name, shape))
        last, shape = g.pool[-1]
        final = g.choice([last, f"{last} ** 2", f"np.sin({last})", f"np.tanh({last}) * {last}"])
        body = [*g.lines, f"return np.sum({final})"]
        source = f"def f({', '.join(names)}):\n" + "".join(
            "".join(f"    {line}\n" for line in stmt.split("\n")) for stmt in body)
        source = _prune(source)
        argnums = (0,) if len(shapes) == 1 or rng.random() < 0.3 else (0, 1)
        program = Program(source, tuple(shapes), argnums, seed=int(rng.integers(2**31)))
        if _valid(program):
            return program


def _prune(source: str) -> str:
    """The source without statements nothing reads (dead code makes programs harder to read)."""
    tree = ast.parse(source)
    fn = tree.body[0]
    changed = True
    while changed:
        changed = False
        for i in range(len(fn.body) - 2, -1, -1):
            stmt = fn.body[i]
            defined = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if isinstance(stmt, ast.FunctionDef):
                defined.add(stmt.name)
            later = {n.id for s in fn.body[i + 1:] for n in ast.walk(s) if isinstance(n, ast.Name)}
            if defined and not defined & later:
                del fn.body[i]
                changed = True
    return ast.unparse(tree) + "\n"


def _valid(program: Program) -> bool:
    """Whether NumPy runs the program to a finite value of moderate size, no intermediate overflowing
    (through an inf, as 1 / exp(v * v) at v**2 > 709, a derivative is 0 * inf: nan in every AD tool,
    JAX's too, though the function is smooth; the finite differences would call that wrong)."""
    try:
        with np.errstate(all="ignore", over="raise"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f, inputs = program.function(), program.inputs()
            value = f(*inputs)
            if not (np.ndim(value) == 0 and np.isfinite(value) and abs(value) < 1e10):
                return False
            # well conditioned: inputs moved by 1e-9 move the value by less than 1e-5 (no sin(1e19))
            rng = np.random.default_rng(program.seed + 4)
            moved = f(*[a + 1e-9 * rng.normal(size=np.shape(a)) for a in inputs])
            return bool(abs(moved - value) < 1e-5 * (1.0 + abs(value)))
    except Exception:
        return False


# ----------------------------------------------------------------------------------------------
# Checking


@contextlib.contextmanager
def element_trace() -> Iterator[None]:
    """Trace arrays element by element whatever their size (``trace.ROLLED_MIN`` raised while inside).

    >>> with element_trace():
    ...     sg.value_and_grad(lambda x: np.sum(x ** 2), backend="python").trace(np.ones(100)).indexed
    False
    """
    old = trace.ROLLED_MIN
    trace.ROLLED_MIN = sys.maxsize
    try:
        yield
    finally:
        trace.ROLLED_MIN = old


def _error(e: BaseException) -> str:
    lines = (str(e) or "").strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _mismatch(got: Any, ref: Any, rtol: float, floor: float = 0.0) -> str | None:
    """None where ``got`` matches ``ref`` to ``rtol`` of the entry plus ``rtol`` of the largest entry (at least 1:
    the inputs are of order 1, so rounding errors are too) plus ``floor`` (the reference's own rounding noise,
    see _Checker._noise), else how it differs.

    >>> _mismatch([1.0, 2.0], [1.0, 2.0 + 1e-13], 1e-10) is None
    True
    >>> _mismatch(3.0, 1.5, 1e-10)
    '1 of 1 entries differ; at (): 3 vs 1.5 (error 1.00e+00 of the largest), got/expected 2'
    """
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        if got.size == ref.size:
            got = got.reshape(ref.shape)
        else:
            return f"shape {got.shape} instead of {ref.shape}"
    both_nan = np.isnan(got) & np.isnan(ref)
    err = np.where(both_nan, 0.0, np.abs(got - ref))
    scale = max(float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0.0)), initial=0.0)), 1.0)
    bad = ~(err <= rtol * (np.abs(ref) + scale) + floor) & ~both_nan & ~((got == ref) & np.isinf(ref))
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), ref.shape) if ref.ndim else ()
    rel = float(err[worst] / max(scale, 1e-300))
    ratio = ""
    if ref.ndim == 0 and ref != 0:
        ratio = f", got/expected {float(got / ref):.6g}"
    return (f"{int(bad.sum())} of {ref.size} entries differ; at {tuple(int(i) for i in worst)}: "
            f"{float(got[worst]):.10g} vs {float(ref[worst]):.10g} (error {rel:.2e} of the largest){ratio}")


def _nan_only(got: Any, ref: Any, rtol: float) -> bool:
    """Whether ``got`` and ``ref`` differ only where one is nan and the other is not.

    >>> _nan_only([np.nan, 1.0], [0.0, 1.0], 1e-12), _nan_only([np.nan, 1.0], [0.0, 2.0], 1e-12)
    (True, False)
    """
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.size != ref.size:
        return False
    got = got.reshape(ref.shape)
    one = np.isnan(got) != np.isnan(ref)
    return bool(one.any()) and _mismatch(np.where(one, ref, got), ref, rtol) is None


def _grads(result: Any, argnums: tuple[int, ...]) -> list[np.ndarray]:
    return [np.asarray(g) for g in (result if len(argnums) > 1 else (result,))]


def _vg(program: Program, f: Callable, inputs: list, backend: str,
        F: Callable | None = None) -> tuple[float, list[np.ndarray], bool, str]:
    """Value, gradients, whether it traced rolled, and the backend that actually ran (by ``F``, a
    value_and_grad of ``f`` on that backend, where given: its traces are kept)."""
    argnums = program.argnums[0] if len(program.argnums) == 1 else program.argnums
    F = F or sg.value_and_grad(f, argnums=argnums, backend=backend)
    value, g = F(*inputs)
    t = F.trace(*inputs)
    return float(value), _grads(g, program.argnums), t.indexed, t.compiled.backend


# The ops whose results a math library rounds (not IEEE arithmetic): the compiled tiers' are within an ulp
# or two of NumPy's, another implementation (symgrad.compile.fastmath) or another order of additions.
_ROUNDED = frozenset({"pow", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
                      "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "logaddexp", "erf", "sigmoid", "softplus",
                      "hypot", "sum", "cumsum"})  # (running sums: gradients reverse them, in another order)


def _nudged(value: Any, operands: list, salt: int) -> Any:
    """``value`` moved by -1, 0 or +1 ulp per entry, chosen by a hash of the operands' bits (the same
    operands move alike, as a function of them would: exact ties stay, near ties may round apart).

    >>> a = np.array([1.4, 1.4, np.nextafter(1.4, 0)])
    >>> v = _nudged(np.tanh(a), [a], 0)
    >>> bool(v[0] == v[1]), bool(np.all(np.abs(v - np.tanh(a)) <= np.spacing(np.tanh(a))))
    (True, True)
    """
    value = np.asarray(value, dtype=float)
    key = np.full(value.size, 0x9E3779B97F4A7C15 * (salt + 1) & (2**64 - 1), dtype=np.uint64)
    for a in operands:  # (1-d arrays: NumPy wraps their integer products silently, not scalars')
        a = np.asarray(a)
        if a.dtype != float or a.ndim > value.ndim or any(
                d not in (1, n) for d, n in zip(a.shape[::-1], value.shape[::-1])):
            a = value  # (reductions, indices: the result's own bits)
        key = (key ^ np.broadcast_to(a, value.shape).ravel().view(np.uint64)) * np.uint64(0xBF58476D1CE4E5B9)
    step = ((key >> np.uint64(62)).astype(np.int64) % 3 - 1).reshape(value.shape)
    moved = np.where(step == 0, value, np.nextafter(value, np.where(step > 0, np.inf, -np.inf)))
    return moved if moved.ndim else np.float64(moved)


def _another_library(node: Any, value: Any, operands: list, salt: int) -> Any:
    """The interpreter's ``value`` of ``node`` as another math library might give it: nudged (``_nudged``)
    where ``node`` is a library function or a sum of real values, else as it is."""
    if node.op.name in _ROUNDED and isinstance(value, np.ndarray | float) and np.isrealobj(value):
        return _nudged(value, operands, salt)
    return value


def _magnitude(node: Any, value: Any, operands: list) -> float:
    """A bound on the sum of the magnitudes of the terms one value of ``node`` adds up: for a sum or a
    running sum, the largest term times how many (the interpreter's arrays of a rolled graph have an
    axis per index symbol, broadcast: the sum of every entry counted terms of other sums, over and
    over: 1e20 for a scan's 44 axes, a floor above any error); else the largest entry.

    >>> from symgrad.expr import rolled
    >>> i = rolled.index("i", 8)
    >>> _magnitude(rolled.reduce("sum", rolled.subscript(rolled.array("x", 8), (i,)), i), 0.0, [np.ones(8), None])
    8.0
    """
    def largest(v: Any) -> float:
        v = np.abs(np.asarray(v, dtype=float))
        return float(np.max(v, where=np.isfinite(v), initial=0.0))
    name = node.op.name
    if name == "sum":
        return largest(operands[0]) * node.args[1].payload[1]
    if name == "cumsum":
        return largest(operands[0]) * node.args[0].shape[node.payload[0]]
    return largest(value)


def _settled(fds: dict[float, float], exact: float, tol: Callable[[float], float]) -> bool:
    """Whether central differences ``fds`` (step -> difference) settle somewhere away from ``exact``.

    Settled: four steps in a row whose differences agree within their tolerance ``tol(h)``, or shrink
    as truncation (~ h**2) predicts, twice in a row (then extrapolated, Richardson); of those, the
    tightest bound decides. Programs with a curvature scale below the steps (sin of 1e8) pass through
    plateaus that look settled once; never settled, they give no verdict, right or wrong.

    >>> _settled({1e-2: 2.0001, 1e-3: 2.000001, 1e-4: 2.00000001, 1e-5: 2.0000000001}, 3.0, lambda h: 1e-6)
    True
    >>> _settled({1e-2: 5.0, 1e-3: -40.0, 1e-4: 700.0, 1e-5: 3.0}, 3.0, lambda h: 1e-6)
    False
    """
    steps = sorted(fds, reverse=True)
    fits = [_fit(fds[a], fds[b], fds[c], a, b, c, tol(c)) for a, b, c in zip(steps, steps[1:], steps[2:])]
    settled = [later for earlier, later in zip(fits, fits[1:]) if earlier and later]
    if not settled:
        return False
    bound, limit = min(settled)
    return not abs(limit - exact) <= bound


def _fit(f1: float, f2: float, f3: float, h1: float, h2: float, h3: float, t: float) -> tuple | None:
    """(error bound, limit) of three central differences at falling steps, if they agree within ``t``
    or their differences shrink within 25% of the ratio truncation (~ h**2) predicts; else None."""
    d1, d2 = f2 - f1, f3 - f2
    if abs(d1) <= t and abs(d2) <= t:
        return 2 * t, f3
    q = (h2 * h2 - h3 * h3) / (h1 * h1 - h2 * h2)
    if d1 * d2 > 0 and abs(d2 / d1 - q) <= q / 4:
        return t + 2 * abs(d2 - q * d1), f3 + d2 * h3 * h3 / (h2 * h2 - h3 * h3)
    return None


def _observe(node: Any, value: Any, operands: list, terms: list, salt: int) -> Any:
    """The interpreter's observer for the noise estimates: keeps the largest terms' magnitude in
    ``terms[0]``, and moves library results by an ulp as another library would."""
    if isinstance(value, np.ndarray | float) and np.isrealobj(value):
        terms[0] = max(terms[0], _magnitude(node, value, operands))
    return _another_library(node, value, operands, salt)


def _capped(moved: float, ref: Any, terms: float) -> float:
    """A noise floor: 8 times how far a result moved, at least the rounding of the largest terms
    (``terms``: terms of 1e19 cancelling to 0 round to 1e3), at most 1e-6 of the result's largest
    entry (or twice the move itself, seen: sin of a chain of squares reaching 2e6 moves its
    gradient by 1.35e-6 of it, float64's own error there) plus four times that rounding."""
    top = float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0.0)), initial=0.0))
    rounding = 16 * 2.0 ** -52 * terms
    noise = min(max(8 * moved, rounding), max(1e-6 * max(top, 1.0), 2 * moved) + 4 * rounding)
    return noise if np.isfinite(noise) else 0.0


class _Checker:
    """Runs the probes of one program; ``only`` restricts them to one probe (for the minimiser)."""

    def __init__(self, program: Program, backends: tuple[str, ...], extras: tuple[str, ...] = (),
                 only: str | None = None, runners: dict | None = None, element: bool = True) -> None:
        self.program, self.backends, self.extras, self.only = program, backends, extras, only
        self.element = element  # whether to compare the element trace (the slowest probe)
        self.runners = runners or {}  # probe name -> replacement for value_and_grad (planted bugs in tests)
        self.found: list[Disagreement] = []
        self.status = "ok"  # or "invalid" (NumPy fails), "unsupported" (the tracer refuses), "fallback"
        self.note = ""
        self._interpreter: Callable | None = None  # value_and_grad on the interpreter (traced once, called thrice)

    def wanted(self, probe: str) -> bool:
        return self.only is None or self.only == probe

    def add(self, probe: str, quantity: str, kind: str, detail: str) -> None:
        self.found.append(Disagreement(probe, quantity, kind, detail, self.program))

    def compare(self, probe: str, quantity: str, got: Any, ref: Any, rtol: float, floor: float = 0.0) -> None:
        detail = _mismatch(got, ref, rtol, floor)
        if detail:
            self.add(probe, quantity, "nan" if _nan_only(got, ref, rtol) else "wrong", detail)

    def run(self) -> list[Disagreement]:
        p = self.program
        try:
            f, inputs = p.function(), p.inputs()
        except Exception as e:  # the minimiser's candidates may not even compile
            self.status, self.note = "invalid", _error(e)
            return []
        if not _valid(p):
            self.status = "invalid"
            return []
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = float(f(*inputs))
            names = [p.names[k] for k in p.argnums]
            try:
                value, grads, rolled, _ = self._value_and_grad("python", f, inputs)
            except Exception as e:
                if _unsupported(e):
                    self.status, self.note = "unsupported", _error(e)
                    return []
                if self.wanted("python"):
                    self.add("python", "value", "error", _error(e))
                return []
            if not rolled and max(np.size(a) for a in inputs) >= trace.ROLLED_MIN:
                self.status, self.note = "fallback", self._why_not_rolled(f, inputs)
            self.reference = value, grads
            self.noise = self._noise(f, inputs, value, grads, expected)
            if self.wanted("python"):  # (NumPy adds terms of 1e62 in another order: their rounding)
                self.compare("python", "value", value, expected, VALUE_RTOL, self.noise[0])
            if self.wanted("fd"):
                self._finite_differences(f, inputs, grads)
            small = sum(map(np.size, inputs)) <= ELEMENT_MAX
            if rolled and small and self.element and self.wanted("element"):
                self._element(f, inputs, value, grads, names)
            for b in self.backends:
                if b != "python" and self.wanted(b):
                    self._backend(b, f, inputs, value, grads, names)
            for extra in self.extras:
                getattr(self, "_" + extra)(f, inputs, grads)
        return self.found

    def _value_and_grad(self, probe: str, f: Callable, inputs: list) -> tuple:
        if probe in self.runners:
            return self.runners[probe](self.program, f, inputs)
        if probe == "python" and self._interpreter is None:
            argnums = self.program.argnums
            self._interpreter = sg.value_and_grad(f, argnums=argnums[0] if len(argnums) == 1 else argnums,
                                                  backend="python")
        return _vg(self.program, f, inputs, probe if probe in ("python", "vm", "numba") else "python",
                   self._interpreter if probe == "python" else None)

    def _noise(self, f: Callable, inputs: list, value: float, grads: list,
               expected: float) -> tuple[float, list[float]]:
        """How far the interpreter's value and gradients move when each differentiated input moves by an
        ulp or two and the library functions' results by one (and its value from NumPy's), times 8, and the
        rounding of the largest terms it adds: the noise of terms that cancel (a sum of deviations is 0 to
        within the terms' rounding, not the result's). Ties (an element read twice), signs and orders stay;
        near ties that another implementation of tanh rounds apart (or together) move (a max of saturated
        values splits its gradient among the entries that tie). At most 1e-6 of the largest entry plus the
        terms' rounding, so no real error hides under it.
        """
        moved_v, moved_g = abs(expected - value), [0.0] * len(grads)
        terms = [0.0]  # the largest sum of |entries| of any value the interpreter computes
        rng = np.random.default_rng(self.program.seed + 2)
        for salt in range(2):
            scaled = [a * (1 + rng.choice([-2.0, 2.0], np.shape(a)) * 2.0 ** -52) if k in self.program.argnums
                      else a for k, a in enumerate(inputs)]
            token = interp.OBSERVER.set(functools.partial(_observe, terms=terms, salt=salt))
            try:
                v, gs, _, _ = self._value_and_grad("python", f, scaled)
            except Exception:
                return 0.0, [0.0] * len(grads)
            finally:
                interp.OBSERVER.reset(token)
            moved_v = max(moved_v, abs(v - value))
            moved_g = [max(m, float(np.max(np.abs(g - r), initial=0.0))) for m, g, r in zip(moved_g, gs, grads)]
        return _capped(moved_v, value, terms[0]), [_capped(m, g, terms[0]) for m, g in zip(moved_g, grads)]

    def _why_not_rolled(self, f: Callable, inputs: list) -> str:
        F = sg.value_and_grad(f, argnums=self.program.argnums, backend="python")
        F._fallback = False  # raise instead of tracing element by element
        try:
            F(*inputs)
        except Exception as e:
            return _error(e)
        return "?"

    def _moved(self, f: Callable, inputs: list, dirs: list, step: float) -> float:
        """f at the inputs moved by ``step`` along ``dirs`` (one per differentiated argument)."""
        moved = list(inputs)
        for k, d in zip(self.program.argnums, dirs):
            moved[k] = inputs[k] + step * d
        return float(f(*moved))

    def _finite_differences(self, f: Callable, inputs: list, grads: list) -> None:
        """The gradient along random directions against central differences at three step sizes; where all
        three miss, a verdict only once the differences have settled (``_settled``)."""
        rng = np.random.default_rng(self.program.seed + 1)
        for _ in range(2):
            dirs = [rng.normal(size=np.shape(inputs[k])) for k in self.program.argnums]
            norm = np.sqrt(sum(np.sum(d * d) for d in dirs))
            miss = self._along(f, inputs, grads, [d / norm for d in dirs])
            if miss:
                self.add("fd", "grad", *miss)
                return

    def _along(self, f: Callable, inputs: list, grads: list, dirs: list) -> tuple[str, str] | None:
        """(kind, detail) of what is wrong with the gradient along ``dirs`` by central differences."""
        exact = sum(float(np.sum(g * d)) for g, d in zip(grads, dirs))
        gnorm = np.sqrt(sum(float(np.sum(g * g)) for g in grads))
        rounding = 1e-12 * max(1.0, abs(float(f(*inputs)))) + self.noise[0]

        def tol(h: float) -> float:
            return FD_RTOL * (gnorm + abs(exact)) + rounding / h

        def fd(h: float) -> float:
            return (self._moved(f, inputs, dirs, h) - self._moved(f, inputs, dirs, -h)) / (2 * h)
        fds = [fd(h) for h in FD_STEPS]
        for k, (h, d) in enumerate(zip(FD_STEPS, fds)):
            t = tol(h)
            if k:  # central differences' truncation error ~ h**2: estimated from the step before
                t += 2 * abs(d - fds[k - 1]) * (h / FD_STEPS[k - 1]) ** 2
            if abs(d - exact) <= t:  # (a nan gradient misses)
                return None
        if not _settled({h: fd(h) for h in FD_LADDER}, exact, tol):
            return None
        return "nan" if np.isnan(exact) else "wrong", (f"directional derivative {exact:.10g}, finite differences "
                + ", ".join(f"{d:.10g} (h={h:g})" for d, h in zip(fds, FD_STEPS)) + f"; |grad| {gnorm:.3g}")

    def _element(self, f: Callable, inputs: list, value: float, grads: list, names: list) -> None:
        try:
            with element_trace():
                v, gs, _, _ = self._value_and_grad("element", f, inputs)
        except Exception as e:
            self.add("element", "value", "error", _error(e))
            return
        self.compare("element", "value", value, v, BACKEND_RTOL, self.noise[0])  # (the element trace as reference)
        for name, got, ref, floor in zip(names, grads, gs, self.noise[1]):
            self.compare("element", f"d/d{name}", got, ref, BACKEND_RTOL, floor)

    def _backend(self, b: str, f: Callable, inputs: list, value: float, grads: list, names: list) -> None:
        try:
            v, gs, _, actual = self._value_and_grad(b, f, inputs)
        except Exception as e:
            self.add(b, "value", "error", _error(e))
            return
        if actual != b and b not in self.runners:
            self.note = f"{b} ran as {actual}"
            return
        self.compare(b, "value", v, value, BACKEND_RTOL, self.noise[0])
        for name, got, ref, floor in zip(names, gs, grads, self.noise[1]):
            self.compare(b, f"d/d{name}", got, ref, BACKEND_RTOL, floor)

    # extras: other transforms on every backend, the interpreter's checked against the gradient

    def _each(self, kind: str, compute: Callable[[str], Any], check: Callable[[Any, list], None],
              rtol: float = BACKEND_RTOL) -> None:
        """``compute(backend)`` on the interpreter (checked by ``check(results, their noise)``) and on each
        other backend."""
        if not any(self.wanted(f"{kind}:{b}") for b in self.backends):
            return
        try:
            ref = compute("python")
        except Exception as e:
            if not _unsupported(e):
                self.add(f"{kind}:python", kind, "error", _error(e))
            return
        own = self._own_noise(compute, ref)
        if self.wanted(f"{kind}:python"):
            check(ref, own)
        for b in self.backends:
            if b == "python" or b == "numba" and self.only is None or not self.wanted(f"{kind}:{b}"):
                continue  # (Numba compiles a Hessian's loops for minutes: only where asked for by name)
            try:
                got = compute(b)
            except Exception as e:
                self.add(f"{kind}:{b}", kind, "error", _error(e))
                continue
            floor = max(self.noise[0], *self.noise[1])  # (the rounding of the value's and gradients' terms)
            for i, (g, r) in enumerate(zip(got, ref)):
                self.compare(f"{kind}:{b}", f"{kind}[{i}]", g, r, rtol, max(floor, own[i]))

    def _own_noise(self, compute: Callable[[str], Any], ref: Any) -> list[float]:
        """How far each of the interpreter's results moves when its library results move by an ulp (see
        ``_noise``), times 8, at most 1e-6 of its largest entry plus the rounding of the largest terms it
        adds: a second derivative can be far more sensitive to rounding than the value and gradient (cos
        of 1e12 in an hvp), and a jvp of terms near 1e12 that cancel to 10 is as exact as they are."""
        moved, terms = [0.0] * len(ref), [0.0]
        for salt in range(2):
            token = interp.OBSERVER.set(functools.partial(_observe, terms=terms, salt=salt))
            try:
                again = compute("python")
            except Exception:
                return [0.0] * len(ref)
            finally:
                interp.OBSERVER.reset(token)
            moved = [max(m, float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(r, dtype=float)),
                                         initial=0.0))) for m, a, r in zip(moved, again, ref)]
        return [_capped(m, r, terms[0]) for m, r in zip(moved, ref)]

    def _tangents(self, inputs: list) -> list:
        rng = np.random.default_rng(self.program.seed + 2)
        return [rng.normal(size=np.shape(a)) for a in inputs]

    def _jvp(self, f: Callable, inputs: list, grads: list) -> None:
        tangents = self._tangents(inputs)
        expected = sum(float(np.sum(g * tangents[k])) for g, k in zip(grads, self.program.argnums))
        fixed = [k for k in range(len(inputs)) if k not in self.program.argnums]
        for k in fixed:
            tangents[k] = np.zeros_like(inputs[k])

        def compute(b: str) -> tuple:
            return sg.jvp(f, tuple(inputs), tuple(tangents), backend=b)

        def check(ref: Any, own: list) -> None:
            self.compare("jvp:python", "jvp value", ref[0], self.reference[0], BACKEND_RTOL)
            scale = sum(float(np.sum(np.abs(g * tangents[k]))) for g, k in zip(grads, self.program.argnums))
            rounding = 1e-13 * sum(float(np.sum(np.abs(tangents[k]))) for k in self.program.argnums) + own[1]
            if abs(float(ref[1]) - expected) > 1e-9 * scale + rounding:  # (terms cancelling to 0 leave rounding)
                self.add("jvp:python", "jvp", "wrong", f"{float(ref[1]):.12g} vs grad . tangent {expected:.12g}")

        self._each("jvp", compute, check)

    def _hvp(self, f: Callable, inputs: list, grads: list) -> None:
        k = self.program.argnums[0]
        v = self._tangents(inputs)[k]

        def compute(b: str) -> tuple:
            return (sg.hvp(f, argnums=k, backend=b)(*inputs, v),)

        def check(ref: Any, own: list) -> None:  # against central differences of the interpreter's gradient
            G = sg.grad(f, argnums=k, backend="python")
            moved = lambda h: [a + h * v if i == k else a for i, a in enumerate(inputs)]  # noqa: E731
            g0, g1 = np.asarray(G(*moved(0.0))), np.asarray(G(*moved(1e-9)))
            if not np.max(np.abs(g1 - g0), initial=0.0) < 1e-5 * (1.0 + np.max(np.abs(g0), initial=0.0)):
                return  # a gradient moved by 1e-9 of the inputs by more: differences of it say nothing
            steps = (1e-5, 1e-6, 1e-7)  # (steeply curved programs need the small steps)
            fds = [(np.asarray(G(*moved(h))) - np.asarray(G(*moved(-h)))) / (2 * h) for h in steps]
            # each step's truncation error ~ h**2, estimated from the step before (as in _finite_differences)
            floors = [0.0] + [2 * float(np.max(np.abs(fds[j] - fds[j - 1]))) * (steps[j] / steps[j - 1]) ** 2
                              for j in range(1, len(steps))]
            details = [_mismatch(ref[0], fd, 1e-4, floor) for fd, floor in zip(fds, floors)]
            if all(details):
                self.add("hvp:python", "hvp", "wrong", "against differences of the gradient: " + details[0])

        self._each("hvp", compute, check)

    def _hessian(self, f: Callable, inputs: list, grads: list) -> None:
        k = self.program.argnums[0]
        if np.size(inputs[k]) > 160:
            return
        v = self._tangents(inputs)[k]

        def compute(b: str) -> tuple:
            return (sg.hessian(f, argnums=k, backend=b)(*inputs),)

        def check(ref: Any, own: list) -> None:
            H = np.asarray(ref[0]).reshape(np.size(v), np.size(v))
            hv = sg.hvp(f, argnums=k, backend="python")(*inputs, v)
            # (each entry of H @ v adds n entries of H, each as uncertain as H's own noise)
            floor = 2 * own[0] * float(np.sum(np.abs(v)))
            self.compare("hessian:python", "hessian @ v", H @ v.ravel(), np.ravel(hv), 1e-9, floor)

        self._each("hessian", compute, check)

    def _jacobian(self, f: Callable, inputs: list, grads: list) -> None:
        fvec, k = self.program.vector_function(), self.program.argnums[0]
        if fvec is None:
            return

        def compute(b: str) -> tuple:
            return (sg.jacobian(fvec, argnums=k, backend=b)(*inputs),)

        def check(ref: Any, own: list) -> None:  # the outputs' sum: the gradient
            J = np.asarray(ref[0])
            total = J.reshape(-1, *np.shape(inputs[k])).sum(axis=0)
            self.compare("jacobian:python", "sum of jacobian rows", total, grads[0], 1e-9, self.noise[1][0])

        self._each("jacobian", compute, check)

    def _vmap(self, f: Callable, inputs: list, grads: list) -> None:
        if len(inputs) != 1:
            return
        rng = np.random.default_rng(self.program.seed + 3)
        X = np.stack([inputs[0], rng.normal(size=np.shape(inputs[0])), rng.normal(size=np.shape(inputs[0]))])

        def compute(b: str) -> tuple:
            return (sg.vmap(sg.grad(f, backend=b), backend=b)(X),)

        def check(ref: Any, own: list) -> None:
            G = sg.grad(f, backend="python")
            for i in range(len(X)):  # (at the batch's own noise: it may sum in another order)
                self.compare("vmap:python", f"vmap grad row {i}", np.asarray(ref[0])[i], G(X[i]), 1e-9, own[0])

        # (rows 1 and 2 are new inputs: the batch's own noise covers them, the value's does not)
        self._each("vmap", compute, check, VALUE_RTOL)


EXTRAS = ("jvp", "hvp", "hessian", "jacobian", "vmap")


def check(program: Program, backends: tuple[str, ...] = ("python", "vm"), extras: tuple[str, ...] = (),
          only: str | None = None, runners: dict | None = None) -> tuple[list[Disagreement], str]:
    """The disagreements of one program and its status ("ok", "invalid", "unsupported", "fallback").

    ``extras``: names from ``EXTRAS`` (other transforms); ``only``: run this probe alone; ``runners``:
    a probe name mapped to a function ``(program, f, inputs) -> (value, grads, rolled, backend)``
    used instead of ``sg.value_and_grad`` (tests plant bugs this way).

    >>> found, status = check(Program("def f(x):\\n    return np.sum(np.sin(x) * x[::-1])\\n", ((64,),), (0,)))
    >>> found, status
    ([], 'ok')
    """
    c = _Checker(program, tuple(backends), tuple(extras), only, runners)
    return c.run(), c.status


# ----------------------------------------------------------------------------------------------
# Minimising


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


# ----------------------------------------------------------------------------------------------
# Running


def run(programs: int | None = None, seed: int = 0, backends: tuple[str, ...] | str = ("python", "vm"),
        numba_every: int = 0, extras_every: int = 4, minutes: float | None = None, minimise_seconds: float = 60.0,
        log: Callable[[str], None] | None = None, stats: dict | None = None,
        element_every: int = 1) -> list[Disagreement]:
    """Generate and check programs; the disagreements found, minimised (``minimise_seconds=0``: as found).

    ``backends`` besides "python" run on every program, except "numba" (compiles 0.5 s and more):
    every ``numba_every``-th program (0: never, unless "numba" is the only other backend). Every
    ``extras_every``-th program also checks one of ``EXTRAS`` (jvp, hvp, hessian, jacobian, vmap).
    The element trace (the slowest probe) runs on every ``element_every``-th program. ``stats`` (a
    dict) receives the counts: programs, disagreements, and the statuses (ok, fallback: traced element
    by element, unsupported: the tracer refused, invalid) with ``reasons`` for the last two.

    >>> stats = {}
    >>> found = run(programs=2, seed=1, minimise_seconds=0, stats=stats)
    >>> stats["programs"], len(found) == stats["disagreements"]
    (2, True)
    """
    if isinstance(backends, str):
        backends = tuple(b.strip() for b in backends.split(",") if b.strip())
    say = log or (lambda s: None)
    stats = {} if stats is None else stats
    counts: Counter = Counter()
    reasons: Counter = Counter()
    found: list[Disagreement] = []
    seen: set = set()
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    n = 0
    while (programs is None or n < programs) and (minutes is None or time.monotonic() - start < 60 * minutes):
        program = generate(rng)
        use = [b for b in backends if b != "numba"]
        if "numba" in backends and (numba_every and n % numba_every == 0 or set(backends) <= {"python", "numba"}):
            use.append("numba")
        extras = (EXTRAS[(n // extras_every) % len(EXTRAS)],) if extras_every and n % extras_every == 0 else ()
        # Every other program on numba splits its kernel into pieces of a few lines (pieces.py), so that
        # the split kernels run the same programs as whole ones.
        split = "numba" in use and (n // max(numba_every, 1)) % 2 == 1
        with pieces.sized(0, 1 + n % 40) if split else contextlib.nullcontext():
            checker = _Checker(program, tuple(use), extras, element=bool(element_every) and n % element_every == 0)
            try:
                results, status = checker.run(), checker.status
            except Exception as e:  # a bug of the fuzzer itself: say so, go on
                say(f"program {n}: the fuzzer failed: {_error(e)}\n{traceback.format_exc()}\n"
                    f"{program.snippet('python')}")
                results, status = [], "crash"
            counts[status] += 1
            if status in ("unsupported", "fallback"):
                reasons[f"{status}: {checker.note[:120]}"] += 1
            n += 1
            for d in _one_per_key(results):
                if d.kind == "error" and (d.key, _gist(d.detail)) in seen:
                    counts["repeated errors"] += 1  # the same exception again: not minimised again
                    continue
                seen.add((d.key, _gist(d.detail)))
                if minimise_seconds > 0:
                    d = minimise(d, tuple(use), minimise_seconds)
                sig = (d.key, d.program.source)
                if sig in seen:
                    continue
                seen.add(sig)
                found.append(d)
                say(f"\nDISAGREEMENT #{len(found)} (program {n - 1}, {time.monotonic() - start:.0f} s)\n{d}")
        if n % 25 == 0:
            say(f"{n} programs, {len(found)} disagreements ({dict(counts)}), {time.monotonic() - start:.0f} s")
    stats.update(programs=n, disagreements=len(found), seconds=time.monotonic() - start, **counts)
    stats["reasons"] = dict(reasons)
    stats["kinds"] = dict(Counter(d.kind for d in found))
    return found


def _gist(message: str) -> str:
    """An exception's message without the expressions and numbers in it (the same error, other programs)."""
    message = re.sub(r"expression .*? is unknown", "expression ... is unknown", message)
    return re.sub(r"\d+", "N", message)[:120]


def _one_per_key(found: list[Disagreement]) -> list[Disagreement]:
    """One disagreement per probe and kind (a wrong value usually makes every gradient wrong too)."""
    seen: dict = {}
    for d in found:
        seen.setdefault((d.probe, d.kind), d)
    return list(seen.values())


def _job(settings: dict) -> tuple[list[Disagreement], dict]:
    """One process's share of a soak: ``run`` with these settings; its disagreements and counts."""
    settings = dict(settings)
    if settings.get("parent") is not None:  # (a worker process)
        _exit_with_parent(settings["parent"])
    settings.pop("parent", None)
    tag, quiet = settings.pop("tag"), settings.pop("quiet")
    stats: dict = {}
    log = None if quiet else (lambda s: print("\n".join(tag + line for line in s.split("\n")), flush=True))
    return run(**settings, log=log, stats=stats), stats


def _exit_with_parent(parent: int) -> None:
    """End this process when ``parent``, the one that started it, has ended (a soak killed by its pid,
    not Ctrl-C, left its workers running on)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _added(parts: list[dict]) -> dict:
    """The counts of several ``run`` stats added (reasons and kinds too)."""
    total: dict = {"reasons": Counter(), "kinds": Counter()}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                total[key].update(value)
            else:
                total[key] = total.get(key, 0) + value
    return {k: dict(v) if isinstance(v, Counter) else v for k, v in total.items()}


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m symgrad.fuzz --minutes 2``; exit status 1 where anything disagreed.

    >>> main(["--programs", "1", "--no-minimise", "--quiet"]) in (0, 1)  # doctest: +ELLIPSIS
    1 programs, ... disagreements
    True
    """
    ap = argparse.ArgumentParser(prog="python -m symgrad.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (1 if neither is given)")
    ap.add_argument("--programs", type=int, default=None, help="stop after this many programs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="python,vm", help="comma-separated: python,vm,numba")
    ap.add_argument("--numba-every", type=int, default=10, help="numba on every K-th program (0: never)")
    ap.add_argument("--extras-every", type=int, default=4, help="jvp/hvp/hessian/jacobian/vmap every K-th program")
    ap.add_argument("--element-every", type=int, default=1, help="the element trace on every K-th program")
    ap.add_argument("--minimise-seconds", type=float, default=60.0, help="time to minimise each disagreement")
    ap.add_argument("--no-minimise", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="only the summary line")
    ap.add_argument("--jobs", type=int, default=1, help="processes, each with its own seed (programs split)")
    a = ap.parse_args(argv)
    minutes = a.minutes if a.minutes is not None or a.programs is not None else 1.0
    jobs = max(1, a.jobs)
    share = None if a.programs is None else -(-a.programs // jobs)
    settings = [dict(programs=share, seed=a.seed + k, backends=a.backends, numba_every=a.numba_every,
                     extras_every=a.extras_every, minutes=minutes, element_every=a.element_every,
                     minimise_seconds=0.0 if a.no_minimise else a.minimise_seconds,
                     tag=f"[seed {a.seed + k}] " if jobs > 1 else "", quiet=a.quiet,
                     parent=os.getpid() if jobs > 1 else None) for k in range(jobs)]
    if jobs == 1:
        found, stats = _job(settings[0])
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_job, settings))
        found = [d for f, _ in results for d in f]
        stats = _added([st for _, st in results])
    if not a.quiet:
        print(f"\nstatuses: { {k: v for k, v in stats.items() if k not in ('reasons', 'seconds', 'kinds')} }")
        for reason, count in sorted(stats["reasons"].items(), key=lambda kv: -kv[1]):
            print(f"  {count} x {reason}")
        for d in found:
            print(f"[{d.probe}] {d.quantity} {d.kind}: {d.detail}")
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(stats["kinds"].items()))
    print(f"{stats['programs']} programs, {len(found)} disagreements" + (f" ({kinds})" if kinds else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
