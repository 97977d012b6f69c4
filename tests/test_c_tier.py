"""The C compiler's tier of tiered compilation (compile/function.py, c_backend.py) where the compiler or its
objects misbehave: a failing or C++ compiler, objects cut short in the cache or not loadable, a pickled
function landing where there is no compiler, the cache's size limit, bad arguments on the C kernels."""

import contextlib
import ctypes
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.compile import c_backend, cache, kernels, loop_vm, tiers
from symgrad.compile.function import Compiled

pytestmark = pytest.mark.skipif(not c_backend.available(), reason="no C compiler")


def _fresh():
    """A loop program no cache holds yet, its argument and its value there."""
    salt = 1.0 + np.random.default_rng().random()
    x, i = sg.array("x", 40), sg.index("i", 39)
    v = np.linspace(-1.0, 1.0, 40)
    f = sg.sum(salt * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2, i)
    return f, x, v, float(np.sum(salt * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2))


@pytest.fixture
def first_on_c(monkeypatch, tmp_path):
    """A fresh cache, the loop VM not at hand (so the C kernels come first), Numba's tier after them, no C
    failure seen yet."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiers, "NUMBA_TIER", True)
    monkeypatch.setattr(loop_vm, "at_hand", lambda: False)
    monkeypatch.setattr(tiers, "C_FAILED", [])


@pytest.mark.parametrize("cc", ["false", "g++"])
def test_a_compiler_that_fails_or_writes_cpp_is_warned_of_once_and_numba_runs(first_on_c, monkeypatch, cc):
    if shutil.which(cc) is None:
        pytest.skip(f"no {cc}")
    monkeypatch.setenv("CC", cc)
    f, x, v, want = _fresh()
    with pytest.warns(UserWarning, match=r"compiled code comes from Numba instead") as caught:
        vg = sg.value_and_grad(f, [x])
    assert vg.backend == "numba" and vg(v)[0] == pytest.approx(want, rel=1e-13)
    assert "exit status 1" in str(caught[0].message) if cc == "false" else "C++ compiler" in str(caught[0].message)
    g, y, w, want2 = _fresh()
    vg2 = sg.value_and_grad(g, [y])  # (no second warning, no second try)
    assert vg2.backend == "numba" and vg2(w)[0] == pytest.approx(want2, rel=1e-13)


def test_a_hung_compiler_holds_a_first_call_only_as_long_as_the_foreground_limit(first_on_c, monkeypatch,
                                                                                  tmp_path):
    """The first call's own build gives up after FOREGROUND_TIMEOUT (not the background's TIMEOUT, 600 s a
    run), kills the compiler, warns and runs on Numba."""
    cc = tmp_path / "hungcc"
    real = c_backend.compiler()[0]
    cc.write_text(f'#!/bin/sh\ncase "$*" in *build-*) exec sleep 600;; esac\nexec {real} "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setattr(c_backend, "FOREGROUND_TIMEOUT", 1)
    f, x, v, want = _fresh()
    with pytest.warns(UserWarning, match=r"took over 1 s on symgrad's generated C .*from Numba instead"):
        vg = sg.value_and_grad(f, [x])
        assert vg(v)[0] == pytest.approx(want, rel=1e-13)
    assert vg.backend == "numba"


def test_an_object_cut_short_in_the_cache_is_built_again(monkeypatch, tmp_path):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    text = "double sg_one(void) { return 1.0; }"
    target = c_backend.build(text, "cut")  # (built, not loaded: a loaded object cut short would crash)
    target.write_bytes(b"")
    one = c_backend.load(text, "cut").sg_one
    one.restype = c_backend.ctypes.c_double
    assert one() == 1.0 and target.stat().st_size > 0


def test_an_object_that_does_not_load_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(c_backend.ctypes, "CDLL", lambda path: (_ for _ in ()).throw(OSError("failed to map")))
    with pytest.raises(c_backend.CompilerError, match="does not load .*noexec"):
        c_backend.load("double sg_one(void) { return 1.0; }", "doc")


def test_a_tiered_function_unpickles_tiered_even_where_no_compiler_is(first_on_c, monkeypatch):
    f, x, v, want = _fresh()
    vg = sg.value_and_grad(f, [x])
    vg(v)
    text = pickle.dumps(vg.ready())
    monkeypatch.setenv("CC", "no-such-cc")
    back = pickle.loads(text)
    assert back.backend in ("vm", "numba") and back(v)[0] == pytest.approx(want, rel=1e-13)


def test_the_c_kernels_name_a_bad_argument(first_on_c):
    f, x, v, _ = _fresh()
    vg = sg.value_and_grad(f, [x])
    assert vg.backend == "c"
    for bad in (None, "abc"):
        with pytest.raises(TypeError, match="x: expected real numbers"):
            vg(bad)
    with pytest.raises(ValueError, match="ready\\(\\): backend must be"):
        vg.ready("nmuba")


def test_the_c_objects_count_toward_the_cache_size(first_on_c, tmp_path):
    f, x, _, _ = _fresh()
    sg.value_and_grad(f, [x])
    folder = cache.cache_dir()
    objects = list((tmp_path / "c").glob("*.so"))
    assert objects and folder is not None
    cache.evict(folder, 0)
    assert not list((tmp_path / "c").glob("*.so"))


def test_a_build_folder_left_behind_by_a_killed_process_is_removed_by_the_next_eviction(first_on_c, tmp_path):
    """SIGTERM runs no exit hook: a build's folder stays in c/ until an eviction pass finds it stale (one
    under way in another process, recent, stays)."""
    f, x, _, _ = _fresh()
    sg.value_and_grad(f, [x])
    stale, fresh = tmp_path / "c" / "build-stale", tmp_path / "c" / "build-fresh"
    for folder in (stale, fresh):
        folder.mkdir()
        (folder / "k.c").write_text("double k(void) { return 1.0; }\n")
    old = time.time() - cache.STALE_BUILD - 60
    os.utime(stale, (old, old))
    cache.evict(cache.cache_dir(), 1 << 40)
    assert not stale.exists() and fresh.exists() and list((tmp_path / "c").glob("*.so"))


def test_a_cc_that_is_not_found_is_warned_of_once(first_on_c, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/gcc-13")
    c_backend._compiler.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="/nonexistent/gcc-13"):
            f, x, v, want = _fresh()
            assert sg.value_and_grad(f, [x])(v)[0] == pytest.approx(want, rel=1e-14)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not c_backend.available()
    finally:
        c_backend._compiler.cache_clear()


def test_cc_may_carry_arguments(monkeypatch):
    monkeypatch.setenv("CC", f"{shutil.which('cc')} -DSYMGRAD_PROBE=1")
    assert c_backend._command()[1:] == ["-DSYMGRAD_PROBE=1"]
    x = sg.Var("x")
    assert sg.compile(x * x, [x], backend="c")([3.0]) == 9.0


def test_the_c_loops_exp_log_tanh_are_the_numba_loops_bits():
    """fastmath.py's exp, expm1, tanh, log, log1p, transcribed into the C loops: the same bits as the Numba
    loops' at special values, subnormals, the overflow thresholds and random points over all magnitudes (so
    the tiers of a function agree bit for bit, whichever runs)."""
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.2, -0.2, 0.625, 1e-300, 5e-324, -5e-324, 2.2250738585072014e-308,
               709.78, 709.79, -745.1, -745.2, 710.0, -40.0, 20.0, 1e300, -1e300, np.inf, -np.inf, np.nan]
    v = np.concatenate([special, rng.normal(size=3000) * 10.0 ** rng.integers(-20, 4, 3000),
                        rng.uniform(-800, 800, 1000), 10.0 ** rng.uniform(-320, 308, 1000)])
    x, i = sg.array("x", v.size), sg.index("i", v.size)
    outputs = [sg.tensor(f(x[i]), i) for f in (sg.exp, sg.expm1, sg.tanh, sg.log, sg.log1p)]
    got = {b: sg.compile(outputs, [x], backend=b)(v) for b in ("c", "numba")}
    assert "sg_fexp(" in sg.compile(outputs, [x], backend="c").source
    same = (got["c"] == got["numba"]) | (np.isnan(got["c"]) & np.isnan(got["numba"]))
    assert same.all() and np.array_equal(np.signbit(got["c"]), np.signbit(got["numba"]))



def test_the_c_loops_matrix_products_are_the_numba_loops_and_the_vms_bits():
    """Matrix products in the C loops call BLAS as Numba's np.dot does (gemm, gemv with either operand
    transposed, dot for a 1x1 result): the same bits on all three backends, and NumPy's products to rounding."""
    rng = np.random.default_rng(4)
    m, k, n, w = 16, 300, 18, 5000
    A, B, v = sg.array("A", (m, k)), sg.array("B", (n, k)), sg.array("v", m)
    a, a2, b = sg.array("a", (1, w)), sg.array("a2", (1, w)), sg.array("b", (3, w))
    r, c, s = sg.index("r", m), sg.index("c", k), sg.index("s", n)
    one, single, three, j = sg.index("one", 1), sg.index("single", 1), sg.index("three", 3), sg.index("j", w)
    AB = sg.tensor(sg.sum(A[r, c] * B[s, c], c), r, s)              # gemm (and its gradient's, transposed)
    Av = sg.tensor(sg.sum(A[r, c] * v[r], r), c)                    # gemv, A read transposed
    ab = sg.tensor(sg.sum(a[one, j] * b[three, j], j), one, three)  # one row: gemv
    ba = sg.tensor(sg.sum(b[three, j] * a2[one, j], j), three, one)  # one column: gemv
    aa = sg.tensor(sg.sum(a[one, j] * a2[single, j], j), one, single)  # 1x1: dot
    f = (sg.sum(sg.tanh(AB[r, s]), r, s) + sg.sum(Av[c] ** 2, c) + sg.sum(sg.sin(ab[one, three]), one, three)
         + sg.sum(ba[three, one] ** 2, three, one) + sg.sum(sg.cos(aa[one, single]), one, single))
    args = [A, B, v, a, a2, b]
    values = [rng.normal(size=e.shape) for e in args]
    x = np.concatenate([e.ravel() for e in values])
    got = {}
    for backend in ("c", "numba", "vm"):
        vg = sg.value_and_grad(f, args, backend=backend)
        got[backend] = np.append(*vg(x))
    source = sg.value_and_grad(f, args, backend="c").source
    assert source.count("sg_mm((") >= 4 and source.count("sg_mv((") >= 2
    assert np.array_equal(got["c"], got["numba"]) and np.array_equal(got["vm"], got["numba"])
    Ax, Bx, vx, ax, a2x, bx = values
    want = (np.sum(np.tanh(Ax @ Bx.T)) + np.sum((Ax.T @ vx) ** 2) + np.sum(np.sin(ax @ bx.T))
            + np.sum((bx @ a2x.T) ** 2) + np.sum(np.cos(ax @ a2x.T)))
    assert got["c"][0] == pytest.approx(want, rel=1e-12)


