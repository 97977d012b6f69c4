"""The symgrad command."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import cli
from symgrad.cli import main

x, y, z = sg.symbols("x y z")


def test_cli_main_job(capsys):
    assert main(["x*y + sin(x)", "--at", "x=2,y=3"]) == 0
    out = capsys.readouterr().out
    assert "f(x, y) = x*y + sin(x)" in out and "df/dx = y + cos(x)" in out and "df/dy = x" in out
    assert "f = 6.909297426825682" in out and "df/dx = 2.5838531634528574" in out
    assert "compiled value-and-gradient (numba, 5 ops): ready in" in out and "us per call" in out
    assert out.strip().endswith("ok")
    assert main(["exp(x)/y", "--at", "x=0,y=2", "--backend", "vm"]) == 0
    out = capsys.readouterr().out
    assert "f = 0.5" in out and "df/dy = -0.25" in out and "(vm, " in out


@pytest.mark.parametrize(
    "argv, match",
    [(["x*y", "--at", "x=2"], "no value for y"), (["x", "--at", "x=2,q=1"], "does not use"),
     (["x", "--at", "x=a"], "not a number"), (["x +"], "syntax error"), (["foo(x)"], "unknown function")],
)
def test_cli_errors_are_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "symgrad.cli", "x**2", "--at", "x=3"], capture_output=True,
                         text=True, check=True).stdout
    assert "df/dx = 2*x" in out and "df/dx = 6.0" in out


def test_cli_wrt_hessian_latex_and_json(capsys):
    argv = ["a*exp(-b*t)", "--wrt", "a,b", "--at", "a=1,b=2,t=0.5", "--hessian", "--latex", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["wrt"] == ["a", "b"] and out["variables"] == ["a", "b", "t"]
    assert out["gradient"] == {"a": "exp(-(b*t))", "b": "-(a*exp(-(b*t))*t)"}
    e = math.exp(-1.0)
    assert out["value"] == pytest.approx(e, rel=1e-15)
    assert out["gradient_values"] == pytest.approx({"a": e, "b": -0.5 * e}, rel=1e-15)
    assert np.allclose(out["hessian_values"], [[0, -0.5 * e], [-0.5 * e, 0.25 * e]], rtol=1e-15)
    assert out["hessian"][1][1] == "a*t*exp(-(b*t))*t" and out["latex"]["f"].startswith("a \\cdot e^{")
    assert "d2f/dbdb" in out["latex"] and out["check"]["ok"] and out["check"]["status"] == {"a": "ok", "b": "ok"}
    assert main(["a*exp(-b*t)", "--wrt", "b", "--hessian"]) == 0
    text = capsys.readouterr().out
    assert "df/db = -(a*exp(-(b*t))*t)" in text and "d2f/dbdb = a*t*exp(-(b*t))*t" in text and "df/da" not in text


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
    assert "--wrt: the formula does not use z" in err and err.count("\n") == 1
