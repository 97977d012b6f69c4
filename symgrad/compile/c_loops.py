"""A LoopProgram's loops as C: the lines of its loop kernel (loop_source.KernelParts, the Python the
Numba backend compiles) translated statement for statement, so the C runs the same loops in the same
order, with the sizes as constants: the file's size does not depend on the arrays' sizes.

The kernel's Python is a small subset, and each construct has one C form: a view of ``x``, ``p``,
``out`` or ``work`` (``b1 = x[0:3].reshape((3,))``) or a row of one (``s50[i53 + 1]``) is a pointer
whose shape the translator keeps, an element ``t[i, j]`` its row-major offset; ``for k in range(..)`` a
C loop; ``t[...] = 0.0`` a loop; ``np.dot(A, B.T, C)`` BLAS called as Numba calls it (c_blas.py), or in
exported C a loop nest (the sum over k in order); ``np.argsort(row, kind="mergesort")`` the prelude's
stable merge sort (nan last, NumPy's order); a name holding an integer (the emitter's index arithmetic,
a table's entry, a loop counter) a ``long long``, any other a ``double``; the scalar expressions are the
op table's templates, written as C by c_source's translator. A construct outside this subset raises
NotImplementedError naming it (a bug: the loop generator grew a form this file does not know).

The kernel ``sg_kernel(x, p, out, work, iwork, status)`` keeps all scratch in ``work`` (doubles)
and ``iwork`` (the sorts' integers), so it is re-entrant; an integer data array's value out of
bounds (``as_index``) sets ``*status`` and reads element 0 instead.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from symgrad.compile import c_blas, c_fastmath, c_functions, fastmath, pieces
from symgrad.compile.c_source import PRELUDE, _ToC
from symgrad.compile.loop_source import KernelParts
from symgrad.expr.ops import OPS

INT, DOUBLE = c_functions.INT, c_functions.DOUBLE
_ARGUMENTS = ("x", "p", "out", "work", "iwork", "sc", "si")
_FAST = {f"fastmath.{f}" for f in fastmath.FUNCTIONS}  # (c_fastmath's, not the C library's: the Numba loops')

LOOP_PRELUDE = """static inline long long sg_imax(long long a, long long b) { return a > b ? a : b; }
static inline long long sg_imin(long long a, long long b) { return a < b ? a : b; }
/* an integer data array's value as an index on an axis of size n (negative from the end); out of
   bounds or not whole: *status set (the caller fails) and 0 read */