def test_the_bundled_openblas_routines_are_the_ones_scipys_cython_blas_calls(monkeypatch):
    """The C loops' BLAS, loaded from SciPy's wheel without importing scipy.linalg (0.15 s of a fresh
    process's first result), computes what ``scipy.linalg.cython_blas`` (Numba's BLAS) does, bit for bit:
    a product through each set of addresses."""
    from symgrad.compile import c_blas

    def gemm(address: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        c, p = np.empty((b.shape[1], a.shape[0]), order="F"), ctypes.POINTER(ctypes.c_int)
        m, k, n = (ctypes.c_int(d) for d in (b.shape[1], b.shape[0], a.shape[0]))
        one, zero = ctypes.c_double(1.0), ctypes.c_double(0.0)
        fn = ctypes.CFUNCTYPE(None, *[ctypes.c_char_p] * 2, *[p] * 3, ctypes.c_void_p, ctypes.c_void_p, p,
                              ctypes.c_void_p, p, ctypes.c_void_p, ctypes.c_void_p, p)(address)
        fn(b"n", b"n", m, n, k, ctypes.byref(one), b.ctypes.data, m, a.ctypes.data, k, ctypes.byref(zero),
           c.ctypes.data, m)
        return c.T  # (row-major a @ b: column-major b.T @ a.T)

    if c_blas._bundled() is None:
        pytest.skip("SciPy without a bundled OpenBLAS: the cython_blas addresses are the only ones")
    bundled = c_blas.addresses()
    monkeypatch.setattr(c_blas, "_bundled", lambda: None)
    c_blas.addresses.cache_clear()
    try:
        cython = c_blas.addresses()
    finally:
        c_blas.addresses.cache_clear()
    assert bundled != cython
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(37, 53)), rng.normal(size=(53, 41))
    got = gemm(bundled[0], a, b)
    assert np.array_equal(got, gemm(cython[0], a, b))
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def test_the_compilers_probe_runs_once_per_machine_and_a_file_with_other_flags_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    c_backend._probed.cache_clear()
    try:
        want = c_backend.flags()
        (kept,) = tmp_path.rglob("probe-*.txt")
        c_backend._probed.cache_clear()
        with monkeypatch.context() as m:  # (a new process: the file answers, the compiler is not run)
            m.setattr(c_backend.subprocess, "run", lambda *a, **k: pytest.fail("the compiler was probed again"))
            assert c_backend.flags() == want and c_backend.compiler()[1] == kept.read_text().splitlines()[0]
        kept.write_text(kept.read_text() + "\n-fplugin=/tmp/planted.so")
        c_backend._probed.cache_clear()
        assert c_backend.flags() == want and "-fplugin" not in kept.read_text()
    finally:
        c_backend._probed.cache_clear()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
