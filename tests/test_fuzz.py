"""The differential fuzzer (symgrad/fuzz/): its generator and minimiser (on planted bugs), and fixed-budget
runs that must find no disagreement between NumPy, the interpreter, the element trace, finite differences,
the loop VM and (sparingly) the Numba loops.

The fixed-budget runs are real bug hunts: while a backend computes silently wrong values they fail, listing
each disagreement with its minimised program (a script to paste)."""

import dataclasses
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import symgrad as sg
from symgrad import fuzz
from symgrad.fuzz import generator, oracle, runner
from symgrad.trace import limits


def _report(found: list) -> str:
    return f"{len(found)} disagreements:\n\n" + "\n\n".join(str(d) for d in found)


def _python(program, f, inputs):
    """value_and_grad on the interpreter (what a planted bug starts from)."""
    return oracle._vg(program, f, inputs, "python")


def _program(source: str, shapes=((64,),), argnums=(0,), seed=3) -> fuzz.Program:
    return fuzz.Program(source, tuple(shapes), tuple(argnums), seed)


def _keys_with_gradients_off(p: fuzz.Program, factor: float) -> list:
    """The disagreements' keys when the interpreter's gradients are multiplied by ``factor`` (a planted bug)."""
    def off(program, f, inputs):
        value, grads, rolled, _ = _python(program, f, inputs)
        return value, [g * factor for g in grads], rolled, "python"

    return [d.key for d in fuzz.check(p, backends=("python",), runners={"python": off})[0]]


# ----------------------------------------------------------------------------------------------
# The generator


def test_generated_programs_are_deterministic_valid_and_varied():
    programs = [fuzz.generate(s) for s in range(270)]
    assert [p.source for p in programs[:20]] == [fuzz.generate(s).source for s in range(20)]
    for p in programs[:40]:
        value = p.function()(*p.inputs())
        assert np.ndim(value) == 0 and np.isfinite(value)
        assert p.source.startswith("def f(") and "    return np.sum(" in p.source
    text = "\n".join(p.source for p in programs)
    for construct in ("sg.scan", "reverse=True", "length=", "np.cumsum", " @ ", "np.einsum", "permutation",
                      "integers(0", "// 2", " % ", "[::-1]", "[::2]", "np.minimum", "np.maximum", "np.clip",
                      "np.where", "keepdims=True", "reshape", "np.concatenate", "np.stack", "axis=", ".T",
                      "np.tanh", "np.log(1.0 + ", "sg.grad(", "sg.vmap(", "np.outer", "h, s = carry",
                      "'kij,kj", "np.sort(", "np.median(", "np.percentile(", "np.partition(", "np.broadcast_to(",
                      "np.full("):
        assert construct in text, construct
    sizes = {n for p in programs for s in p.shapes for n in [int(np.prod(s))]}
    assert any(n < limits.ROLLED_MIN for n in sizes) and any(n >= limits.ROLLED_MIN for n in sizes)
    assert any(len(p.shapes) == 2 and p.argnums == (0, 1) for p in programs)
    assert any(len(p.shapes) == 2 and p.argnums == (0,) for p in programs)


def test_a_program_prints_as_a_script_that_runs():
    p = _program("def f(x, w):\n    return np.sum(np.sin(x) * w[::-1])\n", ((64,), (64,)), (0, 1))
    printed = []
    namespace: dict = {"print": lambda *a: printed.append(a)}
    exec(p.snippet("vm"), namespace)
    (value, (reference, _)), ((vm_value, _),) = printed
    assert value == pytest.approx(reference) == pytest.approx(vm_value)
    assert namespace["x"].shape == (64,) and "backend='vm'" in p.snippet("vm")
    assert "limits.ROLLED_MIN = limits.LONG_LOOP = 10**9" in p.snippet("element")
    assert "sg.hvp(f, argnums=0, backend='numba')" in p.snippet("hvp:numba")


