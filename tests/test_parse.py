"""Parsing formula strings: Python's grammar for arithmetic, floats from the start, one-line errors
for anything else, no recursion and nothing executed whatever the input."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.parse import ParseError

x, y, z = sg.symbols("x y z")


@pytest.mark.parametrize("text, match", [
    ("x +", r"expected a number, a name or '\(', got the end of the formula \(column 4\)"),
    ("gamma(x)", "unknown function 'gamma'"), ("x ^ 2", r"use \*\* for powers"),
    ("__import__('os')", "unknown function '__import__'"), ("x.real", "unexpected character '.'"),
    ("'a' + x", "unexpected character \"'\""), ("x < y < z", "chained"),
    ("sin(x, y)", "sin takes 1 argument, got 2"), ("sin()", "sin takes 1 argument, got 0"),
    ("where(x, y)", "where takes 3 arguments, got 2"), ("sin", "sin is a function: call it"),
    ("x y", "expected an operator, got 'y'"), ("(x", r"'\(' is never closed \(column 1\)"),
    ("x)", r"unmatched '\)'"), ("(x, y)", "a comma outside a function's arguments"), ("", "expected a number"),
    ("()", "expected a number"), ("0x10", "expected an operator, got 'x10'"), ("x\0", r"'\\x00'"),
    ("x\udcff", r"'\\udcff'"), ("lambda: 0", "unexpected character ':'"),
    ("x; import os", "unexpected character ';'"),
])
def test_parse_errors(text, match):
    with pytest.raises(ParseError, match=match):
        sg.parse(text)


def test_parse():
    assert sg.parse("x*y + sin(x)") is x * y + sg.sin(x)
    assert sg.parse("where(x > 0, x**2, -x) + pi") is sg.where(x > 0, x ** 2, -x) + math.pi
    assert sg.parse("2") is sg.const(2)
    assert sg.parse("1_000.5e-1 + .5 + 2.") is sg.const(1_000.5e-1 + .5 + 2.)


@pytest.mark.parametrize("text", ["-x**2", "2**-x", "2**3**2", "-2*3", "x - -y", "x // y % 3", "x % y * z",
                                  "(x < y) < 1", "x == y", "x != -y", "-x*y", "x/y/z", "x**-y**z", "+x"])
def test_precedence_is_pythons(text):
    want = eval(text, {}, {"x": x, "y": y, "z": z})  # noqa: S307 - the reference: Python's own parser
    assert sg.parse(text) is (want if isinstance(want, sg.Expr) else sg.const(want))


@pytest.mark.parametrize("text, value", [
    ("1/0", math.inf), ("0**-1", math.inf), ("10**400", math.inf), ("(-1)**0.5", math.nan),
    ("9**9**9", math.inf), ("10**10**10", math.inf), ("1" * 5000, math.inf), ("1e999999999999999", math.inf),
    ("-1/0", -math.inf), ("0/0", math.nan),
])
def test_numbers_are_floats_as_numpy_computes_them(text, value):
    got = sg.parse(text)  # no bignum arithmetic: 10**10**10 would take hours
    assert math.isnan(got.value) if math.isnan(value) else got.value == value


def test_a_huge_exponent_of_a_variable_is_immediate():
    assert sg.parse("x * 2**10**10") is math.inf * x


@pytest.mark.parametrize("make", [
    lambda n: "+".join(["x", "y"] * (n // 2)), lambda n: "(" * n + "x" + ")" * n,
    lambda n: "sin(" * n + "x" + ")" * n, lambda n: "-" * n + "x", lambda n: "x**" * n + "y",
])
def test_length_and_nesting_need_no_recursion(make):
    f = sg.parse(make(20000))
    assert sg.count_nodes(f) >= 1


def test_an_error_quotes_at_most_80_characters():
    with pytest.raises(ParseError) as info:
        sg.parse("x + " * 100000 + "!")
    message = str(info.value)
    assert len(message) < 200 and "(400001 characters)" in message and "column 400001" in message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(list("xy01.e+-*/%<>=!(),^_ \0\t") + ["sin", "**", "//", "where", "pi",
                                                                      "\udcff", "é"]), max_size=40).map("".join)
       | st.text(max_size=40))
def test_random_strings_parse_or_raise_parse_error(text):
    try:
        got = sg.parse(text)
    except ParseError as e:
        assert "\n" not in str(e) and len(str(e)) < 300
        return
    assert isinstance(got, sg.Expr)
    assert isinstance(sg.parse(str(got)), sg.Expr)  # whatever parses prints as a formula



def test_a_printed_let_form_parses_back():
    """str() names shared subexpressions once (``t1 = ...`` lines) where repeating them would blow up:
    parse reads that form back (a random DAG's printing did not parse: test_random_graphs)."""
    x, y = sg.symbols("x y")
    e = sg.sin(x * y)
    for _ in range(12):
        e = sg.log(e * e + 1.0) + e
    text = str(e)
    assert "t1 = " in text
    back = sg.parse(text)
    point = {x: 0.3, y: 0.7}
    assert sg.evaluate(back, point) == pytest.approx(sg.evaluate(e, point), rel=1e-14)
    with pytest.raises(sg.ParseError, match="line 2"):
        sg.parse("t1 = sin(x)\nt2 = t1 +\nt2")
