"""Long loop kernels split into pieces compiled one by one (symgrad.compile.pieces): the split
kernels compute what the whole ones and the interpreter compute."""

import numpy as np
import pytest
import symgrad.numpy as jnp

import symgrad as sg
from symgrad.compile import pieces
from symgrad.compile.loop_program import LoopProgram

RNG = np.random.default_rng(7)


def test_an_accumulator_started_in_one_piece_and_summed_in_the_next_travels_through_sc():
    body = ["a1 = 0.0", "for i2 in range(3):", "    a1 = a1 + x[i2]", "return a1"]
    parts, floats, ints = pieces.split(body, set(), size=1)
    assert parts[0] == ["a1 = 0.0", "sc[0] = a1", "return 0.0"]
    assert parts[1] == ["a1 = sc[0]", "for i2 in range(3):", "    a1 = a1 + x[i2]", "sc[0] = a1", "return 0.0"]
    assert parts[2] == ["a1 = sc[0]", "return a1"]
    assert (floats, ints) == (1, 0)


def test_integers_travel_through_si_and_views_come_with_the_arrays_they_read():
    body = ["b1 = x[0:6].reshape((2, 3))", "c2 = b1.reshape((6,))", "v3 = (2 + 1)", "v4 = c2[v3]",
            "return v4 + c2[0]"]
    parts, floats, ints = pieces.split(body, {"v3"}, size=3)
    views = ["b1 = x[0:6].reshape((2, 3))", "c2 = b1.reshape((6,))"]
    assert parts == [[*views, "v3 = (2 + 1)", "si[0] = v3", "return 0.0"],
                     [*views, "v3 = si[0]", "v4 = c2[v3]", "return v4 + c2[0]"]]
    assert (floats, ints) == (0, 1)


def test_names_of_a_loop_body_are_not_spilled():
    body = ["for i1 in range(2):", "    v2 = x[i1]", "    out[i1] = v2", "for i3 in range(2, 4):",
            "    v2 = x[i3]", "    out[i3] = v2", "return 0.0"]
    parts, floats, ints = pieces.split(body, set(), size=1)
    assert (floats, ints) == (0, 0) and not any("sc[" in line for part in parts for line in part)


@pytest.mark.parametrize("size", [1, 9])
def test_split_kernels_agree_with_whole_ones_and_the_interpreter(size):
    """Kernels split into pieces of ``size`` lines (each piece a Numba function compiled on its own, 0.3 s
    or more: the recurrence in pieces of one line only where its kernel is short, the forward pass)."""
    def rnn(w, x):
        def step(h, xt):
            h = np.tanh(w @ h + xt)
            return h, np.sum(h * h)
        h, ys = sg.lax.scan(step, np.zeros(8), x)
        return np.sum(ys) + np.max(h)

    def gathers(x):
        p = np.argsort(np.sin(np.arange(80.0)))
        y = np.minimum(x[p], x) * x
        z = jnp.zeros(80).at[p % 7].add(y)
        return np.sum(z ** 2) + np.sum(np.cumsum(x) * x)

    w, x = RNG.normal(size=(8, 8)) * 0.4, RNG.normal(size=(70, 8))
    cases = [(rnn, (0, 1), (w, x)), (gathers, 0, (RNG.normal(size=80),))]
    if size == 1:
        forward = sg.jit(rnn, backend="python")(w, x)
        with pieces.sized(0, 1):
            run = sg.jit(rnn, backend="numba")
            assert run(w, x) == pytest.approx(forward, rel=1e-12) and "def piece1(" in run.compiled.source
        cases = cases[1:]
    for f, argnums, args in cases:
        want_v, want_g = sg.value_and_grad(f, argnums=argnums, backend="python")(*args)
        with pieces.sized(0, size):
            vg = sg.value_and_grad(f, argnums=argnums, backend="numba")
            v, g = vg(*args)
        assert vg.compiled.backend == "numba" and "def piece1(" in vg.compiled.source
        assert isinstance(vg.compiled.program, LoopProgram)
        np.testing.assert_allclose(v, want_v, rtol=1e-12)
        for a, b in zip([g] if argnums == 0 else g, [want_g] if argnums == 0 else want_g):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_batch_and_sum_run_a_split_kernel_row_by_row():
    x, i = sg.array("x", 100), sg.index("i", 99)
    t = sg.Var("t")
    f = sg.sum(sg.tanh(x[i] * x[i + 1] * t), i)
    X, P = RNG.normal(size=(3, 100)), RNG.normal(size=(3, 1))
    want = sg.value_and_grad(f, [x], params=[t], backend="python")
    with pieces.sized(0, 2):
        vg = sg.value_and_grad(f, [x], params=[t], backend="numba")
    assert "def piece2(" in vg.source
    for got, expected in zip(vg.batch(X, P), want.batch(X, P)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    for got, expected in zip(vg.sum(X[0], P), want.sum(X[0], P)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_a_table_entry_computed_in_one_piece_travels_as_an_integer():
    """A gather through a table of indices (``x[7 * arange(n) % n]``): the table's entry, read at the top
    level of one piece and used as an address in the next, travels through ``si`` (found by the fuzzer:
    spilled as a float, the next piece failed to compile)."""
    def f(x):
        return np.sum(np.minimum.accumulate(x[7 * np.arange(x.shape[0]) % x.shape]))

    x = np.random.default_rng(66950515).normal(size=64)
    want = sg.value_and_grad(f, backend="python")(x)
    with pieces.sized(0, 1):
        got = sg.value_and_grad(f, backend="numba")(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13, atol=1e-15)
