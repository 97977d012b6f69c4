"""Program -> standalone C99 with CasADi's calling convention (``sg.export_c``, the "c" backend).

Each instruction is one statement, as in the Numba kernels (numba_backend.py), and its right-hand
side is the op table's template translated: the templates are Python expressions (``math.sin({0})``,
``a if c else b``, ``fastmath.select(c, a, b)``), parsed once per op and written as C (``sin``,
``c ? a : b``, ``sg_select``) over the helpers in ``PRELUDE``, which keep NumPy's special values (nan
propagating through minimum / maximum, -0 < +0, nan != nan). One op table stays the single source:
an op whose template calls what C has no counterpart for (symgrad's special functions written in
Python) raises ``NotImplementedError`` naming it. The file needs only libm; all scratch is in the
caller's ``w`` (none here: straight-line code keeps values in locals), so it is re-entrant.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from symgrad.compile import c_functions, fastmath
from symgrad.compile.program import _OPS_BY_CODE as OPS_BY_CODE
from symgrad.compile.program import LOAD_CONST, LOAD_P, LOAD_X, STORE, Program
from symgrad.expr.ops import OPS, Op

# Python names in the templates -> C (functions of libm, or PRELUDE's helpers)
_CALLS = {**{f"math.{f}": f for f in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
                                       "tanh", "asinh", "acosh", "atanh", "sqrt", "exp", "expm1", "log",
                                       "log1p", "erf", "hypot", "copysign")},
          **{f"fastmath.{f}": f for f in fastmath.FUNCTIONS},
          "abs": "fabs", "np.floor": "floor", "np.ceil": "ceil", "np.fmod": "fmod", "float": "(double)",
          "max": "sg_pymax", "np.maximum": "sg_maximum", "fastmath.maximum": "sg_maximum",
          "fastmath.minimum": "sg_minimum", "np.sign": "sg_sign", "fastmath.select": "sg_select",
          **{f"fastmath.{c}": f"sg_{c}" for c in ("lt", "le", "gt", "ge", "eq", "ne")},
          "special.gammaln": "sg_gammaln", **{f"special.{n}": f"sg_fn_{n}" for n in c_functions.NAMES[1:]}}
# The C library's functions the translations call whose results are not exact (sqrt, fabs, floor ... are,
# and stay instructions): built with -fno-builtin-<f> (c_backend.FLAGS), as gcc would work out one of
# constants at compile time, correctly rounded, where the library the other backends call may be an ulp off
# (expm1(sign(x)) gave the C kernels and Numba's different bits). pow: the translation of **; lgamma: sg_gammaln.
INEXACT = tuple(sorted({f for f in (*_CALLS.values(), *c_functions.DOUBLE_CALLS.values(), "pow", "lgamma")
                        if f.isidentifier() and not f.startswith("sg_")}
                       - {"sqrt", "fabs", "floor", "ceil", "fmod", "copysign", "rint"}))
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

PRELUDE = """#include <math.h>

/* NumPy's semantics: maximum / minimum propagate nan and order -0 < +0 (either argument order gives
   the same bits); a condition is 1.0 or 0.0; nan != x holds; a select takes nan as true. */
