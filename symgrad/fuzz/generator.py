"""The generator: random NumPy programs (``generate``), built move by move (``_MOVES``) on a pool of arrays."""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.fuzz.program import Program


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
    alike = g.pick(lambda s: len(s) == 1 and 2 <= s[0] <= 160) if g.coin(0.2) else None
    if alike is not None:  # every row the same: the step reads it whole (scans._same_row)
        steps, k = int(g.choice([3, 5, 40])), alike[1][0]
        stack = (f"np.broadcast_to({alike[0]}, ({steps}, {k}))", (steps, k))
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


def _powers(g: _Gen) -> tuple[str, tuple] | None:
    """GradBench's least squares: a vmapped row of powers (np.cumprod of an np.full of a traced scalar,
    a scan whose rows are all one) times a vector (from 64 rows a BLAS product reading the scan's carries)."""
    v = g.pick(lambda s: len(s) == 1 and s[0] >= 8)
    if v is None:
        return None
    a, (m,) = v
    n = int(g.choice([8, 64, 96]))
    row = f"np.cumprod(np.concatenate([np.ones(1), np.full({m - 1}, 0.9 + 0.1 * np.tanh(0.01 * i + {a}[0]))]))"
    return f"sg.vmap(lambda i: {row} @ {a})(np.arange({n}))", (n,)


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


def _sorting(g: _Gen) -> tuple[str, tuple] | None:
    """np.sort / np.partition along an axis; np.median, np.quantile, np.percentile of all or along an axis."""
    a, s = g.pick(lambda s: len(s) >= 1)
    kind = g.choice(["sort", "sort", "partition", "median", "quantile", "percentile"])
    axis = int(g.rng.integers(len(s)))
    if kind == "sort":
        return f"np.sort({a}, axis={axis})", s
    if kind == "partition":
        return f"np.partition({a}, {int(g.rng.integers(s[axis]))}, axis={axis})", s
    over, reduced = g.choice([(f", axis={axis}", s[:axis] + s[axis + 1:]), ("", ())])
    if kind == "median":
        return f"np.median({a}{over})", reduced
    q = round(float(g.rng.uniform(0.0, 1.0)), 2) * (100 if kind == "percentile" else 1)
    return f"np.{kind}({a}, {q}{over}, method='{g.choice(['linear', 'lower', 'midpoint', 'hazen'])}')", reduced


_MOVES = [(_unary, 4), (_binary, 5), (_gather, 3), (_slice, 2), (_reshape, 2), (_join, 1), (_reduce, 2),
          (_product, 1.5), (_cumsum, 1), (_scan, 1), (_gather2d, 1), (_outer, 0.7), (_nested, 0.7),
          (_statistic, 0.7), (_pad, 0.7), (_composed, 1.5), (_control, 1), (_branches, 1), (_sorting, 1),
          (_powers, 0.5)]


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
