"""The symgrad command."""

import contextlib
import io
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from graphs import dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad import cli
from symgrad.cli import main

x, y, z = sg.symbols("x y z")


def test_a_c_compiler_that_fails_is_a_message_not_a_traceback(capsys, monkeypatch, tmp_path):
    """--backend c asks for the C compiler's kernels: where $CC fails, the error names it (exit 2)."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    assert main(["x*y + cos(x)", "--at", "x=2,y=3", "--backend", "c"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("symgrad: ") and "failed (exit status 1)" in err and "Traceback" not in err


def test_cli_main_job(capsys):
    assert main(["x*y + sin(x)", "--at", "x=2,y=3"]) == 0
    out = capsys.readouterr().out
    assert "f(x, y) = x*y + sin(x)" in out and "df/dx = y + cos(x)" in out and "df/dy = x" in out
    assert "f = 6.909297426825682" in out and "df/dx = 2.5838531634528574" in out
    assert re.search(r"compiled value-and-gradient \((c|numba), 5 ops\): ready in", out) and "us per call" in out
    assert out.strip().endswith("ok")
    assert main(["exp(x)/y", "--at", "x=0,y=2", "--backend", "vm"]) == 0
    out = capsys.readouterr().out
    assert "f = 0.5" in out and "df/dy = -0.25" in out and "(vm, " in out


@pytest.mark.parametrize("argv, match", [
    (["x*y", "--at", "x=2"], "no value for y"), (["x", "--at", "x=2,q=1"], "'q', but the formula uses only x"),
    (["x", "--at", "x=a"], "not a number"), (["x +"], "expected a number"), (["foo(x)"], "unknown function"),
    (["sin(x, y)"], "sin takes 1 argument, got 2"), (["sin()"], "sin takes 1 argument, got 0"),
    (["sin"], "sin is a function"), (["x*y", "--wrt", "x,x"], "--wrt: 'x' listed twice"),
    (["x*y", "--wrt", ""], "--wrt: no variable names given"), (["x*y", "--wrt", ","], "no variable names"),
    (["2 + 3", "--at", "x=1"], "'x', but the formula has no variables"),
    (["x*y", "--check"], "--check needs a point: give one with --at (nothing was checked)"),
    (["x", "--bogus"], "unrecognized arguments: --bogus"), ([], "the following arguments are required"),
    (["x", "--backend", "gpu"], "invalid choice: 'gpu'"), (["x + \udcff"], "unexpected character '\\udcff'"),
    (["x\0"], "unexpected character '\\x00'"), (["(" * 5000 + "x"], "'(' is never closed"),
    (["x" * 10**6 + "!"], "(1000001 characters): unexpected character '!'"),
])
def test_cli_errors_are_one_line_with_exit_status_2(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and len(err) < 400


@pytest.mark.parametrize("argv, value", [
    (["1/0"], "inf"), (["0**-1"], "inf"), (["10**400"], "inf"), (["(-1)**0.5"], "nan"), (["9**9**9"], "inf"),
    (["10**10**10"], "inf"), (["x * 2**10**10", "--at", "x=1"], "inf"), (["-x*y", "--at", "x=2,y=3"], "-6.0"),
    (["--", "-x*y", "--at", "x=2,y=3"], "-6.0"), (["--at", "x=2,y=3", "-x*y"], "-6.0"),
    (["2 + 3", "--at", ""], "5"), (["2 + 3", "--at", ","], "5.0"),
    (["+".join(["x"] * 1000), "--at", "x=1"], "1000.0"),
])
def test_cli_computes_what_numpy_would(argv, value, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"f() = {value}" in out or f"  f = {value}" in out or f"  f = {value!r}" in out, out


def test_invalid_utf8_in_argv_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "symgrad.cli", b"x + \xff"], capture_output=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count(b"\n") == 1 and b"\\udcff" in proc.stderr


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "symgrad.cli", "x**2", "--at", "x=3"], capture_output=True,
                         text=True, check=True).stdout
    assert "df/dx = 2*x" in out and "df/dx = 6.0" in out


def test_cli_wrt_hessian_latex_and_json(capsys):
    argv = ["a*exp(-b*t)", "--wrt", "a,b", "--at", "a=1,b=2,t=0.5", "--hessian", "--latex", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["wrt"] == ["a", "b"] and out["variables"] == ["a", "b", "t"]
    assert out["gradient"] == {"a": "exp(-b*t)", "b": "-a*t*exp(-b*t)"}
    e = math.exp(-1.0)
    assert out["value"] == pytest.approx(e, rel=1e-15)
    assert out["gradient_values"] == pytest.approx({"a": e, "b": -0.5 * e}, rel=1e-15)
    assert np.allclose(out["hessian_values"], [[0, -0.5 * e], [-0.5 * e, 0.25 * e]], rtol=1e-15)
    assert out["hessian"][1][1] == "a*t**2*exp(-b*t)" and out["latex"]["f"].startswith("a \\cdot e^{")
    assert "d2f/dbdb" in out["latex"] and out["check"]["ok"] and out["check"]["status"] == {"a": "ok", "b": "ok"}
    assert main(["a*exp(-b*t)", "--wrt", "b", "--hessian"]) == 0
    text = capsys.readouterr().out
    assert "df/db = -a*t*exp(-b*t)" in text and "d2f/dbdb = a*t**2*exp(-b*t)" in text and "df/da" not in text


def test_cli_json_writes_non_finite_values_as_strings(capsys):
    assert main(["log(x)", "--at", "x=0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["value"] == "-inf" and out["gradient_values"] == {"x": "inf"}


def test_cli_check_sets_the_exit_status(capsys, monkeypatch):
    assert main(["x*y", "--at", "x=2,y=3", "--check"]) == 0
    real = cli.check_grad

    def wrong(f, wrt, point):  # as if the symbolic gradient were off by 1
        return real(f, wrt, point, grad_exprs=[g + 1.0 for g in sg.grad(f, wrt)])

    monkeypatch.setattr(cli, "check_grad", wrong)
    assert main(["x*y", "--at", "x=2,y=3"]) == 0
    assert main(["x*y", "--at", "x=2,y=3", "--check"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_cli_wrt_errors_are_one_line(capsys):
    assert main(["x*y", "--wrt", "z"]) == 2
    err = capsys.readouterr().err
    assert "--wrt: the formula does not use 'z'" in err and err.count("\n") == 1


_OPTIONS = st.sampled_from([[], ["--hessian"], ["--json"], ["--check"], ["--latex"], ["--wrt", "x"],
                            ["--wrt", "x,y"], ["--wrt", ""], ["--at", "x=1,y=2"], ["--at", "x=0"],
                            ["--at", "x=-1e308,y=nan"], ["--at", "x"], ["--at", "x=1=2"], ["--"], ["-h"]])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(dags(max_ops=6, n_vars=2).map(lambda f: str(f).replace("x0", "x").replace("x1", "y")),
                 st.text(max_size=30),
                 st.sampled_from(["-x*y", "x/0", "sin(x, y)", "10**10**10*x", "x**y", "where(x<y, x, y)"])),
       st.lists(_OPTIONS, max_size=4).map(lambda groups: [a for g in groups for a in g]), st.booleans())
def test_random_command_lines_exit_0_1_or_2_with_no_traceback(formula, options, first):
    argv = [formula, *options] if first else [*options, formula]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--backend", "python"])
    assert code in (0, 1, 2)
    assert "Traceback" not in err.getvalue()
    if code == 2 and "-h" not in argv:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("symgrad: ")


def test_version_let_forms_and_non_finite_values(capsys):
    with pytest.raises(SystemExit) as done:
        cli._parser().parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"symgrad {sg.__version__}"
    assert main(["log(1 + exp(x*y))*cos(log(1 + exp(x*y)))", "--at", "x=0.5,y=1"]) == 0
    out = capsys.readouterr().out
    assert "df/dx =\n    t1 = log(exp(x*y) + 1)\n" in out  # a let-form on its own lines, under its label
    assert main(["log(x)", "--at", "x=0"]) == 0
    out = capsys.readouterr().out
    assert "  f = -inf\n" in out and "  df/dx = inf\n" in out  # as Python writes floats: no quotes


def test_check_exits_1_when_nothing_could_be_checked(capsys):
    assert main(["sqrt(x) + y", "--at", "x=0,y=2", "--check"]) == 0  # y checked, x not finite: fine
    assert main(["log(x)", "--at", "x=-1", "--check"]) == 1
    out, err = capsys.readouterr()
    assert "nothing could be checked" in err and "  result    nothing checked\n" in out  # (not "ok")


def _cli(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "symgrad.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_closed_pipe_ends_the_output_quietly():
    """`symgrad ... | head -1`: the reader takes one line and goes (whether the rest fits in the pipe's buffer
    depends on timing: the test below closes first). No traceback, exit status 0."""
    formula = "+".join(f"sin(x*{k})*cos(y*{k})" for k in range(1, 200))
    proc = _cli(formula, "--at", "x=1,y=2", "--hessian")
    first = proc.stdout.readline()
    proc.stdout.close()
    assert first.startswith("f(x, y) = ")
    assert proc.wait(timeout=300) == 0 and proc.stderr.read() == ""


@pytest.mark.parametrize("formula,status", [("x*y + sin(x)", 0), ("log(x)", 1)])
def test_with_the_reader_gone_the_status_is_the_checks(formula, status):
    """The reader closes before the first line (as `| head -1` after its line, every time): the status is
    still --check's (0 ok, 1 when nothing could be checked), with no traceback."""
    proc = _cli(formula, "--at", "x=0.5,y=3" if "y" in formula else "x=0", "--check", "--backend", "python")
    proc.stdout.close()
    assert proc.wait(timeout=300) == status
    assert "Traceback" not in proc.stderr.read()