static inline long long sg_as_index(double v, double n, int* status) {
    if (!(-n <= v && v < n) || v != floor(v)) {
        *status = 1;
        return 0;
    }
    return v < 0 ? (long long)(v + n) : (long long)v;
}
"""
SORT = """/* a before b in NumPy's stable sort: nan last */
static inline int sg_before(double a, double b) { return a < b || (b != b && a == a); }
/* the positions sorting row[0:n] (a stable merge sort, nan last): into order; tmp holds n more */
static void sg_argsort(const double* row, long long n, long long* order, long long* tmp) {
    for (long long k = 0; k < n; ++k) order[k] = k;
    for (long long width = 1; width < n; width *= 2) {
        for (long long lo = 0; lo < n; lo += 2 * width) {
            long long mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            long long a = lo, b = mid, k = lo;
            while (a < mid && b < hi) tmp[k++] = sg_before(row[order[b]], row[order[a]]) ? order[b++] : order[a++];
            while (a < mid) tmp[k++] = order[a++];
            while (b < hi) tmp[k++] = order[b++];
        }
        for (long long k = 0; k < n; ++k) order[k] = tmp[k];
    }
}
"""


@dataclass
class _View:
    """A pointer the kernel names: its C type, its shape (row-major, contiguous)."""

    ctype: str
    shape: tuple[int, ...]


class _Expression(_ToC):
    """A kernel line's expression as C: names (scalars, views), elements of views, integer arithmetic."""

    def __init__(self, kernel: _Kernel) -> None:
        super().__init__(OPS["const"])
        self.kernel = kernel

    def generic_visit(self, node: ast.AST) -> str:
        raise NotImplementedError(f"the C backend cannot write the loop line {ast.unparse(node)[:100]!r}")

    def visit_Name(self, node: ast.Name) -> str:
        if node.id not in self.kernel.types:
            return self.generic_visit(node)
        return node.id

    def visit_Attribute(self, node: ast.Attribute) -> str:
        text = ast.unparse(node)
        constants = {"math.inf": "INFINITY", "math.nan": "NAN", "np.inf": "INFINITY", "np.nan": "NAN",
                     "math.pi": "3.141592653589793"}
        return constants[text] if text in constants else self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return str(node.value)
        return super().visit_Constant(node)

    def visit_BinOp(self, node: ast.BinOp) -> str:
        integers = self.kernel.type_of(node.left) == INT and self.kernel.type_of(node.right) == INT
        if isinstance(node.op, ast.FloorDiv | ast.Mod) and integers:
            helper = "sg_ifloordiv" if isinstance(node.op, ast.FloorDiv) else "sg_imod"  # (c_functions.HELPERS)
            return f"{helper}({self.visit(node.left)}, {self.visit(node.right)})"
        if isinstance(node.op, ast.Div) and integers:
            return f"((double){self.visit(node.left)} / {self.visit(node.right)})"
        return super().visit_BinOp(node)

    def visit_Subscript(self, node: ast.Subscript) -> str:
        if ast.unparse(node) == "work.shape[0]":
            return str(self.kernel.work_size)
        return self.kernel.element(node)

    def visit_Call(self, node: ast.Call) -> str:
        name = ast.unparse(node.func)
        if re.fullmatch(r"piece\d+", name):  # (a split kernel's piece: pieces.Split.driver)
            return f"sg_{name}(x, p, out, work, iwork, status, sc, si)"
        args = [self.visit(a) for a in node.args]
        if name in ("min", "max") and all(self.kernel.type_of(a) == INT for a in node.args):
            return f"sg_i{name}({', '.join(args)})"
        if name == "fastmath.as_index":
            return f"sg_as_index({args[0]}, {args[1]}, status)"
        if name in _FAST:
            return f"sg_f{name.split('.')[1]}({', '.join(args)})"
        return super().visit_Call(node)


