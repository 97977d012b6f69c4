"""The SymPy bridge: every op both ways, errors and constants."""

import math

import pytest
import sympy

import symgrad as sg

x, y, z = sg.symbols("x y z")


def test_sympy_round_trip_of_every_op():
    whole = {"polygamma": (2.0, y), "sinc_derivative": (2.0, y), "ive": (1.0, y), "erfinv": (0.5 * sg.tanh(y),)}
    # (orders are whole numbers, as SciPy's: SymPy's extend to any)
    exprs = [op(*whole.get(op.name, [x, y, z][: op.arity])) for op in sg.expr.ops.FUNCTIONS.values()]
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


def test_n_ary_min_and_max_from_sympy_fold_pairwise():
    """SymPy flattens Min(Min(a, b), c) into Min(a, b, c); symgrad's minimum takes two arguments."""
    a, b, c = sympy.symbols("a b c")
    f = sg.from_sympy(sympy.Min(0.5, a, b, c) + sympy.Max(a, b, c))
    assert sg.evaluate(f, {"a": 2.0, "b": -1.0, "c": 3.0}) == -1.0 + 3.0


def test_to_sympy_names_a_comparison_sympy_cannot_build():
    """0.5 // (x < 0) is inf in NumPy where x >= 0; SymPy makes it zoo, which it refuses to compare."""
    x0, x2 = sg.symbols("x0 x2")
    with pytest.raises(ValueError, match=r"to_sympy: SymPy cannot build lt\(.*unsigned zoo"):
        sg.to_sympy(x0 + ((0.5 // (-(x2 + 1.0) < 0.5)) < 0.5))


def test_from_sympy_divides_where_sympy_has_a_reciprocal_factor():
    """SymPy's x/y is Mul(x, Pow(y, -1)); as x * (1/y) it rounds differently: 0.7484567 % 0.7484567
    came back as 0.7484567 - 0.7484567 * floor(0.9999999999999999) (found by hypothesis)."""
    x0 = sg.Var("x0")
    back = sg.from_sympy(sg.to_sympy(x0 % abs(x0)))
    assert "x0/abs(x0)" in str(back)
    assert sg.evaluate(back, {"x0": 0.7484567}) == 0.0
    x, y, z = sympy.symbols("x y z")
    assert [str(sg.from_sympy(e)) for e in (x / y, x * y / z, 2 / x)] == ["x/y", "x*y/z", "2/x"]


def test_symbols_are_real_by_default_and_plain_on_request():
    """SymPy's Symbol("x") is another symbol than Symbol("x", real=True): real=False gives the plain ones a
    user's own SymPy code makes, so the two cancel."""
    x = sg.Var("x")
    assert all(s.is_real for s in sg.to_sympy(x ** 2).free_symbols)
    assert sg.to_sympy(x ** 2) - sympy.Symbol("x") ** 2 != 0
    plain = sympy.Symbol("x")
    assert sympy.simplify(sg.to_sympy(sg.sin(x) * x, real=False) - sympy.sin(plain) * plain) == 0
