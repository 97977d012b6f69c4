"""Printing: the let form, linear size, LaTeX."""

import logging
import math
import re

import pytest
from graphs import dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg

x, y, z = sg.symbols("x y z")


def test_let_form_names_shared_subexpressions_once():
    s = sg.sin(x * y + 0.5)
    text = sg.format({"f": s * s + s, "g": s + 1})
    assert text == "t1 = sin(x*y + 0.5)\nf = t1**2 + t1\ng = t1 + 1"
    t = sg.Var("t1")
    assert sg.format([s * s * t, s]).splitlines()[0] == "_t1 = sin(x*y + 0.5)"  # no clash with a variable
    # only what prints more than once, and is long, gets a name: sin(x*y) is short, t1/t1/t1 is one use
    assert sg.format({"f": sg.sin(x * y) * sg.sin(x * y) + sg.sin(x * y)}) == "f = sin(x*y)**2 + sin(x*y)"
    assert sg.format(y / s / s / s) == "y/sin(x*y + 0.5)**3"


def test_str_stays_linear_in_dag_size():
    e = x
    for _ in range(60):  # tree size 2**60, DAG size 121
        e = e * e + 1
    text = str(e)  # e*e reads as e**2: each level prints once, so nothing needs a name
    assert len(text) < 5000 and text.startswith("(" * 59 + "x**2 + 1)**2 + 1)**2") and text.count("**2 + 1") == 60
    assert math.isclose(sg.evaluate(sg.parse(text), {x: 0.1}), sg.evaluate(e, {x: 0.1}), rel_tol=1e-15)
    e = x
    for _ in range(8):  # (finite at 0.1; tree size 511: past the inline limit)
        e = e * e + 1
    s = sg.tanh(e)
    text = str(s * s + s * e)  # shared and long: named once (t1 = the sum); tanh(t1) is short, repeated
    assert text.startswith("t1 = (((") and text.endswith("\ntanh(t1)**2 + tanh(t1)*t1")
    assert math.isclose(sg.evaluate(sg.parse(text), {x: 0.1}), sg.evaluate(s * s + s * e, {x: 0.1}), rel_tol=1e-12)


def test_latex():
    assert sg.latex(sg.sqrt(x) / sg.exp(y)) == r"\frac{\sqrt{x}}{e^{y}}"
    assert sg.latex(sg.Var("alpha") ** 2 * sg.Var("x1")) == r"\alpha^{2} \cdot x_{1}"  # variables by name
    assert sg.latex(-2 * x / (sg.sqrt(y) * (x ** 2 + 1))) == (
        r"-\frac{2 \cdot x}{\sqrt{y} \cdot \left(x^{2} + 1\right)}")
    assert sg.latex(sg.sqrt(y) ** 3 / (x / 3)) == r"\frac{3 \cdot y^{\frac{3}{2}}}{x}"
    assert sg.latex(sg.abs(x - sg.Var("v[3]"))) == r"\left|x - v_{3}\right|"
    assert sg.latex(sg.hypot(x, y)) == r"\operatorname{hypot}\left(x, y\right)"
    assert sg.latex({"f": x * y}) == r"f = x \cdot y"
    assert sg.latex(sg.maximum(x, y)) == r"\max\left(x, y\right)"
    for name, op in sg.expr.ops.FUNCTIONS.items():  # every op prints every argument, in text and LaTeX
        args = [x, y, z][: op.arity]
        e = op(*args) if args else None
        if e is not None and e.op is op:
            for text in (str(e), sg.latex(e)):
                assert all(a.name in text for a in args), (name, text)


def test_latex_superscripts_and_names_are_valid():
    assert sg.latex(sg.exp(x) ** 2) == r"\left(e^{x}\right)^{2}"
    assert sg.latex((x ** y) ** z) == r"\left(x^{y}\right)^{z}"
    assert sg.latex(sg.const(1.5e-20) ** x) == r"\left(1.5 \cdot 10^{-20}\right)^{x}"
    assert sg.latex(sg.Var("p['W'][0, 1]") * sg.Var("x#3")) == r"\text{p['W'][0, 1]} \cdot \text{x\#3}"
    assert sg.latex(sg.Var("a&b") + sg.Var("c_d") + sg.Var("e^f")) == r"\text{a\&b} + c_{d} + \text{e\^{}f}"
    assert sg.latex(x % 2) == r"x \;\mathrm{mod}\; 2"