class _Kernel:
    """The C lines of one loop kernel (``parts``): its declarations first (every name at the top, as
    Python's function scope), then its statements."""

    def __init__(self, parts: KernelParts, spills: tuple[int, int] = (0, 0), blas: bool = False) -> None:
        self.parts, self.blas = parts, blas
        self.views: dict[str, _View] = {"x": _View("const double", (parts.nx,)),
                                        "p": _View("const double", (parts.n_p,)),
                                        "out": _View("double", (parts.n_out,)),
                                        "work": _View("double", (parts.work,)),
                                        "iwork": _View("long long", (0,)),
                                        "sc": _View("double", (spills[0],)),  # (a piece's scalars from and
                                        "si": _View("long long", (spills[1],))}  # for the others)
        self.types: dict[str, str] = {}
        self.tables: dict[str, str] = {}  # a table's name -> its C line (in process: the pointer's declaration)
        self.extra_w = self.extra_iw = 0  # the sorts' scratch, after the kernel's own workspace
        self.counter = 0
        for line in parts.head:
            self._table(line)
        tree = ast.parse("\n".join(parts.body))
        body = self._block(tree.body, 1)
        names = [n for n in self.types if n not in self.views] + \
            [n for n in self.views if n not in _ARGUMENTS and not n.startswith("TABLE")]
        decls = [f"    {self.types[n]} {n} = 0;" if n in self.types else f"    {self.views[n].ctype}* {n} = 0;"
                 for n in names]
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unread = [f"(void){n};" for n in names if n not in read]  # (a scan's step that ignores a row)
        self.decls, self.body = decls + ([f"    {' '.join(unread)}"] if unread else []), body

    @property
    def work_size(self) -> int:
        return self.parts.work

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    # ---- types and views
    def type_of(self, e: ast.expr) -> str:
        return c_functions.expression_type(e, self.types, self._other_type)

    def _other_type(self, e: ast.expr) -> str:
        """A subscript's type (a table's, a sort's positions: integers) or a call's."""
        if isinstance(e, ast.Subscript):
            base = self._base(e)
            integers = base is not None and self.views[base].ctype.endswith("long long")
            return INT if integers or ast.unparse(e) == "work.shape[0]" else DOUBLE
        name = ast.unparse(e.func) if isinstance(e, ast.Call) else ""
        if name == "fastmath.as_index" or name in ("min", "max") and all(self.type_of(a) == INT for a in e.args):
            return INT
        return DOUBLE

    def _base(self, e: ast.Subscript) -> str | None:
        return e.value.id if isinstance(e.value, ast.Name) and e.value.id in self.views else None

    def _indices(self, e: ast.Subscript) -> list[ast.expr]:
        return list(e.slice.elts) if isinstance(e.slice, ast.Tuple) else [e.slice]

    def _offset(self, shape: tuple[int, ...], indices: list[ast.expr]) -> str:
        """The row-major offset of ``indices`` (the first ones of ``shape``'s axes) in elements."""
        text = ""
        for k, i in enumerate(indices):
            term = _Expression(self).visit(i)
            stride = math.prod(shape[k + 1:])
            term = term if stride == 1 else f"({term}) * {stride}"
            text = term if not text else f"{text} + {term}"
        return text or "0"

    def element(self, e: ast.Subscript) -> str:
        """``view[i, j]`` as C: the element at its offset."""
        base = self._base(e)
        if base is None:
            raise NotImplementedError(f"the C backend cannot write the loop line {ast.unparse(e)[:100]!r}")
        indices, view = self._indices(e), self.views[base]
        if len(indices) != len(view.shape) or any(isinstance(i, ast.Slice) for i in indices):
            raise NotImplementedError(f"the C backend cannot write the loop line {ast.unparse(e)[:100]!r}")
        return f"{base}[{self._offset(view.shape, indices)}]"

    def _view(self, name: str, ctype: str, shape: tuple[int, ...]) -> None:
        known = self.views.get(name)
        if known is not None and (known.ctype, known.shape) != (ctype, shape):
            raise NotImplementedError(f"the C backend cannot give {name} two shapes ({known.shape}, {shape})")
        self.views[name] = _View(ctype, shape)

    def _table(self, line: str) -> None:
        """``TABLE0 = np.array([...], dtype=np.int64).reshape(shape)`` (loop_source's form) as a static array,
        its list of integers copied as text (parsing a bundle adjustment's tables took 0.5 s); in process
        (``blas``) a pointer to the values, given when the object is loaded (``table_values``): gcc spent
        half its time on a bundle adjustment's kernel parsing its tables' 60,000 numbers."""
        name, (values, shape) = _table_line(line)
        self.views[name] = _View("const long long", shape)
        self.tables[name] = (f"extern const long long* {name};" if self.blas else
                             f"static const long long {name}[] = {{{values}}};")

    # ---- statements
    def _block(self, body: list[ast.stmt], depth: int) -> list[str]:
        lines: list[str] = []
        for node in body:
            lines += ["    " * depth + line for line in self._statement(node)]
        return lines

    def _statement(self, node: ast.stmt) -> list[str]:
        if isinstance(node, ast.For):
            return self._for(node)
        if isinstance(node, ast.Return):
            return [f"return {_Expression(self).visit(node.value)};"]
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and \
                isinstance(node.target, ast.Subscript):
            return [f"{self.element(node.target)} += {_Expression(self).visit(node.value)};"]
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                ast.unparse(node.value.func) == "np.dot":
            return self._dot(node.value)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):  # (a split kernel's piece)
            return [f"{_Expression(self).visit(node.value)};"]
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Subscript):
                return self._store(target, value)
            if isinstance(target, ast.Name):
                return self._assign(target.id, value)
        raise NotImplementedError(f"the C backend cannot write the loop line {ast.unparse(node)[:100]!r}")

    def _for(self, node: ast.For) -> list[str]:
        if not (isinstance(node.iter, ast.Call) and ast.unparse(node.iter.func) == "range") or node.orelse:
            raise NotImplementedError(f"the C backend cannot write the loop {ast.unparse(node.iter)!r}")
        var = node.target.id
        self.types[var] = INT
        args = [_Expression(self).visit(a) for a in node.iter.args]
        start, stop, step = (["0", *args] if len(args) == 1 else args) + ["1"] * (3 - max(len(args), 2))
        compare = ">" if len(node.iter.args) == 3 and ast.literal_eval(node.iter.args[2]) < 0 else "<"
        head = f"for ({var} = {start}; {var} {compare} {stop}; {var} += {step}) {{"
        return [head, *self._block(node.body, 1), "}"]

    def _store(self, target: ast.Subscript, value: ast.expr) -> list[str]:
        rhs = _Expression(self).visit(value)
        if isinstance(target.slice, ast.Slice | ast.Constant) and ast.unparse(target.slice) in (":", "..."):
            base = self._base(target)
            k = self.fresh("k")
            return [f"for (long long {k} = 0; {k} < {math.prod(self.views[base].shape)}; ++{k}) "
                    f"{base}[{k}] = {rhs};"]
        return [f"{self.element(target)} = {rhs};"]

    def _assign(self, name: str, value: ast.expr) -> list[str]:
        view = self._as_view(value)
        if view is not None:
            pointer, ctype, shape = view
            self._view(name, ctype, shape)
            return [f"{name} = {pointer};"]
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "np.empty":
            size = ast.literal_eval(value.args[0])
            self._view(name, "double", (size,))
            self.extra_w += size
            return [f"{name} = work + {self.parts.work + self.extra_w - size};"]
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "np.argsort":
            row = value.args[0].id
            size = self.views[row].shape[0]
            self._view(name, "long long", (size,))
            self.extra_iw += 2 * size
            at = self.extra_iw - 2 * size
            return [f"{name} = iwork + {at};", f"sg_argsort({row}, {size}, {name}, iwork + {at + size});"]
        kind = self.type_of(value)
        if self.types.setdefault(name, kind) == INT and kind == DOUBLE:  # (lines before used it as an integer)
            raise NotImplementedError(f"the C backend cannot give {name} an integer and then a float value")
        return [f"{name} = {_Expression(self).visit(value)};"]

    def _as_view(self, value: ast.expr) -> tuple[str, str, tuple[int, ...]] | None:
        """A view's pointer, C type and shape: ``v[a:b]`` (``.reshape(shape)``), ``t.reshape(shape)``,
        or a row ``t[i]`` of a view of more axes; None for anything else."""
        shape = None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "reshape":
            shape, value = tuple(ast.literal_eval(value.args[0])), value.func.value
        if isinstance(value, ast.Name) and value.id in self.views:
            view = self.views[value.id]
            return value.id, view.ctype, shape or view.shape
        if not isinstance(value, ast.Subscript) or self._base(value) is None:
            return None
        base, view = self._base(value), self.views[self._base(value)]
        if isinstance(value.slice, ast.Slice):
            lo, hi = ast.literal_eval(value.slice.lower), ast.literal_eval(value.slice.upper)
            return f"{base} + {lo}", view.ctype, shape or (hi - lo,)
        indices = self._indices(value)
        if len(indices) >= len(view.shape):
            return None
        rest = view.shape[len(indices):]
        return f"{base} + {self._offset(view.shape, indices)}", view.ctype, shape or rest

    def _operand(self, e: ast.expr) -> tuple[str, tuple[tuple[int, ...], bool]]:
        """An np.dot operand: its pointer, and its stored shape with whether it is read transposed (``.T``)."""
        transposed = isinstance(e, ast.Attribute) and e.attr == "T"
        found = self._as_view(e.value if transposed else e)
        if found is None:
            raise NotImplementedError(f"the C backend cannot write the product operand {ast.unparse(e)!r}")
        pointer, _, shape = found
        return f"({pointer})", (shape, transposed)  # (a row of a batch: base + offset)

    def _dot(self, call: ast.Call) -> list[str]:
        """``np.dot(A, B, C)`` (A, B matrices or a matrix and a vector, either read transposed) as loops."""
        (a, (sa, ta)), (b, (sb, tb)), (c, (sc, _)) = (self._operand(e) for e in call.args)
        rows = (sa[::-1] if ta else sa)[0] if len(sa) == 2 else 1
        inner = (sa[::-1] if ta else sa)[-1]
        cols = (sb[::-1] if tb else sb)[-1] if len(sb) == 2 else 1
        if self.blas:
            if len(sa) != 2:
                raise NotImplementedError("the C backend cannot call BLAS for a product whose first factor is a "
                                          "vector")
            return [c_blas.call(a, ta, b, tb if len(sb) == 2 else None, c, (rows, inner, cols))]

        def at(pointer: str, shape: tuple, transposed: bool, i: str, j: str) -> str:  # (a matrix's (i, j))
            return f"{pointer}[({j}) * {shape[1]} + {i}]" if transposed else f"{pointer}[({i}) * {shape[1]} + {j}]"

        i, j, k, s = self.fresh("i"), self.fresh("j"), self.fresh("k"), self.fresh("s")
        left = at(a, sa, ta, i, k) if len(sa) == 2 else f"{a}[{k}]"
        right = at(b, sb, tb, k, j) if len(sb) == 2 else f"{b}[{k}]"
        store = f"{c}[({i}) * {cols} + {j}]" if len(sc) == 2 else f"{c}[{i if len(sa) == 2 else j}]"
        return [f"for (long long {i} = 0; {i} < {rows}; ++{i}) {{",
                f"    for (long long {j} = 0; {j} < {cols}; ++{j}) {{", f"        double {s} = 0.0;",
                f"        for (long long {k} = 0; {k} < {inner}; ++{k}) {s} += {left} * {right};",
                f"        {store} = {s};", "    }", "}"]