def test_one_program_in_four_runs_at_guarded_points_its_script_reproduces():
    """Exact zeros and ties among the inputs of every 4th seed (where guards act: x**y, sqrt, abs, max), the
    same in the printed script; finite differences move the other entries only, and a guard that
    differentiates wrongly there is found (here: relu's derivative at 0 claimed as 1 on the VM)."""
    p = dataclasses.replace(_program("def f(x):\n    return np.sum(np.maximum(x, 0.0) * x[::-1])\n"), seed=6)
    x = p.inputs()[0]
    assert p.guarded and np.all(x.flat[::8] == 0.0) and np.all(x.flat[1::8] == x.flat[2::8])
    namespace: dict = {"print": lambda *a: None}
    exec(p.snippet("vm"), namespace)
    np.testing.assert_array_equal(namespace["x"], x)
    plain = dataclasses.replace(p, seed=7)
    assert not plain.guarded and not plain.special()[0].any()
    assert fuzz.check(p, extras=fuzz.EXTRAS) == ([], "ok")

    def relu_one_at_zero(program, f, inputs):
        value, grads, rolled, _ = _python(program, f, inputs)
        grads[0][::8] += inputs[0][::-1][::8]
        return value, grads, rolled, "vm"

    found, _ = fuzz.check(p, runners={"vm": relu_one_at_zero})
    assert [d.key for d in found] == [("vm", "d/dx", "wrong")]


def test_element_trace_is_forced_and_restored():
    f = sg.value_and_grad(lambda x: np.sum(x ** 2), backend="python")
    with fuzz.element_trace():
        assert not f.trace(np.ones(100)).indexed
    assert limits.ROLLED_MIN == 64
    assert sg.value_and_grad(lambda x: np.sum(x ** 2), backend="python").trace(np.ones(100)).indexed


def test_a_correct_program_has_no_disagreement_and_a_wrong_one_does():
    p = _program("def f(x):\n    v1 = np.tanh(x[::-1])\n    return np.sum(v1 * x)\n")
    assert fuzz.check(p, extras=fuzz.EXTRAS) == ([], "ok")

    def wrong_gradient(program, f, inputs):
        value, grads, rolled, _ = _python(program, f, inputs)
        grads[0][5] += 1.0
        return value, grads, rolled, "vm"

    found, _ = fuzz.check(p, runners={"vm": wrong_gradient})
    assert [d.key for d in found] == [("vm", "d/dx", "wrong")] and "at (5,)" in found[0].detail


# ----------------------------------------------------------------------------------------------
# The minimiser, on planted bugs


def _wrong_with(construct: str):
    """A fake backend: the interpreter, except a value twice too large where the program contains ``construct``."""
    def runner(program, f, inputs):
        value, grads, rolled, _ = _python(program, f, inputs)
        return (2 * value if construct in program.source else value), grads, rolled, "vm"
    return runner


def test_minimiser_shrinks_a_planted_bug_to_its_construct():
    runners = {"vm": _wrong_with("np.minimum")}
    p = _program("def f(x, w):\n"
                 "    t1 = np.random.default_rng(4).permutation(x.shape[0])\n"
                 "    v2 = np.tanh(x[t1]) * w[::-1]\n"
                 "    v3 = np.cumsum(v2)\n"
                 "    v4 = np.minimum(v3, 0.5) + np.sin(x)\n"
                 "    v5 = v4.reshape(8, -1) @ w[:16]\n"
                 "    return np.sum(v5 ** 2)\n", ((128,), (128,)), (0, 1))
    found, status = fuzz.check(p, runners=runners)
    assert status == "ok" and [d.key for d in found] == [("vm", "value", "wrong")]
    small = fuzz.minimise(found[0], runners=runners, seconds=60)
    assert small.key == found[0].key and small.original is p
    assert "np.minimum" in small.program.source
    assert small.program.source.count("\n") <= 3, small.program.source  # def, maybe one line, return
    assert small.program.shapes[0] == (64,) and len(small.program.argnums) == 1
    assert len(small.program.source) < len(p.source) / 3


def test_minimiser_keeps_the_kind_of_an_error():
    def fails_on_scans(program, f, inputs):
        if "sg.scan" in program.source:
            raise RuntimeError("planted")
        return _python(program, f, inputs)

    runners = {"vm": fails_on_scans}
    p = _program("def f(x):\n"
                 "    v1 = np.sin(x) * 2.0\n"
                 "    def step(h, r):\n"
                 "        h = np.tanh(h * 0.5 + r)\n"
                 "        return h, np.sum(h * h)\n"
                 "    v2, v3 = sg.scan(step, np.zeros(4), v1.reshape(16, -1), reverse=True)\n"
                 "    return np.sum(v3) + np.sum(v2)\n")
    found, _ = fuzz.check(p, runners=runners)
    assert [d.key for d in found] == [("vm", "value", "error")] and "planted" in found[0].detail
    small = fuzz.minimise(found[0], runners=runners, seconds=60)
    assert "sg.scan" in small.program.source and small.key == ("vm", "value", "error")
    assert len(small.program.source) < len(p.source)
    assert "reverse=True" not in small.program.source and "np.tanh" not in small.program.source


