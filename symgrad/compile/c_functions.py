"""symgrad's special functions (compile/special.py, expr/special_series.py: plain Python on floats, which
Numba compiles as they are) written as C by walking their syntax trees, so that one source serves the
interpreter, the Numba kernels and the exported C alike.

The Python they use is a small subset, translated statement for statement: assignments (tuples too),
``if`` / ``elif`` / ``else``, ``for`` over ``range`` or a tuple of numbers, ``while``, ``break``,
``return``; numbers, ``+ - * / // % **``, comparisons, ``and`` / ``or`` / ``not``, conditional
expressions; ``math.*`` / ``np.floor`` / ``np.round`` / ``np.fmod`` / ``abs`` / ``int`` / ``float``;
a module's constant NumPy array read by index (a static array). A variable is a ``long long`` when
every value it is given is an integer (``int(...)``, a ``range`` counter, integer arithmetic), else a
``double``; ``//`` and ``%`` of integers are Python's (floored). Anything else raises
NotImplementedError naming the function and the construct.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.compile import special

DOUBLE_CALLS = {**{f"math.{f}": f for f in ("sin", "cos", "tan", "exp", "log", "sqrt", "erf", "erfc", "floor",
                                              "copysign", "fabs", "expm1", "log1p", "lgamma")},
                 "math.gamma": "tgamma", "np.floor": "floor", "np.round": "rint", "np.fmod": "fmod",
                 "float": "(double)"}
_CONSTANTS = {"math.pi": "3.141592653589793", "math.inf": "INFINITY", "math.nan": "NAN"}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
INT, DOUBLE = "long long", "double"
HELPERS = """static inline long long sg_ifloordiv(long long a, long long b) {
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
/* a float to a whole power as Numba computes it (by squaring; 1 / r below 0): the same bits */
static inline double sg_ipow(double a, long long b) {
    long long e = b < 0 ? -b : b;
    double r = 1.0;
    if (e > 0x10000) return pow(a, (double)b);
    while (e != 0) {
        if (e & 1) r *= a;
        e >>= 1;
        a *= a;
    }
    return b < 0 ? 1.0 / r : r;
}
static inline long long sg_imod(long long a, long long b) {
    long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def expression_type(e: ast.expr, names: dict[str, str], other: Callable[[ast.expr], str]) -> str:
    """``INT`` or ``DOUBLE``, the C type of the Python expression ``e`` as Python computes it: integer
    literals and arithmetic of integers are integers, ``/`` and ``**`` floats; ``names`` types the
    variables (a float if unknown), ``other`` what is neither (calls, subscripts)."""
    if isinstance(e, ast.Constant):
        return INT if isinstance(e.value, int) and not isinstance(e.value, bool) else DOUBLE
    if isinstance(e, ast.Name):
        return names.get(e.id, DOUBLE)
    if isinstance(e, ast.BinOp | ast.IfExp):
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div | ast.Pow):
            return DOUBLE
        pair = (e.left, e.right) if isinstance(e, ast.BinOp) else (e.body, e.orelse)
        return INT if all(expression_type(a, names, other) == INT for a in pair) else DOUBLE
    if isinstance(e, ast.UnaryOp):
        return expression_type(e.operand, names, other)
    return other(e)


class _Function:
    """One Python function's C text: ``definition`` (and the arrays it reads, ``arrays``)."""

    def __init__(self, fn: Callable, name: str) -> None:
        self.fn, self.name = fn, name
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        assert isinstance(tree, ast.FunctionDef)
        self.params = [a.arg for a in tree.args.args]
        self.types: dict[str, str] = dict.fromkeys(self.params, DOUBLE)
        self.arrays: dict[str, np.ndarray] = {}
        self.loops = 0
        self._infer(tree.body)
        body = self._block(tree.body, 1)
        decls = [f"    {t} v_{v} = 0;" for v, t in self.types.items() if v not in self.params]
        head = f"static double sg_fn_{name}({', '.join(f'double v_{p}' for p in self.params)}) {{"
        self.definition = "\n".join([head, *decls, *body, "}", ""])

    def fail(self, node: ast.AST) -> Any:
        raise NotImplementedError(f"the C backend cannot write {self.name}: {ast.unparse(node)[:80]}")

    # ---- types: a variable is an integer when every value it is given is one (to a fixed point)
    def _infer(self, body: list) -> None:
        assigned: list[tuple[str, ast.expr | None]] = []
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) else \
                        [(target, node.value)]
                    assigned += [(t.id, v) for t, v in pairs if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                assigned.append((node.target.id, ast.BinOp(node.target, node.op, node.value)))
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                ranged = isinstance(node.iter, ast.Call) and ast.unparse(node.iter.func) == "range"
                assigned.append((node.target.id, None if ranged else ast.Constant(0.0)))
        for name, _ in assigned:  # (in order of appearance: the same text in every process)
            self.types.setdefault(name, INT)
        changed = True
        while changed:
            changed = False
            for name, value in assigned:
                if value is not None and self.types[name] == INT and self._type(value) == DOUBLE:
                    self.types[name], changed = DOUBLE, True

    def _type(self, e: ast.expr) -> str:
        return expression_type(e, self.types, self._call_type)

    def _call_type(self, e: ast.expr) -> str:
        name = ast.unparse(e.func) if isinstance(e, ast.Call) else ""
        return INT if name == "int" or name == "abs" and self._type(e.args[0]) == INT else DOUBLE

    # ---- statements
    def _block(self, body: list, depth: int) -> list[str]:
        lines: list[str] = []
        for node in body:
            lines += self._statement(node, depth)
        return lines

    def _statement(self, node: ast.stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
            return []
        if isinstance(node, ast.Return):
            return [f"{pad}return {self._expr(node.value)};"]
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Tuple):  # all right-hand sides first, as Python
                values = [self._expr(v) for v in node.value.elts]
                temps = [f"{pad}{self.types[t.id]} t{k} = {v};"
                         for k, (t, v) in enumerate(zip(target.elts, values))]
                sets = [f"{pad}v_{t.id} = t{k};" for k, t in enumerate(target.elts)]
                return [f"{pad}{{", *("    " + t for t in temps), *("    " + s for s in sets), f"{pad}}}"]
            return [f"{pad}v_{target.id} = {self._expr(node.value)};"]
        if isinstance(node, ast.AugAssign):
            return [f"{pad}v_{node.target.id} = {self._expr(ast.BinOp(node.target, node.op, node.value))};"]
        if isinstance(node, ast.If):
            lines = [f"{pad}if ({self._expr(node.test)}) {{", *self._block(node.body, depth + 1)]
            if node.orelse:
                lines += [f"{pad}}} else {{", *self._block(node.orelse, depth + 1)]
            return [*lines, f"{pad}}}"]
        if isinstance(node, ast.For):
            return self._for(node, depth)
        if isinstance(node, ast.While):
            return [f"{pad}while ({self._expr(node.test)}) {{", *self._block(node.body, depth + 1), f"{pad}}}"]
        if isinstance(node, ast.Break):
            return [f"{pad}break;"]
        return self.fail(node)

    def _for(self, node: ast.For, depth: int) -> list[str]:
        pad, var = "    " * depth, f"v_{node.target.id}"
        if node.orelse:
            return self.fail(node)
        if isinstance(node.iter, ast.Tuple):  # over numbers: a static array
            self.loops += 1
            table, k = f"sg_{self.name}_c{self.loops}", f"k{self.loops}"
            values = [float(ast.literal_eval(e)) for e in node.iter.elts]
            self.arrays[table] = np.array(values)
            return [f"{pad}for (long long {k} = 0; {k} < {len(values)}; ++{k}) {{",
                    f"{pad}    {var} = {table}[{k}];", *self._block(node.body, depth + 1), f"{pad}}}"]
        if not (isinstance(node.iter, ast.Call) and ast.unparse(node.iter.func) == "range"):
            return self.fail(node)
        args = [self._expr(a) for a in node.iter.args]
        start, stop = (args[0], args[1]) if len(args) > 1 else ("0", args[0])
        if len(args) == 3:
            return self.fail(node)
        self.loops += 1  # (the end computed once, as range's)
        end = f"e{self.loops}"
        return [f"{pad}{{", f"{pad}    const long long {end} = {stop};",
                f"{pad}    for ({var} = {start}; {var} < {end}; ++{var}) {{", *self._block(node.body, depth + 2),
                f"{pad}    }}", f"{pad}}}"]

    # ---- expressions
    def _expr(self, e: ast.expr) -> str:
        if isinstance(e, ast.Constant):
            if isinstance(e.value, bool) or not isinstance(e.value, int | float):
                return self.fail(e)
            return repr(e.value) if isinstance(e.value, int) or np.isfinite(e.value) else self.fail(e)
        if isinstance(e, ast.Name):
            return f"v_{e.id}" if e.id in self.types else self.fail(e)
        if isinstance(e, ast.Attribute):
            return _CONSTANTS.get(ast.unparse(e)) or self.fail(e)
        if isinstance(e, ast.BinOp):
            return self._binary(e)
        if isinstance(e, ast.UnaryOp):
            op = {ast.USub: "-", ast.Not: "!"}.get(type(e.op))
            return f"({op}{self._expr(e.operand)})" if op else self.fail(e)
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1 or type(e.ops[0]) not in _COMPARE:
                return self.fail(e)
            return f"({self._expr(e.left)} {_COMPARE[type(e.ops[0])]} {self._expr(e.comparators[0])})"
        if isinstance(e, ast.BoolOp):
            return "(" + (" && " if isinstance(e.op, ast.And) else " || ").join(map(self._expr, e.values)) + ")"
        if isinstance(e, ast.IfExp):
            return f"({self._expr(e.test)} ? {self._expr(e.body)} : {self._expr(e.orelse)})"
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.Subscript):
            return self._read(e)
        return self.fail(e)

    def _binary(self, e: ast.BinOp) -> str:
        left, right = self._expr(e.left), self._expr(e.right)
        if isinstance(e.op, ast.Div):
            return f"((double){left} / {right})"
        if isinstance(e.op, ast.Pow):  # (to a whole power: Numba's squaring, for the same bits)
            if self._type(e.right) == INT:
                return f"sg_ipow((double){left}, {right})"
            return f"pow((double){left}, (double){right})"
        integers = self._type(e.left) == INT and self._type(e.right) == INT
        if isinstance(e.op, ast.FloorDiv | ast.Mod):
            if not integers:
                return self.fail(e)
            return f"sg_{'ifloordiv' if isinstance(e.op, ast.FloorDiv) else 'imod'}({left}, {right})"
        if type(e.op) not in _BINARY:
            return self.fail(e)
        return f"({left} {_BINARY[type(e.op)]} {right})"

    def _call(self, e: ast.Call) -> str:
        name, args = ast.unparse(e.func), [self._expr(a) for a in e.args]
        if name == "int":
            return f"((long long)({args[0]}))"
        if name == "abs":
            return f"{'llabs' if self._type(e.args[0]) == INT else 'fabs'}({args[0]})"
        if name in NAMES and name != self.name:
            return f"sg_fn_{name}({', '.join(args)})"
        if name not in DOUBLE_CALLS or e.keywords:
            return self.fail(e)
        return f"{DOUBLE_CALLS[name]}({', '.join(args)})"

    def _read(self, e: ast.Subscript) -> str:
        """A module's constant array read at an index (``_BERNOULLI[j]``), or its length (``.shape[0]``)."""
        if isinstance(e.value, ast.Attribute) and e.value.attr == "shape" and isinstance(e.value.value, ast.Name):
            array = self.fn.__globals__.get(e.value.value.id)
            if isinstance(array, np.ndarray) and ast.literal_eval(e.slice) == 0:
                return str(len(array))
        array = self.fn.__globals__.get(ast.unparse(e.value)) if isinstance(e.value, ast.Name) else None
        if not isinstance(array, np.ndarray) or array.ndim != 1:
            return self.fail(e)
        table = f"sg_{self.name}_{e.value.id.strip('_').lower()}"
        self.arrays[table] = array
        return f"{table}[{self._expr(e.slice)}]"