@functools.lru_cache(maxsize=16)  # (each piece's kernel reads the same lines; a table's line may be MBs)
def _table_line(line: str) -> tuple[str, tuple[str, tuple[int, ...]]]:
    """A table line's name, values (as text) and shape."""
    name, rest = line.split(" = np.array([", 1)
    values, shape = rest.split("], dtype=np.int64).reshape(", 1)
    if not name.isidentifier() or not re.fullmatch(r"-?\d+(, -?\d+)*", values):
        raise NotImplementedError(f"the C loops: a table line of another form: {line[:80]}")
    return name, (values, tuple(int(n) for n in re.findall(r"\d+", shape)))


def table_values(parts: KernelParts) -> list[np.ndarray]:
    """The values of the kernel's tables, in order: what an in-process kernel's ``sg_set_tables`` takes.

    >>> from symgrad.compile.loop_source import KernelParts
    >>> table_values(KernelParts(("TABLE0 = np.array([3, -1], dtype=np.int64).reshape((2,))",), (), 0,
    ...                           frozenset(), 0, 0, 0))
    [array([ 3, -1])]
    """
    return [np.fromstring(_table_line(line)[1][0], dtype=np.int64, sep=",") for line in parts.head]


def _table_setter(names: Sequence[str]) -> list[str]:
    """The in-process kernel's tables (pointers) and ``sg_set_tables``, which points them at their values."""
    return [*(f"const long long* {n} = 0;" for n in names), "void sg_set_tables(const long long** values) {",
            *(f"    {n} = values[{k}];" for k, n in enumerate(names)), "}"]


