"""THE op table: one row per op, the single source of truth for every layer.

A row holds the reference implementation (NumPy, which also folds constants),
the Numba source template, the partial derivatives, and the printing forms.
Partials are written in terms of the arguments and of the node itself (``o``):
d exp(a) = o, d sqrt(a) = 0.5 / o, so gradients reuse the forward values.
``None`` as a partial means "identically zero": reverse mode skips that edge.

Kinks follow one convention (docs/architecture.md): d|a| at 0 is 0, relu'(0) = 0,
d max(a, b) splits 1/2 : 1/2 at a == b, and floor, ceil, sign, comparisons and
stop_gradient have derivative 0.
"""

from __future__ import annotations

import importlib
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from symgrad.expr import special_series

# Precedences for printing: an argument binds looser than its slot asks -> parentheses.
CMP, ADD, MUL, NEG, POW, ATOM = 5, 10, 20, 25, 30, 100


@dataclass(eq=False, frozen=True)
class Op:
    """One row of the op table."""

    name: str
    arity: int
    impl: Callable | None  # NumPy reference implementation
    numba: str | None  # Numba expression template over "{0}", "{1}", ...
    partials: tuple[Callable | None, ...] = ()
    prec: int = ATOM
    template: tuple | None = None  # infix printing: strings and (arg, min precedence)
    latex: tuple | None = None  # same form, for LaTeX; None: \operatorname{name}(...)
    latex_prec: int | None = None  # precedence of the LaTeX form when it differs (\sum_i a binds like +)
    to_sympy: Callable | str | None = None  # a SymPy function's name, or a function of SymPy arguments
    commutative: bool = False
    branch: Callable | None = None  # kink ops: arg values -> which smooth piece
    aliases: tuple[str, ...] = ()  # NumPy method names that reach this op
    ufunc: Any = None  # the NumPy ufunc that maps onto this op
    doc: str = ""
    kind: str = "scalar"  # "rolled": index symbols, arrays, loads, reductions (see rolled.py)
    binds: bool = False  # the arguments after the first are index symbols this node binds
    array_valued: bool = False  # an array (sg.array, tensor, table, scatter), read through loads
    evaluate: Callable | None = None  # rolled rows: (node, argument values, context) -> value
    finite: bool = False  # its value is finite wherever its arguments' are (no sqrt, log, / ...)
    fold: Callable | None = None  # on Python floats: impl's value, with no warning to silence (constant folding)
    code: int = field(default=-1)

    def __call__(self, *args: Any) -> Any:
        return build.apply(self, args)

    def __repr__(self) -> str:
        return f"<op {self.name}>"


OPS: dict[str, Op] = {}


def _row(name: str, arity: int, impl, numba, d=(), **kw) -> Op:
    op = Op(name, arity, impl, numba, tuple(d), code=len(OPS), **kw)
    OPS[name] = op
    return op


def _infix(sym: str, prec: int, left: int, right: int, latex: str | None = None) -> dict:
    return dict(
        prec=prec,
        template=((0, left), sym, (1, right)),
        latex=((0, left), latex if latex is not None else sym, (1, right)),
    )


def call_template(head: str, arity: int, close: str) -> tuple:
    """A printing template for a call: head, the arguments separated by commas, close."""
    args = sum((((i, 0), ", ") for i in range(arity)), ())[:-1]
    return (head, *args, close)


def _func(sym: str, arity: int = 1) -> tuple:  # LaTeX for a named function
    return call_template(sym + r"\left(", arity, r"\right)")


def _erf(a):
    if np.iscomplexobj(a):
        raise TypeError("erf: complex arguments are not supported by the interpreter")
    return np.float64(math.erf(a)) if np.ndim(a) == 0 else np.vectorize(math.erf, otypes=[float])(a)


def _guarded(c1, c2, value, formula):
    """``value`` where both conditions hold, else ``formula``: the derivatives are the formula's wherever
    one of them fails."""
    return where(c1, where(c2, value, formula), formula)


def _kink(lost, a, b):
    """The partial of max / min for an argument: a where's 0 where ``lost`` (the other is the result),
    1/2 at a tie, else 1. As a where, a product with it keeps its 0 out of the product (the build rule
    x * where(c, 0, q) -> where(c, 0, x * q)): sqrt(max(x, 0))'s inf partial at x < 0 does not meet
    0 * inf = nan, and what computed the losing argument gets a masked adjoint."""
    return where(lost, 0.0, where(eq(a, b), 0.5, 1.0))