static inline double sg_maximum(double a, double b) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static inline double sg_minimum(double a, double b) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}
static inline double sg_pymax(double a, double b) { return b > a ? b : a; }
static inline double sg_sign(double a) { return a > 0.0 ? 1.0 : a < 0.0 ? -1.0 : a; }
static inline double sg_select(double c, double a, double b) { return c != 0.0 ? a : b; }
static inline double sg_lt(double a, double b) { return a < b ? 1.0 : 0.0; }
static inline double sg_le(double a, double b) { return a <= b ? 1.0 : 0.0; }
static inline double sg_gt(double a, double b) { return a > b ? 1.0 : 0.0; }
static inline double sg_ge(double a, double b) { return a >= b ? 1.0 : 0.0; }
static inline double sg_eq(double a, double b) { return a == b ? 1.0 : 0.0; }
static inline double sg_ne(double a, double b) { return a != b ? 1.0 : 0.0; }
/* SciPy's gammaln: -inf at -inf, where lgamma gives inf (lgamma also sets the global signgam) */
static inline double sg_gammaln(double a) { return a == -INFINITY ? -INFINITY : lgamma(a); }
"""


class _ToC(ast.NodeVisitor):
    """A template's expression (placeholders ``_0``, ``_1``, ``_2``) as C text."""

    def __init__(self, op: Op) -> None:
        self.op = op

    def generic_visit(self, node: ast.AST) -> str:
        raise NotImplementedError(f"the C backend cannot write op {self.op.name!r} yet ({ast.unparse(node)})")

    def visit_Name(self, node: ast.Name) -> str:
        if not re.fullmatch(r"_[0-2]", node.id):
            return self.generic_visit(node)
        return "{" + node.id[1] + "}"

    def visit_Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            return self.generic_visit(node)
        return literal(float(node.value))

    def visit_BinOp(self, node: ast.BinOp) -> str:
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            return f"pow({left}, {right})"
        if type(node.op) not in _BINARY:
            return self.generic_visit(node)
        return f"({left} {_BINARY[type(node.op)]} {right})"

    def visit_UnaryOp(self, node: ast.UnaryOp) -> str:
        if isinstance(node.op, ast.USub):
            return f"(-{self.visit(node.operand)})"
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> str:
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            return self.generic_visit(node)
        return f"({self.visit(node.left)} {_COMPARE[type(node.ops[0])]} {self.visit(node.comparators[0])})"

    def visit_BoolOp(self, node: ast.BoolOp) -> str:
        return "(" + (" && " if isinstance(node.op, ast.And) else " || ").join(map(self.visit, node.values)) + ")"

    def visit_IfExp(self, node: ast.IfExp) -> str:
        return f"({self.visit(node.test)} ? {self.visit(node.body)} : {self.visit(node.orelse)})"

    def visit_Call(self, node: ast.Call) -> str:
        name = ast.unparse(node.func)
        if name not in _CALLS or node.keywords:
            return self.generic_visit(node)
        return f"{_CALLS[name]}({', '.join(self.visit(a) for a in node.args)})"


@functools.cache
def template(name: str) -> str:
    """The C form of op ``name``'s template, with ``{0}``, ``{1}``, ``{2}`` for its arguments.

    >>> template("logaddexp")
    '(({0} == {1}) ? ({0} + 0.6931471805599453) : (sg_pymax({0}, {1}) + log1p(exp((-fabs(({0} - {1})))))))'
    """
    op = OPS[name]
    if not op.numba:
        raise NotImplementedError(f"the C backend cannot write op {name!r} (it has no compiled form)")
    python = fastmath.CALLS.sub(r"math.\1(", op.numba).format("_0", "_1", "_2")
    return _ToC(op).visit(ast.parse(python, mode="eval").body)


def literal(v: float) -> str:
    """A double as C writes it: ``NAN``, ``INFINITY``, ``(-0.0)``, or its shortest repr.

    >>> literal(0.1), literal(-0.0), literal(float("-inf")), literal(3.0)
    ('0.1', '(-0.0)', '(-INFINITY)', '3.0')
    """
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = repr(v)
    return f"({text})" if math.copysign(1.0, v) < 0 else text


@dataclass(frozen=True)
class Layout:
    """Where the program's inputs and outputs are in CasADi's ``arg`` / ``res``: each input slot's (x, then p)
    (argument, position) or, for a constant captured while tracing, its value (a float); each output's
    (result, position), the returned value first; each argument's and result's name and sparsity in
    CasADi's compressed-column form (nrow, ncol, colind[ncol + 1], row[nnz]), positions in that order."""

    inputs: tuple[tuple[int, int] | float, ...]
    outputs: tuple[tuple[int, int], ...]
    arg_names: tuple[str, ...]
    arg_sparsity: tuple[tuple[int, ...], ...]
    res_names: tuple[str, ...]
    res_sparsity: tuple[tuple[int, ...], ...]


def dense(rows: int, cols: int) -> tuple[int, ...]:
    """CasADi's sparsity of a dense ``rows`` x ``cols`` matrix (column-major) in its compact form, as CasADi's
    generated files write it: ``nrow, ncol, 1`` (a full pattern's third entry, colind[0], is always 0), so a
    dense argument of 10^6 entries takes three numbers, not 10^6.

    >>> dense(2, 2)
    (2, 2, 1)
    """
    return (rows, cols, 1)