@dataclass(frozen=True)
class LoopC:
    """A loop kernel in C: ``text`` (the prelude, tables, special functions and ``sg_kernel``), and the
    scratch it needs: ``work`` doubles (its own workspace and the sorts' rows) and ``iwork`` integers."""

    text: str
    work: int
    iwork: int


def loop_c(parts: KernelParts, blas: bool = False) -> LoopC:
    """The C of the loop kernel ``parts`` as ``static double sg_kernel(x, p, out, work, iwork, status)``, its
    matrix products calling BLAS (``blas``: in process) or loop nests (exported C).

    >>> import symgrad as sg
    >>> from symgrad.compile.loop_source import parts
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> c = loop_c(parts([sg.sum(x[i] ** 2, i)], [x]))
    >>> print(c.text[c.text.index("static double sg_kernel"):].strip())
    static double sg_kernel(const double* x, const double* p, double* out, double* work,
                            long long* iwork, int* status) {
        double a5 = 0;
        long long i2 = 0;
        double v3 = 0;
        double v4 = 0;
        const double* b1 = 0;
        (void)x; (void)p; (void)out; (void)work; (void)iwork; (void)status;
        b1 = x + 0;
        a5 = 0.0;
        for (i2 = 0; i2 < 3; i2 += 1) {
            v3 = b1[i2];
            v4 = (v3 * v3);
            a5 = (a5 + v4);
        }
        return a5;
    }
    """
    kernel = _Kernel(parts, blas=blas)
    signature = ("static double sg_kernel(const double* x, const double* p, double* out, double* work,\n"
                 "                        long long* iwork, int* status) {")
    unused = "    (void)x; (void)p; (void)out; (void)work; (void)iwork; (void)status;"
    setter = _table_setter(list(kernel.tables)) if blas and kernel.tables else []
    text = "\n".join([*_head(kernel.body, parts.body, list(kernel.tables.values())), *setter, signature,
                      *kernel.decls, unused, *kernel.body, "}", ""])
    return LoopC(text, parts.work + kernel.extra_w, kernel.extra_iw)


