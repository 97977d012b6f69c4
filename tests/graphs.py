"""Hypothesis strategies for random expression DAGs that use every op.

A graph is grown node by node, each new node taking its arguments from all
earlier ones, so subexpressions are shared.  Ops with a restricted domain get
their argument mapped into it (log(a*a + 0.5), asin(0.9*tanh(a)), ...), so most
points are finite; tests still filter the rare overflow.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr import ops

VARS = sg.symbols("x0 x1 x2")


def _pos(a):
    return a * a + 0.5


def _unit(a):
    return 0.9 * sg.tanh(a)


GUARDS = {
    "log": lambda a: sg.log(_pos(a)),
    "sqrt": lambda a: sg.sqrt(_pos(a)),
    "log1p": lambda a: sg.log1p(a * a),
    "acosh": lambda a: sg.acosh(_pos(a) + 1.0),
    "asin": lambda a: sg.asin(_unit(a)),
    "acos": lambda a: sg.acos(_unit(a)),
    "atanh": lambda a: sg.atanh(_unit(a)),
    "div": lambda a, b: a / _pos(b),
    "pow": lambda a, b: _pos(a) ** sg.tanh(b),
    "exp": lambda a: sg.exp(sg.tanh(a) * 3),
    "expm1": lambda a: sg.expm1(sg.tanh(a) * 3),
    "sinh": lambda a: sg.sinh(sg.tanh(a) * 3),
    "cosh": lambda a: sg.cosh(sg.tanh(a) * 3),
    "tan": lambda a: sg.tan(_unit(a)),
    "hypot": lambda a, b: sg.hypot(a, b + 0.25),
    "atan2": lambda a, b: sg.atan2(a, _pos(b)),
    "gammaln": lambda a: sg.gammaln(_pos(a) + 0.25),
    "digamma": lambda a: sg.digamma(_pos(a) + 0.25),
    "polygamma": lambda a, b: sg.polygamma(2, _pos(a) + _pos(b) + 0.25),  # (the order: a whole number)
    "sinc": lambda a: sg.sinc(sg.tanh(a) * 3),  # (period 2: of exp(...) it swings faster than differences see)
    "sinc_derivative": lambda a, b: ops.OPS["sinc_derivative"](2.0, sg.tanh(a + b) * 3),
    "ive": lambda a, b: ops.OPS["ive"](1.0, a + b),
    "erfinv": lambda a: ops.OPS["erfinv"](_unit(a)),
}
OP_NAMES = list(ops.FUNCTIONS)
SMOOTH = [n for n in OP_NAMES if ops.OPS[n].branch is None and ops.OPS[n].partials[0] is not None]


def build(name: str, args: list) -> sg.Expr:
    if name in GUARDS:
        return GUARDS[name](*args)
    return ops.OPS[name](*args)


@st.composite
def dags(draw, max_ops: int = 10, names: list[str] = OP_NAMES, n_vars: int = 3) -> sg.Expr:
    """A random expression over x0..x{n_vars-1}, whose nodes share arguments."""
    pool: list = list(VARS[:n_vars])
    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(names))
        arity = ops.OPS[name].arity
        args = [draw(st.sampled_from(pool)) if draw(st.integers(0, 5)) else
                draw(st.sampled_from([0.5, 2.0, -1.5, 3.0])) for _ in range(arity)]
        if all(not isinstance(a, sg.Expr) for a in args):
            args[0] = pool[-1]
        pool.append(build(name, args))
    # Sum a few nodes so the output uses more than the last one.
    picks = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    out = pool[-1]
    for p in picks:
        out = out + p
    return out


points = st.lists(st.floats(-1.7, 1.7, allow_nan=False), min_size=3, max_size=3).map(
    # Generic points: no kink sits exactly at 0.0 or 1.0, or where two coordinates are equal.
    lambda xs: [x + 0.1234567 * (k + 1) for k, x in enumerate(xs)]
)


def finite(*values) -> bool:
    return bool(np.all(np.isfinite(np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in values]))))