@pytest.mark.parametrize("lock", ["_PROBING", "_LOCK"])
def test_a_child_forked_while_the_compiler_is_probed_or_runs_can_build(monkeypatch, tmp_path, lock):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    with getattr(c_backend, lock):  # (the import's probe, or a build, under way in another thread, as forked)
        pid = os.fork()
        if pid == 0:  # (the child: its locks are fresh ones, and the probe and a build run)
            code = 2
            try:
                if not getattr(c_backend, lock).acquire(timeout=10):  # (held: the fork kept the parent's lock)
                    os._exit(2)
                getattr(c_backend, lock).release()
                c_backend._probed.cache_clear()
                built = c_backend.build("double sg_two(void) { return 2.0; }", "fork").is_file()
                code = 0 if built and c_backend.flags()[:2] == ("-std=c99", "-O2") else 1
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_short_straight_line_program_runs_on_c_then_on_numba_with_the_same_bits(first_on_c):
    """Under "auto" a short straight-line program's first kernels are the C compiler's, Numba's after them;
    the two give the same bits for every op and its partials on special values and random points (so a
    function's results do not move when Numba's kernels take over)."""
    from test_compile import GRID, every_op_and_its_gradient

    x, y, z = sg.symbols("x y z")
    salt = 1.0 + np.random.default_rng().random()  # (a program no cache holds)
    vg = sg.value_and_grad(sg.sin(x * salt) * y + z ** 3, [x, y, z])
    assert vg.backend == "c" and vg([0.5, 2.0, 3.0])[0] == pytest.approx(np.sin(0.5 * salt) * 2 + 27, rel=1e-15)
    assert vg.ready().backend == "numba" and vg([0.5, 2.0, 3.0])[1][2] == 27.0
    # (and library functions of what can only be a few constants: gcc must not work them out at compile time)
    outs = every_op_and_its_gradient() + [sg.expm1(sg.sign(x)), sg.asinh(sg.where(x > 0, 0.1, 2.5)),
                                          sg.sin(sg.lt(y, 0.0)), sg.erf(sg.floor(z)) ** sg.sign(y)]
    scales = 10.0 ** np.arange(-3, 3).repeat(50)[:, None]
    points = np.concatenate([GRID, np.random.default_rng(1).normal(size=(300, 3)) * scales])
    got = {b: sg.compile(outs, [x, y, z], backend=b).batch(points) for b in ("c", "numba")}
    nan = np.isnan(got["c"])  # (a nan's sign means nothing: the C library and LLVM's folding set it differently)
    assert np.array_equal(nan, np.isnan(got["numba"])) and (got["c"] == got["numba"])[~nan].all()
    assert np.array_equal(np.signbit(got["c"])[~nan], np.signbit(got["numba"])[~nan])