def test_run_reports_minimised_planted_disagreements(monkeypatch):
    real = oracle._vg

    def planted(program, f, inputs, backend, F=None):
        value, grads, rolled, actual = real(program, f, inputs, backend, F)
        if backend == "vm" and "np.cumsum" in program.source:
            grads = [g * 1.5 for g in grads]
        return value, grads, rolled, actual

    monkeypatch.setattr(oracle, "_vg", planted)
    stats: dict = {}
    found = fuzz.run(programs=40, seed=5, backends="python,vm", extras_every=0, element_every=0,
                     minimise_seconds=120, stats=stats)
    assert found and stats["programs"] == 40 and stats["disagreements"] == len(found)
    assert all(d.probe == "vm" and d.quantity.startswith("d/d") for d in found), _report(found)
    small = all("np.cumsum" in d.program.source and d.program.source.count("\n") <= 8 for d in found)
    assert small, _report(found)
    assert fuzz.main(["--programs", "25", "--seed", "5", "--extras-every", "0", "--element-every", "0",
                      "--no-minimise", "--quiet"]) == 1


def test_jobs_split_the_programs_and_add_up_the_counts(capsys):
    """--jobs 2: two processes with seeds 7 and 8, the programs shared out, their counts added."""
    assert fuzz.main(["--programs", "3", "--jobs", "2", "--seed", "7", "--no-minimise", "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == "4 programs, 0 disagreements"  # (2 each: 3 rounded up)
    assert runner._added([{"programs": 2, "ok": 2, "reasons": {"a": 1}, "kinds": {}},
                          {"programs": 3, "ok": 1, "reasons": {"a": 2, "b": 1}, "kinds": {"nan": 1}}]) == {
        "programs": 5, "ok": 3, "reasons": {"a": 3, "b": 1}, "kinds": {"nan": 1}}


def test_jobs_end_with_the_process_that_started_them():
    """A soak killed by its pid (kill, not Ctrl-C) took its workers along; they ran on, orphaned."""
    soak = subprocess.Popen([sys.executable, "-m", "symgrad.fuzz", "--minutes", "5", "--jobs", "2", "--quiet"])
    workers: list[int] = []
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        workers = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(int(d)) == soak.pid
                   and b"spawn_main" in _command(int(d))]
    soak.kill()
    soak.wait()
    assert len(workers) == 2
    deadline = time.monotonic() + 30
    while any(_parent(w) is not None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_parent(w) is None for w in workers), "workers still running"


def _command(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _parent(pid: int) -> int | None:
    """The parent of a running process (None when it has ended or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[1])


# ----------------------------------------------------------------------------------------------
# The bug hunts: fixed budgets, deterministic seeds; these must find nothing


def test_fuzz_interpreter_element_trace_and_loop_vm():
    """150 programs: NumPy, finite differences, the element trace, the loop VM, every 4th an extra transform."""
    stats: dict = {}
    found = fuzz.run(programs=150, seed=2024, backends=("python", "vm"), extras_every=4, element_every=2,
                     minimise_seconds=10, stats=stats)
    assert stats["programs"] == 150 and stats.get("ok", 0) > 100, stats
    assert not found, _report(found)


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzz_numba_loops(seed):
    """A few programs on the generated Numba loops (each compiles 0.5 s or more); every other one with its
    kernel split into pieces of a few lines."""
    found = fuzz.run(programs=3, seed=seed, backends=("python", "numba"), extras_every=0, element_every=0,
                     minimise_seconds=0)
    assert not found, _report(found)


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_fuzz_c_loops():
    """Programs on the C loops (c_loops.py: the loop kernel translated to C, built by the system compiler,
    0.1-0.3 s each), every 4th with an extra transform, every other one split into pieces in files of
    their own (built at once, linked)."""
    stats: dict = {}
    found = fuzz.run(programs=30, seed=41, backends=("python", "c"), extras_every=4, element_every=0,
                     minimise_seconds=10, stats=stats)
    assert stats.get("ok", 0) > 20, stats
    assert not found, _report(found)


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_fuzz_c_loops_built_quickly(monkeypatch):
    """Programs on the C loops as a long kernel's first tier builds them (-Og, no vectoriser: the first
    kernels of an LSTM gradient under "auto"), against the interpreter."""
    from symgrad.compile import c_backend

    quick, build = [], c_backend.build
    monkeypatch.setattr(c_backend, "build", lambda text, stem, others=(), q=False: quick.append(1) or build(
        text, stem, others, True))
    stats: dict = {}
    found = fuzz.run(programs=12, seed=43, backends=("python", "c"), extras_every=4, element_every=0,
                     minimise_seconds=10, stats=stats)
    assert quick and stats.get("ok", 0) > 8, (len(quick), stats)
    assert not found, _report(found)


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_fuzz_products_through_blas_on_the_c_loops_and_the_vm(monkeypatch):
    """Products of every size calling BLAS (``plan.BLAS_MIN`` lowered from 4096 multiply-adds, which the
    fuzzer's small arrays never reach): the C loops' products (c_blas.py, gemm / gemv / dot as Numba calls
    them) and the loop VM's, against the interpreter."""
    from symgrad.compile import c_blas, plan

    monkeypatch.setattr(plan, "BLAS_MIN", 8)
    translated = []
    call = c_blas.call
    monkeypatch.setattr(c_blas, "call", lambda *a: translated.append(a) or call(*a))
    stats: dict = {}
    found = fuzz.run(programs=30, seed=9, backends=("python", "c", "vm"), extras_every=4, element_every=0,
                     minimise_seconds=10, stats=stats)
    assert len(translated) >= 5 and stats.get("ok", 0) > 20, (len(translated), stats)
    assert not found, _report(found)


def test_terms_that_cancel_are_compared_at_their_rounding():
    """np.sum(np.outer(v, v) - np.mean(np.outer(v, v))) of equal entries is 0 exactly in the interpreter and
    NumPy, about 1e-10 on the loop VM (terms of 6400 added in another order): rounding of the terms, not a
    disagreement; the tolerance scales with the magnitude of the interpreter's intermediate values."""
    p = _program("def f(x):\n"
                 "    def step2(carry, r):\n"
                 "        h, s = carry\n"
                 "        s = np.sum(h * h)\n"
                 "        return ((h, s), s)\n"
                 "    (v3, v5), v4 = sg.scan(step2, (x, 0.1), length=8)\n"
                 "    v6 = np.outer(v4, v4)\n"
                 "    return np.sum(v6 - np.mean(v6) - v4 + v4)\n", shapes=((80,),), seed=188404287)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)
    shifted = {"vm": lambda program, f, inputs: (lambda v, g, r, a: (v + 1e-6, g, r, a))(
        *_python(program, f, inputs))}
    found, _ = fuzz.check(p, backends=("python", "vm"), runners=shifted)  # an error above the rounding still shows
    assert [d.key for d in found] == [("vm", "value", "wrong")]


def test_terms_of_1e19_cancelling_are_compared_at_their_rounding():
    """np.var of 16 equal entries of 1e19 (a scan doubling its carry 64 times) is 0 in the interpreter and
    1024 on the VM: one ulp of the terms, not a disagreement (the floor was capped at 1e-6 of the result)."""
    p = _program("def f(x, w):\n"
                 "    v5, _ = sg.scan(lambda c, r: (c + c + r, None), np.zeros(16), w)\n"
                 "    return np.var(v5)\n", shapes=((72,), (64,)), seed=2106755731)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)