def _python(name: str) -> Callable:
    fn = getattr(special, name)
    return getattr(fn, "py_func", fn)  # (a Numba dispatcher's own Python)


@functools.cache
def definition(name: str) -> str:
    """The C of ``special.<name>`` (and of the arrays it reads), as ``sg_fn_<name>``.

    >>> print(definition("sinc_derivative").splitlines()[0])
    static double sg_fn_sinc_derivative(double v_n, double v_x) {
    """
    fn = _Function(_python(name), name)
    arrays = [f"static const double {t}[] = {{{', '.join(repr(float(v)) for v in a)}}};"
              for t, a in fn.arrays.items()]
    return "\n".join([*arrays, fn.definition])


# compile/special.py's functions the op table's templates call (``special.<name>``)
NAMES = ("gammaln", "digamma", "polygamma", "sinc_derivative", "ive", "erfinv")


def definitions(names: set[str], helpers: bool = True) -> list[str]:
    """The C of the special functions ``names`` and of those they call, each after what it calls, after
    ``HELPERS`` (if any is written and ``helpers``: a file that has them already says False)."""
    wanted = names | {n for m in names for n in _callees(m)}
    done = [definition(name) for name in NAMES if name in wanted and name != "gammaln"]  # (callees first)
    return [HELPERS, *done] if done and helpers else done


@functools.cache
def _callees(name: str) -> tuple[str, ...]:
    source = inspect.getsource(_python(name))
    return tuple(n for n in NAMES if n != name and f"{n}(" in source)
