"""symgrad.compile: every backend against the interpreter, the Program, the call path's errors."""

import itertools
import math
import subprocess
import sys
import threading

import numpy as np
import pytest
from backends import agree, agree_sum, reference
from graphs import VARS, dags, points
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compile.lower import lower
from symgrad.compile.program import STORE
from symgrad.expr import ops

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
NAMES = [v.name for v in VARS]
COMPILED = ["numba", "vm"]
x, y, z = sg.symbols("x y z")


def every_op_and_its_gradient() -> list:
    """Each op on (x, y, z) and its partials, plus the powers lowering rewrites."""
    outs = []
    for op in ops.FUNCTIONS.values():
        if op.arity:
            e = op(*[x, y, z][: op.arity])
            outs += [e, *sg.grad(e, [x, y, z][: op.arity])]
    return outs + [x**2, x**3, x**-2, x**-3, x**7, x**0.5, x**-0.5, y**16, x**-16, x**2.5]


SPECIAL = [-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, math.nan, math.inf, -math.inf]
GRID = np.array(list(itertools.product(SPECIAL, repeat=3)))


@pytest.mark.parametrize("backend", COMPILED)
def test_every_op_on_special_values_matches_the_interpreter(backend):
    outs = every_op_and_its_gradient()
    f = sg.compile(outs, [x, y, z], backend=backend)
    ref = reference(outs, "xyz", GRID)
    assert agree(f.batch(GRID), ref, rtol=1e-15)
    for i in range(0, len(GRID), 37):  # the single-point kernel too
        assert agree(f(GRID[i]), ref[i], rtol=1e-15)


@pytest.mark.parametrize("backend", [*COMPILED, "python"])
def test_kinds_of_function(backend):
    f = x * y + sg.sin(x)
    fn = sg.compile(f, [x, y], backend=backend)
    assert fn([2.0, 3.0]) == pytest.approx(6.909297426825682, rel=1e-15) and isinstance(fn([2.0, 3.0]), float)
    vg = sg.value_and_grad(f, [x, y], backend=backend)
    value, g = vg(np.array([2.0, 3.0]))
    assert value == pytest.approx(6.909297426825682, rel=1e-15)
    assert np.allclose(g, [3.0 + math.cos(2.0), 2.0], rtol=1e-15, atol=0)
    buf = np.zeros(2)
    assert vg([2.0, 3.0], out=buf) == pytest.approx(value, rel=1e-15) and np.array_equal(buf, g)
    H = sg.compile(sg.hessian(f, [x, y]), [x, y], backend=backend)
    assert np.allclose(H([2.0, 3.0]), [[-math.sin(2.0), 1.0], [1.0, 0.0]], rtol=1e-15, atol=0)
    out = np.zeros((2, 2))
    assert H([2.0, 3.0], out=out) is out and out[0, 1] == 1.0
    vec = sg.compile([x, 2.0, x * y], [x, y], backend=backend)  # an input and a constant as outputs
    assert np.array_equal(vec([2.0, 3.0]), [2.0, 2.0, 6.0])


@pytest.mark.parametrize("backend", [*COMPILED, "python"])
def test_params_batch_and_sum(backend):
    a, b = sg.symbols("a b")
    loss = (a * sg.exp(-b * x) - y) ** 2  # a model a*exp(-b t) against data (t, y) = params
    vg = sg.value_and_grad(loss, [a, b], params=[x, y], backend=backend)
    rng = np.random.default_rng(1)
    P = rng.uniform(0, 2, size=(3001, 2))
    theta = np.array([1.5, 0.7])
    v, g = vg(theta, P[0])
    ref = reference([loss, *sg.grad(loss, [a, b])], ["a", "b", "x", "y"], np.c_[np.tile(theta, (3001, 1)), P])
    assert agree([v, *g], ref[0])
    total, gsum = vg.sum(theta, P)
    assert agree_sum([total, *gsum], ref, rtol=1e-12)
    V, G = vg.batch(np.tile(theta, (3001, 1)), P)  # params per row
    assert agree(np.c_[V, G], ref)
    V1, G1 = vg.batch(rng.uniform(0, 2, size=(5, 2)), P[0])  # one params row for all points
    assert V1.shape == (5,) and G1.shape == (5, 2)
    H = sg.compile(sg.hessian(loss, [a, b]), [a, b], [x, y], backend=backend)
    assert H.batch(np.tile(theta, (4, 1)), P[:4]).shape == (4, 2, 2)
    assert np.allclose(H.sum(theta, P[:4]), sum(H(theta, p) for p in P[:4]), rtol=1e-13)