def test_finite_differences_that_have_not_converged_are_no_disagreement():
    """sin(v**3) of v near 100 (a scan's rows squared): central differences at 1e-6 and 1e-7 still differ by
    8% (truncation ~ h**2), the one at 1e-7 by 0.08% from the exact gradient: their own error, estimated from
    the step before, is part of the tolerance. A gradient off by 1% is still found."""
    p = _program("def f(x):\n"
                 "    def step1(carry, r):\n"
                 "        h = carry\n"
                 "        h = h + r\n"
                 "        return (h, h * h)\n"
                 "    v2, v3 = sg.scan(step1, x, x)\n"
                 "    return np.sum([v3, np.sin(v3 ** 3)])\n", shapes=((128,),), seed=1040872606)
    found, _ = fuzz.check(p, backends=("python",))
    assert not found, _report(found)

    assert ("fd", "grad", "wrong") in _keys_with_gradients_off(p, 1.01)


def test_finite_differences_that_settle_only_below_the_programs_curvature_scale():
    """A soak's scan over sin of values near 1e5 (|grad| 1.7e9, f 1.5e4): central differences at 1e-6..1e-7
    sit on a plateau near -6e7 (once shrinking as h**2 would), extended-precision ones reach the gradient's
    -2.7709166e7 only below 1e-8. The ladder down to 1e-10 settles there; a gradient off by 1% is found."""
    p = _program("def f(x, w):\n"
                 "    v1 = sg.grad(lambda u: np.sum(np.tanh(u)) * np.sum(u))(w)\n"
                 "    def step7(carry, r):\n"
                 "        h, s = carry\n"
                 "        h = 0.9 * h + np.sin(r)\n"
                 "        s = 0.5 * s + np.sum(h * h)\n"
                 "        return ((h, s), s)\n"
                 "    (v8, v10), v9 = sg.scan(step7, (np.zeros(4), 0.1), np.sum(v1 ** 2) * v1)\n"
                 "    v = np.square(v9)\n"
                 "    return np.sum(sg.numpy.asarray(v).at[[0, 2, 0]].add(np.sin(v[:3])))\n",
                 shapes=((96,), (72,)), argnums=(1,), seed=1546749607)
    found, _ = fuzz.check(p, backends=("python",))
    assert not found, _report(found)

    assert ("fd", "grad", "wrong") in _keys_with_gradients_off(p, 1.01)


