"""sg.minimize: IPOPT (cyipopt) and SciPy's trust-constr with symgrad's gradient, sparse constraint
Jacobian and sparse Lagrangian Hessian, on problems whose optimum is known."""

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

import symgrad as sg

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
import collocation  # noqa: E402


@pytest.mark.parametrize("method", ["ipopt", "trust-constr"])
def test_the_nearest_point_of_a_plane_to_the_origin(method):
    """min |x|^2 subject to a . x = 1: x = a / |a|^2 (a large array: the rolled sparse path)."""
    a = np.linspace(1.0, 2.0, 500)
    plane = scipy.optimize.NonlinearConstraint(lambda x: np.sum(a * x, keepdims=True), 1.0, 1.0)
    result = sg.minimize(lambda x: np.sum(x ** 2), np.zeros(500), constraints=[plane], method=method,
                         options={"tol": 1e-10} if method == "ipopt" else {"gtol": 1e-10, "xtol": 1e-12})
    np.testing.assert_allclose(result.x, a / np.sum(a ** 2), rtol=1e-6, atol=1e-9)


def test_bounds_and_an_inequality_are_active_where_they_should_be():
    """min sum((x - 2)^2) with x <= 1.5 on the first half and sum(x) <= 1.6 n: the bound holds the first
    half at 1.5, the sum the rest at 1.7 (KKT: x = 2 - mu / 2 where free, mu = 0.6)."""
    n = 300
    total = scipy.optimize.NonlinearConstraint(lambda x: np.sum(x, keepdims=True), -np.inf, 1.6 * n)
    upper = np.where(np.arange(n) < n // 2, 1.5, 5.0)
    result = sg.minimize(lambda x: np.sum((x - 2.0) ** 2), np.zeros(n), constraints=[total],
                         bounds=(np.full(n, -5.0), upper), method="ipopt", options={"tol": 1e-10})
    assert result.success
    np.testing.assert_allclose(result.x, np.where(np.arange(n) < n // 2, 1.5, 1.7), atol=1e-6)


def test_a_collocation_problem_matches_its_defects_and_the_derivatives_ipopt_is_given():
    """The cart-pole swing-up (examples/collocation.py) at N = 100: IPOPT converges, the defects vanish, and
    the sparse Jacobian and Lagrangian Hessian it was given are the dense rolled ones (lower triangle)."""
    collocation.N = 100
    try:
        z0 = collocation.guess()
        problem = sg.optimize.Problem(collocation.effort,
                                      [scipy.optimize.NonlinearConstraint(collocation.defects, 0.0, 0.0)], z0)
        rows, cols = problem.jacobianstructure()
        dense = np.zeros((problem.m, z0.size))
        dense[rows, cols] = problem.jacobian(z0)
        np.testing.assert_allclose(dense, sg.jacobian(collocation.defects, backend="vm")(z0), rtol=1e-12,
                                   atol=1e-12)
        lam = np.linspace(-1.0, 1.0, problem.m)
        rows, cols = problem.hessianstructure()
        lower = np.zeros((z0.size, z0.size))
        lower[rows, cols] = problem.hessian(z0, lam, 0.5)
        want = sg.hessian(lambda z: 0.5 * collocation.effort(z) + np.sum(lam * collocation.defects(z)),
                          backend="vm")(z0)
        np.testing.assert_allclose(lower, np.tril(want), rtol=1e-10, atol=1e-10)
        lb, ub = collocation.bounds()
        result = sg.minimize(collocation.effort, z0, bounds=(lb, ub), method="ipopt",
                             constraints=[scipy.optimize.NonlinearConstraint(collocation.defects, 0.0, 0.0)])
        assert result.success and result.nit > 0
        assert np.abs(collocation.defects(result.x)).max() < 1e-8
        assert np.all(np.abs(result.x[4 * 101:]) <= collocation.FORCE + 1e-8)
    finally:
        collocation.N = 2000
