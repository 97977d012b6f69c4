"""Graphs 10**6 deep: every walk is iterative (no RecursionError), and memory is given back."""

import gc
import math

import pytest
from sympy_ref import close

import symgrad as sg
from symgrad.expr.node import table_size
from symgrad.expr.traverse import to_flat

x, y = sg.symbols("x y")


def test_million_term_sum_built_left_to_right():
    gc.collect()
    before = table_size()
    with sg.expr.node.paused_gc():
        s = sg.const(0.0)
        for i in range(1, 10**6 + 1):
            s = s + x * (i % 7) if i % 2 else s + y
    assert table_size() > before + 900_000
    gx, gy = sg.grad(s, [x, y])
    assert sg.evaluate([s, gx, gy], {x: 0.5, y: 2.0}) == [
        pytest.approx(0.5 * sum(i % 7 for i in range(1, 10**6 + 1, 2)) + 2.0 * 500_000), sum(
            i % 7 for i in range(1, 10**6 + 1, 2)), 500_000.0]
    text = str(s)  # like terms gathered as printed (the graph keeps its 10**6 nodes)
    assert text == f"{sum(i % 7 for i in range(1, 10**6 + 1, 2))}*x + 500000*y"
    assert len(to_flat(s)[0]) == sg.count_nodes(s)
    del s, text
    gc.collect()
    assert table_size() < before + 100


def test_ten_thousand_step_recurrence():
    """a, b = sin(a)*b + a, cos(b)*a - b, 10**4 times: gradient against finite differences."""
    a, b = x, y
    for _ in range(10**4):
        a, b = sg.sin(a) * b + a, sg.cos(b) * a - b
    f = sg.tanh(a * 1e-3) + sg.tanh(b * 1e-3)
    report = sg.check_grad(f, [x, y], [0.3, -0.2], rtol=1e-4)
    assert report.status == ["ok", "ok"], str(report)
    assert sg.latex(f).count("=") > 1  # large: shared nodes are named, not repeated
    assert math.isfinite(report.value)


def test_deep_chain_through_functions():
    s = x
    for _ in range(50_000):
        s = sg.sin(s) * 0.5 + y
    g = sg.grad(s, [x, y])
    h = sg.jvp(s, [x, y], [0.0, 1.0])
    gx, gy, jy = sg.evaluate([*g, h], {x: 0.4, y: 0.1})
    assert close(gy, jy, rtol=1e-12)
    assert 0 < gy < 2.1 and gx == 0.0  # x's influence vanishes after 50000 contractions (underflow)


def test_a_long_loop_through_a_mask_keeps_its_adjoint_one_where_deep():
    """h = tanh(h * where(x > 0.1, sqrt(x), 0) + c), unrolled 3000 times: each step's adjoint passes
    the mask (and a guard against its nan partial); nested wheres merge, so nothing recurses down a
    tower of them (a RecursionError at about 100 steps, found by the fuzzer)."""
    import numpy as np

    def f(v):
        x, r = v[0], v[1]
        m = np.where(x > 0.1, np.sqrt(x), 0.0)
        h = x
        for k in range(3000):
            h = np.tanh(h * m + r * 0.01 * (k % 3))
        return h

    for v in (np.array([1.5, 0.2]), np.array([0.05, 0.2])):
        fd = [(f(v + e) - f(v - e)) / 2e-7 for e in 1e-7 * np.eye(2)]
        assert sg.grad(f, backend="python")(v) == pytest.approx(fd, rel=1e-6, abs=1e-9)
