"""symgrad: exact derivatives of scalar formulas, readable and fast.

>>> import symgrad as sg
>>> x, y = sg.symbols("x y")
>>> sg.grad(x * y + sg.sin(x), [x, y])
[y + cos(x), x]
"""

from symgrad.check import GradCheckReport, GradientCheckError, check_grad
from symgrad.compile.function import Compiled, compile
from symgrad.compile.lower import Program
from symgrad.expr.arrays import SymArray
from symgrad.expr.build import FUNCS as _FUNCS
from symgrad.expr.build import Var, const, symbols, vector
from symgrad.expr.diff import diff
from symgrad.expr.interp import evaluate
from symgrad.expr.node import Expr, TracingError, paused_gc
from symgrad.expr.printing import format, latex
from symgrad.expr.serialize import FormatError, dumps, loads
from symgrad.expr.sparsity import SparseExprs
from symgrad.expr.sympy_bridge import from_sympy, to_sympy
from symgrad.expr.traverse import count_nodes, free_variables, structural_hash, substitute
from symgrad.parse import parse
from symgrad.trace import Function, grad, hessian, hvp, jacobian, jit, jvp, value_and_grad, vjp

exp = _FUNCS["exp"]
log = _FUNCS["log"]
log1p = _FUNCS["log1p"]
expm1 = _FUNCS["expm1"]
sqrt = _FUNCS["sqrt"]
sin = _FUNCS["sin"]
cos = _FUNCS["cos"]
tan = _FUNCS["tan"]
asin = _FUNCS["asin"]
acos = _FUNCS["acos"]
atan = _FUNCS["atan"]
atan2 = _FUNCS["atan2"]
sinh = _FUNCS["sinh"]
cosh = _FUNCS["cosh"]
tanh = _FUNCS["tanh"]
asinh = _FUNCS["asinh"]
acosh = _FUNCS["acosh"]
atanh = _FUNCS["atanh"]
abs = _FUNCS["abs"]
sign = _FUNCS["sign"]
floor = _FUNCS["floor"]
ceil = _FUNCS["ceil"]
minimum = _FUNCS["minimum"]
maximum = _FUNCS["maximum"]
hypot = _FUNCS["hypot"]
logaddexp = _FUNCS["logaddexp"]
mod = _FUNCS["mod"]
floor_divide = _FUNCS["floor_divide"]
erf = _FUNCS["erf"]
sigmoid = _FUNCS["sigmoid"]
softplus = _FUNCS["softplus"]
relu = _FUNCS["relu"]
where = _FUNCS["where"]
stop_gradient = _FUNCS["stop_gradient"]
lt, le, gt, ge, eq, ne = (_FUNCS[n] for n in ("lt", "le", "gt", "ge", "eq", "ne"))

__version__ = "0.1.0"
