"""Value ranges (expr/ranges.py) hold: every node of random graphs over raw ops (domains left open:
log of negatives, 1/0, exp overflowing), at random finite points, has a value its range allows; and the
guards reverse mode drops on their strength leave no nan the guarded gradient did not have."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad import lax
from symgrad.expr import ops
from symgrad.expr.ranges import range_of
from symgrad.expr.traverse import topo_order

VARS = sg.symbols("x0 x1")
NAMES = [n for n in ops.FUNCTIONS if n not in ("polygamma", "sinc_derivative", "ive")]  # (orders: constants)
CONSTANTS = [0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e300, math.inf, -math.inf, math.nan]
# Ops whose overflow (a finite value too large) the ranges count as finite, as the op table's ``finite``.
OVERFLOWING = {"add", "sub", "mul"}


@st.composite
def raw_graphs(draw, max_ops: int = 12) -> sg.Expr:
    pool: list = list(VARS)
    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(NAMES))
        args = [draw(st.sampled_from(pool)) if draw(st.integers(0, 3)) else draw(st.sampled_from(CONSTANTS))
                for _ in range(ops.OPS[name].arity)]
        if all(not isinstance(a, sg.Expr) for a in args):
            args[0] = pool[-1]
        pool.append(ops.OPS[name](*args))
    return pool[-1]


POINTS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-300, -1e-300, 700.0, -710.0, 1e5, -1e5, 1e300,
                   -1e300, 2.0 ** -1074, 0.25, 7.0, -3.75, 40.0])


def _check(expr: sg.Expr, x0: np.ndarray, x1: np.ndarray) -> None:
    order = topo_order([expr])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        values = sg.evaluate(order, {VARS[0]: x0, VARS[1]: x1})
    memo: dict = {}
    tainted: set = set()  # (a convention's overflow under it: not checked)
    for node, v in zip(order, values):
        r = range_of(node, memo)
        v = np.broadcast_to(np.asarray(v, dtype=float), x0.shape)
        if any(a in tainted for a in node.args) or node.op.name in OVERFLOWING and np.isinf(v).any() \
                and not r.inf:
            tainted.add(node)
            continue
        nan, inf = np.isnan(v), np.isinf(v)
        assert r.nan or not nan.any(), (node, r, v)
        assert r.inf or not inf.any(), (node, r, v)
        assert all(r.may_be(float(u)) for u in v[inf]), (node, r, v)
        finite = v[~nan & ~inf]
        assert ((finite >= r.lo) & (finite <= r.hi)).all(), (node, r, v)


@settings(max_examples=int(__import__("os").environ.get("RANGE_EXAMPLES", 400)), deadline=None)
@given(raw_graphs(), st.permutations(range(len(POINTS))))
def test_every_value_lies_in_its_range(expr, order):
    _check(expr, POINTS, POINTS[list(order)])


def test_ranges_of_what_the_lstm_gradient_guards():
    """A sigmoid's and a tanh's partials, a comparison of index arithmetic and a where of constants are
    finite; exp and log (and 1 / exp) are not."""
    z, k = sg.Var("z"), sg.index("k", 56)
    sigmoid = 1 / (1 + sg.exp(-z))
    assert not range_of(-1 / (1 + sg.exp(-z)) ** 2).bad and not range_of(sigmoid * (1 - sigmoid)).bad
    assert not range_of(1 - sg.tanh(z / (1 + sg.exp(z))) ** 2).bad
    assert not range_of(sg.where(k // 14 < 1, 1.0, 0.0)).bad and range_of(k % 14)[:2] == (0.0, 14.0)
    assert range_of(sg.exp(z)).inf and range_of(sg.log(z)).nan and range_of(1 / sg.exp(z)).inf
    assert range_of(sg.sin(sg.exp(z))).nan and not range_of(sg.tanh(sg.exp(z))).bad


@pytest.mark.parametrize("backend", ["vm", "c"])
def test_a_masked_sigmoid_has_a_finite_gradient_without_guards(backend):
    """A where's branch not taken holds a sigmoid of a huge value: its exp overflows, and the product of the
    mask's 0 with exp's inf stays guarded (0), while the products by the sigmoid's bounded partials are
    not guarded at all; the gradient is the interpreter's and finite differences'."""
    def f(x):
        s = 1 / (1 + np.exp(-x))
        return np.sum(np.where(x > -50, s * (1 - s) * np.tanh(s * x), 0.0))

    x = np.array([-1000.0, -2.0, 0.0, 1.5, 800.0])
    grad = sg.jit(sg.grad(f), backend=backend)
    got = grad(x)
    assert np.isfinite(got).all() and got[0] == 0.0
    h = 1e-6
    for i in range(1, 5):
        e = np.zeros(5)
        e[i] = h
        assert got[i] == pytest.approx((f(x + e) - f(x - e)) / (2 * h), rel=1e-5, abs=1e-9)
    guards = str(grad.derivatives).count("< inf")
    assert guards <= 2, grad.derivatives


def _scanned(x):
    return lax.scan(lambda c, xi: (np.where(xi > 0, np.exp(-xi ** 3) * c, c),) * 2, 1.0, x)[0]


MASKED_OVERFLOWS = {  # (an independent tester's: where the mask is off, a power or a quotient overflows)
    "power": (lambda x: np.where(x > 0, np.exp(-x ** 3), 1.0), (1e200,), (0,)),
    "reciprocal": (lambda x: np.where(x > 0, 1 / (1 + x ** 3), 0.0), (1e200,), (0,)),
    "untaken": (lambda y: np.exp(np.where(y < 0, np.log(y ** 2 * y), -1.0)), (1e300,), (0,)),
    "quotient": (lambda x, y: np.where(y < -1, x / (np.maximum(y, 0.0) + 1e-12) / x, 0.0), (1e300, 0.0), (0, 1)),
    "array": (lambda x: np.sum(np.where(x > 0, np.exp(-x ** 3), 1.0)), (np.array([1e200, 1.0]),), (0,)),
    "scan": (_scanned, (np.array([1.0, 1e200, 0.5]),), (0,)),
    "fori": (lambda x: lax.fori_loop(0, 3, lambda i, c: np.where(c > 0, np.exp(-c ** 3), c), x), (1e200,), (0,)),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", sorted(MASKED_OVERFLOWS))
def test_a_partial_that_may_overflow_stays_guarded(name):
    """x**3 of 1e200 is inf, and so are 1e300 / 1e-12 and exp's; where the mask is off the adjoint is 0, and
    0 * inf must not bring a nan into the gradient: each gradient is NumPy's finite slope (autograd's, by
    differences away from the point), on the interpreter and the loop VM."""
    f, args, argnums = MASKED_OVERFLOWS[name]
    with np.errstate(all="ignore"):
        for grad in (sg.grad(f, argnums=argnums), sg.jit(sg.grad(f, argnums=argnums), backend="vm")):
            got = grad(*args)
            got = np.concatenate([np.ravel(g) for g in (got if isinstance(got, tuple) else (got,))])
            assert np.isfinite(got).all(), (name, got)
            if name == "array":
                assert got[0] == 0.0 and got[1] == pytest.approx(-3 * np.exp(-1.0), rel=1e-12)
            elif name == "scan":
                assert np.allclose(got, 0.0, atol=1e-300) and got[1] == 0.0
            else:
                assert np.all(got == 0.0), (name, got)


def test_a_masked_power_s_second_derivative_stays_guarded():
    with np.errstate(all="ignore"):
        assert sg.hessian(lambda x: np.where(x > 0, np.exp(-x ** 3), 1.0))(1e200) == 0.0