def test_nan_safe_where_in_every_backend():
    f = sg.where(x > 0, sg.sqrt(x), 0.0)
    for backend in [*COMPILED, "python"]:
        vg = sg.value_and_grad(f, [x], backend=backend)
        value, g = vg([-1.0])
        assert value == 0.0 and g[0] == 0.0, backend
        assert vg([4.0])[1][0] == 0.25
        assert np.array_equal(vg.batch(np.array([[-1.0], [4.0]]))[1][:, 0], [0.0, 0.25])


@settings(max_examples=150, **SETTINGS)
@given(dags(), points, st.sampled_from([0.0, math.nan, math.inf, -math.inf, 1e300, -0.0]))
def test_vm_matches_the_interpreter_on_random_graphs(f, p, special):
    outs = [f, *sg.grad(f, VARS)]
    vg = sg.value_and_grad(f, VARS, backend="vm")
    X = np.array([p, [special, p[1], p[2]], [p[0], special, -p[2]]])
    ref = reference(outs, NAMES, X)
    value, g = vg(X[0])
    assert agree([value, *g], ref[0]), str(f)
    V, G = vg.batch(X)
    assert agree(np.c_[V, G], ref), str(f)
    fx = sg.value_and_grad(f, VARS[1:], params=VARS[:1], backend="vm")  # x0 as data: a sum over rows
    rows = np.array([[p[0]], [p[0] + 0.5], [special]])
    ref_rows = reference([f, *sg.grad(f, VARS[1:])], NAMES, np.c_[rows, np.tile(p[1:], (3, 1))])
    total, gsum = fx.sum(p[1:], rows)
    assert agree_sum([total, *gsum], ref_rows), str(f)


@settings(max_examples=4, **SETTINGS)
@given(st.lists(dags(), min_size=6, max_size=6), points)
def test_numba_kernels_match_the_interpreter_on_random_graphs(fs, p):
    # Several graphs in one program: one Numba compile checks them all.
    outs = [e for f in fs for e in (f, *sg.grad(f, VARS))]
    fn = sg.compile(outs, VARS, backend="numba")
    X = np.array([p, [math.nan, *p[1:]], [p[0], math.inf, p[2]], [-p[0], p[1], -math.inf]])
    ref = reference(outs, NAMES, X)
    assert agree(fn(X[0]), ref[0])
    assert agree(fn.batch(X), ref)
    fp = sg.compile(outs, VARS[1:], params=VARS[:1], backend="numba")
    assert agree_sum(fp.sum(p[1:], X[:, :1]), reference(outs, NAMES, np.c_[X[:, :1], np.tile(p[1:], (4, 1))]))


def test_program_lowering():
    prog = lower([x**5 * y**-3, sg.stop_gradient(x) * 2.0, x**0.5], [x], [y])
    names = [list(ops.OPS)[op] if op < len(ops.OPS) else "load/store" for op in prog.code[:, 0]]
    assert "pow" not in names and names.count("mul") == 3 + 2 + 1 + 1 and names.count("div") == 1
    assert "sqrt" in names and "stop_gradient" not in names
    assert prog.n_out == 3 and not prog.returns_value and prog.n_ops == 9
    assert sorted(prog.consts) == [1.0, 2.0]  # 1.0 for the negative power; exponents are not loaded
    assert (prog.code[:, 0] == STORE).sum() == 3
    chain = x
    for _ in range(1000):
        chain = sg.sin(chain) + chain
    assert lower(chain, [x]).n_slots <= 3  # slots are reused once dead
    dead = lower([x + 1], [x, y])  # y unused: no load
    assert len(dead) == 4 and "x[1]" not in str(dead)
    assert lower([x * y + 1], [x, y]).key == lower([y * x + 1], [x, y]).key != lower([x * y + 1], [y, x]).key


