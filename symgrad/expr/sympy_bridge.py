"""To and from SymPy, for heavy simplification, comparison and pretty output.

Both directions walk iteratively; variables become real SymPy symbols.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy
from sympy.functions.elementary.piecewise import ExprCondPair

from symgrad.expr import ops
from symgrad.expr.build import Var, apply, const
from symgrad.expr.node import Expr, paused_gc
from symgrad.expr.traverse import _like, as_expr_list, topo_order


def _sympy_const(v: float) -> sympy.Expr:
    if math.isnan(v):
        return sympy.nan
    if math.isinf(v):
        return sympy.oo if v > 0 else -sympy.oo
    return sympy.Integer(int(v)) if v.is_integer() and abs(v) < 1e16 else sympy.Float(v)


def to_sympy(exprs: Any, real: bool = True) -> Any:
    """Convert expressions to SymPy (one, or a list / array like the input).

    Variables become SymPy symbols declared real (``Symbol(name, real=True)``: symgrad's variables
    are floats, and SymPy then differentiates ``abs`` as ``sign``); SymPy takes a plain
    ``Symbol("x")`` for another symbol, so mixing the two does not cancel: pass ``real=False`` to get
    plain symbols.

    >>> import symgrad as sg, sympy
    >>> x, y = sg.symbols("x y")
    >>> sg.to_sympy(x * y + sg.sin(x))
    x*y + sin(x)
    >>> sg.to_sympy(x ** 2, real=False) - sympy.Symbol("x") ** 2
    0

    Rolled expressions become SymPy's indexed forms: ``Sum`` over an ``Idx``, ``IndexedBase``
    loads, and a ``Lambda`` of the indices for a tensor (max / min over an index, tables and
    scatters have none: unroll first). Values agree with symgrad's wherever no intermediate
    value is infinite or nan: SymPy's ``x/0`` is the unsigned ``zoo``, NumPy's a signed inf.
    """
    roots = as_expr_list(exprs)
    done: dict[Expr, Any] = {}
    for node in topo_order(roots):
        name = node.op.name
        if name == "var":
            done[node] = sympy.Symbol(node.payload, real=True) if real else sympy.Symbol(node.payload)
        elif name == "const":
            done[node] = _sympy_const(node.payload)
        elif name in _LEAVES:
            done[node] = _LEAVES[name](*node.payload)
        elif node.op.to_sympy is None:
            raise TypeError(f"to_sympy: {name} nodes have no SymPy form (use unroll(...) first)")
        else:
            args = [done[a] for a in node.args]
            try:
                done[node] = _sympy_function(node.op)(*args)
            except TypeError as e:  # SymPy refusing to compare zoo or nan, which its 1/0 makes
                raise ValueError(f"to_sympy: SymPy cannot build {name}{tuple(args)}: {e} (SymPy's x/0 is the "
                                 "unsigned zoo, where NumPy's is a signed inf)") from None
    return _like(exprs, [done[r] for r in roots])


def _fold(op: ops.Op):
    def build(*args: Expr) -> Expr:
        out = args[0]
        for a in args[1:]:
            out = apply(op, (out, a))
        return out
    return build


def _product(*factors: Expr) -> Expr:
    """SymPy's Mul, its factors ``1/d`` (Pow(d, -1)) as divisions: x/y is x / y, not x * (1/y),
    which rounds differently (x0 % abs(x0) came back as x0 - abs(x0)*floor(0.9999999999999999))."""
    one = const(1.0)
    over = [f.args[1] for f in factors if f.op.name == "div" and f.args[0] is one]
    kept = [f for f in factors if not (f.op.name == "div" and f.args[0] is one)]
    out = _fold(ops.mul)(*kept) if kept else one / over.pop(0)
    for d in over:
        out = out / d
    return out


def _pow(base: Expr, ex: Expr) -> Expr:
    if ex is const(0.5):
        return ops.sqrt(base)
    if ex is const(-1.0):
        return 1.0 / base
    return base**ex


# Rolled leaves: an index is a SymPy Idx over its range, an array an IndexedBase of its shape.
_LEAVES = {"index": lambda name, n: sympy.Idx(name, n),
           "array": lambda name, shape: sympy.IndexedBase(name, shape)}


class StopGradient(sympy.Function):
    """stop_gradient inside SymPy: the identity, with derivative 0."""

    def fdiff(self, argindex=1):
        return sympy.S.Zero

    def _eval_evalf(self, prec):
        return self.args[0].evalf(prec)


def _sympy_function(op: ops.Op) -> Any:
    """What an op becomes in SymPy: its row names a SymPy function (or StopGradient), or builds the expression."""
    if isinstance(op.to_sympy, str):
        return StopGradient if op.to_sympy == "StopGradient" else getattr(sympy, op.to_sympy)
    return op.to_sympy


def _piecewise(*pairs: tuple) -> Expr:
    out = const(0.0) if pairs[-1][1] is not const(1.0) else pairs[-1][0]
    body = pairs if pairs[-1][1] is not const(1.0) else pairs[:-1]
    for value, cond in reversed(body):
        out = ops.where(cond, value, out)
    return out


def _log(x: Expr, base: Expr | None = None) -> Expr:
    return ops.log(x) if base is None else ops.log(x) / ops.log(base)


_FROM: dict[type, Any] = {  # the op table's functions first: the rows below (n-ary Min / Max folded) win
    **{_sympy_function(op): op for op in ops.OPS.values() if isinstance(op.to_sympy, str)},
    sympy.Add: _fold(ops.add),
    sympy.Mul: _product,
    sympy.Pow: _pow,
    sympy.log: _log,
    sympy.Max: _fold(ops.maximum),
    sympy.Min: _fold(ops.minimum),
    sympy.Piecewise: _piecewise,
    ExprCondPair: lambda value, cond: (value, cond),
    sympy.Heaviside: lambda x, *h0: 0.5 + 0.5 * ops.sign(x),
    sympy.sinc: lambda t: ops.sinc(t * (1.0 / math.pi)),  # (SymPy's sin(t)/t; NumPy's is sin(pi x)/(pi x))
    sympy.besseli: lambda n, a: ops.ive(n, a) * ops.exp(ops.abs(a)),
    sympy.And: _fold(ops.mul),
    sympy.Or: _fold(ops.maximum),
    sympy.Not: lambda c: 1.0 - c,
    sympy.ITE: ops.where,
    sympy.StrictLessThan: ops.lt,
    sympy.LessThan: ops.le,
    sympy.StrictGreaterThan: ops.gt,
    sympy.GreaterThan: ops.ge,
    sympy.Equality: ops.eq,
    sympy.Unequality: ops.ne,
    sympy.re: lambda a: a,  # symgrad values are real
    sympy.im: lambda a: const(0.0),
}


def _leaf(s: Any) -> Expr | None:
    if isinstance(s, sympy.Symbol):
        return Var(s.name)
    if s is sympy.true:
        return const(1.0)
    if s is sympy.false:
        return const(0.0)
    if s is sympy.zoo or s is sympy.nan:  # SymPy's x/0 and 0/0: a value without a sign, as NumPy's nan
        return const(float("nan"))
    if isinstance(s, sympy.Expr) and s.is_number and not s.free_symbols and not s.args or \
            isinstance(s, sympy.NumberSymbol):
        value = complex(s)
        if value.imag:
            raise ValueError(f"from_sympy: complex constant {s} is not supported")
        return const(value.real)
    return None


@paused_gc()
def from_sympy(s: Any) -> Any:
    """Convert a SymPy expression (or a list / array of them) to symgrad expressions.

    >>> import sympy
    >>> import symgrad as sg
    >>> x = sympy.Symbol("x")
    >>> sg.from_sympy(sympy.sin(x) ** 2)
    sin(x)**2
    """
    if isinstance(s, list | tuple | np.ndarray):
        flat = [from_sympy(e) for e in np.asarray(s, dtype=object).ravel()]
        return _like(s, flat)
    s = sympy.sympify(s)
    done: dict[Any, Any] = {}
    stack = [s]
    while stack:
        node = stack[-1]
        if node in done:
            stack.pop()
            continue
        leaf = _leaf(node)
        if leaf is not None:
            done[node] = leaf
            stack.pop()
            continue
        pending = [a for a in node.args if a not in done]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        build = next((_FROM[t] for t in type(node).__mro__ if t in _FROM), None)
        if build is None:
            raise ValueError(f"from_sympy: SymPy function {type(node).__name__!r} has no symgrad equivalent")
        done[node] = build(*(done[a] for a in node.args))
    return done[s]