def nonzeros(sparsity: tuple[int, ...]) -> int:
    """The number of nonzeros of a CasADi sparsity (compact dense, or compressed columns).

    >>> nonzeros(dense(2, 3)), nonzeros((2, 2, 0, 1, 2, 0, 1))
    (6, 2)
    """
    if len(sparsity) == 3 and sparsity[2] == 1:
        return sparsity[0] * sparsity[1]
    return sparsity[2 + sparsity[1]]


def _body(program: Program, read: Callable[[str, int], str], write: Callable[[int, str], str]) -> list[str]:
    """The statements of ``program``: each input read as ``read("x" or "p", slot)``, each output written by
    ``write(d, value)`` (d = -1: the returned value), one ``const double`` per instruction."""
    lines, names = [], [""] * program.n_slots
    for i, (op, d, a, b, c) in enumerate(program.code.tolist()):
        if op == STORE:
            lines.append(write(d, names[a]))
            continue
        if op == LOAD_CONST:
            names[d] = literal(float(program.consts[a]))
            continue
        if op == LOAD_X or op == LOAD_P:
            rhs = read("x" if op == LOAD_X else "p", a)
        else:
            rhs = template(OPS_BY_CODE[op].name).format(names[a], names[b], names[c])
        names[d] = f"v{i}"
        lines.append(f"const double v{i} = {rhs};")
    return lines


def _special(program: Program) -> list[str]:
    """The C of the special functions (c_functions.py) the program's ops call."""
    used = {n for op in set(program.code[:, 0].tolist()) if op < len(OPS_BY_CODE)
            for n in c_functions.NAMES if f"sg_fn_{n}(" in template(OPS_BY_CODE[op].name)}
    return c_functions.definitions(used)


def _indented(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + line for line in lines]


def _program_body(program: Program, layout: Layout) -> list[str]:
    """A straight-line program's statements reading CasADi's ``arg`` and writing ``res`` directly."""
    n_x = len(program.inputs)

    def read(kind: str, a: int) -> str:
        at = layout.inputs[a + (n_x if kind == "p" else 0)]
        return literal(at) if isinstance(at, float) else f"arg[{at[0]}][{at[1]}]"

    def write(d: int, v: str) -> str:
        r, k = layout.outputs[0 if d < 0 else d + program.returns_value]
        return f"if (res[{r}]) res[{r}][{k}] = {v};"

    return _body(program, read, write)


def casadi(layout: Layout, name: str, body: list[str], sz_w: int = 0, sz_iw: int = 0) -> list[str]:
    """The entry point in CasADi's calling convention around ``body`` (statements over ``arg``, ``res``,
    ``iw`` and ``w``, which take ``sz_iw`` and ``sz_w`` entries), and its companions (sizes, names,
    sparsity)."""
    n_in, n_out = len(layout.arg_names), len(layout.res_names)

    sparsities = [", ".join(map(str, s)) for s in (*layout.arg_sparsity, *layout.res_sparsity)]
    lines = [f"static const long long {name}_s{k}[] = {{{s}}};" for k, s in enumerate(sparsities)]
    lines += [f"static const char* {name}_in_names[] = {{{_strings(layout.arg_names)}}};",
              f"static const char* {name}_out_names[] = {{{_strings(layout.res_names)}}};", "",
              f"int {name}(const double** arg, double** res, long long* iw, double* w, int mem) {{",
              "    (void)iw; (void)w; (void)mem;", *_indented(body, 1), "    return 0;",
              "}", "",
              f"long long {name}_n_in(void) {{ return {n_in}; }}",
              f"long long {name}_n_out(void) {{ return {n_out}; }}",
              f"double {name}_default_in(long long i) {{ (void)i; return 0.0; }}",
              *(f"const char* {name}_name_{io}(long long i) {{ return i >= 0 && i < {n} ? {name}_{io}_names[i] "
                ": 0; }" for io, n in (("in", n_in), ("out", n_out))),
              f"const long long* {name}_sparsity_in(long long i) {{",
              *(f"    if (i == {k}) return {name}_s{k};" for k in range(n_in)), "    return 0;", "}",
              f"const long long* {name}_sparsity_out(long long i) {{",
              *(f"    if (i == {k}) return {name}_s{n_in + k};" for k in range(n_out)), "    return 0;", "}",
              f"int {name}_work(long long* sz_arg, long long* sz_res, long long* sz_iw, long long* sz_w) {{",
              f"    if (sz_arg) *sz_arg = {n_in};", f"    if (sz_res) *sz_res = {n_out};",
              f"    if (sz_iw) *sz_iw = {sz_iw};", f"    if (sz_w) *sz_w = {sz_w};", "    return 0;", "}",
              f"int {name}_alloc_mem(void) {{ return 0; }}",
              f"int {name}_init_mem(int mem) {{ (void)mem; return 0; }}",
              f"void {name}_free_mem(int mem) {{ (void)mem; }}",
              f"int {name}_checkout(void) {{ return 0; }}",
              f"void {name}_release(int mem) {{ (void)mem; }}",
              f"void {name}_incref(void) {{ }}", f"void {name}_decref(void) {{ }}", ""]
    return lines