def _cmp(ufunc):
    return lambda a, b: ufunc(a, b) * 1.0


class _LazySympy:
    """SymPy, imported on first use: ``import symgrad`` does not load it (half its import time)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("sympy"), name)


sympy = _LazySympy()


def _sympy_cmp(rel: str) -> Callable:
    return lambda a, b: sympy.Piecewise((1, getattr(sympy, rel)(a, b)), (0, True))


# fmt: off
# ---- leaves -------------------------------------------------------------------------
var = _row("var", 0, None, None, finite=True)
const = _row("const", 0, None, None, finite=True)

# ---- arithmetic -----------------------------------------------------------------------
add = _row("add", 2, np.add, "{0} + {1}", (lambda a, b, o: 1.0, lambda a, b, o: 1.0),
           commutative=True, ufunc=np.add, to_sympy=lambda a, b: a + b, **_infix(" + ", ADD, ADD, ADD),
           finite=True, fold=operator.add)
sub = _row("sub", 2, np.subtract, "{0} - {1}", (lambda a, b, o: 1.0, lambda a, b, o: -1.0),
           ufunc=np.subtract, to_sympy=lambda a, b: a - b, **_infix(" - ", ADD, ADD, ADD + 1), finite=True,
           fold=operator.sub)
mul = _row("mul", 2, np.multiply, "{0} * {1}", (lambda a, b, o: b, lambda a, b, o: a),
           commutative=True, ufunc=np.multiply, to_sympy=lambda a, b: a * b,
           **_infix("*", MUL, MUL, MUL, r" \cdot "), finite=True, fold=operator.mul)
div = _row("div", 2, np.divide, "{0} / {1}", (lambda a, b, o: 1.0 / b, lambda a, b, o: -o / b),
           ufunc=np.divide, to_sympy=lambda a, b: a / b, prec=MUL, template=((0, MUL), "/", (1, MUL + 1)),
           latex=(r"\frac{", (0, 0), "}{", (1, 0), "}"))
neg = _row("neg", 1, np.negative, "-{0}", (lambda a, o: -1.0,), ufunc=np.negative,
           to_sympy=lambda a: -a, prec=NEG, template=("-", (0, NEG)), latex=("-", (0, NEG)), finite=True,
           fold=operator.neg)
pow = _row("pow", 2, np.power, "{0} ** {1}",
           # Where the textbook partials give 0 * inf: d/da is 0 at a == b == 0 (a**0 is constant), d/db is
           # 0 at a == 0 (log 0 replaced by log 1), not nan. The guards hold only there: at b == 0, a != 0,
           # d/da is the formula, whose derivative in b (1/a) a guard at b == 0 alone would make 0.
           (lambda a, b, o: _guarded(eq(b, 0.0), eq(a, 0.0), 0.0, b * a ** (b - 1.0)),
            lambda a, b, o: o * log(where(eq(a, 0.0), 1.0, a))),
           ufunc=np.power, to_sympy=lambda a, b: a ** b, prec=POW, template=((0, POW + 1), "**", (1, POW)),
           latex=((0, POW + 1), "^{", (1, 0), "}"))

# ---- elementary functions -----------------------------------------------------------------
exp = _row("exp", 1, np.exp, "fastmath.exp({0})", (lambda a, o: o,), ufunc=np.exp, to_sympy="exp",
           latex=(r"e^{", (0, 0), "}"))
log = _row("log", 1, np.log, "fastmath.log({0})", (lambda a, o: 1.0 / a,), ufunc=np.log, to_sympy="log",
           latex=_func(r"\log"))
log1p = _row("log1p", 1, np.log1p, "fastmath.log1p({0})", (lambda a, o: 1.0 / (a + 1.0),), ufunc=np.log1p,
             to_sympy=lambda a: sympy.log(1 + a))
expm1 = _row("expm1", 1, np.expm1, "fastmath.expm1({0})", (lambda a, o: o + 1.0,), ufunc=np.expm1,
             to_sympy=lambda a: sympy.exp(a) - 1)
sqrt = _row("sqrt", 1, np.sqrt, "math.sqrt({0})", (lambda a, o: 0.5 / o,), ufunc=np.sqrt,
            to_sympy="sqrt", latex=(r"\sqrt{", (0, 0), "}"))
sin = _row("sin", 1, np.sin, "math.sin({0})", (lambda a, o: cos(a),), ufunc=np.sin, to_sympy="sin",
           latex=_func(r"\sin"), finite=True)
cos = _row("cos", 1, np.cos, "math.cos({0})", (lambda a, o: -sin(a),), ufunc=np.cos, to_sympy="cos",
           latex=_func(r"\cos"), finite=True)
tan = _row("tan", 1, np.tan, "math.tan({0})", (lambda a, o: o * o + 1.0,), ufunc=np.tan, to_sympy="tan",
           latex=_func(r"\tan"))
asin = _row("asin", 1, np.arcsin, "math.asin({0})", (lambda a, o: 1.0 / sqrt(1.0 - a * a),),
            ufunc=np.arcsin, aliases=("arcsin",), to_sympy="asin", latex=_func(r"\arcsin"))
acos = _row("acos", 1, np.arccos, "math.acos({0})", (lambda a, o: -1.0 / sqrt(1.0 - a * a),),
            ufunc=np.arccos, aliases=("arccos",), to_sympy="acos", latex=_func(r"\arccos"))
atan = _row("atan", 1, np.arctan, "math.atan({0})", (lambda a, o: 1.0 / (a * a + 1.0),),
            ufunc=np.arctan, aliases=("arctan",), to_sympy="atan", latex=_func(r"\arctan"), finite=True)
atan2 = _row("atan2", 2, np.arctan2, "math.atan2({0}, {1})",
             (lambda a, b, o: b / (a * a + b * b), lambda a, b, o: -a / (a * a + b * b)),
             ufunc=np.arctan2, aliases=("arctan2",), to_sympy="atan2")
sinh = _row("sinh", 1, np.sinh, "math.sinh({0})", (lambda a, o: cosh(a),), ufunc=np.sinh,
            to_sympy="sinh", latex=_func(r"\sinh"))
cosh = _row("cosh", 1, np.cosh, "math.cosh({0})", (lambda a, o: sinh(a),), ufunc=np.cosh,
            to_sympy="cosh", latex=_func(r"\cosh"))
tanh = _row("tanh", 1, np.tanh, "fastmath.tanh({0})", (lambda a, o: 1.0 - o * o,), ufunc=np.tanh,
            to_sympy="tanh", latex=_func(r"\tanh"), finite=True)
asinh = _row("asinh", 1, np.arcsinh, "math.asinh({0})", (lambda a, o: 1.0 / sqrt(a * a + 1.0),),
             ufunc=np.arcsinh, aliases=("arcsinh",), to_sympy="asinh")
acosh = _row("acosh", 1, np.arccosh, "math.acosh({0})", (lambda a, o: 1.0 / sqrt(a * a - 1.0),),
             ufunc=np.arccosh, aliases=("arccosh",), to_sympy="acosh")
atanh = _row("atanh", 1, np.arctanh, "math.atanh({0})", (lambda a, o: 1.0 / (1.0 - a * a),),
             ufunc=np.arctanh, aliases=("arctanh",), to_sympy="atanh")
logaddexp = _row("logaddexp", 2, np.logaddexp,
                 "({0} + 0.6931471805599453 if {0} == {1} else "
                 "max({0}, {1}) + fastmath.log1p(fastmath.exp(-abs({0} - {1}))))",
                 # sigmoid(a - b), not exp(a - out): one exp (not three calls) where only the derivative is used
                 (lambda a, b, o: sigmoid(a - b), lambda a, b, o: sigmoid(b - a)), commutative=True,
                 ufunc=np.logaddexp,
                 to_sympy=lambda a, b: sympy.log(sympy.exp(a) + sympy.exp(b)), doc="log(exp(a) + exp(b)), smooth")
erf = _row("erf", 1, _erf, "math.erf({0})", (lambda a, o: (2.0 / math.sqrt(math.pi)) * exp(-(a * a)),),
           to_sympy="erf", latex=_func(r"\operatorname{erf}"), finite=True)
sigmoid = _row("sigmoid", 1, lambda a: 1.0 / (1.0 + np.exp(-a)), "1.0 / (1.0 + fastmath.exp(-{0}))",
               (lambda a, o: o * (1.0 - o),), to_sympy=lambda a: 1 / (1 + sympy.exp(-a)),
               latex=_func(r"\sigma"), finite=True)
softplus = _row("softplus", 1, lambda a: np.maximum(a, 0.0) + np.log1p(np.exp(-np.abs(a))),
                "max({0}, 0.0) + fastmath.log1p(fastmath.exp(-abs({0})))", (lambda a, o: sigmoid(a),),
                to_sympy=lambda a: sympy.log(1 + sympy.exp(a)), finite=True)

# ---- kinks and steps (derivatives by the documented convention) --------------------------------
hypot = _row("hypot", 2, np.hypot, "math.hypot({0}, {1})",  # a cone at the origin: split 1/2 : 1/2 there
             (lambda a, b, o: where(eq(o, 0.0), 0.5, a / o), lambda a, b, o: where(eq(o, 0.0), 0.5, b / o)),
             commutative=True, ufunc=np.hypot, to_sympy=lambda a, b: sympy.sqrt(a * a + b * b),
             branch=lambda a, b: (a == 0) & (b == 0))
# NumPy's npy_divmod as expressions over fmod (Numba's np.remainder / np.floor_divide differ from NumPy's at
# infinities and signed zeros): the Python convention, remainder with the divisor's sign. Printed a notch
# below * so that a product of remainders keeps its parentheses (Python reads a % b*c as (a % b)*c).
_FMOD = "np.fmod({0}, {1})"
_REMAINDER = (f"({_FMOD} if {{1}} == 0.0 else (({_FMOD} + {{1}} if ({{1}} < 0.0) != ({_FMOD} < 0.0) else {_FMOD}) "
              f"if {_FMOD} != 0.0 else math.copysign(0.0, {{1}})))")
_QUOTIENT = (f"(({{0}} - {_FMOD}) / {{1}} - (1.0 if {_FMOD} != 0.0 and (({{1}} < 0.0) != ({_FMOD} < 0.0)) "
             "else 0.0))")
_FLOOR_DIVIDE = (f"({{0}} / {{1}} if {{1}} == 0.0 else ((np.floor({_QUOTIENT}) + (1.0 if {_QUOTIENT} - "
                 f"np.floor({_QUOTIENT}) > 0.5 else 0.0)) if {_QUOTIENT} != 0.0 "
                 "else math.copysign(0.0, {0} / {1})))")
mod = _row("mod", 2, np.remainder, _REMAINDER,
           (lambda a, b, o: 1.0, lambda a, b, o: -floor_divide(a, b)), ufunc=np.remainder,
           to_sympy=lambda a, b: a - b * sympy.floor(a / b), branch=np.floor_divide,
           **_infix(" % ", MUL - 1, MUL, MUL + 1, r" \;\mathrm{mod}\; "))
floor_divide = _row("floor_divide", 2, np.floor_divide, _FLOOR_DIVIDE, (None, None),
                    ufunc=np.floor_divide, to_sympy=lambda a, b: sympy.floor(a / b), branch=np.floor_divide,
                    **_infix(" // ", MUL - 1, MUL, MUL + 1, r" \;//\; "))


def _max(a: Any, b: Any) -> Any:
    """NumPy's maximum, with IEEE 754-2019's order of zeros (-0 < +0): the same for either argument
    order, as a commutative op must be (NumPy returns whichever zero comes second)."""
    with np.errstate(invalid="ignore"):
        return np.where((a == 0.0) & (b == 0.0), a + b, np.maximum(a, b))[()]


def _min(a: Any, b: Any) -> Any:
    with np.errstate(invalid="ignore"):
        return np.where((a == 0.0) & (b == 0.0), -(-a - b), np.minimum(a, b))[()]


abs = _row("abs", 1, np.abs, "abs({0})", (lambda a, o: where(eq(a, 0.0), 0.0, sign(a)),), ufunc=np.absolute,
           aliases=("__abs__",), to_sympy="Abs", branch=np.sign, latex=(r"\left|", (0, 0), r"\right|"),
           finite=True)
sign = _row("sign", 1, lambda a: np.sign(a) + 0.0, "(np.sign({0}) + 0.0)", (None,), ufunc=np.sign,
            to_sympy="sign", branch=np.sign, finite=True)
floor = _row("floor", 1, np.floor, "np.floor({0})", (None,), ufunc=np.floor, aliases=("__floor__",),
             to_sympy="floor", branch=np.floor, latex=(r"\left\lfloor ", (0, 0), r"\right\rfloor"), finite=True)
ceil = _row("ceil", 1, np.ceil, "np.ceil({0})", (None,), ufunc=np.ceil, aliases=("__ceil__",),
            to_sympy="ceiling", branch=np.ceil, latex=(r"\left\lceil ", (0, 0), r"\right\rceil"), finite=True)
minimum = _row("minimum", 2, _min, "fastmath.minimum({0}, {1})",
               (lambda a, b, o: _kink(gt(a, b), a, b), lambda a, b, o: _kink(lt(a, b), a, b)),
               commutative=True, ufunc=np.minimum, to_sympy="Min",
               branch=lambda a, b: np.sign(a - b), latex=_func(r"\min", 2), finite=True)
maximum = _row("maximum", 2, _max, "fastmath.maximum({0}, {1})",
               (lambda a, b, o: _kink(lt(a, b), a, b), lambda a, b, o: _kink(gt(a, b), a, b)),
               commutative=True, ufunc=np.maximum, to_sympy="Max",
               branch=lambda a, b: np.sign(a - b), latex=_func(r"\max", 2), finite=True)
relu = _row("relu", 1, lambda a: np.maximum(a, 0.0) + 0.0, "(np.maximum({0}, 0.0) + 0.0)",
            (lambda a, o: where(gt(a, 0.0), 1.0, 0.0),), to_sympy=lambda a: sympy.Max(a, 0), branch=np.sign,
            finite=True)

# ---- conditions (1.0 true, 0.0 false) and selection ----------------------------------------------
lt = _row("lt", 2, _cmp(np.less), "fastmath.lt({0}, {1})", (None, None), ufunc=np.less,
          to_sympy=_sympy_cmp("Lt"),
          branch=_cmp(np.less), **_infix(" < ", CMP, CMP + 1, CMP + 1), finite=True)
le = _row("le", 2, _cmp(np.less_equal), "fastmath.le({0}, {1})", (None, None), ufunc=np.less_equal,
          to_sympy=_sympy_cmp("Le"),
          branch=_cmp(np.less_equal), **_infix(" <= ", CMP, CMP + 1, CMP + 1, r" \leq "), finite=True)
gt = _row("gt", 2, _cmp(np.greater), "fastmath.gt({0}, {1})", (None, None), ufunc=np.greater,
          to_sympy=_sympy_cmp("Gt"),
          branch=_cmp(np.greater), **_infix(" > ", CMP, CMP + 1, CMP + 1), finite=True)
ge = _row("ge", 2, _cmp(np.greater_equal), "fastmath.ge({0}, {1})", (None, None), ufunc=np.greater_equal,
          to_sympy=_sympy_cmp("Ge"), branch=_cmp(np.greater_equal),
          **_infix(" >= ", CMP, CMP + 1, CMP + 1, r" \geq "), finite=True)
eq = _row("eq", 2, _cmp(np.equal), "fastmath.eq({0}, {1})", (None, None), ufunc=np.equal,
          commutative=True, to_sympy=_sympy_cmp("Eq"), branch=_cmp(np.equal), doc="a == b as 1.0 / 0.0",
          **_infix(" == ", CMP, CMP + 1, CMP + 1, " = "), finite=True)
ne = _row("ne", 2, _cmp(np.not_equal), "fastmath.ne({0}, {1})", (None, None), ufunc=np.not_equal,
          commutative=True, to_sympy=_sympy_cmp("Ne"), branch=_cmp(np.not_equal), doc="a != b as 1.0 / 0.0",
          **_infix(" != ", CMP, CMP + 1, CMP + 1, r" \neq "), finite=True)
COMPARISONS = frozenset(("lt", "le", "gt", "ge", "eq", "ne"))  # 0/1 valued, no derivative
where = _row("where", 3, lambda c, a, b: np.where(c != 0, a, b), "fastmath.select({0}, {1}, {2})",
             (None, lambda c, a, b, o: where(c, 1.0, 0.0), lambda c, a, b, o: where(c, 0.0, 1.0)),
             to_sympy=lambda c, a, b: sympy.Piecewise((a, sympy.Ne(c, 0)), (b, True)),
             branch=lambda c, a, b: c != 0, finite=True)
stop_gradient = _row("stop_gradient", 1, lambda a: a, "{0}", (None,), to_sympy="StopGradient", finite=True)
# fmt: on

# ---- rolled: index symbols, arrays, loads, reductions over an index, tensors --------------------
# A rolled node's value in the interpreter is an array with one axis per index symbol of the graph
# (size 1 where the node does not vary): a whole index range is evaluated at once. ``ctx`` is
# interp.Rolled, which knows the axes and whether elements are numbers or expressions (unroll).


def _indices(node: Any) -> tuple:  # arguments 1 .. k-1, comma-separated
    return sum((((j, 0), ", ") for j in range(1, len(node.args))), ())[:-1]


def _ranges(node: Any, first: int) -> tuple:  # i=0..3, j=0..1: the index arguments from ``first``, bound
    bound = range(first, len(node.args))
    return sum((((k, 0), f"=0..{node.args[k].payload[1] - 1}", ", ") for k in bound), ())[:-1]


def _reduction_latex(node: Any) -> tuple:  # \sum_{i=0}^{3} body, \max_{0 \leq i \leq 3} body
    last = node.args[1].payload[1] - 1
    if node.op.name == "sum":
        return (r"\sum_{", (1, 0), f"=0}}^{{{last}}} ", (0, ADD))
    return (rf"\{node.op.name}_{{0 \leq ", (1, 0), rf" \leq {last}}} ", (0, ADD))


def _reduction(name: str) -> Op:
    to_sympy = (lambda body, i: sympy.Sum(body, (i, i.lower, i.upper))) if name == "sum" else None
    return _row(name, 2, None, None, kind="rolled", binds=True, to_sympy=to_sympy,
                template=lambda node: (f"{name}(", (0, 0), ", ", *_ranges(node, 1), ")"),
                latex=_reduction_latex, latex_prec=ADD,
                evaluate=lambda node, args, ctx: ctx.reduce(name, args[0], node.args[1]),
                doc=f"{name} over an index range of a body that may use the index", finite=True)


index = _row("index", 0, None, None, kind="rolled", doc="an index symbol over 0 .. n-1 (payload: name, n)",
             evaluate=lambda node, args, ctx: ctx.index(node), finite=True)
array = _row("array", 0, None, None, kind="rolled", array_valued=True,
             doc="a symbolic array input (payload: name, shape)",
             evaluate=lambda node, args, ctx: ctx.array(node), finite=True)
table = _row("table", 0, None, None, kind="rolled", array_valued=True,
             doc="a constant integer array (payload: shape, values)",
             evaluate=lambda node, args, ctx: np.array(node.payload[1], dtype=float).reshape(node.payload[0]),
             finite=True)
load = _row("load", -1, None, None, kind="rolled", to_sympy=lambda arr, *address: arr[address],
            template=lambda node: ((0, ATOM), "[", *_indices(node), "]"),
            latex=lambda node: ((0, ATOM), "_{", *_indices(node), "}"),
            evaluate=lambda node, args, ctx: ctx.load(args[0], args[1:], node.payload == "guarded"),
            doc="an element of an array at index expressions: x[i + 1, j] (payload \"guarded\": see "
                "rolled.subscript)", finite=True)
sum_ = _reduction("sum")
max_ = _reduction("max")
min_ = _reduction("min")
tensor = _row("tensor", -1, None, None, kind="rolled", array_valued=True, binds=True,
              to_sympy=lambda body, *indices: sympy.Lambda(indices, body),
              template=lambda node: ("tensor(", (0, 0), ", ", *_ranges(node, 1), ")"),
              latex=lambda node: (r"\left[", (0, 0), r"\right]_{", *_indices(node), "}"), latex_prec=POW,
              evaluate=lambda node, args, ctx: ctx.materialise(args[0], node.args[1:]),
              doc="the array whose element at the index arguments is the body", finite=True)
scatter = _row("scatter", -1, None, None, kind="rolled", array_valued=True, binds=True,
               template=lambda node: ("scatter(", *call_template("", 1 + node.payload[1], "")[1:-1],
                                      *((", ", *_ranges(node, 1 + node.payload[1])) if len(node.args) >
                                        1 + node.payload[1] else ()), ")"),
               evaluate=lambda node, args, ctx: ctx.scatter(node, args),
               doc="the array of sums of a body into addresses over bound indices (payload: shape, "
                   "number of addresses); args: body, addresses, indices", finite=True)
as_index = _row("as_index", 2, None, "float(fastmath.as_index({0}, {1}))", (None, None), kind="rolled",
                template=call_template("as_index(", 2, ")"), latex=_func(r"\operatorname{as\_index}", 2),
                evaluate=lambda node, args, ctx: ctx.as_index(args[0], args[1]),
                doc="the integer a value read from an integer data array gives as an index into an axis of "
                    "size n (args: value, n): its integer part, negative values counted from the end as in "
                    "NumPy (a gather whose index array is a traced argument)", finite=True)
cumsum = _row("cumsum", 1, None, None, kind="rolled", array_valued=True,
              template=lambda node: ("cumsum(", (0, 0), f", axis={node.payload[0]}",
                                     ", reverse)" if node.payload[1] else ")"),
              latex=lambda node: (r"\operatorname{cumsum}" + ("^{-}" if node.payload[1] else "") +
                                  f"_{{{node.payload[0]}}}\\left(", (0, 0), r"\right)"),
              evaluate=lambda node, args, ctx: ctx.cumsum(args[0], *node.payload),
              doc="the running sums of an array along an axis, from its start (from its end: reverse); "
                  "a sequential loop (payload: axis, reverse)", finite=True)
argsort = _row("argsort", 1, None, None, kind="rolled", array_valued=True,
               template=lambda node: ("argsort(", (0, 0), f", axis={node.payload})"),
               latex=lambda node: (rf"\operatorname{{argsort}}_{{{node.payload}}}\left(", (0, 0), r"\right)"),
               evaluate=lambda node, args, ctx: ctx.argsort(args[0], node.payload),
               doc="the positions that sort an array along an axis (payload: axis), a stable sort with nan "
                   "last, as np.argsort(kind=\"stable\"): integer data, no derivative (np.sort gathers "
                   "through it)", finite=True)

scan = _row("scan", -1, None, None, kind="rolled", array_valued=True,
            template=lambda node: ("scan(", str(node.payload[2]), *(x for k in range(len(node.args))
                                                               for x in (", ", (k, 0))), ")"),
            latex=lambda node: call_template(r"\operatorname{scan}\left(", len(node.args), r"\right)"),
            evaluate=lambda node, args, ctx: ctx.scan(node, args),
            doc="a loop carrying a state (sg.scan): every carry, the initial one in row 0 (in the last row "
                "if reversed), then the one after each step (payload: length, "
                "reverse, the step, a scans.Step); args: the initial carry, the arrays read a row per step, "
                "the arrays read whole")

# The scalar functions: every row a formula, a method or a NumPy ufunc can reach.
FUNCTIONS: dict[str, Op] = {name: op for name, op in OPS.items() if op.kind == "scalar" and op.arity > 0}

# (last: the codes of the rows above, which hashes read, stay as they were)
# A function with a derivative rule of its own (sg.custom_jvp / custom_vjp): the value (argument 0)
# of its arguments (1 ..), whose partials the rule in its payload gives (expr/custom.py), not the
# value's graph; printed as the call, compiled as the value.
custom = _row("custom", -1, lambda value, *args: value, None, to_sympy=lambda value, *args: value,
              template=lambda node: (f"{node.payload.name}(", *sum((((k, 0), ", ") for k in range(
                  1, len(node.args))), ())[:-1], ")"))

# The gamma family (rows added last, for the same reason): SciPy's values in the interpreter, Numba's
# from compile/special.py. polygamma's order is a whole-number constant (nan otherwise, as SciPy's).


def _scipy(name: str) -> Callable:
    return lambda *args: getattr(importlib.import_module("scipy.special"), name)(*args)


gammaln = _row("gammaln", 1, _scipy("gammaln"), "special.gammaln({0})", (lambda a, o: digamma(a),),
               to_sympy="loggamma", latex=_func(r"\ln\Gamma"), doc="log |Gamma(a)| (SciPy's gammaln)")
digamma = _row("digamma", 1, _scipy("psi"), "special.digamma({0})", (lambda a, o: polygamma(1.0, a),),
               aliases=("psi",), to_sympy="digamma", latex=_func(r"\psi"), doc="the derivative of gammaln")
polygamma = _row("polygamma", 2, _scipy("polygamma"), "special.polygamma({0}, {1})",
                 (None, lambda n, a, o: polygamma(n + 1.0, a)), to_sympy="polygamma",
                 latex=(r"\psi^{(", (0, 0), r")}\left(", (1, 0), r"\right)"),
                 doc="the n-th derivative of digamma (args: n, a whole number, and a)")
FUNCTIONS.update(gammaln=gammaln, digamma=digamma, polygamma=polygamma)

# NumPy's sinc and its derivatives of every order (rows last, as the gamma family's): one row computes the
# n-th derivative exactly at 0 and near it, where the quotient's own derivatives cancel (expr/special_series.py,
# which compile/special.py compiles too: the interpreter runs the same function). The order is a whole-number
# constant (nan otherwise).


def _each(fn):  # a plain-Python function of floats over arrays (the compiled code's: the same bits everywhere)
    return lambda *args: np.vectorize(fn, otypes=[float])(*args)[()]


_sinc_derivative = _each(special_series.sinc_derivative)


def _sinc_sympy(n, a):  # (the closed form is 0/0 at 0: its limit there, the series' coefficient)
    t, k = sympy.Dummy("t"), int(n)
    at_zero = 0 if k % 2 else (-1) ** (k // 2) * sympy.pi ** k / (k + 1)
    closed = sympy.diff(sympy.sinc(sympy.pi * t), t, k).subs(t, a)
    return sympy.Piecewise((at_zero, sympy.Eq(a, 0)), (closed, True))


sinc = _row("sinc", 1, lambda a: _sinc_derivative(0.0, a), "special.sinc_derivative(0.0, {0})",
            (lambda a, o: sinc_derivative(1.0, a),),
            to_sympy=lambda a: sympy.sinc(sympy.pi * a), latex=_func(r"\operatorname{sinc}"), finite=True,
            doc="NumPy's sinc: sin(pi a) / (pi a), 1 at 0")
sinc_derivative = _row("sinc_derivative", 2, _sinc_derivative, "special.sinc_derivative({0}, {1})",
                       (None, lambda n, a, o: sinc_derivative(n + 1.0, a)), to_sympy=_sinc_sympy,
                       latex=(r"\operatorname{sinc}^{(", (0, 0), r")}\left(", (1, 0), r"\right)"),
                       doc="the n-th derivative of sinc (args: n, a whole number, and a)")
FUNCTIONS.update(sinc=sinc, sinc_derivative=sinc_derivative)

# C's fmod (NumPy's np.fmod): a - b*trunc(a/b), with a's sign. Its partial in b, -trunc(a/b), is the whole
# number (o - a)/b (a/b rounded can be the next one: fmod(1, 0.1)), held constant: differentiated as
# written its two terms, ~a/b**2 each, cancel only on paper (at b = 1e-114 the hvp was 1e211, not 0).
fmod = _row("fmod", 2, np.fmod, "np.fmod({0}, {1})",
            (lambda a, b, o: 1.0, lambda a, b, o: stop_gradient((o - a) / b)),
            ufunc=np.fmod, to_sympy=lambda a, b: a - b * sympy.sign(a / b) * sympy.floor(sympy.Abs(a / b)),
            branch=lambda a, b: np.trunc(a / b),
            doc="C's fmod: the remainder of a / b truncated toward 0, with a's sign")
# The inverse of erf (SciPy's in the interpreter), and exp(-|a|) I_n(a) of whole order n (as SciPy's ive),
# compiled from expr/special_series.py (the interpreter runs its ive too). d ive(n, a) / da =
# (ive(n-1, a) + ive(n+1, a)) / 2 - sign(a) ive(n, a): every order is another row's value (a kink at 0,
# |a|'s, for n = 0).
erfinv = _row("erfinv", 1, _scipy("erfinv"), "special.erfinv({0})",
              (lambda a, o: (0.5 * math.sqrt(math.pi)) * exp(o * o),), to_sympy="erfinv",
              latex=_func(r"\operatorname{erf}^{-1}"), doc="the inverse of erf on (-1, 1)")
ive = _row("ive", 2, _each(special_series.ive), "special.ive({0}, {1})",
           (None, lambda n, a, o: 0.5 * (ive(n - 1.0, a) + ive(n + 1.0, a)) - sign(a) * o),
           to_sympy=lambda n, a: sympy.exp(-sympy.Abs(a)) * sympy.besseli(n, a),
           latex=(r"\tilde I_{", (0, 0), r"}\left(", (1, 0), r"\right)"),
           doc="exp(-|a|) I_n(a), the scaled modified Bessel function of whole order n (SciPy's ive)")
FUNCTIONS.update(fmod=fmod, erfinv=erfinv, ive=ive)

# Late import: rows are callable (they build nodes), and build needs the rows.
from symgrad.expr import build  # noqa: E402
