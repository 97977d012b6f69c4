"""Models built from scalars (sg.vector, Python loops) rolled back into loops (symgrad.expr.reroll):
the rolled value and gradient equal the scalar graph's."""

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compile.loop_program import LoopProgram
from symgrad.expr.reroll import MIN_TERMS, reroll

RNG = np.random.default_rng(11)


def _scalar_reference(f, xs, v):
    """The value and gradient of the scalar graph itself (a straight-line program, not rerolled)."""
    xs = list(xs)
    return sg.compile([f, *sg.grad(f, xs)], xs, backend="vm")(v)


def test_a_spring_chain_built_from_scalars_compiles_as_one_loop():
    n = 400
    q = sg.vector("q", n)
    f = sum((sg.sqrt((q[2 * i + 2] - q[2 * i]) ** 2 + (q[2 * i + 3] - q[2 * i + 1]) ** 2) - 1.0) ** 2
            for i in range(n // 2 - 1))
    vg = sg.value_and_grad(f, q, backend="vm")
    assert isinstance(vg.program, LoopProgram) and vg.n_ops < 40  # (not 199 copies of the term)
    v = RNG.normal(size=n)
    value, gradient = vg(v)
    want = _scalar_reference(f, q, v)
    np.testing.assert_allclose(value, want[0], rtol=1e-12)
    np.testing.assert_allclose(gradient, want[1:], rtol=1e-12, atol=1e-12)
    pts = v.reshape(-1, 2)
    lengths = np.linalg.norm(pts[1:] - pts[:-1], axis=1)
    np.testing.assert_allclose(value, np.sum((lengths - 1.0) ** 2), rtol=1e-12)


def test_families_leftovers_other_inputs_and_params_each_keep_their_place():
    n = 150
    x, y, a, t = sg.vector("x", n), sg.vector("y", n), sg.Var("a"), sg.Var("t")
    p5 = sum(sg.sin(x[i] * x[i + 1]) * sg.exp(-x[i] ** 2) + sg.log(1.0 + x[i] ** 2) for i in range(n - 1))
    # the other operand order every other term (a canonical order that ties on alike shapes)
    coupled = sum((y[i] * x[i] if i % 2 else x[i] * y[i]) * t for i in range(0, n, 2))
    f = p5 + coupled + a * x[0] + x[5] ** 3 + sum(y[i] ** 2 for i in range(10))  # too few to roll: as they are
    inputs = [*x, a, *y]
    vg = sg.value_and_grad(f, inputs, params=[t], backend="vm")
    assert isinstance(vg.program, LoopProgram)
    v, p = RNG.normal(size=2 * n + 1), np.array([0.7])
    value, gradient = vg(v, p)
    want = sg.compile([f, *sg.grad(f, inputs)], inputs, params=[t], backend="vm")(v, p)
    np.testing.assert_allclose(value, want[0], rtol=1e-12)
    np.testing.assert_allclose(gradient, want[1:], rtol=1e-11, atol=1e-12)


def test_what_does_not_roll_is_left_alone():
    x = sg.vector("x", 200)
    few = sum(x[i] * x[i + 1] for i in range(MIN_TERMS - 1))
    assert reroll(few, list(x)) is None
    assert reroll(sum(x[i] ** 2 for i in range(100)), [sg.Var("z"), *x[::-1]]) is None  # not a vector in order
    scattered = sum(x[(7 * i) % 200] * x[(7 * i + 3) % 200] for i in range(100))  # no constant step
    assert reroll(scattered, list(x)) is None


_OPS = [lambda a, b: a * b, lambda a, b: a - b, lambda a, b: sg.sin(a) + b, lambda a, b: a / (1.0 + b * b),
        lambda a, b: sg.exp(-a * a) * b, lambda a, b: sg.tanh(a + 2.0 * b)]


@settings(max_examples=25, deadline=None)
@given(offsets=st.lists(st.integers(0, 3), min_size=2, max_size=4), ops=st.lists(st.integers(0, 5), min_size=1,
       max_size=4), step=st.sampled_from([1, 2, 3]), count=st.integers(MIN_TERMS - 2, MIN_TERMS + 40),
       gap=st.integers(0, 120), seed=st.integers(0, 2**16))
@example(offsets=[0, 0], ops=[1, 1, 1], step=1, count=64, gap=0, seed=0)  # (-x[i] - x[i]: each term twice)
def test_random_stencils_roll_to_the_same_value_and_gradient(offsets, ops, step, count, gap, seed):
    """Terms of random shape over entries at random offsets, at bases stepping by 1-3 with a gap
    somewhere (two runs, or one run and leftovers): the value and gradient of the scalar graph."""
    n = step * (count + 1) + 4
    x = sg.vector("x", n)

    def term(b):
        e = x[b + offsets[0]]
        for k, op in enumerate(ops):
            e = _OPS[op](e, x[b + offsets[(k + 1) % len(offsets)]])
        return e

    bases = [step * i + (1 if i >= gap else 0) for i in range(count)]
    bases = [b for b in bases if b + max(offsets) < n]
    f = sum(term(b) for b in bases)
    first = min(gap, len(bases))
    if max(first, len(bases) - first) >= MIN_TERMS and sg.expr.traverse.free_variables(term(0)):
        assert reroll(f, list(x)) is not None  # (else the comparison below would test nothing new)
    v = np.random.default_rng(seed).normal(size=n) * 0.5
    want = _scalar_reference(f, x, v)
    got = sg.value_and_grad(f, x, backend="vm")(v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(got[1], want[1:], rtol=1e-10, atol=1e-10)
