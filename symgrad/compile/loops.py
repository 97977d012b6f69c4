"""Rolled expressions -> Numba loops, and the :class:`LoopProgram` that ``Compiled`` runs them through.

One fused loop nest per materialised array (a ``tensor`` or ``scatter``) and for the scalar
outputs; a reduction is an inner loop with an accumulator. Each value is computed in the
outermost loop where every index it varies over is bound, so loop-invariant work is hoisted;
index arithmetic stays in integers. The kernel reads its inputs from flat vectors ``x`` and
``p`` (each input array raveled, scalars one entry each, in order) and writes its other
outputs, raveled, into ``out``. Compile time does not depend on the arrays' sizes.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad.compile import cache, fastmath
from symgrad.compile.backends import SIGNATURES, Kernels
from symgrad.compile.numba_backend import _literal
from symgrad.expr.build import apply
from symgrad.expr.dot import to_dot
from symgrad.expr.interp import run
from symgrad.expr.node import Expr, intern
from symgrad.expr.ops import OPS
from symgrad.expr.rolled import (
    affine,
    by_name,
    costly,
    fresh_index,
    index,
    reduce,
    scatter,
    shape_of,
    substitute_indices,
    tensor,
    value_range,
)
from symgrad.expr.traverse import topo_order

_INTEGER_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "neg": "(-{0})",
                "mod": "({0} % {1})", "floor_divide": "({0} // {1})", "as_index": "fastmath.as_index({0}, {1})"}
_COMBINE = {"sum": "{0} + {1}", "max": OPS["maximum"].numba, "min": OPS["minimum"].numba}
_START = {"sum": "0.0", "max": "-math.inf", "min": "math.inf"}
# Small constant powers as the loop VM computes them (the same bits): products, not a pow call, and sqrt.
POWERS = {2.0: "{0} * {0}", 3.0: "{0} * {0} * {0}", 0.5: OPS["sqrt"].numba}
COLUMN_MIN = 8  # sums down columns this long or longer are added row by row (see _by_rows)


class _Region:
    """A loop body (or the kernel's top level): the indices bound there, its lines, its names."""

    def __init__(self, parent: _Region | None, bound: frozenset, loops: dict) -> None:
        self.parent, self.bound, self.loops = parent, bound, loops  # loops: index -> loop variable
        self.lines: list[str] = []
        self.names: dict[Expr, str] = {}

    def chain(self) -> list[_Region]:
        out, r = [], self
        while r is not None:
            out.append(r)
            r = r.parent
        return out[::-1]  # outermost first

    def lookup(self, node: Expr) -> str | None:
        r = self
        while r is not None:
            if node in r.names:
                return r.names[node]
            r = r.parent
        return None


class _Emitter:
    def __init__(self, buffers: dict[Expr, str], scalars: dict[Expr, str]) -> None:
        self.buffers, self.scalars = buffers, scalars  # array nodes -> buffer names; vars -> x[k]
        self.count = 0
        self.children: dict[tuple, tuple] = {}
        self.integers: set[Expr] = set()  # nodes emitted as integer arithmetic

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def value(self, root: Expr, region: _Region) -> str:
        """The name (or literal) of ``root``'s value in ``region``, emitting what it needs."""
        stack = [(root, region, False)]
        while stack:
            node, reg, expanded = stack.pop()
            if self._known(node, reg) is not None:
                continue
            home = next(r for r in reg.chain() if r.bound >= node.free)
            name = node.op.name
            if name in ("sum", "max", "min"):
                if not expanded:
                    body, i = node.args
                    if i in home.bound:  # the index is bound outside already: this loop gets its own
                        j = fresh_index(i)
                        body, i = substitute_indices(body, {i: j}), j
                    loops = {**home.loops, i: self.fresh("i")}
                    child = _Region(home, home.bound | {i}, loops)
                    self.children[(node, id(reg))] = (child, body, i)
                    stack += [(node, reg, True), (body, child, False)]
                else:
                    self._reduce(node, home, *self.children.pop((node, id(reg))))
                continue
            if not expanded:
                stack.append((node, reg, True))
                stack += [(a, reg, False) for a in node.args if not a.op.array_valued and
                          self._known(a, reg) is None]
                continue
            home.names[node] = self._emit(node, reg, home)
        return self._known(root, region)

    def _emit(self, node: Expr, reg: _Region, home: _Region) -> str:
        """Compute ``node`` (its arguments known in ``reg``) in ``home``: the name of its value."""
        name = self.fresh("v")
        home.lines.append(f"{name} = {self._expression(node, reg)}")
        return name

    def _known(self, node: Expr, reg: _Region) -> str | None:
        name = node.op.name
        if name == "const":
            return _literal(float(node.payload))
        if name == "index":
            return reg.loops.get(node)
        if name == "var":
            return self.scalars[node]
        return reg.lookup(node)

    def _expression(self, node: Expr, reg: _Region) -> str:
        args = [self._operand(a, reg) for a in node.args]
        name = node.op.name
        if name == "load":
            arr = self.buffers[node.args[0]]
            addresses = [self._clamped(a, n, reg) for a, n in zip(node.args[1:], node.args[0].shape)]
            return f"{arr}[{', '.join(addresses)}]"
        if name == "pow" and node.args[1].op.name == "const" and node.args[1].payload in POWERS:
            return POWERS[node.args[1].payload].format(args[0])
        if name == "as_index" or name in _INTEGER_OPS and all(self._integral(a) for a in node.args):
            self.integers.add(node)
            return _INTEGER_OPS[name].format(*(self._address(a, reg) for a in node.args))
        return node.op.numba.format(*args)

    def _integral(self, a: Expr) -> bool:
        """Index arithmetic: index symbols, integer constants, loads from tables, and integer ops of them."""
        name = a.op.name
        return name == "index" or name == "const" and float(a.payload).is_integer() or \
            name == "load" and a.args[0].op.name == "table" or a in self.integers

    def _operand(self, a: Expr, reg: _Region) -> str:
        return "" if a.op.array_valued else self._known(a, reg)

    def _clamped(self, a: Expr, n: int, reg: _Region) -> str:
        """A load's address, clamped into the array where its range leaves it: only derivatives make
        such loads, in the branch a guard does not take (users' loads are range-checked when built)."""
        text = self._address(a, reg)
        lo, hi = value_range(a)
        return text if 0 <= lo and hi < n else f"min(max({text}, 0), {n - 1})"

    def _address(self, a: Expr, reg: _Region) -> str:
        """An index expression as an integer (constants as int literals)."""
        if a.op.name == "const":
            return str(int(a.payload))
        return self._known(a, reg)

    def _reduce(self, node: Expr, home: _Region, child: _Region, body: Expr, i: Expr) -> None:
        value = self.value(body, child)
        acc = self.fresh("a")
        kind = node.op.name
        child.lines.append(f"{acc} = {_COMBINE[kind].format(acc, value)}")
        home.lines.append(f"{acc} = {_START[kind]}")
        home.lines.append(f"for {child.loops[i]} in range({i.payload[1]}):")
        home.lines += ["    " + line for line in child.lines]
        home.names[node] = acc


def source(outputs: list[Expr], inputs: list[Expr], params: list[Expr] = ()) -> str:
    """A Numba module whose ``kernel(x, p, out, work)`` returns ``outputs[0]`` (a scalar) and writes
    the others (scalars or arrays, raveled, in order) into ``out``; ``x`` holds ``inputs`` and ``p``
    ``params`` (arrays raveled, scalars) in order; ``work`` (``WORK`` floats, one per thread) holds
    the temporary arrays. ``point(x, p, out)`` is the same code checking the sizes and allocating
    its workspace (one function: a call compiles once, not a kernel and a wrapper).

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> print(source([sg.sum(x[i] ** 2, i)], [x]).split("def kernel")[1].split("@numba")[0].strip())
    (x, p, out, work):
        b1 = x[0:3].reshape((3,))
        a5 = 0.0
        for i2 in range(3):
            v3 = b1[i2]
            v4 = v3 ** 2.0
            a5 = a5 + v4
        return a5
    """
    for k, r in enumerate(outputs):
        if r.free:
            raise ValueError(f"compiling: the output {str(r)[:60]} varies over {sorted(map(str, r.free))}: reduce "
                             "it or make it a tensor")
        if r.op.array_valued and (k == 0 or r.op.name == "table"):
            raise ValueError(f"compiling: output {k} is the array {str(r)[:60]}; the first output must be a "
                             "scalar, and a constant table is no output")
    lines, buffers, scalars, head = [], {}, {}, []
    emitter = _Emitter(buffers, scalars)
    for vector, group in (("x", inputs), ("p", params)):
        for v, start, size in Layout(group).blocks():
            if v.op.name == "array":
                buffers[v] = emitter.fresh("b")
                lines.append(f"{buffers[v]} = {vector}[{start}:{start + size}].reshape({v.shape!r})")
            else:
                scalars[v] = f"{vector}[{start}]"
    outputs, products = _plan(outputs)
    order = topo_order(outputs)
    missing = sorted(str(n) for n in order if n.op.name in ("var", "array") and n not in scalars | buffers)
    if missing:
        raise ValueError(f"compiling: the outputs depend on {missing[:5]}, which are not among the inputs")
    slots, out_offsets, offset = _slots(outputs)
    top = _Region(None, frozenset(), {})
    filler = _Filler(emitter, head, out_offsets)
    filler.arrays(outputs, order, products, top)
    for r, start in slots:
        if not r.op.array_valued:
            top.lines.append(f"out[{start}] = {emitter.value(r, top)}")
        elif r.op.name in ("array", "scan"):  # an input as it is (the gradient of a linear function)
            top.lines += _copied(emitter, "out", start, buffers[r], math.prod(r.shape))
        elif start != out_offsets[r]:  # the same array again: a copy of where it was computed
            size, first = math.prod(r.shape), out_offsets[r]
            top.lines += _copied(emitter, "out", start, f"out[{first}:{first + size}]", size)
    ret = emitter.value(outputs[0], top) if not outputs[0].op.array_valued else "0.0"
    body = "\n".join("    " + line for line in _library_where_scalar(lines + top.lines + [f"return {ret}"]))
    nx, np_ = len(Layout(inputs)), len(Layout(params))
    sizes = f"x.shape[0] != {nx} or p.shape[0] != {np_} or out.shape[0] != {offset}"
    checks = f"    if {sizes}:\n        raise ValueError(\"symgrad: wrong shape\")\n    work = np.empty(WORK)\n"
    header = f"import math\n\nimport numba\nimport numpy as np\n{fastmath.IMPORT}\n\n"
    return (header + "".join(h + "\n" for h in head) +
            f"WORK = {filler.work}  # floats of workspace its temporary arrays take\n"
            f"\n\n@numba.njit(error_model='numpy')\ndef kernel(x, p, out, work):\n{body}\n"
            f"\n\n@numba.njit(error_model='numpy')\ndef point(x, p, out):\n{checks}{body}\n")


class _Filler:
    """Emits the loops filling a program's arrays, each in its buffer (a slice of ``out``, or of the
    workspace), and a scan's step inside its loop over the steps."""

    def __init__(self, emitter: _Emitter, head: list[str], out_offsets: dict) -> None:
        self.emitter, self.buffers, self.head, self.out_offsets = emitter, emitter.buffers, head, out_offsets
        self.work = 0  # floats of workspace taken so far

    def take(self, size: int) -> str:
        self.work += size
        return f"work[{self.work - size}:{self.work}]"

    def place(self, node: Expr, top: _Region, homes: dict) -> None:
        """A buffer for the array ``node``: its home (a scan's row), its slice of ``out``, or of the workspace."""
        self.buffers[node] = self.emitter.fresh("t")
        size, start = math.prod(node.shape), self.out_offsets.get(node)
        where = homes.get(node) or (self.take(size) + f".reshape({node.shape!r})" if start is None else
                                    f"out[{start}:{start + size}].reshape({node.shape!r})")
        top.lines.append(f"{self.buffers[node]} = {where}")

    def arrays(self, outputs: list[Expr], order: list[Expr], products: set, top: _Region,
               homes: dict | None = None) -> None:
        """The loops filling the arrays of ``order`` (``outputs`` planned, ``products`` their BLAS products)."""
        buffers, emitter, homes = self.buffers, self.emitter, homes or {}
        for t in (n for n in order if n.op.name == "table" and n not in buffers):
            buffers[t] = f"TABLE{len(self.head)}"
            self.head.append(f"{buffers[t]} = np.array({list(t.payload[1])}, dtype=np.int64).reshape("
                             f"{tuple(t.payload[0])!r})")
        riders = _riders(order)

        def loop(nest: list[Expr]) -> None:
            _materialise(nest + _riding(riders, _ranges(nest[0])), buffers, emitter, top)

        units = _schedule(order, products, outputs)
        fused = _fused(order, outputs, units)
        for kind, nodes in units:
            if kind == "tensors":
                nodes = [n for n in nodes if n not in fused]
                if not nodes:
                    continue
            if kind == "scan":
                self.scan(nodes[0], top)
                continue
            for node in nodes[:1] if kind == "accumulate" else nodes:
                self.place(node, top, homes)
            if kind == "product":
                top.lines.append(_dot(nodes[0], buffers))
            elif kind == "cumsum":
                _running(nodes[0], buffers, emitter, top, fused)
            elif kind == "tensors":
                loop(nodes)
            elif kind == "scatter":
                top.lines.append(f"{buffers[nodes[0]]}[...] = 0.0")
                loop(nodes)
            else:  # a tensor whose body adds scatters: the rest first, then each scatter adds in place
                total, rest, scatters = nodes[0], nodes[1], nodes[2:]
                if rest is None:
                    top.lines.append(f"{buffers[total]}[...] = 0.0")
                else:
                    buffers[rest] = buffers[total]
                    loop([rest])
                for nest in _nests(scatters):
                    buffers.update((sc, buffers[total]) for sc in nest)
                    loop(nest)

    def scan(self, node: Expr, top: _Region) -> None:
        """A loop over the steps around the step's loops: row 0 of the carries holds the initial one
        (row n reversed), the step reads the row before and writes the next (rows views)."""
        length, reverse, step = node.payload
        init, rows, consts = node.args[0], node.args[1:1 + len(step.xs)], node.args[1 + len(step.xs):]
        size, emitter, buffers = math.prod(init.shape), self.emitter, self.buffers
        at, full = self.work, emitter.fresh("s")
        buffers[node] = full
        top.lines.append(f"{full} = {self.take((length + 1) * size)}.reshape({node.shape!r})")
        top.lines += _copied(emitter, "work", at + length * size if reverse else at, buffers[init], size)
        t, body = emitter.fresh("i"), _Region(None, frozenset(), {})
        before, after = (f"{t} + 1", t) if reverse else (t, f"{t} + 1")
        for placeholder, source in ((step.carry, f"{full}[{before}]"),
                                    *((p, f"{buffers[a]}[{t}]") for p, a in zip(step.xs, rows))):
            buffers[placeholder] = emitter.fresh("b")
            body.lines.append(f"{buffers[placeholder]} = {source}")
        buffers.update(zip(step.consts, (buffers[a] for a in consts)))
        outputs, products = _plan([step.body])
        self.arrays(outputs, topo_order(outputs), products, body, {outputs[0]: f"{full}[{after}]"})
        if outputs[0].op.name in ("array", "table"):  # planned away (a copy of a row or of the carry)
            body.lines += _copied(emitter, "work", f"{at} + ({after}) * {size}", buffers[outputs[0]], size)
        top.lines.append(f"for {t} in range({length - 1}, -1, -1):" if reverse else f"for {t} in range({length}):")
        top.lines += ["    " + line for line in body.lines]


def _copied(emitter: _Emitter, memory: str, start: int | str, source: str, size: int) -> list[str]:
    """Lines copying the array ``source`` (C order) into ``memory`` from ``start``: a loop, which
    Numba compiles in milliseconds (an assignment of an array to a slice takes it 0.5-3 s)."""
    flat, k = emitter.fresh("c"), emitter.fresh("i")
    return [f"{flat} = {source}.reshape(({size},))", f"for {k} in range({size}):",
            f"    {memory}[{start} + {k}] = {flat}[{k}]"]


_LIBRARY_CALL = re.compile(r"(?<![\w.])math\.\w+\(")  # a C library call (not fastmath's)
_ACCUMULATES = re.compile(r"^\s*a\d+ = ")  # the emitter's reduction accumulators: a loop-carried sum
_FASTMATH = re.compile(rf"fastmath\.({'|'.join(fastmath.FUNCTIONS)})\(")
_LIBRARY_NAMES = re.compile(rf"(?<![\w.])math\.({'|'.join(fastmath.FUNCTIONS)})\(")


def _library_where_scalar(lines: list[str]) -> list[str]:
    """The kernel's lines with a ``fastmath.`` function turned into the C library's wherever LLVM
    will not vectorise one of its calls: outside innermost loops, and in innermost loops that also
    call the library (sin, cos) or carry a reduction (no reassociation without fast-math flags).
    Run one element at a time, fastmath's select-only code is ~2x slower than the library's
    branches (P5: 1.46x the hand-written loop with fastmath, 1.0x without). A function is switched
    in every line or none: the same node computed in two loops must give the same bits (a max's
    derivative finds its ties by comparing them)."""
    depth = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    vectorised: set[int] = set()
    for k, line in enumerate(lines):
        if not line.lstrip().startswith("for "):
            continue
        end = k + 1
        while end < len(lines) and depth(lines[end]) > depth(line):
            end += 1
        scalar = (b for b in lines[k + 1:end] if b.lstrip().startswith("for ") or _LIBRARY_CALL.search(b)
                  or _ACCUMULATES.match(b))
        if next(scalar, None) is None:
            vectorised.update(range(k + 1, end))
    library = {name for k, line in enumerate(lines) if k not in vectorised for name in _FASTMATH.findall(line)}
    if not library:
        return lines
    switch = re.compile(rf"fastmath\.({'|'.join(sorted(library))})\(")
    return [switch.sub(r"math.\1(", line) for line in lines]


BLAS_MIN = 4096  # multiply-adds from which a contraction calls BLAS (a call costs about a microsecond)


def _plan(outputs: list[Expr]) -> tuple[list[Expr], set[Expr]]:
    """The outputs rewritten for loops, and the tensors that are matrix products.

    A transcendental value inside nested loops that two expressions use is materialised (a
    softmax's exponentials, otherwise computed again in each loop that reads them). A large enough
    contraction ``sum(a*b, c)`` over one or two other indices becomes a product computed by BLAS
    (``np.dot``), its operands materialised unless they are arrays read as they are (or
    transposed). An expression that is the whole body of a tensor is read from the tensor
    wherever else it occurs, not computed again (the derivative of ``tanh(u)`` at every element
    uses ``tanh(u)``, which the forward tensor holds)."""
    order = topo_order(outputs)
    users: dict[Expr, int] = {}
    for node in order:
        for a in set(node.args):
            users[a] = users.get(a, 0) + 1
    axes = _axes(order)
    shared = {n for n in order if len(n.free) >= 2 and users.get(n, 0) >= 2 and costly(n) and not _address(n)}
    outputs, _ = _rewrite(outputs, lambda node, new: _materialised(new, axes(node)) if node in shared else None)
    order = topo_order(outputs)
    axes, bodies, products = _axes(order), _bodies(order), set()

    def contract(node: Expr, new: Expr) -> Expr | None:
        product = _product(new, bodies[node].args[1:] if node in bodies else axes(node)) \
            if new.op.name == "sum" else None
        if product is not None:
            products.add(product)
            return apply(OPS["load"], (product, *product.args[1:]))
        return _materialised(new, bodies[node].args[1:]) if node in bodies else None

    outputs, _ = _rewrite(outputs, contract)
    bodies = _bodies(topo_order(outputs))  # the operands' tensors made for BLAS, read elsewhere too
    outputs, renamed = _rewrite(outputs, lambda node, new: _materialised(new, bodies[node].args[1:])
                                if node in bodies else None)
    products = {renamed.get(p, p) for p in products}
    outputs, renamed = _rewrite(outputs, lambda node, new: None if new in products else _by_rows(new))
    return outputs, {renamed.get(p, p) for p in products}


def _address(n: Expr) -> bool:
    """Whether ``n`` is index arithmetic (``(6*j + k) % 6``: loads' addresses read it, never an array)."""
    try:
        value_range(n)
    except TypeError:
        return False
    return True


def _by_rows(t: Expr) -> Expr | None:
    """A tensor of sums down columns, ``t[j] = sum(A[i, j], i)``, as a scatter adding row after row
    (``t[j] += A[i, j]``, j innermost), or None: summed down a column, each element waits on the
    addition before (a chain of ``COLUMN_MIN`` or more), across a row they are independent and
    contiguous. Each element adds the same terms in the same order. Not where a load reads along
    ``i`` as its last axis and varies over ``j`` too (a row sum: contiguous already); a load
    over ``i`` alone is one value per row."""
    if t.op.name != "tensor" or t.args[0].op.name != "sum":
        return None
    (body, i), js = t.args[0].args, t.args[1:]
    if i.payload[1] < COLUMN_MIN or any(n.op.name in _START for n in _body(t.args[0])):
        return None
    loads = [n for n in _body(t.args[0]) if n.op.name == "load" and n.args[0].op.name != "table"]
    if any(i in n.args[-1].free and not n.free.isdisjoint(js) for n in loads) or not any(
            js[-1] in n.args[-1].free and any(i in a.free for a in n.args[1:-1]) for n in loads):
        return None
    return scatter(body, js, (i, *js), t.shape)


def _rewrite(outputs: list[Expr], replace: Callable) -> tuple[list[Expr], dict]:
    """The graph rebuilt bottom up, ``replace(node, node rebuilt)`` giving what its users read
    instead (or None: the rebuilt node); and the map from old nodes to new."""
    new: dict[Expr, Expr] = {}
    for node in topo_order(outputs):
        args = tuple(new.get(a, a) for a in node.args)
        if any(a is not b for a, b in zip(args, node.args)):  # (a tensor of a load of a tensor is that tensor)
            new[node] = tensor(*args) if node.op.name == "tensor" else apply(node.op, args, node.payload)
        out = replace(node, new.get(node, node))
        if out is not None:
            new[node] = out
    return [new.get(r, r) for r in outputs], new


def _materialised(e: Expr, axes: tuple) -> Expr:
    """``e`` read from the tensor of it over ``axes``."""
    return apply(OPS["load"], (tensor(e, *axes), *axes))


def _bodies(order: list[Expr]) -> dict[Expr, Expr]:
    """Each tensor's body (not a mere load) -> the first tensor over exactly its indices."""
    bodies: dict[Expr, Expr] = {}
    for t in order:
        b = t.args[0] if t.op.name == "tensor" else None
        if b is not None and b.args and b.op.name != "load" and b.free == set(t.args[1:]):
            bodies.setdefault(b, t)
    return bodies


def _axes(order: list[Expr]) -> Callable[[Expr], tuple]:
    """A node's indices in the order of the first tensor around it (else by name): the layout a
    tensor of it gets, so the tensors around read it in order."""
    found: dict[Expr, tuple] = {}
    for t in order:
        if t.op.name == "tensor":
            for n in _body(t):
                if n.free and n.free <= set(t.args[1:]):
                    found.setdefault(n, tuple(i for i in t.args[1:] if i in n.free))
    return lambda node: found.get(node) or tuple(by_name(node.free))


def _product(s: Expr, axes: tuple) -> Expr | None:
    """``s`` = sum(a*b, c) as the tensor of a matrix (or matrix-vector) product over ``axes``, or None."""
    body, c = s.args
    if body.op.name != "mul" or not 1 <= len(axes) <= 2 or any(c not in f.free for f in body.args):
        return None
    factors = sorted(body.args, key=lambda f: next((k for k, i in enumerate(axes) if i in f.free), 2))
    own = [f.free - {c} for f in factors]
    if own[0] != {axes[0]} or own[1] != set(axes[1:]):
        return None
    if math.prod(i.payload[1] for i in (*axes, c)) < BLAS_MIN:
        return None
    operands = [_operand(f, (axes[0], c)) for f in factors[:1]] + [_operand(factors[1], (c, *axes[1:]))]
    return tensor(reduce("sum", operands[0] * operands[1], c), *axes)


def _operand(f: Expr, axes: tuple) -> Expr:
    """``f`` as a load of an array over ``axes`` (in either order): itself if it is one, else a load
    from the tensor of it (materialised once, so BLAS can read it)."""
    if f.op.name == "load" and f.payload is None and f.args[0].op.name != "table" and \
            len(f.args) == len(axes) + 1 and set(f.args[1:]) == set(axes) and len(set(f.args[1:])) == len(axes) \
            and all(i.payload[1] == n for i, n in zip(f.args[1:], f.args[0].shape)):  # (all of it, not a part)
        return f
    return apply(OPS["load"], (tensor(f, *axes), *axes))


def _dot(node: Expr, buffers: dict) -> str:
    """``np.dot`` filling the product tensor ``node`` (see _product), transposing views as needed."""
    (body, c), axes = node.args[0].args, node.args[1:]
    first, second = sorted(body.args, key=lambda f: axes[0] not in f.free)

    def view(load: Expr, leading: Expr) -> str:
        name = buffers[load.args[0]]
        return name if len(load.args) == 2 or load.args[1] is leading else f"{name}.T"

    return f"np.dot({view(first, axes[0])}, {view(second, c)}, {buffers[node]})"


def _running(node: Expr, buffers: dict, emitter: _Emitter, top: _Region, fused: set) -> None:
    """The loops filling the running sums ``node`` (axes in order, its axis backwards if reversed):
    each element adds the one before it along the axis (np.cumsum's order of additions). Along
    the last axis the sum so far is kept in a register (one add per element); along another, the
    row before is read back, each element of a row independent of the others (vectorised). An
    operand in ``fused`` (cheap arithmetic read by nothing else) is computed in the loop itself."""
    (axis, reverse), shape, operand = node.payload, node.shape, node.args[0]
    indices = tuple(fresh_index(index("s", n)) for n in shape)
    levels, region = [], top
    for i in indices:
        region = _Region(region, region.bound | {i}, {**region.loops, i: emitter.fresh("i")})
        levels.append(region)
    names = [region.loops[i] for i in indices]
    here = ", ".join(names)
    if operand in fused:
        value = emitter.value(substitute_indices(operand.args[0], dict(zip(operand.args[1:], indices))), region)
    else:
        value = f"{buffers[operand]}[{here}]"
    dst = buffers[node]
    if axis == len(shape) - 1:
        acc = emitter.fresh("a")
        (levels[axis - 1] if axis else top).lines.append(f"{acc} = 0.0")
        region.lines += [f"{acc} = {acc} + {value}", f"{dst}[{here}] = {acc}"]
    else:
        at = names[axis]
        before = ", ".join([*names[:axis], f"{at} + 1" if reverse else f"{at} - 1", *names[axis + 1:]])
        first = f"{at} < {shape[axis] - 1}" if reverse else f"{at} > 0"
        region.lines.append(f"{dst}[{here}] = {value} + ({dst}[{before}] if {first} else 0.0)")
    for depth, (name, n, level) in enumerate(zip(names, shape, levels)):
        steps = f"{n - 1}, -1, -1" if depth == axis and reverse else f"{n}"
        top.lines.append("    " * depth + f"for {name} in range({steps}):")
        top.lines += ["    " * (depth + 1) + line for line in level.lines]


def _fused(order: list[Expr], outputs: list[Expr], units: list[tuple[str, list]]) -> set:
    """Tensors of cheap arithmetic that only running sums read (not outputs): computed in the
    running sums' loop instead of filling an array first (the compiled loops; the VM fills it).
    Only tensors filled by a plain nest: one that scatters add into ("accumulate") is its
    buffer's only complete value."""
    uses = _uses(order)
    plain = {n for kind, nodes in units if kind == "tensors" for n in nodes}
    kept = set(outputs)
    return {n.args[0] for n in order if n.op.name == "cumsum" and n.args[0] in plain and uses[n.args[0]] == 1
            and n.args[0] not in kept and not any(costly(m) for m in _body(n.args[0]))}


def _uses(order: list[Expr]) -> dict[Expr, int]:
    """How many times each node is an argument in ``order``."""
    uses: dict[Expr, int] = {}
    for node in order:
        for a in node.args:
            uses[a] = uses.get(a, 0) + 1
    return uses


def _schedule(order: list[Expr], products: set, kept: Sequence[Expr] = ()) -> list[tuple[str, list]]:
    """The loop nests filling the arrays, in an order that computes what each reads first.

    "tensors": tensors over the same ranges, one loop nest filling them all (sharing what their
    bodies share), each placed in the first such nest after those of the arrays it reads;
    "product": a BLAS product; "scatter": a scatter alone; "accumulate": [a tensor, the tensor of
    its body's other terms (or None), the scatters its body adds], which add in place: no
    buffer of their own, and scatters over the same ranges in one loop (a gradient through
    strided or table addresses is then one pass, as written by hand)."""
    uses, present, kept = _uses(order), set(order), set(kept)
    accumulating, hidden = {}, set()
    for t in order:
        if t.op.name == "tensor" and t not in products:
            terms = _terms(t.args[0])
            added = [m for m in terms if m.op.name == "load" and m.args[0].op.name == "scatter"
                     and m.payload is None and all(a is b for a, b in zip(m.args[1:], t.args[1:]))
                     and uses[m.args[0]] == uses[m] == 1 and m.args[0] not in kept]
            rest = [m for m in terms if all(m is not a for a in added)]
            rest = tensor(_sum(rest), *t.args[1:]) if rest and added else None
            if added and rest not in present:  # (else the rest is an array others read: it keeps its buffer)
                accumulating[t] = [rest, *(m.args[0] for m in added)]
                hidden.update(m.args[0] for m in added)
    units: list[tuple[str, list]] = []
    unit_of: dict[Expr, int] = {}
    for node in order:
        if node.op.name not in ("tensor", "scatter", "cumsum", "scan") or node in hidden:
            continue
        parts = [node, *(p for p in accumulating.get(node, ()) if p is not None)]
        after = max((unit_of.get(a, -1) for p in parts for a in _loaded(p)), default=-1)
        alone = node.op.name != "tensor" or node in products or node in accumulating
        home = None if alone else next((k for k in range(after + 1, len(units)) if units[k][0] == "tensors"
                                        and units[k][1][0].shape == node.shape), None)
        if home is not None:
            units[home][1].append(node)
        else:
            kind = ("product" if node in products else "accumulate" if node in accumulating else
                    node.op.name if node.op.name in ("scatter", "cumsum", "scan") else "tensors")
            units.append((kind, [node, *accumulating.get(node, ())]))
            home = len(units) - 1
        unit_of[node] = home
    return units


def _terms(e: Expr) -> list[Expr]:
    """The terms of a sum ``a + b + ...``."""
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        if node.op.name == "add":
            stack += node.args
        else:
            out.append(node)
    return out


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _nests(scatters: list[Expr]) -> list[list[Expr]]:
    """Scatters grouped by the ranges they loop over (one loop nest each group)."""
    nests: dict[tuple, list[Expr]] = {}
    for sc in scatters:
        nests.setdefault(_ranges(sc), []).append(sc)
    return list(nests.values())


def _ranges(node: Expr) -> tuple:
    """The sizes of the loops filling a tensor or scatter (a reduction: of its index)."""
    k = 0 if node.op.name == "tensor" else node.payload[1] if node.op.name == "scatter" else 0
    return tuple(i.payload[1] for i in node.args[1 + k:])


def _slots(outputs: list[Expr]) -> tuple[list, dict, int]:
    """Where the outputs after the first go in ``out``: (output, offset) in order (an output may be
    there twice), each output's first offset, and the size of ``out``."""
    slots, offset = [], 0
    for r in outputs[1:]:
        slots.append((r, offset))
        offset += math.prod(r.shape) if r.op.array_valued else 1
    first: dict[Expr, int] = {}
    for r, start in slots:
        first.setdefault(r, start)
    return slots, first, offset


def _riding(riders: list[Expr], ranges: tuple) -> list[Expr]:
    """The riders that join a loop nest over ``ranges`` (one-dimensional, over their index's
    range), taken off the list."""
    riding = [r for r in riders if len(ranges) == 1 and r.args[1].payload[1] == ranges[0]]
    riders[:] = [r for r in riders if all(r is not q for q in riding)]  # (== on Exprs builds nodes)
    return riding


def _riders(order: list[Expr]) -> list[Expr]:
    """Scalar reductions over plain inputs, which may join a 1-D loop over the same range: the
    loop computing the adjoints accumulates the value too, sharing what their bodies share."""
    in_arrays = {m for a in order if a.op.name in ("tensor", "scatter") for m in _body(a)}
    return [n for n in order if n.op.name in _START and not n.free and n not in in_arrays and
            not any(m.op.name in _START or m.op.name == "load" and m.args[0].op.name not in ("array", "table")
                    for m in _body(n))]


def _loaded(node: Expr) -> set:
    """The arrays a tensor's body reads (not through other arrays: those have their own loops)."""
    if node.op.name in ("cumsum", "scan"):
        return set(node.args)
    return {n.args[0] for n in _body(node) if n.op.name == "load"}


def _body(node: Expr) -> set:
    """The scalar nodes a tensor's, scatter's or reduction's loop computes: its body's graph, not
    descending into the arrays it reads. A reduction may ride in another loop only if none of
    this is another reduction and no array's loop needs it (it is complete after the loop only)."""
    seen, stack = {node.args[0]}, [node.args[0]]
    while stack:
        for a in stack.pop().args:
            if a not in seen and not a.op.array_valued:
                seen.add(a)
                stack.append(a)
    return seen


def _materialise(group: list[Expr], buffers: dict, emitter: _Emitter, top: _Region) -> None:
    """The loop nest filling tensors (element at their indices, the group sharing the first one's
    indices) or a scatter (adding at its addresses)."""
    first = group[0]
    k = 0 if first.op.name == "tensor" else first.payload[1]
    indices = tuple(fresh_index(i) for i in first.args[1 + k:])  # fresh: no body binds them
    levels, region = [], top  # one region per loop: what varies over the outer indices only is hoisted
    for i in indices:
        region = _Region(region, region.bound | {i}, {**region.loops, i: emitter.fresh("i")})
        levels.append(region)
    inner, loops = region, region.loops
    bodies = []
    for node in group:
        k = node.payload[1] if node.op.name == "scatter" else 0
        own = node.args[1 + k:]
        body = substitute_indices(node.args[0], dict(zip(own, indices)))
        bodies.append(body)
        value = emitter.value(body, inner)
        if node.op.name in _START:  # a scalar reduction riding along: its accumulator
            acc = emitter.fresh("a")
            top.lines.append(f"{acc} = {_START[node.op.name]}")
            inner.lines.append(f"{acc} = {_COMBINE[node.op.name].format(acc, value)}")
            top.names[node] = acc
        elif node.op.name == "tensor":
            inner.lines.append(f"{buffers[node]}[{', '.join(loops[i] for i in indices)}] = {value}")
        else:
            renamed = [substitute_indices(a, dict(zip(own, indices))) for a in node.args[1:1 + k]]
            addresses = ", ".join(emitter._address(a, inner) if a.op.name == "const" else emitter.value(a, inner)
                                  for a in renamed)
            inner.lines.append(f"{buffers[node]}[{addresses}] += {value}")
    if len(indices) == 1:  # the iterations where every guarded read is inside its array, apart
        for lo, hi in _partition(indices[0], bodies):
            top.lines.append(f"for {loops[indices[0]]} in range({lo}, {hi}):")
            top.lines += ["    " + line for line in levels[0].lines]
        return
    for depth, (i, level) in enumerate(zip(indices, levels)):
        top.lines.append("    " * depth + f"for {loops[i]} in range({i.payload[1]}):")
        top.lines += ["    " * (depth + 1) + line for line in level.lines]


def _partition(i: Expr, bodies: list[Expr]) -> list[tuple[int, int]]:
    """The ranges a one-dimensional loop over ``i`` runs in: the iterations where every guarded read
    at ``i + c`` is inside its array (``x[i - 1]``, ``x[i + 1]``: all but the first and the last)
    apart from the others, so that in the main loop the guards hold by its range (LLVM removes
    them and vectorises, where otherwise it peels iterations off: LLVM 22 can abort doing that).
    One range when there is nothing to split."""
    n = i.payload[1]
    lo, hi = 0, n  # the main loop: lo .. hi - 1
    for node in topo_order(bodies):
        if node.op.name != "load" or node.payload != "guarded":
            continue
        for a, size in zip(node.args[1:], node.args[0].shape):
            form = affine(a)
            if form is not None and len(form[0]) == 1 and form[0].get(i) == 1:
                lo, hi = max(lo, -form[1]), min(hi, size - form[1])
    if (lo, hi) == (0, n) or not 0 <= lo < hi <= n:
        return [(0, n)]
    return [(a, b) for a, b in ((0, lo), (lo, hi), (hi, n)) if a < b]


class Layout(Sequence):
    """The entries of a flat argument vector: each array raveled, then one per scalar, in order.
    Named like ``x[0, 1]`` on demand (an array may have 10**6 elements: no list of names is made).

    >>> import symgrad as sg
    >>> v = Layout([sg.array("x", (2, 2)), sg.Var("a")])
    >>> len(v), v[1], v[-1], v[:2]
    (5, 'x[0, 1]', 'a', ['x[0, 0]', 'x[0, 1]'])
    """

    def __init__(self, exprs: Sequence[Expr]) -> None:
        self.exprs = tuple(exprs)
        sizes = [math.prod(shape_of(v)) if v.op.name == "array" else 1 for v in self.exprs]
        self.starts = [0, *itertools.accumulate(sizes)]
        # One array: calls may pass it in its own shape (the gradient comes back raveled).
        self.shape = self.exprs[0].shape if len(self.exprs) == 1 and self.exprs[0].op.name == "array" else None

    def blocks(self) -> list[tuple[Expr, int, int]]:
        """(input, its first entry, its number of entries), in order."""
        return [(v, a, b - a) for v, a, b in zip(self.exprs, self.starts, self.starts[1:])]

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        k = k + len(self) if k < 0 else k
        if not 0 <= k < len(self):
            raise IndexError(k)
        block = bisect.bisect_right(self.starts, k) - 1
        v = self.exprs[block]
        if v.op.name != "array":
            return v.payload
        where = np.unravel_index(k - self.starts[block], v.shape)
        return f"{v.payload[0]}[{', '.join(str(int(w)) for w in where)}]"

    def __repr__(self) -> str:
        names = (f"{v.payload[0]}{list(v.shape)}" if v.op.name == "array" else v.payload for v in self.exprs)
        return f"({', '.join(names)})"


_ZERO = intern(OPS["const"], (), 0.0)


@dataclass(frozen=True, eq=False)
class LoopProgram:
    """A compiled function's plan when its expressions are rolled: the roots themselves (a few
    nodes, whatever the arrays' sizes), read by the loop generator or the interpreter.

    ``returns_value``: the first root is returned as a float; the others (``n_out`` floats, arrays
    raveled) are written to an output array. ``inputs`` and ``params`` are the layouts of ``x``, ``p``.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 4), sg.index("i", 4)
    >>> f = sg.sum(x[i] ** 2, i)
    >>> print(LoopProgram.make([f, *sg.grad(f, [x])], [x], [], True))
    { lambda x[4] = (x[4]).
      return sum(x[i]**2, i=0..3)
      out[0:4] = tensor(2*x[j], j=0..3) }
    """

    roots: tuple[Expr, ...]
    inputs: Layout
    params: Layout
    n_out: int
    returns_value: bool

    @classmethod
    def make(cls, roots: list[Expr], inputs: list[Expr], params: list[Expr], returns_value: bool,
             order: list[Expr] | None = None) -> LoopProgram:
        """The program for ``roots`` (``order``: their topological order, when the caller has it),
        checked: every array or variable it reads is an input or a param."""
        have = set(inputs).union(params)
        order = topo_order(roots) if order is None else order
        missing = sorted(str(n) for n in order if n.op.name in ("var", "array") and n not in have)
        if missing:
            raise ValueError(f"the outputs depend on {', '.join(missing[:5])}, which are not among the inputs "
                             f"{Layout(inputs)!r} or params {Layout(params)!r}")
        for r in roots:
            if r.free:
                raise ValueError(f"compiling: the output {str(r)[:60]} varies over {sorted(map(str, r.free))}: "
                                 "reduce it (sg.sum) or make it an array (sg.tensor)")
        n_out = sum(math.prod(r.shape) for r in roots[returns_value:])
        return cls(tuple(roots), Layout(inputs), Layout(params), n_out, returns_value)

    @functools.cached_property
    def source(self) -> str:
        """The generated Numba module: the loop kernel and its point / batch / total entries."""
        outputs = list(self.roots) if self.returns_value else [_ZERO, *self.roots]
        return source(outputs, self.inputs.exprs, self.params.exprs) + _ENTRIES.format(
            nx=len(self.inputs), np=len(self.params), nout=self.n_out)

    @property
    def key(self) -> str:
        return hashlib.blake2b(self.source.encode(), digest_size=12).hexdigest()

    @functools.cached_property
    def library(self) -> frozenset[str]:
        """The fastmath functions the compiled loops call from the C library (see _library_where_scalar):
        the loop VM calls the same, so both give the same bits."""
        return frozenset(_LIBRARY_NAMES.findall(self.source))

    @property
    def n_ops(self) -> int:
        """The number of arithmetic nodes in the rolled graph (its size, not the arrays')."""
        return sum(1 for n in topo_order(list(self.roots)) if n.op.kind != "rolled" and n.args)

    def __len__(self) -> int:
        return len(topo_order(list(self.roots)))

    def kernels(self, backend: str, roots: Any = None) -> Kernels:
        """The kernels running this program on ``backend`` ("numba" loops, or the "python" interpreter)."""
        if backend not in LOOP_BACKENDS:
            raise ValueError(f"backend {backend!r} does not run rolled expressions yet; use one of "
                             f"{sorted(LOOP_BACKENDS)} (or unroll them: sg.unroll)")
        return LOOP_BACKENDS[backend](self)

    def to_dot(self) -> str:
        """Graphviz DOT of the rolled expressions the program computes."""
        return to_dot(list(self.roots), "program")

    def __str__(self) -> str:
        sig = f"x[{len(self.inputs)}] = {self.inputs!r}"
        if self.params.exprs:
            sig += f"; p[{len(self.params)}] = {self.params!r}"
        lines, at = [f"{{ lambda {sig}."], 0
        for k, r in enumerate(self.roots):
            if k == 0 and self.returns_value:
                lines.append(f"  return {r}")
                continue
            size = math.prod(r.shape)
            lines.append(f"  out[{at}:{at + size}] = {r}" if r.op.array_valued else f"  out[{at}] = {r}")
            at += size
        return "\n".join(lines) + " }"

    def __repr__(self) -> str:
        return f"<LoopProgram {len(self.roots)} outputs, x[{len(self.inputs)}], p[{len(self.params)}]>"

    def __reduce__(self) -> tuple:
        # The graph travels as a sg.dumps document (checked node by node where it lands), never the
        # generated source or its key: the receiver generates both again, as Program's pickles do.
        from symgrad.compile.lower import OPS_ID, PICKLE_VERSION
        from symgrad.expr.serialize import dumps

        roles = (len(self.roots), len(self.inputs.exprs), len(self.params.exprs))
        graph = dumps([*self.roots, *self.inputs.exprs, *self.params.exprs])
        return LoopProgram._unpickled, (PICKLE_VERSION, OPS_ID, graph, roles, self.returns_value)

    def __setstate__(self, state: Any) -> None:
        # Only a forged pickle sets state (ours call _unpickled): one carrying "source" would run it.
        raise ValueError("this pickled symgrad loop program carries its state (generated source?) instead of its "
                         "graph: refused; pickle it again with this symgrad")

    @classmethod
    def _unpickled(cls, version: Any, ops_id: Any, graph: Any, roles: Any, returns_value: Any) -> LoopProgram:
        """A LoopProgram from a pickle: format and op table checked, the graph loaded by sg.loads (a
        FormatError for anything sg.dumps does not write), the program made again from it."""
        from symgrad.compile.lower import OPS_ID, PICKLE_VERSION, _names
        from symgrad.expr.serialize import loads

        if version != PICKLE_VERSION or ops_id != OPS_ID:
            raise ValueError(f"this pickled symgrad loop program has format {version!r} and op table {ops_id!r}; "
                             f"this symgrad reads format {PICKLE_VERSION}, op table {OPS_ID}: compile it again")
        exprs = loads(graph)
        if not (isinstance(exprs, list) and isinstance(roles, tuple) and len(roles) == 3
                and all(type(n) is int and n >= 0 for n in roles) and sum(roles) == len(exprs) and roles[0]
                and type(returns_value) is bool):
            raise ValueError("this pickled symgrad loop program is malformed (its roots, inputs and params)")
        a, b = roles[0], roles[0] + roles[1]
        return cls.make(exprs[:a], _names(exprs[a:b], "inputs"), _names(exprs[b:], "params"), returns_value)


# The batch and sum entries around the loop kernel: sizes checked (a longer vector would be read
# silently otherwise), the workspace allocated once per thread's rows.
_ENTRIES = """

@numba.njit(nogil=True, error_model='numpy')
def batch(X, P, V, OUT, lo, hi):
    if X.shape[1] != {nx} or P.shape[1] != {np} or OUT.shape[1] != {nout}:
        raise ValueError("symgrad: wrong shape")
    work = np.empty(WORK)
    for r in range(lo, hi):
        v = kernel(X[r], P[r if P.shape[0] > 1 else 0], OUT[r], work)
        if V.shape[0]:
            V[r] = v


@numba.njit(nogil=True, error_model='numpy')
def total(x, P, acc, lo, hi):
    if x.shape[0] != {nx} or P.shape[1] != {np}:
        raise ValueError("symgrad: wrong shape")
    work, part = np.empty(WORK), np.empty({nout})
    acc[:] = 0.0
    for r in range(lo, hi):
        acc[0] += kernel(x, P[r], part, work)
        acc[1:] += part
"""


def numba_kernels(program: LoopProgram) -> Kernels:
    """Numba loop kernels for ``program`` (the loop VM's past ``$SYMGRAD_MAX_PROGRAMS``)."""
    name = _module_name(program)
    if not cache.has_room(name):
        cache.warn_once("loop programs", f"{cache.max_programs()} programs are compiled with Numba in this "
                        "process (its machine code is never freed; $SYMGRAD_MAX_PROGRAMS): new rolled ones run "
                        "on the loop VM")
        return LOOP_BACKENDS["vm"](program)
    module = cache.load(name, program.source)
    return Kernels("numba", functools.lru_cache(None)(
        lambda variant: cache.typed(module, variant, SIGNATURES[variant])), program.source)


def numba_on_disk(program: LoopProgram) -> bool:
    """Whether Numba's machine code for ``program`` is in the disk cache (ready in a moment)."""
    name = _module_name(program)
    return cache.has_room(name) and cache.on_disk(cache.load(name, program.source), "point")


def _module_name(program: LoopProgram) -> str:
    return f"loops_{program.key}"


def python_kernels(program: LoopProgram) -> Kernels:
    """The reference interpreter (NumPy, vectorised over each index) behind the kernel interface."""
    order = topo_order(list(program.roots))

    def values(x: np.ndarray, p: np.ndarray) -> list:
        given = {}
        for layout, vector in ((program.inputs, x), (program.params, p)):
            for v, start, size in layout.blocks():
                if v.op.name == "array":
                    given[v.payload[0]] = vector[start:start + size].reshape(v.shape)
                else:
                    given[v.payload] = vector[start]
        got = run(order, given, set(program.roots))
        return [np.ravel(got[r]) for r in program.roots]

    def point(x, p, out):
        if len(x) != len(program.inputs) or len(p) != len(program.params) or len(out) != program.n_out:
            raise ValueError("symgrad: wrong shape")
        got = values(x, p)
        if program.n_out:
            out[:] = np.concatenate(got[program.returns_value:])
        return float(got[0][0]) if program.returns_value else 0.0

    def batch(X, P, V, OUT, lo, hi):
        for r in range(lo, hi):
            v = point(X[r], P[r if len(P) > 1 else 0], OUT[r])
            if len(V):
                V[r] = v

    def total(x, P, acc, lo, hi):
        acc[:], part = 0.0, np.empty(program.n_out)
        for r in range(lo, hi):
            acc[0] += point(x, P[r], part)
            acc[1:] += part

    return Kernels("python", dict(point=point, batch=batch, total=total).__getitem__, program.__str__)


LOOP_BACKENDS: dict[str, Callable[[LoopProgram], Kernels]] = {"numba": numba_kernels, "python": python_kernels}