def test_chaotic_finite_differences_give_no_verdict():
    """A soak's exp of a cube of 4.2 * cos(x) (values near 1e7) through a scan's sin: central differences from
    1e-4 to 1e-10 jump between -3e7 and 1e5 and never settle; no disagreement is claimed."""
    p = _program("def f(x):\n"
                 "    def step9(carry, r):\n"
                 "        h = carry\n"
                 "        h = 0.9 * h + np.sin(r)\n"
                 "        return (h, h * h)\n"
                 "    t = np.random.default_rng(29).permutation(x.shape[0])\n"
                 "    v = np.exp(0.2 * (max(np.sum(x), 4.2) * np.cos(x)) ** 3)\n"
                 "    v10, v11 = sg.scan(step9, 0.0, v[t] / 1.09)\n"
                 "    return np.sum(v11 * v11)\n", shapes=((4,),), seed=1441683124)
    found, _ = fuzz.check(p, backends=("python",))
    assert not found, _report(found)


def test_jvps_of_cancelling_terms_are_compared_at_their_own_noise(monkeypatch):
    """A soak's sum of deviations (identically 0, gradient exactly 0): its jvp, the tangents of 81 terms near
    1e4 cancelling, was -8.2e-12, reported against grad . tangent = 0. The jvp's own noise (its value when
    the library results move by an ulp) is part of the tolerance; an error above it is still found."""
    p = _program("def f(w):\n"
                 "    v4 = np.cumsum(w)[np.random.default_rng(96).integers(0, w.shape, size=(8, 9))]\n"
                 "    v6 = v4.T @ v4 * (v4.T @ v4)\n"
                 "    return np.sum(v6 - np.mean(v6))\n", shapes=((72,),), seed=1600849484)
    found, status = fuzz.check(p, backends=("python", "vm"), extras=("jvp",))
    assert status == "ok" and not found, _report(found)
    jvp = sg.jvp
    monkeypatch.setattr(sg, "jvp", lambda *a, **k: (lambda v, t: (v, t + 1e-7))(*jvp(*a, **k)))
    found, _ = fuzz.check(p, backends=("python",), extras=("jvp",))
    assert ("jvp:python", "jvp", "wrong") in [d.key for d in found]


