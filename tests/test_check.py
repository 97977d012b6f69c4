"""check_grad: wrong gradients caught, kinks reported, bad points named."""

import numpy as np
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


def _loss(p, X, y):
    Z = X @ p["W"] + p["b"]
    return -np.sum(sg.log_softmax(Z, axis=1)[np.arange(y.shape[0]), y])


def test_functions_of_pytrees_with_data_arguments_and_argnums():
    """check_grads as JAX has it: dicts of parameters, integer data passed through, entry names."""
    rng = np.random.default_rng(2)
    p = {"W": rng.normal(size=(6, 4)), "b": rng.normal(size=4)}
    X, y = rng.normal(size=(5, 6)), rng.integers(0, 4, 5)
    report = sg.check_grad(_loss, p, X, y)  # argnums: the arguments of floats (p and X), y is data
    assert report.ok and len(report.names) == 24 + 4 + 30
    assert report.names[:2] == ["p['W'][0, 0]", "p['W'][0, 1]"] and report.names[-1] == "X[4, 5]"
    only_p = sg.check_grad(_loss, p, X, y, argnums=0, order=2)
    assert only_p.ok and len(only_p.names) == 2 * 28 and only_p.names[28].startswith("order 2: ")
    with pytest.raises(ValueError, match="argnums"):
        sg.check_grad(_loss, p, X, y, argnums=5)


def test_large_arguments_are_checked_along_random_directions():
    x = np.random.default_rng(3).normal(size=5000)
    report = sg.check_grad(lambda v: np.sum(np.sin(v) * v[::-1]), x, order=2)
    assert report.ok and report.names == [f"direction {k}" for k in (1, 2, 3)] + [
        f"order 2: direction {k}" for k in (1, 2, 3)]
    wrong = sg.check_grad(lambda v: np.sum(v * sg.stop_gradient(v)), x)  # gradient v, not 2v
    assert wrong.status == ["FAIL"] * 3


def test_order_two_finds_a_wrong_second_derivative():
    """Value x**3 and gradient 3 x**2 right, the gradient's own derivative 0 (stopped): order 1 passes,
    order 2 fails."""
    def f(x):
        return np.sum(3 * x * sg.stop_gradient(x ** 2) - 2 * sg.stop_gradient(x ** 3))

    x = np.array([0.5, -1.0, 2.0])
    assert sg.check_grad(f, x).ok
    second = sg.check_grad(f, x, order=2)
    assert second.status[:3] == ["ok"] * 3 and second.status[3:] == ["FAIL"] * 3


def test_kinks_of_functions_are_found_from_the_function_itself():
    report = sg.check_grad(lambda x: np.sum(np.abs(x - 0.5) ** 3 + np.maximum(x, 0)), np.linspace(-1, 1, 5))
    assert report.status == ["ok", "ok", "kink", "ok", "ok"]  # |x - 0.5|**3 is smooth enough at 0.5


def test_check_grads_raises_as_jaxs_does():
    sg.check_grads(lambda x, y: np.sum(np.sin(x) * y ** 2), (np.array([0.3, -1.2]), 0.7), order=2)

    @sg.custom_jvp
    def wrong(x):
        return np.sin(x)

    wrong.defjvps(lambda t, ans, x: 2.0 * np.cos(x) * t)  # twice the derivative
    for modes in (["rev"], ["fwd"]):
        with pytest.raises(AssertionError, match=None if modes == ["rev"] else "forward mode, order 1"):
            sg.check_grads(wrong, (0.4,), order=1, modes=modes)
    # forward mode takes results of any shape (reverse mode: a scalar's gradient), to any order
    sg.check_grads(lambda x, p: {"a": np.tanh(x) * x[::-1], "b": p["w"] ** 3}, (np.array([0.3, -1.2]),
                   {"w": 0.7}), order=3, modes=["fwd"])


def test_checkpoint_and_tree_util_port_unchanged():
    from symgrad.tree_util import tree_flatten

    from symgrad.ports.ad_checkpoint import checkpoint_name

    @sg.checkpoint
    def layer(w, x):
        return checkpoint_name(np.tanh(w * x), "h")

    deep = sg.checkpoint(layer, policy=sg.checkpoint_policies.save_only_these_names("h"))
    f = lambda w: np.sum(deep(w, layer(w, np.linspace(0.0, 1.0, 5))))  # noqa: E731
    w = 0.8
    assert sg.grad(f)(w) == pytest.approx((f(w + 1e-6) - f(w - 1e-6)) / 2e-6, rel=1e-7)
    assert tree_flatten({"a": 1.0, "b": (2.0,)})[0] == [1.0, 2.0]


def test_jax_config_lines_port():
    sg.config.update("jax_enable_x64", True)
    with pytest.raises(ValueError, match="jax_debug_nans"):
        sg.config.update("jax_debug_nans", True)