def _head(lines: Sequence[str], body: Sequence[str], tables: Sequence[str],
          products: str = c_blas.SOURCE, blas: bool = False) -> list[str]:
    """A file's lines before its functions (their C ``lines``, from the Python ``body``): the prelude, the
    helpers and special functions they call (``products``: the BLAS products' definitions, or in a file
    beside the one holding them their prototypes, where they call them or ``blas``), and ``tables``."""
    used = {n for n in c_functions.NAMES if any(f"special.{n}(" in line for line in body)}
    sorts = [SORT] if any("sg_argsort(" in line for line in lines) else []
    fast = [c_fastmath.SOURCE] if any(fastmath.CALLS.search(line) for line in body) else []
    calls = [products] if blas or _calls_blas(lines) else []
    return [PRELUDE, c_functions.HELPERS, LOOP_PRELUDE, *fast, *sorts, *calls,
            *c_functions.definitions(used, helpers=False), *tables]


# Lines of a kernel's Python from which its C is split into files built at once where there are cores (the
# gradient of 10 steps of an ODE's RK4, 850 lines: 0.5 s in one file, 0.3 s in two)
SPLIT_LINES = 500
PIECE_LINES = 100


def _calls_blas(lines: Sequence[str]) -> bool:
    return any("sg_mm(" in line or "sg_mv(" in line for line in lines)


_PIECE = ("const double* x, const double* p, double* out, double* work, long long* iwork, int* status, "
          "double* sc, long long* si")  # (a piece's arguments)
_UNUSED = "    (void)x; (void)p; (void)out; (void)work; (void)iwork; (void)status; (void)sc; (void)si;"