def test_values_and_jvps_of_telescoping_sums_are_compared_at_their_terms_rounding(monkeypatch):
    """Two soak programs whose sums telescope: exp of running sums reaching 3e62, differenced (NumPy's sum
    gave 1.5e36, the interpreter's exact 0), and a jvp of exp(0.2 v) near 1e12 differenced (-10.52454 against
    grad . tangent -10.52407). Both are within the rounding of the terms they add; the interpreter's value
    and the extras' own noise floors now include it. An error above it is still found (1e-6 of a jvp)."""
    telescoping = _program("def f(x):\n"
                           "    def step1(carry, r):\n"
                           "        h, s = carry\n"
                           "        h = h + np.sin(0.5)\n"
                           "        s = np.sum(h)\n"
                           "        return ((h, s), (h, s))\n"
                           "    (v2, v4), v3 = sg.scan(step1, (x, 0.1), length=5)\n"
                           "    v8 = np.exp(np.pad(v3[1], (2, 3)))\n"
                           "    v9 = np.stack([v8, v8], axis=1)\n"
                           "    return np.sum(v9[1:] - v9[:-1])\n", seed=911041970)
    differenced = _program("def f(x):\n"
                           "    def step4(carry, r):\n"
                           "        h = carry + r\n"
                           "        return (h, np.sum(h * h))\n"
                           "    v5, v6 = sg.scan(step4, np.zeros(8), x)\n"
                           "    return np.sum(np.diff(np.exp(0.2 * np.append(v6, 0.5))))\n", seed=1242988667)
    for p, extras in ((telescoping, ()), (differenced, ("jvp",))):
        found, status = fuzz.check(p, backends=("python",), extras=extras)
        assert status == "ok" and not found, _report(found)
    jvp = sg.jvp  # (terms near 1e43 bound nothing there: a moderate program shows the floor is no blanket)
    monkeypatch.setattr(sg, "jvp", lambda *a, **k: (lambda v, t: (v, t * (1 + 1e-6)))(*jvp(*a, **k)))
    moderate = _program("def f(x):\n    return np.sum(np.diff(np.exp(0.2 * np.cumsum(x))))\n", seed=5)
    found, _ = fuzz.check(moderate, backends=("python",), extras=("jvp",))
    assert ("jvp:python", "jvp", "wrong") in [d.key for d in found]


def test_programs_whose_intermediates_overflow_are_not_generated():
    """A soak's 1 / exp(v * v) with v**2 past 709: the value is 0 (fine), the gradient -e**-2 * e * 2v is
    0 * inf = nan on every backend, as in JAX, while finite differences see a smooth function. Such
    programs are invalid (IEEE overflow, not a derivative rule); the same function below overflow is kept."""
    src = "def f(x):\n    v5 = np.sum(x ** 2) * x\n    return np.sum(1.0 / np.exp(v5 * v5))\n"
    assert not generator._valid(_program(src, seed=1805834246))
    small = _program(src.replace("np.sum(x ** 2) * x", "0.1 * x"), seed=1805834246)
    assert generator._valid(small) and fuzz.check(small, backends=("python", "vm")) == ([], "ok")


def test_running_sums_are_nudged_like_sums():
    """A soak's sin of a running sum of a running sum (arguments near 1e5): the VM and the element trace
    agreed, the interpreter's gradient differed by 1.2e-9 relative (its reversed running sums add in
    another order). Running sums are now among the results the noise estimate moves by an ulp."""
    p = _program("def f(x):\n"
                 "    v2 = sg.grad(lambda u: np.sum(np.tanh(u)) * np.sum(u))(x)\n"
                 "    return np.sum(np.sin(np.cumsum(np.cumsum(v2 * v2)).reshape(3, -1)))\n",
                 shapes=((96,),), seed=37274085)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)


def test_hessian_vector_differences_that_have_not_converged_are_no_disagreement():
    """A soak's hvp against central differences of the gradient (sin of a squared running sum: curvature
    ~1e9): each step's own truncation error, estimated from the step before, is part of the tolerance."""
    p = _program("def f(x):\n"
                 "    v2 = x[1:] * x[:-1]\n"
                 "    v6 = np.square(np.cumsum(v2[np.random.default_rng(93).permutation(v2.shape[0])]))\n"
                 "    v9 = np.pad(v6, (2, 3))[:159] * np.sin(v6)\n"
                 "    return np.sum(np.tanh(v9) * v9)\n", shapes=((160,),), seed=1195289134)
    found, _ = fuzz.check(p, backends=("python",), extras=("hvp",))
    assert not found, _report(found)


