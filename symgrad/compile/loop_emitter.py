"""The emitter of loop bodies: ``_Region`` (a loop body, or a kernel's top level: the indices bound
there, its lines, its names) and ``_Emitter`` (each value computed in the outermost region where
every index it varies over is bound, a reduction as an inner loop with an accumulator, index
arithmetic in integers), with the interleaved sums' slots. loop_source.py emits the Numba loops'
lines through it; the loop VM (loop_vm.py) lowers to its rows through a subclass.
"""

from __future__ import annotations

from collections.abc import Callable

from symgrad.compile.numba_backend import _literal
from symgrad.expr.node import Expr
from symgrad.expr.ops import OPS
from symgrad.expr.rolled import index, substitute_indices, value_range

_INTEGER_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "neg": "(-{0})",
                "mod": "({0} % {1})", "floor_divide": "({0} // {1})", "as_index": "fastmath.as_index({0}, {1})"}
_COMBINE = {"sum": "{0} + {1}", "max": OPS["maximum"].numba, "min": OPS["minimum"].numba}
_START = {"sum": "0.0", "max": "-math.inf", "min": "math.inf"}
SLOTS = 8  # the accumulators of a long sum at a kernel's top level (see interleaved)
INTERLEAVED_MIN = 128


def interleaved(node: Expr) -> bool:
    """Whether the reduction ``node``, at a kernel's top level, adds into ``SLOTS`` accumulators,
    element k into slot k % SLOTS, added ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)) at the end: one
    accumulator waits on each addition before, these on the one SLOTS elements before, and LLVM
    vectorises them (a sum of 1.28M: 0.64 -> 0.19 ms). The loop VM adds its lanes the same way."""
    return node.op.name == "sum" and node.args[1].payload[1] >= INTERLEAVED_MIN


def folded(slots: str) -> str:
    """The sum of an interleaved sum's accumulators, in pairs."""
    terms = [f"{slots}[{k}]" for k in range(SLOTS)]
    while len(terms) > 1:
        terms = [f"({a} + {b})" for a, b in zip(terms[::2], terms[1::2])]
    return terms[0][1:-1]


def _blocked(var: str, bounds: str, lines: list[str], fresh: Callable[[str], str], shift: int = 0) -> list[str]:
    """``for var in range(bounds)`` over ``lines``, which add into ``SLOT``, the slot of element
    ``var + shift`` of interleaved sums: whole blocks of SLOTS elements as a loop over the slots inside
    a loop over the blocks (vectorised), the elements before and after them one by one."""
    if not any("SLOT" in line for line in lines):
        return [f"for {var} in range({bounds}):", *("    " + line for line in lines)]
    span = range(*map(int, bounds.split(",")))
    lo, hi = span.start, span.stop
    start = min(hi, lo + (-(lo + shift)) % SLOTS)
    end = start + (hi - start) // SLOTS * SLOTS
    at = f"({var} + {shift})" if shift else var

    def alone(a: int, b: int) -> list[str]:
        return [f"for {var} in range({a}, {b}):",
                *("    " + line.replace("SLOT", f"{at} % {SLOTS}") for line in lines)]

    block, slot = fresh("i"), fresh("i")
    blocks = [f"for {block} in range({(end - start) // SLOTS}):", f"    for {slot} in range({SLOTS}):",
              f"        {var} = {start} + {SLOTS} * {block} + {slot}",
              *("        " + line.replace("SLOT", slot) for line in lines)]
    return (alone(lo, start) if lo < start else []) + (blocks if start < end else []) + \
        (alone(end, hi) if end < hi else [])


# Small constant powers as the loop VM computes them (the same bits): products, not a pow call, and sqrt.
POWERS = {2.0: "{0} * {0}", 3.0: "{0} * {0} * {0}", 0.5: OPS["sqrt"].numba}


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
        self.count = self.n_indices = 0
        self.children: dict[tuple, tuple] = {}
        self.integers: set[Expr] = set()  # nodes emitted as integer arithmetic
        self.integer_names: set[str] = set()  # and the names holding them
        self.work = 0  # floats of workspace taken so far

    def take(self, size: int) -> str:
        self.work += size
        return f"work[{self.work - size}:{self.work}]"

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def fresh_index(self, i: Expr) -> Expr:
        """A new index over ``i``'s range, named by this emitter's count (``i#L7``), not the process's:
        the same program gives the same nodes, so the same source (and disk cache entry) each time."""
        self.n_indices += 1
        return index(f"{i.payload[0].split('#')[0]}#L{self.n_indices}", i.payload[1])

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
                        j = self.fresh_index(i)
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
        if self._integral(node):  # (integer arithmetic, a table's entry)
            self.integer_names.add(name)
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
        if name == "as_index" or self._integer(node):
            self.integers.add(node)
            return _INTEGER_OPS[name].format(*(self._address(a, reg) for a in node.args))
        return node.op.numba.format(*args)

    def _integer(self, node: Expr) -> bool:
        """Whether ``node`` is computed in integers: an integer op of integral arguments, a remainder or
        quotient only by what is never 0 (``1 % j`` at j = 0 is nan, as NumPy's floats give)."""
        if node.op.name not in _INTEGER_OPS or not all(self._integral(a) for a in node.args):
            return False
        if node.op.name not in ("mod", "floor_divide"):
            return True
        try:
            lo, hi = value_range(node.args[1])
        except (TypeError, OverflowError):
            return False
        return lo > 0 or hi < 0

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
        if home.parent is None and interleaved(node):
            slots = self.fresh("t")
            child.lines.append(f"{slots}[SLOT] = {slots}[SLOT] + {value}")
            home.lines += [f"{slots} = {self.take(SLOTS)}", f"{slots}[:] = 0.0",
                           *_blocked(child.loops[i], str(i.payload[1]), child.lines, self.fresh),
                           f"{acc} = {folded(slots)}"]
            home.names[node] = acc
            return
        child.lines.append(f"{acc} = {_COMBINE[kind].format(acc, value)}")
        home.lines.append(f"{acc} = {_START[kind]}")
        home.lines.append(f"for {child.loops[i]} in range({i.payload[1]}):")
        home.lines += ["    " + line for line in child.lines]
        home.names[node] = acc
