"""check_grad: wrong gradients caught, kinks reported, bad points named."""

import pytest

import symgrad as sg

x, y, z = sg.symbols("x y z")


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
