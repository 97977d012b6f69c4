"""sg.minimize: IPOPT (cyipopt) and SciPy's trust-constr with symgrad's gradient, sparse constraint
Jacobian and sparse Lagrangian Hessian, on problems whose optimum is known."""

import ctypes.util
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

import symgrad as sg
from symgrad.solvers import ipopt

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


def _hs071():
    """Hock-Schittkowski 71 (IPOPT's own example): min x0 x3 (x0 + x1 + x2) + x2, x0 x1 x2 x3 >= 25,
    |x|^2 = 40, 1 <= x <= 5; optimum 17.0140173 at (1, 4.743, 3.8211, 1.3794)."""
    product = scipy.optimize.NonlinearConstraint(lambda x: np.prod(x, keepdims=True), 25.0, np.inf)
    sphere = scipy.optimize.NonlinearConstraint(lambda x: np.sum(x ** 2, keepdims=True), 40.0, 40.0)
    x0 = np.array([1.0, 5.0, 5.0, 1.0])
    problem = sg.optimize.Problem(lambda x: x[0] * x[3] * np.sum(x[:3]) + x[2], [product, sphere], x0)
    return problem, x0, np.ones(4), np.full(4, 5.0)


def test_ipopt_through_ctypes_takes_the_steps_cyipopt_takes():
    """symgrad's binding of IPOPT's C interface and cyipopt's, on the same problem object and library:
    the same iterates, bit for bit (the callbacks and the values they write are the same), and HS071's
    published optimum."""
    import cyipopt  # (cyipopt's wheels: the test extra)
    problem, x0, lb, ub = _hs071()
    options = {"print_level": 0, "sb": "yes", "tol": 1e-10}
    ours = ipopt.solve(problem, x0, lb, ub, options, ipopt.builds()["cyipopt"])
    theirs_problem = cyipopt.Problem(n=4, m=2, problem_obj=problem, lb=lb, ub=ub, cl=problem.lower,
                                     cu=problem.upper)
    for name, value in options.items():
        theirs_problem.add_option(name, value)
    x, info = theirs_problem.solve(x0)
    assert ours["status"] == info["status"] == 0
    np.testing.assert_array_equal(ours["x"], x)
    np.testing.assert_array_equal(ours["mult_g"], info["mult_g"])
    assert ours["obj_val"] == info["obj_val"]
    np.testing.assert_allclose(ours["x"], [1.0, 4.74299963, 3.82114998, 1.37940829], rtol=1e-7)
    np.testing.assert_allclose(ours["obj_val"], 17.0140173, rtol=1e-8)


@pytest.mark.parametrize("build", sorted(ipopt.builds()))
def test_every_ipopt_build_found_reaches_hs071s_optimum(build):
    """Each IPOPT library installed (CasADi's wheel's, cyipopt's, the system's) through the binding."""
    problem, x0, lb, ub = _hs071()
    info = ipopt.solve(problem, x0, lb, ub, {"print_level": 0, "sb": "yes", "tol": 1e-10}, ipopt.builds()[build])
    assert info["status"] == 0, info["status_msg"]
    np.testing.assert_allclose(info["x"], [1.0, 4.74299963, 3.82114998, 1.37940829], rtol=1e-7)


def test_the_default_ipopt_is_casadis_wheel_unless_named(monkeypatch):
    """The ipopt extra's library (CasADi's wheel) comes first; $SYMGRAD_IPOPT_LIBRARY or library=
    choose another; a missing one is an error naming the path."""
    builds = ipopt.builds()
    assert next(iter(builds)) == "casadi" and ipopt.version().startswith("3.14")
    assert ipopt.library()._name == builds["casadi"]
    assert ipopt.library("cyipopt")._name == builds["cyipopt"]  # (a build by its name)
    monkeypatch.setenv("SYMGRAD_IPOPT_LIBRARY", builds["cyipopt"])
    assert ipopt.library()._name == builds["cyipopt"]
    with pytest.raises(OSError, match=r"from library= \('/nowhere/libipopt.so'\) cannot be loaded.*builds found"):
        ipopt.library("/nowhere/libipopt.so")
    monkeypatch.setenv("SYMGRAD_IPOPT_LIBRARY", "/nowhere/libipopt.so")
    with pytest.raises(OSError, match=r"from \$SYMGRAD_IPOPT_LIBRARY \('/nowhere"):
        ipopt.version()

def test_ipopt_stops_at_an_exception_in_a_callback_and_raises_it():
    problem, x0, lb, ub = _hs071()
    calls = []

    def failing(x, *rest):
        calls.append(1)
        if len(calls) > 3:
            raise ZeroDivisionError("the model broke at step 4")
        return original(x, *rest)

    original, problem.hessian = problem.hessian, failing
    with pytest.raises(ZeroDivisionError, match="step 4"):
        ipopt.solve(problem, x0, lb, ub, {"print_level": 0, "sb": "yes"})
    assert len(calls) == 4  # (IPOPT stopped there)


