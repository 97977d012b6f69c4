"""Every example runs (as a user would run it) and prints what it claims."""

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def run(name: str) -> str:
    # No timeout: an example compiles (digits: its loops, minutes on a loaded machine), and a wall-clock limit
    # would fail a correct run there. Nothing in them waits on anything that could hang.
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def number(pattern: str, text: str) -> float:
    return float(re.search(pattern, text).group(1))


def test_quickstart():
    out = run("quickstart")
    assert "df/dx    = y + cos(x)" in out and "f = 6.909297426826" in out and out.strip().endswith("ok")
    assert "vg([2, 3]) = (6.909297426825682, array([2.58385316, 2.        ]))" in out
    assert "df/dv[0] = v[1] + cos(v[0])" in out


def test_optimize():
    out = run("optimize")
    assert "2998 nonzeros of 1000000" in out
    assert number(r"Newton-CG, symgrad gradient \+ sparse Hessian .* max\|x - 1\| = (\S+)", out) < 1e-6
    assert re.search(r"same 100 L-BFGS-B iterations: symgrad's gradient \d+x faster", out)  # (no timing asserted)


def test_fitting():
    out = run("fitting")
    assert re.search(r"symgrad sum \+ BFGS\s+1\.99\d\d\s+0\.34\d\d\s+3\.10\d\d\s+0\.60\d\d", out)
    assert number(r"the fits differ by at most (\S+)", out) < 1e-4


def test_digits():
    pytest.importorskip("sklearn")
    out = run("digits")
    assert number(r"test accuracy: ([\d.]+)%", out) >= 90
    assert out.count("finite difference") == 5


def test_rnn():
    out = run("rnn")
    nodes = re.findall(r"live expression nodes (\d+)", out)
    memory = [float(m) for m in re.findall(r"Python memory in use (\d+) kB", out)]
    assert len(nodes) == 2 and nodes[0] == nodes[1] and memory[1] <= memory[0] + 100
    assert number(r"loss \S+ -> (\S+)", out) < 1e-3


def test_mechanics():
    out = run("mechanics")
    assert "EL[0] = " in out and "\\theta_{1}" in out and "alpha2 = " in out
    assert number(r"textbook equations .* max difference (\S+)", out) < 1e-9
    assert number(r"energy drift (\S+)", out) < 1e-6


def test_gradcheck():
    out = run("gradcheck")
    assert "wrong components: ['y']" in out and "result    FAILED" in out and "GradientCheckError" in out


def test_the_tutorial_runs_top_to_bottom_as_written():
    """Its code blocks, in order, in one namespace (as a reader pastes them), and what they promise."""
    text = (pathlib.Path(__file__).parent.parent / "docs" / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 6
    namespace: dict = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"tutorial.md, block {k}", "exec"), namespace)  # noqa: S102
    assert namespace["gW"].shape == (3, 4) and namespace["gb"].shape == (3,)
    assert namespace["fit"].x == pytest.approx([2.0, 1.3], rel=1e-6)
    assert namespace["report"].ok


def test_c_newton_loop_calls_the_exported_gradient_and_sparse_hessian(tmp_path):
    """examples/c: `make` exports the energy's value-and-gradient and sparse Hessian as C, builds
    newton.c against them (-Wall -Wextra -Werror -pedantic) and runs it; the same Newton iteration in
    Python (symgrad's own kernels, NumPy's solve) reaches the same minimiser."""
    import importlib.util
    import os
    import shutil

    import numpy as np

    import symgrad as sg

    if shutil.which(os.environ.get("CC", "cc")) is None or shutil.which("make") is None:
        pytest.skip("the C example needs a C compiler and make")
    folder = tmp_path / "c"
    shutil.copytree(EXAMPLES / "c", folder)
    done = subprocess.run(["make", f"PYTHON={sys.executable}"], cwd=folder, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    x_c = np.array([float(v) for v in done.stdout.split("x =")[1].split()])
    spec = importlib.util.spec_from_file_location("c_example_export", folder / "export.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    N, energy = example.N, example.energy
    vg, H = sg.value_and_grad(energy), sg.hessian(energy)
    x = np.zeros(N)
    for _ in range(8):
        x = x - np.linalg.solve(H(x), vg(x)[1])
    np.testing.assert_allclose(x_c, x, rtol=1e-12, atol=1e-14)
    assert "iteration 7: energy 0.416536604028396" in done.stdout