def test_program_printout_and_attributes():
    vg = sg.value_and_grad(x * y + sg.sin(x), [x, y], backend="vm")
    text = str(vg.program)
    assert text.startswith("{ lambda x[2] = (x, y).") and "sin s0" in text and "cos s0" in text
    assert "return" in text and "out[1]" in text
    assert vg.backend == "vm" and vg.n_ops == 5 and vg.source == text
    fn = sg.compile(x * y + sg.sin(x), [x, y], backend="numba")
    assert "math.sin(v0)" in fn.source and "@numba.njit" in fn.source
    # auto: small graphs get straight-line code (the C compiler's first where there is one, then Numba's)
    assert sg.compile(x * y, [x, y]).backend in ("c", "numba")
    big = sum(sg.sin(x * i + y) for i in range(300))
    assert sg.compile(big, [x, y]).backend == "vm"
    assert "vm:" in repr(sg.compile(big, [x, y]))


def test_same_formula_twice_in_one_process_shares_the_kernel():
    f = x * y + sg.cos(y) * 3.0
    a, b = sg.compile(f, [x, y], backend="numba"), sg.compile(f, [x, y], backend="numba")
    assert a._point is b._point and a([1.0, 2.0]) == b([1.0, 2.0]) == 2.0 + 3.0 * math.cos(2.0)


def test_deep_graph_compiles_on_the_vm():
    e = x
    for i in range(100_000):
        e = e * 0.999999 + 1e-6 * i if i % 2 else sg.sin(e)
    fn = sg.compile(e, [x], backend="vm")
    assert fn([0.3]) == pytest.approx(sg.evaluate(e, {x: 0.3}), rel=1e-12)