def test_a_long_kernel_is_built_at_o1_and_a_huge_file_at_o0_with_the_same_bits(monkeypatch, tmp_path):
    """A kernel longer than LONG_LINES is built at -O1 (gcc's time on long kernels nearly halves), one with a
    file longer than HUGE_LINES at -O0 (an 81,000-node Hessian's one function: past gcc's 60 s at -O1, 6 s at
    -O0): objects of their own, the same bits as at -O2."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    x, i = sg.array("x", 300), sg.index("i", 299)
    f = sg.sum(sg.exp(sg.tanh(x[i + 1]) - x[i] ** 2) * sg.log1p(x[i] ** 2), i)
    v = np.random.default_rng(2).normal(size=300)
    got, levels, compiled = {}, [], c_backend._compiled
    monkeypatch.setattr(c_backend, "_compiled", lambda command, options, *rest: levels.append(
        [o for o in options if o.startswith("-O")]) or compiled(command, options, *rest))
    for lines, huge in ((c_backend.LONG_LINES, c_backend.HUGE_LINES), (0, c_backend.HUGE_LINES), (0, 0)):
        monkeypatch.setattr(c_backend, "LONG_LINES", lines)
        monkeypatch.setattr(c_backend, "HUGE_LINES", huge)
        value, g = sg.value_and_grad(f, [x], backend="c")(v)
        got[lines, huge] = np.concatenate([[value], g])
    objects = list((tmp_path / "c").glob("l*.so"))
    assert len(objects) == 3 and levels == [["-O2"], ["-O1"], ["-O0"]]
    assert np.array_equal(got[0, 0], got[c_backend.LONG_LINES, c_backend.HUGE_LINES])
    assert np.array_equal(got[0, c_backend.HUGE_LINES], got[0, 0])
    value, g = sg.value_and_grad(f, [x], backend="python")(v)
    np.testing.assert_allclose(got[0, 0], np.concatenate([[value], g]), rtol=1e-12, atol=1e-14)


def test_a_long_kernel_under_auto_runs_unvectorised_first_then_vectorised_with_the_same_bits(first_on_c,
                                                                                              monkeypatch):
    """Under "auto" a long kernel's first C build is at -Og without the vectoriser (sooner: an LSTM gradient's
    first result 1.5 -> 0.9 s), on the calling thread; the full build replaces it from the background (one
    file's begun beside the first: the core that one leaves), giving the same bits."""
    monkeypatch.setattr(tiers, "NUMBA_TIER", False)
    monkeypatch.setattr(c_backend, "QUICK_LINES", 0)
    built, build = [], c_backend.build
    caller = threading.current_thread()
    names = []

    def recorded(*a):
        names.append(threading.current_thread().name)
        built.append((a[3], threading.current_thread() is caller))
        return build(*a)
    monkeypatch.setattr(c_backend, "build", recorded)
    f, x, v, want = _fresh()
    vg = sg.value_and_grad(f, [x])
    value, g = vg(v)
    assert (True, True) in built and vg.backend == "c" and value == pytest.approx(want, rel=1e-14)
    assert vg.ready().backend == "c" and set(built) == {(True, True), (False, False)}
    assert c_backend._cores() == 1 or "symgrad-compile-c-beside" in names  # (one file: begun beside)
    value2, g2 = vg(v)
    assert value2 == value and np.array_equal(g2, g)


@pytest.mark.skipif(not sys.platform.startswith("linux") or sys.version_info < (3, 11),
                    reason="reads /proc; Popen's process_group")
def test_a_background_builds_compilers_run_at_the_lowest_priority_in_this_session(first_on_c, monkeypatch,
                                                                                  tmp_path):
    """The full build in the background yields the cores to the caller (nice 19), in this process's session
    (Linux's autogroups share the CPU between sessions alike, whatever their nice); the first call's own
    quick build runs at the caller's priority."""
    log, cc = tmp_path / "nices", tmp_path / "nicecc"
    stat = '$(cut -d" " -f19 /proc/$$/stat) $(cut -d" " -f6 /proc/$$/stat)'  # (its nice, its session)
    # (a full build's compiler is given nice 19 just after it starts: it waits for that, 5 s at most)
    wait = ('k=0; while [ "$(cut -d" " -f19 /proc/$$/stat)" != 19 ] && [ $k -lt 50 ]; '
            'do sleep 0.1; k=$((k+1)); done')
    cc.write_text(f'#!/bin/sh\ncase "$*" in *-Og*build-*) level=quick;; *build-*) level=full;; *) level=;; esac\n'
                  f'[ "$level" = full ] && {{ {wait}; }}\n'
                  f'[ -n "$level" ] && echo "$level {stat}" >> {log}\nexec {c_backend.compiler()[0]} "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setattr(tiers, "NUMBA_TIER", False)
    monkeypatch.setattr(c_backend, "QUICK_LINES", 0)
    f, x, v, want = _fresh()
    vg = sg.value_and_grad(f, [x])
    assert vg(v)[0] == pytest.approx(want, rel=1e-14) and vg.ready().backend == "c"
    runs = [line.split() for line in log.read_text().splitlines()]
    nice, session = os.getpriority(os.PRIO_PROCESS, 0), os.getsid(0)
    assert {level for level, _, _ in runs} == {"quick", "full"}, runs
    assert all(int(n) == (nice if level == "quick" else 19) and int(s) == session for level, n, s in runs), runs


def test_a_script_that_ends_while_a_tier_builds_stops_the_compiler_and_leaves_no_folder(tmp_path):
    """The background build of a tier is not waited for at exit: the compiler (and what it started) is killed
    and its folder removed, with nothing printed (the folder's remover had raced the compiler writing), and
    the compiler's own temporary files with it (gcc's went to /tmp, left there by each killed build)."""
    pidfile, cc, scratch = tmp_path / "pid", tmp_path / "slowcc", tmp_path / "scratch"
    full = "*-ftree-vectorize*/l[0-9a-f]*"  # (the full build sleeps; the probe and the quick build run)
    cc.write_text(f'#!/bin/sh\ncase "$*" in {full}) mktemp > {scratch}; echo $$ > {pidfile}; exec sleep 600;; '
                  f'esac\nexec {c_backend.compiler()[0]} "$@"\n')
    cc.chmod(0o755)
    script = ("import os, sys, time\nimport symgrad as sg\nfrom symgrad.compile import c_backend, tiers\n"
              f"sys.path.insert(0, {os.path.dirname(__file__)!r})\nfrom test_c_tier import _fresh\n"
              "c_backend.QUICK_LINES, tiers.NUMBA_TIER = 0, False\n"
              "f, x, v, want = _fresh()\nsg.value_and_grad(f, [x])(v)\n"
              f"for _ in range(6000):  # (until the full build is under way)\n"
              f"    if os.path.exists({str(pidfile)!r}):\n        break\n    time.sleep(0.01)\n")
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path / "cache"), CC=str(cc))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    pid = int(pidfile.read_text())
    state = Path(f"/proc/{pid}/status")
    assert not state.exists() or "\tZ" in state.read_text().splitlines()[2]  # (gone, or a zombie unreaped)
    assert [p.name for p in (tmp_path / "cache" / "c").iterdir() if p.is_dir()] == []
    left = Path(scratch.read_text().strip())  # (as gcc's cc1 names its .s files: in $TMPDIR)
    assert left.parent.parent == tmp_path / "cache" / "c" and not left.exists()