def test_ties_that_another_tanh_rounds_apart_are_no_disagreement():
    """A soak's np.max of saturated values (tanh(tanh(s * w) * 1.5 - 0.1)): NumPy's tanh rounds 28 entries to
    the same value, the VM's (fastmath, within 2 ulp) 27, so the max's gradient is split 28 or 27 ways
    (the value moves by 5e-9 relative). The noise estimate moves the interpreter's library results by an
    ulp, as another implementation would; a real error above that still shows."""
    p = _program("def f(x, w):\n"
                 "    t1 = np.random.default_rng(32).permutation(w.shape[0])\n"
                 "    v4 = w[t1][(7 * np.arange(72) + 2) % 72]\n"
                 "    u8 = max(np.sum(v4 ** 2), 12.24) * v4\n"
                 "    for _ in range(2):\n"
                 "        u8 = np.tanh(u8) * 1.5 - 0.1\n"
                 "    v11 = sg.grad(lambda u: np.max(u) + np.sum(u ** 3))(u8[1:])\n"
                 "    return np.sum(np.tanh(v11) * v11)\n", shapes=((4, 24), (72,)), seed=1632541846)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)
    shifted = {"vm": lambda program, f, inputs: (lambda v, g, r, a: (v * (1 + 1e-5), g, r, a))(
        *_python(program, f, inputs))}
    found, _ = fuzz.check(p, backends=("python", "vm"), runners=shifted)
    assert [d.key for d in found] == [("vm", "value", "wrong")]


def test_noise_is_estimated_for_interpreter_values_of_many_axes():
    """A soak's scan (the interpreter's values had 44 axes): moving the library results by an ulp asked
    np.broadcast_shapes (32 at most) and the noise estimate failed, leaving no floor: the 1-ulp sums of
    NumPy and the VM, amplified by sin of 11000 near a zero of cos, were reported as a disagreement."""
    p = _program("def f(x):\n"
                 "    def step1(carry, r):\n"
                 "        h = carry * 0.7 + np.sum(carry * x[:16]) * 0.1 + r\n"
                 "        return (h, np.sum(h * h))\n"
                 "    v2, v3 = sg.scan(step1, x[:16], x)\n"
                 "    def step8(carry, r):\n"
                 "        h, s = carry\n"
                 "        return ((h + 0.4, s), (h + 0.4) * 0.5)\n"
                 "    (v9, v11), v10 = sg.scan(step8, (v3[:1], 0.1), length=3)\n"
                 "    return np.sum(np.sin(v10.T @ v10))\n", shapes=((64,),), seed=144648941)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)


def test_an_ill_conditioned_second_derivative_is_compared_at_its_own_noise():
    """A soak's hvp through cos(mean(r**2)) of r ~ 1e6: the interpreter's and the VM's sums of 1e12 differ
    in the last bits, which the second derivative amplifies to 1e-9 relative, and central differences of
    the gradient (moved by 1e-9 of the inputs, it moves by more than 1e-5) say nothing."""
    p = _program("def f(x):\n"
                 "    v2 = np.einsum('ij,ij->i', x, x) ** 2\n"
                 "    def step5(carry, r):\n"
                 "        h = np.cos(np.mean(r ** 2))\n"
                 "        return (h, h)\n"
                 "    v6, v7 = sg.scan(step5, 0.0, np.stack([v2, v2]))\n"
                 "    return np.sum(v2[:2] + v7)\n", shapes=((12, 40),), seed=1151913750)
    found, status = fuzz.check(p, backends=("python", "vm"), extras=("hvp",))
    assert status == "ok" and not found, _report(found)


def test_a_jacobians_row_sum_is_compared_at_the_gradients_noise():
    """The final soak's scan growing by 1.5 a step (terms of 1.5**64 cancelling in v4.T - v4.T[:1]): the
    Jacobian's rows summed differ from the gradient by 6.6e-6 relative, their rounding; compared at 1e-9
    without the gradient's noise floor, that was a disagreement."""
    p = _program("def f(x):\n"
                 "    def step2(carry, r):\n"
                 "        return (carry * 0.7 + np.sum(carry) * 0.1, carry * 0.7 + np.sum(carry) * 0.1)\n"
                 "    v3, v4 = sg.scan(step2, x[:8], x)\n"
                 "    return np.sum(v4.T - v4.T[:1])\n", shapes=((64,),), seed=719825796)
    found, status = fuzz.check(p, backends=("python", "vm"), extras=("jacobian",))
    assert status == "ok" and not found, _report(found)