def test_ipopt_options_refused_by_name_and_numbers_given_as_integers():
    problem, x0, lb, ub = _hs071()
    with pytest.raises(ValueError, match="max_itr=5"):
        ipopt.solve(problem, x0, lb, ub, {"sb": "yes", "max_itr": 5})
    result = ipopt.solve(problem, x0, lb, ub, {"print_level": 0, "sb": "yes", "tol": 1, "max_iter": 2})
    assert result["status"] == -1 and result["status_msg"] == "Maximum Number of Iterations Exceeded."


def test_minimize_runs_on_an_ipopt_library_given_by_path():
    path = ctypes.util.find_library("ipopt")
    sphere = scipy.optimize.NonlinearConstraint(lambda x: np.sum(x ** 2, keepdims=True), 1.0, 1.0)
    result = sg.minimize(lambda x: x[0] + 2 * x[1], np.array([1.0, 0.0]), constraints=[sphere], library=path,
                         options={"tol": 1e-10})
    np.testing.assert_allclose(result.x, -np.array([1.0, 2.0]) / np.sqrt(5), rtol=1e-8)
    with pytest.raises(OSError, match="no-such-ipopt"):
        sg.minimize(lambda x: np.sum(x ** 2), np.ones(2), library="/no-such-ipopt.so")


def test_what_scipy_users_write_is_read_as_scipy_reads_it():
    """Found by an independent tester: no constraints at 1000 variables (an empty multiplier array was
    traced), a constraint returning a scalar, SciPy's (min, max) pair per variable (read as (lb, ub)
    arrays at n = 2: a wrong answer), one constraint not in a list, a float for an integer option."""
    result = sg.minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(1000), bounds=(-2.0, 0.8))
    assert result.success
    np.testing.assert_allclose(result.x, 0.8, atol=1e-7)
    plane = scipy.optimize.NonlinearConstraint(lambda x: x[0] + x[1] + x[2], 1.0, 1.0)
    np.testing.assert_allclose(sg.minimize(lambda x: np.sum(x ** 2), np.ones(3), constraints=plane).x, 1 / 3,
                               atol=1e-8)
    result = sg.minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(3), bounds=[(0, 0.5), (None, 0.2), (2, None)],
                         options={"max_iter": 50.0})
    np.testing.assert_allclose(result.x, [0.5, 0.2, 2.0], atol=1e-7)
    result = sg.minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(2), bounds=[(0, 0.5), (-1, 0.2)])
    np.testing.assert_allclose(result.x, [0.5, 0.2], atol=1e-7)


def test_bad_bounds_and_constraints_are_refused_by_name():
    square = lambda x: np.sum(x ** 2)  # noqa: E731
    with pytest.raises(ValueError, match="variable 1 has its lower bound 2.0 above its upper bound 1.0"):
        sg.minimize(square, np.zeros(2), bounds=([0.0, 2.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match="constraint 0 has its lower bound 2.0 above"):
        sg.minimize(square, np.zeros(2), constraints=[scipy.optimize.NonlinearConstraint(lambda x: x, 2.0, 1.0)])
    with pytest.raises(ValueError, match=r"bounds of shapes \(2,\) and \(3,\) for 2 variables"):
        sg.minimize(square, np.zeros(2), bounds=(np.zeros(2), np.ones(3)))
    with pytest.raises(TypeError, match="constraint 0 is a dict; give scipy.optimize.NonlinearConstraint"):
        sg.minimize(square, np.zeros(2), constraints=[{"type": "eq", "fun": lambda x: x[0]}])
    with pytest.raises(IndexError, match=r"constraint 1 fails at the starting point x0 \(of shape \(2,\)\)"):
        sg.minimize(square, np.zeros(2), constraints=[scipy.optimize.NonlinearConstraint(lambda x: x[:1], 0, 0),
                                                      scipy.optimize.NonlinearConstraint(lambda x: x[5], 0, 0)])
    with pytest.raises(TypeError, match="x0, the starting point, is None"):  # (IPOPT's status -13 before)
        sg.minimize(square, None)
    with pytest.raises(ValueError, match=r"x0 has nan or inf at \[1\]"):
        sg.minimize(square, [0.0, np.nan], method="ipopt")


def test_solves_from_several_threads_take_turns():
    """MUMPS, IPOPT's linear solver, is not thread-safe (the tester's four threads segfaulted one run in
    three): solves take turns, each right."""
    import threading

    results = {}

    def solve(k):
        circle = scipy.optimize.NonlinearConstraint(lambda x: np.sum(x ** 2, keepdims=True), 1.0, 1.0)
        results[k] = sg.minimize(lambda x: x[0] + (k + 1) * x[1], np.array([1.0, 0.0]), constraints=[circle],
                                 options={"tol": 1e-10}).x

    threads = [threading.Thread(target=solve, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_allclose(results[k], -np.array([1.0, k + 1]) / np.hypot(1.0, k + 1), rtol=1e-7)
