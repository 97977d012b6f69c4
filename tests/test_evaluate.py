"""The interpreter's inputs, substitute and free_variables."""

import math

import numpy as np
import pytest

import symgrad as sg

x, y, z = sg.symbols("x y z")


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