def test_a_large_workspace_is_faulted_in_while_the_compiler_runs(first_on_c, monkeypatch):
    """The first call's workspace (past FAULTED_MIN floats) is made during the build and kept as the calling
    thread's spare: the first call takes it instead of faulting in new pages (0.25 -> 0.07 s, 103 MB)."""
    monkeypatch.setattr(c_backend, "FAULTED_MIN", 0)
    monkeypatch.setattr(kernels._spare, "work", None, raising=False)
    had_spare, take = [], c_backend.take
    monkeypatch.setattr(c_backend, "take", lambda n: had_spare.append(kernels._spare.work is not None) or take(n))
    x, i, j = sg.array("x", 40), sg.index("i", 39), sg.index("j", 40)
    salt = 1.0 + np.random.default_rng().random()  # (a program no cache holds)
    t = sg.tensor(sg.exp(x[j]) * salt, j)  # (materialised: a workspace)
    v = np.linspace(-1.0, 1.0, 40)
    want = float(np.sum(np.exp(v[1:]) * np.exp(v[:-1]))) * salt ** 2
    assert sg.compile(sg.sum(t[i + 1] * t[i], i), [x], backend="c")(v) == pytest.approx(want, rel=1e-14)
    assert had_spare[:1] == [True]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_POPULATE_WRITE) is Linux's")
