"""symgrad: exact derivatives of scalar formulas, readable and fast.

>>> import symgrad as sg
>>> x, y = sg.symbols("x y")
>>> sg.grad(x * y + sg.sin(x), [x, y])
[y + cos(x), x]
"""

import importlib as _importlib
from types import ModuleType as _ModuleType

from symgrad import compile, parse  # callable modules: sg.compile(...), symgrad.compile.lower
from symgrad.check import GradCheckReport, GradientCheckError, check_grad, check_grads
from symgrad.compile.function import Compiled
from symgrad.compile.program import Program
from symgrad.export import export_c
from symgrad.expr.build import Var, const, symbols, vector
from symgrad.expr.diff import diff
from symgrad.expr.dot import to_dot
from symgrad.expr.functions import FUNCS as _FUNCS
from symgrad.expr.functions import SymArray
from symgrad.expr.indexed import array, index, max, min, sum, table, tensor, unroll
from symgrad.expr.interp import evaluate
from symgrad.expr.node import Expr, TracingError, paused_gc
from symgrad.expr.printing import format, latex
from symgrad.expr.scan_function import scan
from symgrad.expr.serialize import FormatError, dumps, loads
from symgrad.expr.sparsity import SparseExprs
from symgrad.expr.special import digamma, gammaln, log_softmax, logsumexp, multigammaln, polygamma, softmax
from symgrad.expr.traverse import count_nodes, free_variables, structural_hash, substitute
from symgrad.parse import ParseError
from symgrad.ports import ad_checkpoint, config, lax, numpy  # JAX's modules under symgrad's names (more: _Aliases)
from symgrad.ports.ad_checkpoint import checkpoint, checkpoint_name, checkpoint_policies, remat
from symgrad.solvers import ipopt, optimize  # sg.optimize.Problem: the problem object cyipopt takes
from symgrad.solvers.optimize import minimize
from symgrad.trace import *  # the transforms and Function: symgrad.trace.__all__
from symgrad.trace.control import cond, fori_loop, switch, while_loop
from symgrad.trace.custom import custom_jvp, custom_vjp
from symgrad.util import chunks as _chunks
from symgrad.util import pytree
from symgrad.util.aliases import Aliases as _Aliases
from symgrad.util.callmodule import CallableModule as _CallableModule
from symgrad.util.pytree import (
    ravel_pytree,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)

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
sinc = _FUNCS["sinc"]
relu = _FUNCS["relu"]
where = _FUNCS["where"]
stop_gradient = _FUNCS["stop_gradient"]
lt, le, gt, ge, eq, ne = (_FUNCS[n] for n in ("lt", "le", "gt", "ge", "eq", "ne"))

tree_util = tree = pytree  # JAX's jax.tree_util.tree_map and jax.tree.map: sg.tree_util.tree_map, sg.tree.map
# The modules users import by their public names (`import symgrad.numpy as jnp`, `from symgrad.tree_util import
# tree_map`, as from jax.tree_util), wherever they live in the package: each imported on first use.
_Aliases({f"symgrad.{public}": f"symgrad.{real}" for public, real in {
    "pytree": "util.pytree", "tree_util": "util.pytree", "tree": "util.pytree", "numpy": "ports.numpy",
    "lax": "ports.lax", "nn": "ports.nn", "scipy": "ports.scipy", "scipy.special": "ports.scipy.special",
    "config": "ports.config", "ad_checkpoint": "ports.ad_checkpoint", "optimize": "solvers.optimize",
    "ipopt": "solvers.ipopt",
    # where modules were before the function layer became a package: code and pickles that name them still load
    "batched": "trace.batched", "control": "trace.control", "custom": "trace.custom", "guards": "trace.guards",
    "sparse_rolled": "trace.sparse", "special": "expr.special", "progress": "util.progress",
    "callmodule": "util.callmodule", "compile.loops": "compile.loop_program"}.items()}).install()
_chunks.install("symgrad.distributed")  # Dask arrays among the data: run chunk by chunk (imports Dask when met)

__version__ = "0.1.0"

# What `from symgrad import *` gives: everything public except the names that would shadow Python's
# builtins (abs, compile, format, max, min, sum): use them as sg.abs, sg.compile, sg.sum, ...
__all__ = sorted(
    {name for name, value in globals().items() if not name.startswith("_") and (
        not isinstance(value, _ModuleType) or isinstance(value, _CallableModule))}
    - {"abs", "compile", "format", "max", "min", "sum"} | {"to_sympy", "from_sympy"}
)


def __getattr__(name: str):
    """to_sympy and from_sympy load SymPy on first use (it is half of symgrad's import time); sg.nn, sg.scipy
    and sg.distributed their modules (SciPy's special functions, Dask)."""
    if name in ("to_sympy", "from_sympy"):
        from symgrad.expr import sympy_bridge

        return getattr(sympy_bridge, name)
    if name in ("nn", "scipy", "distributed"):
        return _importlib.import_module(f"symgrad.{name}")
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")