@pytest.mark.parametrize("backend", [*COMPILED, "python"])
def test_arguments_are_converted_or_rejected_clearly(backend):
    vg = sg.value_and_grad(x * y, [x, y], params=[z], backend=backend)
    assert vg([2, 3], [1])[0] == 6.0  # integer lists are cast
    assert vg(np.array([2, 3]), np.array([1]))[0] == 6.0
    strided = np.array([2.0, 0.0, 3.0, 0.0])[::2]
    assert vg(strided, [0.0])[0] == 6.0
    readonly = np.array([2.0, 3.0])
    readonly.setflags(write=False)
    assert vg(readonly, [0.0])[0] == 6.0
    assert math.isnan(vg([math.nan, 3.0], [0.0])[0])  # nan propagates
    with pytest.raises(ValueError, match=r"x: expected shape \(2,\) for \['x', 'y'\], got shape \(3,\)"):
        vg([1.0, 2.0, 3.0], [0.0])
    with pytest.raises(TypeError, match="missing params: expected p of shape"):
        vg([1.0, 2.0])
    with pytest.raises(TypeError, match="x: expected real numbers, got list"):
        vg(["a", "b"], [0.0])
    with pytest.raises(TypeError, match="complex"):
        vg([1j, 2.0], [0.0])
    with pytest.raises(ValueError, match=r"out: expected .* shape \(2,\)"):
        vg([1.0, 2.0], [0.0], out=np.zeros(3))
    with pytest.raises(ValueError, match=r"P: expected shape \(1 or 4, 1\)"):
        vg.batch(np.zeros((4, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"X: expected shape \(N, 2\)"):
        vg.batch(np.zeros((4, 3)), np.zeros((4, 1)))
    f1 = sg.compile(sg.sin(x), [x], backend=backend)
    assert f1(0.5) == math.sin(0.5)  # a scalar for a single input
    with pytest.raises(TypeError, match="takes no out array"):
        f1([0.5], out=np.zeros(1))


def test_compile_errors_name_the_culprit():
    with pytest.raises(ValueError, match="depend on variable 'z'"):
        sg.compile(x * z, [x])
    with pytest.raises(ValueError, match="'x' is listed twice"):
        sg.compile(x, [x, x])
    with pytest.raises(ValueError, match="both an input and a param"):
        sg.compile(x, [x], [x])
    with pytest.raises(TypeError, match="must be variables"):
        sg.compile(x, [x * 2])
    with pytest.raises(ValueError, match="backend must be one of"):
        sg.compile(x, [x], backend="gpu")
    with pytest.raises(ValueError, match="one scalar expression"):
        sg.value_and_grad([x, y], [x])


def test_a_formula_without_variables_has_an_empty_gradient():
    x = sg.Var("x")
    value, g = sg.value_and_grad(sg.const(2.0) + 3.0, [])([])
    assert value == 5.0 and isinstance(g, np.ndarray) and g.shape == (0,)
    vg = sg.value_and_grad(sg.sin(x) + 2.0, [], params=[x])
    value, g = vg([], [1.0])
    assert value == math.sin(1.0) + 2.0 and g.shape == (0,)
    assert vg.batch(np.empty((2, 0)), [1.0])[1].shape == (2, 0)


_ZEROS = [(0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 0.0), (math.nan, -0.0), (-0.0, math.nan), (1.0, 1.0),
          (-math.inf, math.inf), (2.0, -3.0)]


def test_signed_zeros_agree_bit_for_bit_in_every_backend():
    """max/min order zeros as IEEE 754-2019 does (-0 < +0, whatever the argument order); relu and sign
    give +0 at -0 as NumPy's sign does; so d|x| at -0.0 is +0 everywhere. Equal values, equal signs
    of every number, nan where NumPy has nan."""
    x, y = sg.symbols("x y")
    exprs = [sg.maximum(x, y), sg.minimum(x, y), sg.relu(x), sg.sign(x), sg.diff(sg.abs(x), x),
             sg.diff(sg.relu(x), x), sg.diff(sg.maximum(x, y), x), np.fmax(x, y), sg.abs(x), sg.softplus(x)]
    compiled = [sg.compile(exprs, [x, y], backend=b) for b in ("numba", "vm", "python")]
    for p in _ZEROS:
        want = np.array([sg.evaluate(e, {x: p[0], y: p[1]}) for e in exprs], dtype=float)
        for f in compiled:
            got = f(np.array(p))
            number = ~np.isnan(want)  # (IEEE 754 leaves a nan result's sign to the machine: operand order)
            assert np.array_equal(got, want, equal_nan=True) and \
                np.array_equal(np.signbit(got[number]), np.signbit(want[number])), (f.backend, p, got, want)
    assert np.signbit([sg.maximum(0.0, -0.0), sg.maximum(-0.0, 0.0)]).tolist() == [False, False]
    assert np.signbit([sg.minimum(0.0, -0.0), sg.minimum(-0.0, 0.0), sg.relu(-0.0), sg.sign(-0.0)]).tolist() \
        == [True, True, False, False]


@pytest.mark.parametrize("arg, error, match", [
    (None, TypeError, "x: expected real numbers, got NoneType None"),
    (["2", "3"], TypeError, r"x: expected real numbers, got list \['2', '3'\]"),
    ([10**400, 3.0], ValueError, "x: a value is too large for a float64"),
    ([[1.0], [2.0, 3.0]], ValueError, "x: expected a rectangular array of real numbers, got list"),
    ("23", TypeError, "x: expected real numbers, got str '23'"),
    ([1 + 2j, 3.0], TypeError, "x: complex values are not supported"),
])
@pytest.mark.parametrize("backend", ["numba", "vm"])
def test_bad_call_arguments_are_named(backend, arg, error, match):
    x, y = sg.symbols("x y")
    vg = sg.value_and_grad(x * y + sg.sin(x), [x, y], backend=backend)
    with pytest.raises(error, match=match):
        vg(arg)
    if arg is not None:
        with pytest.raises(error, match="X: (expected|a value|complex)"):
            vg.batch([arg, arg])


def test_background_compiles_not_started_are_dropped():
    """At a test's end and at the interpreter's exit the queued background compiles are dropped: what
    they would have upgraded goes on running (on the VM), and no compile starts for it."""
    from symgrad.compile import tiers

    x = sg.Var("x")
    gate = threading.Event()
    busy = tiers.worker("numba").submit(gate.wait)  # (the compile thread busy: the upgrade waits its turn)
    c = sg.compile(x * x, [x], backend="vm")._upgrade(("numba", lambda: pytest.fail("a dropped compile ran")))
    tiers.drop_background_compiles()
    gate.set()
    busy.result()
    assert c._final.result() is False and c.backend == "vm" and c(np.array([3.0])) == 9.0


def test_a_script_ends_at_its_last_line_while_a_background_compile_runs():
    """A compile under way when a script ends (minutes for a big kernel, its result unused) is
    abandoned, not awaited: here one that would never finish, and the script exits at once, status 0."""
    script = ("import threading; from symgrad.compile import tiers; "
              "tiers.worker('numba').submit(threading.Event().wait); print('last line')")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "last line", "")