def loop_c_pieces(parts: KernelParts, files: int, blas: bool = False) -> tuple[LoopC, list[str]]:
    """The loop kernel ``parts`` as ``loop_c`` gives it, its body cut into the pieces of Numba's split
    kernel (pieces.py: whole top-level statements, the scalars one piece leaves to a later one in ``sc`` and
    ``si``) when it is longer than ``pieces.SPLIT_LINES`` (``SPLIT_LINES`` where ``files`` > 1), each piece a
    function of its own in one of ``files`` C files, so a compiler can build them at once (an LSTM's
    gradient, 8000 lines: 4.3 s in one file); the lightest is the kernel's, calling the pieces in turn. A
    long loop's body (a scan's over its steps) is cut too, its pieces called inside it (an ODE gradient's
    1,400 lines: -O2 0.15 -> 0.10 s of gcc on two cores). Their sorts share the scratch after the
    workspace.

    >>> import symgrad as sg
    >>> from symgrad.compile import pieces
    >>> from symgrad.compile.loop_source import parts
    >>> x, i = sg.array("x", 3), sg.index("i", 3)
    >>> with pieces.sized(0, 2):
    ...     kernel, files = loop_c_pieces(parts([sg.sum(x[i] ** 2, i), sg.tensor(x[i] * 2.0, i)], [x]), 2)
    >>> len(files), "sg_piece0(x, p, out, work, iwork, status, sc, si);" in kernel.text
    (1, True)
    """
    if len(parts.body) <= (pieces.SPLIT_LINES if files == 1 else min(pieces.SPLIT_LINES, SPLIT_LINES)):
        return loop_c(parts, blas), []
    size = min(pieces.PIECE_LINES, max(PIECE_LINES, len(parts.body) // (2 * files)))  # (two a file, or more)
    cut = pieces.split(list(parts.body), set(parts.integers), size, loops=True)
    bodies, spills = cut.pieces, (cut.floats, cut.ints)
    kernels = [_Kernel(replace(parts, body=tuple(body)), spills, blas) for body in bodies]
    functions = []
    for k, (body, kernel) in enumerate(zip(bodies, kernels, strict=True)):
        functions.append((body, kernel, [f"double sg_piece{k}({_PIECE}) {{", *kernel.decls, _UNUSED,
                                         *kernel.body, "}", ""]))
    driver = _Kernel(replace(parts, head=(), body=tuple(cut.driver)), spills)
    entry = [*(f"double sg_piece{k}({_PIECE});" for k in range(len(bodies))),
             "static double sg_kernel(const double* x, const double* p, double* out, double* work,",
             "                        long long* iwork, int* status) {",
             f"    double sc[{max(cut.floats, 1)}] = {{0}};", f"    long long si[{max(cut.ints, 1)}] = {{0}};",
             *driver.decls, *driver.body, "}", ""]
    tables = kernels[0].tables
    setter = _table_setter(list(tables)) if blas and tables else []
    texts = _files(functions, files, [*setter, *entry], tables, any(_calls_blas(k.body) for k in kernels))
    extra_w, extra_iw = max(k.extra_w for k in kernels), max(k.extra_iw for k in kernels)
    return LoopC(texts[0], parts.work + extra_w, extra_iw), texts[1:]


def _files(functions: list[tuple[list[str], _Kernel, list[str]]], files: int, entry: list[str],
           tables: dict[str, str], blas: bool) -> list[str]:
    """The C files of a split kernel's ``functions`` (each its Python, kernel and C lines), at most ``files``
    of about equal length; the lightest also holds ``entry`` (the kernel calling the pieces) and, where any
    piece calls BLAS (``blas``), the products' definitions (the others their prototypes)."""
    groups: list[list] = [[] for _ in range(min(files, len(functions)))]
    for function in sorted(functions, key=lambda f: -len(f[2])):  # (the longest first, to the lightest file)
        min(groups, key=lambda g: sum(len(f[2]) for f in g)).append(function)
    texts = []
    for k, group in enumerate(sorted(groups, key=lambda g: sum(len(f[2]) for f in g))):
        lines = [line for _, _, function in group for line in function]
        read = set(re.findall(r"\bTABLE\d+\b", "\n".join(lines)))
        python = [line for b, _, _ in group for line in b]
        head = _head(lines, python, [t for name, t in tables.items() if name in read],
                     c_blas.SOURCE if k == 0 else c_blas.PROTOTYPES, blas and k == 0)
        texts.append("\n".join([*head, *lines, *(entry if k == 0 else ())]))
    return texts


def kernel_source(kernel: LoopC, parts: KernelParts) -> str:
    """The C file of symgrad's "c" backend for a loop kernel: ``sg_point``, ``sg_batch`` and ``sg_total``, as
    the Numba module's entries (``total`` adds the rows in order), each given its scratch by the caller
    (``work``: ``kernel.work`` doubles, ``iwork``: ``kernel.iwork`` integers) and returning a failed
    ``as_index`` through ``status``."""
    nx, n_p, nout = parts.nx, parts.n_p, parts.n_out
    scratch = "double* work, long long* iwork, int* status"
    return "\n".join([
        "/* symgrad loop kernels (generated). */", kernel.text,
        f"double sg_point(const double* x, const double* p, double* out, {scratch}) {{",
        "    return sg_kernel(x, p, out, work, iwork, status);", "}", "",
        "void sg_batch(const double* X, const double* P, long long p_rows, double* V, double* OUT, long long lo, "
        f"long long hi, {scratch}) {{",
        "    for (long long i = lo; i < hi; ++i) {",
        f"        double v = sg_kernel(X + i * {nx}, P + (p_rows > 1 ? i : 0) * {n_p}, OUT + i * {nout}, work, "
        "iwork, status);",
        "        if (V) V[i] = v;", "    }", "}", "",
        f"void sg_total(const double* x, const double* P, double* acc, long long lo, long long hi, double* row, "
        f"{scratch}) {{",
        f"    for (long long k = 0; k <= {nout}; ++k) acc[k] = 0.0;",
        "    for (long long i = lo; i < hi; ++i) {",
        f"        acc[0] += sg_kernel(x, P + i * {n_p}, row, work, iwork, status);",
        f"        for (long long k = 0; k < {nout}; ++k) acc[k + 1] += row[k];", "    }", "}", ""])
