"""Long loop kernels split into pieces compiled one by one (symgrad.compile.pieces): the split
kernels compute what the whole ones and the interpreter compute."""

import re

import numpy as np
import pytest
import symgrad.numpy as jnp

import symgrad as sg
from symgrad.compile import pieces
from symgrad.compile.loop_program import LoopProgram

RNG = np.random.default_rng(7)


def rnn(w, x):
    def step(h, xt):
        h = np.tanh(w @ h + xt)
        return h, np.sum(h * h)
    h, ys = sg.lax.scan(step, np.zeros(8), x)
    return np.sum(ys) + np.max(h)


def test_an_accumulator_started_in_one_piece_and_summed_in_the_next_travels_through_sc():
    body = ["a1 = 0.0", "for i2 in range(3):", "    a1 = a1 + x[i2]", "return a1"]
    cut = pieces.split(body, set(), size=1)
    parts, floats, ints = cut.pieces, cut.floats, cut.ints
    assert parts[0] == ["a1 = 0.0", "sc[0] = a1", "return 0.0"]
    assert parts[1] == ["a1 = sc[0]", "for i2 in range(3):", "    a1 = a1 + x[i2]", "sc[0] = a1", "return 0.0"]
    assert parts[2] == ["a1 = sc[0]", "return a1"]
    assert (floats, ints) == (1, 0)


def test_integers_travel_through_si_and_views_come_with_the_arrays_they_read():
    body = ["b1 = x[0:6].reshape((2, 3))", "c2 = b1.reshape((6,))", "v3 = (2 + 1)", "v4 = c2[v3]",
            "return v4 + c2[0]"]
    cut = pieces.split(body, {"v3"}, size=3)
    views = ["b1 = x[0:6].reshape((2, 3))", "c2 = b1.reshape((6,))"]
    assert cut.pieces == [[*views, "v3 = (2 + 1)", "si[0] = v3", "return 0.0"],
                          ["v3 = si[0]", *views, "v4 = c2[v3]", "return v4 + c2[0]"]]
    assert (cut.floats, cut.ints) == (0, 1)
    assert cut.driver == ["piece0(x, p, out, work, sc, si)", "return piece1(x, p, out, work, sc, si)"]


def test_names_of_a_loop_body_are_not_spilled():
    body = ["for i1 in range(2):", "    v2 = x[i1]", "    out[i1] = v2", "for i3 in range(2, 4):",
            "    v2 = x[i3]", "    out[i3] = v2", "return 0.0"]
    cut = pieces.split(body, set(), size=1)
    assert (cut.floats, cut.ints) == (0, 0) and not any("sc[" in line for part in cut.pieces for line in part)


@pytest.mark.parametrize("size", [1, 9])
def test_split_kernels_agree_with_whole_ones_and_the_interpreter(size):
    """Kernels split into pieces of ``size`` lines (each piece a Numba function compiled on its own, 0.3 s
    or more: the recurrence in pieces of one line only where its kernel is short, the forward pass)."""
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


def _run(body: list[str], cut: pieces.Split | None, x: np.ndarray) -> tuple[float, np.ndarray]:
    """The kernel ``body`` run as Python on ``x`` (whole, or as the pieces and driver of ``cut``): its value
    and workspace and output."""
    names = {"np": np, "math": __import__("math")}
    if cut is None:
        exec("def kernel(x, p, out, work):\n" + "\n".join("    " + line for line in body), names)
    else:
        for k, piece in enumerate(cut.pieces):
            exec(f"def piece{k}(x, p, out, work, sc, si):\n" + "\n".join("    " + line for line in piece), names)
        exec("def kernel(x, p, out, work):\n    sc, si = np.zeros(9), np.zeros(9, dtype=np.int64)\n"
             + "\n".join("    " + line for line in cut.driver), names)
    work, out = np.zeros(40), np.zeros(1)
    return names["kernel"](x, np.zeros(1), out, work), np.concatenate([work, out])


# A scan's loop as loop_source writes one: its counter counted down through a max, rows of the carries as
# views made at the top of the step, a scalar the step reads from the step before, an accumulator summed
# inside a nest and read after the loop, a view of the last step read after it, an accumulator read only in
# the step (found by the fuzzer: not stored for the next step).
LOOP = ["t1 = work[0:30].reshape((3, 10))", "v2 = 1.5", "a3 = 0.0", "a13 = 0.0",
        "for i4 in range(3):",
        "    i5 = max(2 - i4, -40)",
        "    b6 = t1[i5]",
        "    v7 = v2 * 0.5",
        "    for i8 in range(10):",
        "        b6[i8] = x[i8] * v7 + b6[i8]",
        "    b9 = t1[max(i5 - 1, 0)]",
        "    for i10 in range(10):",
        "        a3 = a3 + b6[i10] * b9[i10]",
        "    v2 = v7 + b6[3]",
        "    for i11 in range(10):",
        "        b9[i11] = b9[i11] - v2",
        "    a13 = a13 + b9[4]",
        "    out[0] = a13 * 2.0",
        "v12 = b6[2] + b9[1]",
        "return a3 + v12 + v2"]


