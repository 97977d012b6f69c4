"""Printing: the let form, linear size, LaTeX."""

import math

import symgrad as sg

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