def test_gradients_that_move_past_the_cap_under_ulps_are_compared_at_that_move():
    """The soak on 247e896: sin of a chain of squares (reaching 2.4e6) of a scan's running sums. Its
    gradient moves by 1.35e-6 of its largest entry when the inputs move by two ulps; the interpreter
    rolled (-24369.649, as float64 evaluated by hand) and the element trace and VM (-24369.682) lie on
    either side of the exact -24369.665 (long double). The floor, capped at 1e-6 of the largest entry,
    is at least twice the move seen."""
    p = _program("def f(x, w):\n"
                 "    def step1(carry, r):\n"
                 "        h, s = carry\n"
                 "        h = h * np.cos(r) + 0.1\n"
                 "        s = 0.5 * s + np.sum(h * h)\n"
                 "        return ((h, s), s)\n"
                 "    (v2, v4), v3 = sg.scan(step1, (x[:8], 0.1), w)\n"
                 "    return np.sum(np.sin(sg.fori_loop(0, 3, lambda i, y: y.at[i + 1].add(y[i] ** 2), "
                 "sg.numpy.asarray(v3))))\n", shapes=((128,), (64,)), seed=1719433448)
    found, status = fuzz.check(p, backends=("python", "vm"))
    assert status == "ok" and not found, _report(found)


def test_a_hessian_of_cancelling_terms_is_compared_at_its_own_noise(monkeypatch):
    """A soak's sum of sqrt(h*h) = |h| over a scan's carries: its Hessian is 0, computed as terms near 1/|h|
    that cancel to about 1e-7 (the same numbers since before this session's changes), and an ulp's move of
    the library's results moves them by 100; H @ v was compared with the hvp at 1e-9 with no noise floor.
    H's own noise times the tangent is the floor now; on a smooth function an error of 1e-6 is still found."""
    p = _program("def f(x):\n"
                 "    def step1(carry, r):\n"
                 "        h = carry\n"
                 "        h = h * 0.7 + np.sum(h * 0.8) * 0.1 + r\n"
                 "        return (h, h * h)\n"
                 "    v2, v3 = sg.scan(step1, np.zeros(8), x)\n"
                 "    return np.sum(np.sqrt(v3))\n", seed=1549415571)
    found, status = fuzz.check(p, backends=("python",), extras=("hessian",))
    assert status == "ok" and not found, _report(found)
    smooth = _program("def f(x):\n    return np.sum(np.sin(x) * np.roll(x, 1))\n")
    assert fuzz.check(smooth, backends=("python",), extras=("hessian",)) == ([], "ok")
    hvp = sg.hvp
    monkeypatch.setattr(sg, "hvp", lambda *a, **k: (lambda g: lambda *b: g(*b) + 1e-6)(hvp(*a, **k)))
    found, _ = fuzz.check(smooth, backends=("python",), extras=("hessian",))
    assert ("hessian:python", "hessian @ v", "wrong") in [d.key for d in found]


def test_vmap_rows_are_compared_at_the_batchs_own_noise(monkeypatch):
    """The vmap extra's rows 1 and 2 are new inputs: compared at 1e-9 with no noise estimate, a soak's
    ill-conditioned program (sin of squares near 4e9 of a batch summing in another order) was reported.
    The batch's own noise is the floor now; a planted error is still found."""
    p = _program("def f(x):\n    return np.sum(np.tanh(x) * np.roll(x, 1))\n")
    assert fuzz.check(p, backends=("python",), extras=("vmap",)) == ([], "ok")
    vmap = sg.vmap
    monkeypatch.setattr(sg, "vmap", lambda *a, **k: (lambda g: lambda X: g(X) * (1 + 1e-6))(vmap(*a, **k)))
    found, _ = fuzz.check(p, backends=("python",), extras=("vmap",))
    assert any(d.key[0] == "vmap:python" and d.kind == "wrong" for d in found), _report(found)