def flat(layout: Layout, name: str, sz_w: int = 0, sz_iw: int = 0) -> list[str]:
    """``int NAME_flat(const double* in, double* out)``: every input's nonzeros one after the other (in
    argument order, matrices column-major), every output's likewise: CasADi's entry point over slices of
    two vectors, for callers not coming from CasADi (no copies). A function that needs work arrays
    (rolled loops) takes them from ``malloc`` here (returning 2 when it cannot)."""
    def cuts(sparsity: tuple) -> list[int]:
        return [sum(nonzeros(s) for s in sparsity[:k]) for k in range(len(sparsity))]

    n_in, n_out = len(layout.arg_names), len(layout.res_names)
    return [f"int {name}_flat(const double* in, double* out) {{",
            f"    const double* arg[{max(n_in, 1)}];", f"    double* res[{max(n_out, 1)}];",
            *(f"    arg[{k}] = in + {c};" for k, c in enumerate(cuts(layout.arg_sparsity))),
            *(f"    res[{k}] = out + {c};" for k, c in enumerate(cuts(layout.res_sparsity))),
            *([] if n_in else ["    arg[0] = in;"]), *([] if n_out else ["    res[0] = out;"]),
            *_scratch(name, sz_w, sz_iw), "}", ""]


def _scratch(name: str, sz_w: int, sz_iw: int) -> list[str]:
    """The call of ``name`` in ``NAME_flat``, with work arrays from malloc where it needs them."""
    if not sz_w and not sz_iw:
        return [f"    return {name}(arg, res, 0, 0, 0);"]
    return [f"    double* w = (double*)malloc({max(sz_w, 1)} * sizeof(double));",
            f"    long long* iw = (long long*)malloc({max(sz_iw, 1)} * sizeof(long long));",
            f"    int status = w && iw ? {name}(arg, res, iw, w, 0) : 2;", "    free(w);", "    free(iw);",
            "    return status;"]


def _point(program: Program, name: str) -> list[str]:
    """``double NAME_point(x, p, out)``: every input in one vector (parameters in another), the first output
    returned, the others written to ``out`` in order (symgrad's own kernels' layout)."""
    write = lambda d, v: f"ret = {v};" if d < 0 else f"out[{d}] = {v};"  # noqa: E731
    return [f"double {name}_point(const double* x, const double* p, double* out) {{",
            "    double ret = 0.0;", "    (void)x; (void)p; (void)out;",
            *_indented(_body(program, lambda kind, a: f"{kind}[{a}]", write), 1), "    return ret;", "}", ""]


def _rows(program: Program, name: str) -> list[str]:
    """``NAME_batch`` (rows ``lo:hi`` of X, parameters per row or one row for all) and ``NAME_total`` (the
    sum over rows ``lo:hi`` of P of every output, in row order: the Numba kernels' sums), the kernels of
    symgrad's "c" backend, both calling ``NAME_point`` (the body once in the file: compile time is the
    compiler's on one copy of it)."""
    nx, n_p, nout = len(program.inputs), len(program.params), program.n_out
    value = "V[i] = " if program.returns_value else ""
    return [f"void {name}_batch(const double* X, const double* P, long long p_rows, double* V, double* OUT, "
            "long long lo, long long hi) {",
            "    for (long long i = lo; i < hi; ++i) {",
            f"        {value}{name}_point(X + i * {nx}, P + (p_rows > 1 ? i : 0) * {n_p}, OUT + i * {nout});",
            "    }", "    (void)V;", "}", "",
            f"void {name}_total(const double* x, const double* P, double* acc, long long lo, long long hi, "
            "double* row) {",
            f"    for (long long k = 0; k <= {nout}; ++k) acc[k] = 0.0;",
            "    for (long long i = lo; i < hi; ++i) {",
            f"        acc[0] += {name}_point(x, P + i * {n_p}, row);",
            f"        for (long long k = 0; k < {nout}; ++k) acc[k + 1] += row[k];",
            "    }", "}", ""]