@pytest.mark.parametrize("size", range(1, 10))
def test_a_long_loop_cut_into_pieces_computes_what_the_whole_one_computes(size):
    x = RNG.normal(size=10)
    cut = pieces.split(LOOP, set(), size=size, loops=True)
    assert any(line.startswith("for i4 in range(3):") for line in cut.driver)
    assert "    si[0] = i4" in cut.driver  # (the counter, where the step's pieces read it)
    want, got = _run(LOOP, None, x), _run(LOOP, cut, x)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    flat = pieces.split(LOOP, set(), size=size)  # (Numba's pieces: the loop whole, in one piece)
    assert not any(line.startswith("for") for line in flat.driver)


def test_a_loop_of_scalar_lines_is_not_cut_and_a_steps_pieces_each_hold_a_loop():
    """A piece called in every step does a loop's work: a loop over rows of scalar lines (a bundle adjustment's
    residuals) stays whole; a scan's step is cut after its loops."""
    rows = ["for i1 in range(100):", *(f"    v{k} = x[i1] * {k}.0" for k in range(2, 40)), "    out[i1] = v39",
            "return 0.0"]
    assert not any(line.startswith("    piece") for line in pieces.split(rows, set(), size=2, loops=True).driver)
    cut = pieces.split(LOOP, set(), size=1, loops=True)
    inside = [line.split("(")[0].strip() for line in cut.driver if line.startswith("    piece")]
    assert len(inside) == 4
    for name in inside[:-1]:
        assert any(line.startswith("for ") for line in cut.pieces[int(name[5:])])


def test_a_loop_whose_step_reads_an_array_a_later_piece_makes_is_not_cut():
    """The row ``b3`` is made after its first reader in the step: the reader reads the step before's, which a
    piece making its views anew would not see."""
    body = ["t1 = work[0:20].reshape((2, 10))", "b3 = t1[0]", "for i2 in range(2):", "    out[0] = b3[0]",
            "    b3 = t1[i2]", "    b3[1] = 2.0", "return 0.0"]
    cut = pieces.split(body, set(), size=1, loops=True)
    assert not any(line.startswith("    piece") for line in cut.driver)


def test_a_sorts_row_stays_in_the_piece_that_makes_it():
    """A sort's row and positions (np.empty, np.argsort) are not views: the statements reading them stay in
    the piece making them (in pieces of one line, a later piece read a row it never made)."""
    def f(x):
        return np.sum(np.sort(x * 2.0) * np.arange(70.0))

    x = RNG.normal(size=70)
    want = sg.grad(f, backend="python")(x)
    for backend in ("numba", "c"):
        with pieces.sized(0, 1):
            g = sg.grad(f, backend=backend)
            np.testing.assert_array_equal(g(x), want)
        assert "piece1" in g.compiled.source


def test_a_scans_step_cut_into_c_functions_gives_the_whole_kernels_bits():
    """A scan's loop over its steps, cut into C functions called in turn inside it (pieces.split's loops):
    the same bits as the kernel whole, the loop VM's and the interpreter's values."""
    w, x = RNG.normal(size=(8, 8)) * 0.4, RNG.normal(size=(70, 8))
    whole = sg.value_and_grad(rnn, argnums=(0, 1), backend="c")
    want = whole(w, x)
    with pieces.sized(0, 4):
        cut = sg.value_and_grad(rnn, argnums=(0, 1), backend="c")
        got = cut(w, x)
    driver = cut.compiled.source.split("static double sg_kernel(")[1].split("\n}")[0]
    assert re.search(r"for \(i\d+ = 0; i\d+ < 70; i\d+ \+= 1\) \{\n\s+si\[\d+\] = i\d+;\n\s+sg_piece", driver)
    vm = sg.value_and_grad(rnn, argnums=(0, 1), backend="vm")(w, x)
    assert got[0] == want[0] and all(np.array_equal(a, b) for a, b in zip(got[1], want[1]))
    np.testing.assert_allclose(got[0], vm[0], rtol=1e-13)
    for a, b in zip(got[1], vm[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