def test_a_workspace_populated_on_advice_keeps_what_it_holds_and_has_its_pages_in():
    """The first call runs while a thread has the kernel fault its workspace in (no waiting for it): the
    advice writes nothing (a call under way keeps its values) and leaves no page to fault in."""
    import resource

    assert kernels._populates()  # (Linux 5.14 and later; this machine's)
    work = np.empty(1 << 21)  # 16 MiB
    work[:1000] = np.arange(1000.0)
    assert kernels._populate(work) == 0
    np.testing.assert_array_equal(work[:1000], np.arange(1000.0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    work[::512] = 1.0  # (a write a page: 4096 pages)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 200


def test_past_the_programs_cap_auto_leaves_the_c_tier_out(first_on_c, monkeypatch):
    """Loaded shared objects are never unloaded: past $SYMGRAD_MAX_PROGRAMS of them "auto" builds no more."""
    x = sg.Var("x")
    salt = 1.0 + np.random.default_rng().random()
    assert sg.compile(x * salt, [x]).backend == "c" and c_backend._OPENED
    monkeypatch.setenv("SYMGRAD_MAX_PROGRAMS", str(len(c_backend._OPENED)))
    assert not c_backend.has_room() and sg.compile(x * (salt + 1), [x]).backend != "c"


@pytest.mark.filterwarnings("ignore:.*no-such-cc:RuntimeWarning")  # (warned: $CC names no compiler)
def test_the_c_kernels_write_only_writable_buffers_and_take_subclasses(first_on_c, tmp_path, monkeypatch):
    """A read-only out= is refused as on Numba's kernels (not written: it may be a bytes object's memory); a
    memmap is an array; a function tiered without a tier to come still pickles as "auto" (no compiler where
    it lands: it runs elsewhere)."""
    monkeypatch.setattr(tiers, "NUMBA_TIER", False)
    x, y = sg.symbols("x y")
    salt = 1.0 + np.random.default_rng().random()
    vg = sg.value_and_grad(x * y * salt, [x, y])
    assert vg.backend == "c"
    data = bytes(16)
    with pytest.raises(ValueError, match="out: expected a writable"):
        vg([2.0, 3.0], out=np.frombuffer(data))
    assert data == bytes(16)
    out = np.memmap(tmp_path / "out.bin", dtype=np.float64, mode="w+", shape=(2,))
    assert vg([2.0, 3.0], out=out) == pytest.approx(6.0 * salt) and out[0] == pytest.approx(3.0 * salt)
    text = pickle.dumps(vg)
    monkeypatch.setenv("CC", "no-such-cc")
    c_backend._compiler.cache_clear()
    try:
        back = pickle.loads(text)
        assert back.backend != "c" and back([2.0, 3.0])[0] == pytest.approx(6.0 * salt)
    finally:
        c_backend._compiler.cache_clear()


@pytest.mark.parametrize("numba_faster", [False, True])
def test_where_the_disk_holds_both_kernels_the_c_ones_run_first_and_numbas_only_if_faster(
        first_on_c, monkeypatch, numba_faster):
    """Numba's kernels in the disk cache were taken as they were, though a timed call had kept the C
    compiler's (k-means' Hessian diagonal: 14 ms a call against 6.9 from a second process on): where the
    disk holds both, the C kernels run at once and Numba's replace them only if faster, as in the process
    that compiled both; where it holds Numba's alone, Numba's."""
    f, x, v, want = _fresh()
    first = sg.value_and_grad(f, [x])
    value, g = first(v)
    first.ready()
    monkeypatch.setattr(Compiled, "_faster", lambda self, point: numba_faster)
    again = sg.value_and_grad(f, [x])
    assert [tier for tier, _ in again._tiers] == ["numba"]  # (after the C kernels)
    assert again(v)[0] == value and again.ready().backend == ("numba" if numba_faster else "c")
    assert np.array_equal(again(v)[1], g)
    objects = list(c_backend._folder().glob("l*.so"))
    assert objects
    for built in objects:
        built.unlink()
    numba = sg.value_and_grad(f, [x])
    assert numba.backend == "numba" and numba._tiers == [] and numba(v)[0] == value


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
@pytest.mark.parametrize("split", [False, True])
def test_an_in_process_kernels_tables_are_given_at_load_not_compiled(split, tmp_path):
    """A gather's table of positions (a bundle adjustment's: 60,000 numbers, half of gcc's time) is passed to
    the loaded object (sg_set_tables), not written into its C; in pieces each file declares the ones it
    reads. The same bits as the loop VM's and Numba's kernels; exported C keeps its tables as arrays."""
    from symgrad.compile import pieces

    perm = np.random.default_rng(3).permutation(300)
    back = np.argsort(perm)

    def f(x):
        y = np.sin(x[perm]) * x
        return np.sum(y[back] * np.cos(x) + y)

    x = np.linspace(-1.0, 2.0, 300)
    with pieces.sized(0, 3) if split else contextlib.nullcontext():
        c = sg.value_and_grad(f, backend="c")
        got = c(x)
    source = c.compiled.source
    assert "sg_set_tables" in source and "extern const long long* TABLE0;" in source
    assert ", ".join(map(str, perm[:20])) not in source
    for backend in ("vm", "numba"):
        want = sg.value_and_grad(f, backend=backend)(x)
        assert got[0] == want[0] and np.array_equal(got[1], want[1])
    reference = sg.value_and_grad(f, backend="python")(x)
    np.testing.assert_allclose(got[1], reference[1], rtol=1e-13, atol=1e-15)
    exported, _ = sg.export_c(sg.grad(f), x, directory=tmp_path)
    assert ", ".join(map(str, perm[:20])) in exported.read_text()


@pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
def test_a_program_compiled_again_and_dropped_leaves_the_first_ones_tables_in_place():
    """The same program compiled twice loads one shared object: the second's tables, set over the first's and
    freed with it, made the first read freed memory (a segfault, or wrong values) until tables were kept
    by object."""
    import gc

    perm = np.random.default_rng(4).permutation(300)
    x = np.linspace(-1.0, 2.0, 300)
    want = float(np.sum(np.sin(x[perm]) * x))
    salt = np.random.default_rng().random()  # (a program no cache holds)
    first = sg.jit(lambda x: np.sum(np.sin(x[perm]) * x) + salt, backend="c")
    assert first(x) == pytest.approx(want + salt, rel=1e-14)
    for _ in range(3):
        again = sg.jit(lambda x: np.sum(np.sin(x[perm]) * x) + salt, backend="c")
        assert again(x) == first(x)
        del again
        gc.collect()
        _ = [np.full(300, 12345.0 + k) for k in range(1000)]  # (memory the freed tables held, written over)
        assert first(x) == pytest.approx(want + salt, rel=1e-14)
