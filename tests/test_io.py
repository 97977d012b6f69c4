"""Printing, LaTeX, the SymPy bridge, the interpreter's inputs, check_grad, parse and the CLI."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad import cli
from symgrad.cli import main
from symgrad.parse import ParseError

x, y, z = sg.symbols("x y z")


def test_let_form_names_shared_subexpressions_once():
    s = sg.sin(x * y)
    text = sg.format({"f": s * s + s, "g": s + 1})
    assert text == "t1 = sin(x*y)\nf = t1*t1 + t1\ng = t1 + 1"
    t = sg.Var("t1")
    assert sg.format([s * s * t, s]).splitlines()[0] == "_t1 = sin(x*y)"  # no clash with a variable


def test_str_stays_linear_in_dag_size():
    e = x
    for _ in range(60):  # tree size 2**60, DAG size 121
        e = e * e + 1
    text = str(e)
    assert len(text) < 5000 and text.count("\n") < 130
    assert math.isclose(sg.evaluate(sg.parse(text.splitlines()[0].split(" = ")[1]), {x: 0.1}), 1.01)


def test_latex():
    assert sg.latex(sg.sqrt(x) / sg.exp(y)) == r"\frac{\sqrt{x}}{e^{y}}"
    assert sg.latex(sg.Var("alpha") ** 2 * sg.Var("x1")) == r"x_{1} \cdot \alpha^{2}"
    assert sg.latex(sg.abs(x - sg.Var("v[3]"))) == r"\left|x - v_{3}\right|"
    assert sg.latex(sg.hypot(x, y)) == r"\operatorname{hypot}\left(x, y\right)"
    assert sg.latex({"f": x * y}) == r"f = x \cdot y"
    assert sg.latex(sg.maximum(x, y)) == r"\max\left(x, y\right)"
    for name, op in sg.expr.ops.OPS.items():  # every op prints every argument, in text and LaTeX
        args = [x, y, z][: op.arity]
        e = op(*args) if args else None
        if e is not None and e.op is op:
            for text in (str(e), sg.latex(e)):
                assert all(a.name in text for a in args), (name, text)


def test_sympy_round_trip_of_every_op():
    exprs = [sg.expr.ops.OPS[n](*([x, y, z][: op.arity])) for n, op in sg.expr.ops.OPS.items() if op.arity]
    for point in ({x: 0.3, y: 0.6, z: -0.2}, {x: 1.7, y: -0.4, z: 0.0}):
        for e in exprs:
            s = sg.to_sympy(e)
            ref = complex(s.xreplace({sympy.Symbol(k.name, real=True): sympy.Float(v, 30)
                                       for k, v in point.items()}).evalf(30))
            ours = sg.evaluate(e, point)
            if ref.imag:  # outside the real domain: nan, as NumPy
                assert math.isnan(ours), str(e)
                continue
            assert ours == pytest.approx(ref.real, rel=1e-12, abs=1e-300), str(e)
            assert sg.evaluate(sg.from_sympy(s), point) == pytest.approx(ours, rel=1e-12), str(e)


def test_from_sympy_errors_and_constants():
    X = sympy.Symbol("x")
    assert sg.from_sympy(sympy.pi * X) is math.pi * x
    assert sg.from_sympy(sympy.sqrt(X) + 1 / X) is sg.sqrt(x) + 1 / x
    assert sg.evaluate(sg.from_sympy(sympy.log(X, 2)), {x: 8.0}) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="'gamma' has no symgrad equivalent"):
        sg.from_sympy(sympy.gamma(X))
    assert sg.from_sympy([X, X ** 2]) == [x, x ** 2]


def test_evaluate_inputs():
    assert sg.evaluate(x * y, {"x": 2, y: np.float32(3)}) == 6.0
    assert sg.evaluate(sg.exp(x), {x: 1j * math.pi}) == pytest.approx(-1)
    np.testing.assert_allclose(sg.evaluate(x + 1, {x: np.arange(3)}), [1, 2, 3])
    np.testing.assert_allclose(sg.evaluate(sg.const(2.0) + 0 * x, {x: np.zeros(2)}), [2.0, 2.0])
    H = sg.evaluate(sg.hessian(x ** 2 * y, [x, y]), {x: 1.0, y: 2.0})
    np.testing.assert_allclose(H, [[4, 2], [2, 0]])
    with pytest.raises(ValueError, match="no value given for variable 'y'"):
        sg.evaluate(x * y, {x: 1})
    with pytest.raises(TypeError, match="must be numeric"):
        sg.evaluate(x, {x: "a"})
    with pytest.raises(TypeError, match="keys must be variables"):
        sg.evaluate(x, {1: 2})
    with pytest.raises(TypeError, match="sg.substitute"):
        sg.evaluate(x, {x: y})


def test_substitute_and_free_variables():
    assert sg.substitute(x * y + sg.sin(x), {x: y}) is y * y + sg.sin(y)
    assert sg.free_variables([x * z, y]) == [x, y, z]


def test_check_grad_catches_a_wrong_gradient_and_reports_kinks():
    f = x * y + sg.sin(x)
    bad = sg.check_grad(f, [x, y], [2.0, 3.0], grad_exprs=[y + sg.sin(x), x])
    assert bad.status == ["FAIL", "ok"] and not bad
    with pytest.raises(sg.GradientCheckError, match="FAIL"):
        bad.raise_if_failed()
    with pytest.raises(sg.GradientCheckError):
        sg.check_grad(f, [x, y], [2.0, 3.0], grad_exprs=[y, x], raise_on_failure=True)
    kinks = sg.check_grad(sg.abs(x) + sg.maximum(x, y) + y, [x, y], [0.0, 1.0])
    assert kinks.status == ["kink", "ok"] and kinks.ok
    tie = sg.check_grad(sg.maximum(x, y), [x, y], {x: 1.0, y: 1.0})
    assert tie.status == ["kink", "kink"]
    assert sg.check_grad(sg.log(x), [x], [-1.0]).status == ["nonfinite"]
    assert sg.check_grad(sg.stop_gradient(x) * x, [x], [3.0]).ok


def test_check_grad_bad_points():
    with pytest.raises(ValueError, match="the point has 3 values but wrt has 2 variables"):
        sg.check_grad(x * y, [x, y], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="no value for 'y'"):
        sg.check_grad(x * y, [x, y], {x: 1.0})
    with pytest.raises(ValueError, match="no value given for variable 'z'"):
        sg.check_grad(x * y * z, [x, y], [1.0, 2.0])


@pytest.mark.parametrize(
    "text, match",
    [("x +", "syntax error"), ("gamma(x)", "unknown function 'gamma'"), ("x ^ 2", r"use \*\*"),
     ("__import__('os')", "unknown function"), ("x.real", "Attribute"), ("'a' + x", "not a number"),
     ("x < y < z", "chained")],
)
def test_parse_errors(text, match):
    with pytest.raises(ParseError, match=match):
        sg.parse(text)


def test_parse():
    assert sg.parse("x*y + sin(x)") is x * y + sg.sin(x)
    assert sg.parse("where(x > 0, x**2, -x) + pi") is sg.where(x > 0, x ** 2, -x) + math.pi
    assert sg.parse("2") is sg.const(2)


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


def test_progress_bars_on_a_terminal_only(capsys, monkeypatch):
    from symgrad import progress

    v = sg.vector("v", 3000)
    f = np.sum(np.sin(v[1:] * v[:-1]))
    monkeypatch.setattr(progress, "MIN_TOTAL", 1000)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    sg.value_and_grad(f, v, backend="vm")  # stderr is captured, not a terminal: silent
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SYMGRAD_PROGRESS", "1")
    sg.value_and_grad(f, v, backend="vm")
    err = capsys.readouterr().err
    assert "gradient:" in err and "lowering:" in err and "nodes/s" in err
    monkeypatch.setenv("SYMGRAD_PROGRESS", "0")
    sg.value_and_grad(f, v, backend="vm")
    assert capsys.readouterr().err == ""
