"""Pytrees as JAX has them: registered classes and dataclasses as containers of traced arguments and
gradients, tree_map / tree_flatten / ravel_pytree under JAX's names."""

import dataclasses

import numpy as np
import pytest

import symgrad as sg
from symgrad.util import pytree

RNG = np.random.default_rng(11)


@sg.register_dataclass
@dataclasses.dataclass
class Layer:
    W: np.ndarray
    b: np.ndarray
    act: str = dataclasses.field(default="tanh", metadata={"static": True})


class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second


sg.register_pytree_node(Pair, lambda p: ((p.first, p.second), "pair"), lambda aux, ch: Pair(*ch))


@sg.register_pytree_node_class
class Scaled:
    def __init__(self, value, scale):
        self.value, self.scale = value, scale

    def tree_flatten(self):
        return (self.value,), self.scale

    @classmethod
    def tree_unflatten(cls, scale, children):
        return cls(children[0], scale)


def _loss(layer, x):
    return np.sum(getattr(np, layer.act)(x @ layer.W + layer.b) ** 2)


def _fd(f, x, direction, h=1e-6):
    return (f(x + h * direction) - f(x - h * direction)) / (2 * h)


@pytest.mark.parametrize("act,backend", [("tanh", "python"), ("sin", "vm")])
def test_a_dataclass_of_parameters_gets_its_gradient_as_that_dataclass(act, backend):
    layer = Layer(RNG.normal(size=(70, 3)) * 0.1, RNG.normal(size=3), act)
    x = RNG.normal(size=(5, 70))
    g = sg.grad(_loss, backend=backend)(layer, x)
    assert isinstance(g, Layer) and g.act == act and g.W.shape == (70, 3) and g.b.shape == (3,)
    dW, db = RNG.normal(size=(70, 3)), RNG.normal(size=3)
    along = _fd(lambda t: _loss(Layer(layer.W + t * dW, layer.b + t * db, act), x), 0.0, 1.0)
    assert np.sum(g.W * dW) + np.sum(g.b * db) == pytest.approx(along, rel=1e-6)


def test_registered_nodes_flatten_map_and_rebuild():
    tree = {"p": Pair(1.0, [2.0, Scaled(3.0, 10.0)]), "q": (4.0,)}
    leaves, treedef = sg.tree_flatten(tree)
    assert leaves == [1.0, 2.0, 3.0, 4.0]
    back = sg.tree_unflatten(treedef, [10.0, 20.0, 30.0, 40.0])
    assert back["p"].second[1].value == 30.0 and back["p"].second[1].scale == 10.0 and back["q"] == (40.0,)
    doubled = sg.tree.map(lambda v: 2 * v, tree)
    assert sg.tree_util.tree_leaves(doubled) == [2.0, 4.0, 6.0, 8.0]
    # aux data is part of the structure: another scale is another tree
    assert sg.tree_structure(Scaled(1.0, 2.0)) != sg.tree_structure(Scaled(1.0, 3.0))
    assert pytree.paths(sg.tree_structure(Layer(1.0, 2.0))) == [".W", ".b"]


def test_gradient_through_a_registered_node_and_a_class_decorated_one():
    def f(p):
        return np.sum(np.sin(p.first) * p.second.value) * p.second.scale

    p = Pair(RNG.normal(size=80), Scaled(RNG.normal(size=80), 3.0))
    g = sg.grad(f)(p)
    assert isinstance(g, Pair) and isinstance(g.second, Scaled) and g.second.scale == 3.0
    np.testing.assert_allclose(g.first, np.cos(p.first) * p.second.value * 3.0, rtol=1e-12)
    np.testing.assert_allclose(g.second.value, np.sin(p.first) * 3.0, rtol=1e-12)


def test_tree_map_over_several_trees_and_is_leaf():
    a, b = {"x": 1.0, "y": [2.0, 3.0]}, {"x": 10.0, "y": [20.0, 30.0]}
    assert sg.tree_map(lambda u, v: u + v, a, b) == {"x": 11.0, "y": [22.0, 33.0]}
    with pytest.raises(ValueError, match="another structure"):
        sg.tree_map(lambda u, v: u + v, a, {"x": 1.0, "y": [2.0]})
    counted = sg.tree_map(len, {"x": [1, 2, 3], "y": [4]}, is_leaf=lambda n: isinstance(n, list))
    assert counted == {"x": 3, "y": 1}


def test_ravel_pytree_round_trips_and_traces_rolled():
    tree = {"W": RNG.normal(size=(8, 9)), "b": RNG.normal(size=3), "s": 2.5}
    flat, unravel = sg.ravel_pytree(tree)
    assert flat.shape == (76,)
    back = unravel(flat)
    np.testing.assert_array_equal(back["W"], tree["W"])
    assert back["s"] == 2.5
    with pytest.raises(ValueError, match="76 entries"):
        unravel(flat[:-1])

    def f(W, b):  # inside a rolled trace: one vector of parameters, and back
        v, unr = sg.ravel_pytree({"W": W, "b": b})
        return np.sum(v ** 2) + np.sum(np.sin(unr(v)["W"]))

    value, (gW, gb) = sg.value_and_grad(f, argnums=(0, 1))(tree["W"], tree["b"])
    assert value == pytest.approx(f(tree["W"], tree["b"]), rel=1e-12)
    np.testing.assert_allclose(gW, 2 * tree["W"] + np.cos(tree["W"]), rtol=1e-12)
    np.testing.assert_allclose(gb, 2 * tree["b"], rtol=1e-12)


def test_deep_trees_flatten_without_recursion():
    tree = 1.0
    for _ in range(100_000):
        tree = Pair(tree, None)
    leaves, treedef = sg.tree_flatten(tree)
    assert leaves == [1.0]
    assert sg.tree_leaves(sg.tree_unflatten(treedef, [5.0])) == [5.0]


def test_register_dataclass_names_a_missing_field():
    @dataclasses.dataclass
    class D:
        a: float

    with pytest.raises(ValueError, match="no field c"):
        sg.register_dataclass(D, data_fields=("a",), meta_fields=("c",))
    with pytest.raises(TypeError, match="not a dataclass"):
        sg.register_dataclass(Pair)


def test_broadcast_prefix():
    tree = {"a": (1.0, [2.0, 3.0]), "b": 4.0}
    assert pytree.broadcast_prefix(0, tree) == [0, 0, 0, 0]
    assert pytree.broadcast_prefix({"a": (None, 1), "b": 2}, tree) == [None, 1, 1, 2]
    with pytest.raises(ValueError, match="not a prefix"):
        pytree.broadcast_prefix({"a": 0}, tree)
    with pytest.raises(ValueError, match="not a prefix"):
        pytree.broadcast_prefix({"a": (0, 1, 2), "b": 0}, tree)