_NAMES = st.text(st.characters(max_codepoint=0xFFFF), min_size=1, max_size=5).filter(str.isprintable)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=8), _NAMES)
def test_latex_of_random_graphs_parses_in_mathtext(f, name):
    """matplotlib's mathtext (a TeX-free parser of TeX math) accepts every line symgrad writes.
    Names stay in Unicode's basic plane: mathtext has no glyph lookup beyond it (TeX engines differ)."""
    mathtext = pytest.importorskip("matplotlib.mathtext").MathTextParser("path")
    logging.getLogger("matplotlib").setLevel(logging.ERROR)  # missing glyphs are substituted, not errors
    f = f * sg.Var(name)
    for text in (sg.latex(f), sg.latex([f, f * 2]), sg.latex({name: f}), f._repr_latex_().strip("$")):
        for line in text.removeprefix(r"\begin{aligned}").removesuffix(r"\end{aligned}").split(" \\\\\n"):
            mathtext.parse(f"${line.replace('&=', '=')}$")


def test_a_variable_named_like_a_temporary_keeps_the_latex_valid():
    """A variable t0 pushes the temporaries to _t1, _t2 (found by hypothesis: "_t_{1}" is no TeX)."""
    f = sg.sin((sg.Var("x2") + 0.5 + sg.Var("x0")) * sg.Var("t0"))
    assert sg.latex([f, f * 2]).splitlines()[0] == (
        r"\_t_{1} = \sin\left(t_{0} \cdot \left(x_{2} + x_{0} + 0.5\right)\right) \\")


def test_repr_latex_for_jupyter():
    assert (x * y)._repr_latex_() == r"$x \cdot y$"
    e = x
    for _ in range(40):
        e = sg.sin(e) * sg.sin(e) + e  # big enough for the let-form
    text = e._repr_latex_()
    assert text.startswith(r"$\begin{aligned}t_{1} &= ") and text.endswith(r"\end{aligned}$")


def test_to_dot_shows_every_node_once_and_the_shared_ones_filled():
    s = sg.sin(x * y)
    dot = sg.to_dot({"f": s * s + s, "g \"quoted\"": s + 1})
    nodes = re.findall(r"^  (n\d+) \[label=", dot, re.M)
    edges = re.findall(r"^  (n\d+) -> (n\d+|out\d+)", dot, re.M)
    assert len(nodes) == sg.count_nodes([s * s + s, s + 1]) == 8
    assert {a for a, _ in edges} <= set(nodes) and len(edges) == 11
    assert re.findall(r'\[label="(\w+)", style=filled', dot) == ["sin"]
    assert 'out1 [label="g \\"quoted\\"", shape=house];' in dot
    chain = x
    for _ in range(10**5):
        chain = chain + 1.0  # no recursion
    assert sg.to_dot(chain).count(" -> ") == 2 * 10**5 + 1


def test_program_to_dot_follows_the_slots():
    from symgrad.compile.lower import lower

    program = lower([x * y + sg.sin(x), x * y], [x, y])
    dot = program.to_dot()
    assert dot.count(" [label=") == len(program) and '[label="out[0] = s' in dot
    assert dot.count(" -> ") == 2 + 1 + 2 + 2  # mul, sin, add read 5 values; 2 stores
    assert "i0 -> i2;" in dot and "i1 -> i2;" in dot  # x[0] and x[1] flow into the mul


def test_format_of_many_outputs():
    vs = sg.vector("v", 8000)
    text = sg.format(list(vs * 2.0))
    assert text.count("\n") == 7999 and text.splitlines()[-1] == "out[7999] = 2*v[7999]"