def _strings(names: tuple[str, ...]) -> str:
    """C string literals of ``names``: printable ASCII as is (but quotes, backslashes and ``?``, which
    could start a trigraph), every other byte of their UTF-8 as an octal escape."""
    def one(text: str) -> str:
        return '"' + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\?' else f"\\{b:03o}"
                             for b in text.encode()) + '"'
    return ", ".join(map(one, names)) or "0"


def check_name(name: str) -> str:
    """``name`` if it can name the exported C function (an identifier, not a C keyword nor ``main``)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name or "") or name in _RESERVED or name.startswith("__"):
        raise ValueError(f"export_c: {name!r} cannot name a C function: use letters, digits and _ (not first a "
                         "digit), not a C keyword nor main")
    return name


_RESERVED = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary main""".split())


def export_source(program: Program, layout: Layout, name: str) -> tuple[str, str]:
    """The C file and header of ``program`` as the function ``name`` in CasADi's calling convention, with
    ``NAME_flat`` beside it.

    >>> import symgrad as sg
    >>> from symgrad.compile.lower import lower
    >>> x = sg.Var("x")
    >>> c, h = export_source(lower([sg.sin(x) * x], [x]), Layout(((0, 0),), ((0, 0),), ("x",), (dense(1, 1),),
    ...                                                         ("f",), (dense(1, 1),)), "f")
    >>> print(c[c.index("int f("):c.index("long long f_n_in")].strip())
    int f(const double** arg, double** res, long long* iw, double* w, int mem) {
        (void)iw; (void)w; (void)mem;
        const double v0 = arg[0][0];
        const double v1 = sin(v0);
        const double v2 = (v0 * v1);
        if (res[0]) res[0][0] = v2;
        return 0;
    }
    """
    check_name(name)
    head = [f"/* {name}: generated by symgrad from program {program.key}. C99, libm only. */",
            f'#include "{name}.h"', PRELUDE, *_special(program)]
    body = casadi(layout, name, _program_body(program, layout))
    return "\n".join(head + body + flat(layout, name)), header(name)


def kernel_source(program: Program, name: str) -> str:
    """The C file of symgrad's "c" backend for ``program``: ``NAME_point``, ``NAME_batch`` and ``NAME_total``."""
    head = [f"/* symgrad kernels for program {program.key} (generated). */", PRELUDE, *_special(program)]
    return "\n".join(head + _point(program, name) + _rows(program, name))


def header(name: str) -> str:
    """The declarations of the exported function ``name`` and its companions (CasADi's names)."""
    guard = f"{name.upper()}_H"
    return "\n".join([
        f"/* {name}: generated by symgrad. CasADi's calling convention; see docs/export.md. */",
        f"#ifndef {guard}", f"#define {guard}", "#ifdef __cplusplus", 'extern "C" {', "#endif",
        f"int {name}(const double** arg, double** res, long long* iw, double* w, int mem);",
        f"long long {name}_n_in(void);", f"long long {name}_n_out(void);",
        f"double {name}_default_in(long long i);",
        f"const char* {name}_name_in(long long i);", f"const char* {name}_name_out(long long i);",
        f"const long long* {name}_sparsity_in(long long i);",
        f"const long long* {name}_sparsity_out(long long i);",
        f"int {name}_work(long long* sz_arg, long long* sz_res, long long* sz_iw, long long* sz_w);",
        f"int {name}_flat(const double* in, double* out);",
        f"int {name}_alloc_mem(void);", f"int {name}_init_mem(int mem);", f"void {name}_free_mem(int mem);",
        f"int {name}_checkout(void);", f"void {name}_release(int mem);",
        f"void {name}_incref(void);", f"void {name}_decref(void);",
        "#ifdef __cplusplus", "}", "#endif", f"#endif  /* {guard} */", ""])
