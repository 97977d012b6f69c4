"""Pytrees, as in JAX: tuples, lists, dicts (keys sorted), namedtuples, None and registered classes
(``register_pytree_node``, ``register_dataclass``) hold leaves. JAX's ``jax.tree_util`` and
``jax.tree`` functions have their names here too (``sg.tree_util.tree_map``, ``sg.tree.map``).

The traced API flattens each argument into leaves (numbers and arrays), traces those,
and rebuilds results (gradients, Jacobian blocks, auxiliary outputs) in the same
structure. A tree's structure is a hashable ``treedef``: ``LEAF``, or a tuple of the
container's kind and its children's treedefs.

>>> leaves, tree = flatten({"b": (1.0, 2.0), "a": [3.0]})
>>> leaves
[3.0, 1.0, 2.0]
>>> unflatten(tree, [30.0, 10.0, 20.0])
{'a': [30.0], 'b': (10.0, 20.0)}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

LEAF = None  # the treedef of a leaf
# Registered classes: class -> (flatten: node -> (children, aux), unflatten: (aux, children) -> node,
# the children's names for paths, or None). Grows by one entry per class a user registers.
_REGISTRY: dict[type, tuple[Callable, Callable, tuple[str, ...] | None]] = {}


def register_pytree_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable) -> type:
    """Make ``cls`` a container (JAX's ``register_pytree_node``): ``flatten_fn(node)`` gives
    ``(children, aux)``, ``unflatten_fn(aux, children)`` the node again; ``aux`` (static data, part
    of the structure) must be hashable.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> _ = register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch))
    >>> tree_leaves(Pair(1.0, [2.0, 3.0]))
    [1.0, 2.0, 3.0]
    """
    _REGISTRY[cls] = (flatten_fn, unflatten_fn, None)
    return cls


def register_pytree_node_class(cls: type) -> type:
    """Class decorator: ``cls.tree_flatten(self) -> (children, aux)`` and the classmethod
    ``cls.tree_unflatten(aux, children)`` make it a container (JAX's decorator of that name).

    >>> @register_pytree_node_class
    ... class Box:
    ...     def __init__(self, v): self.v = v
    ...     def tree_flatten(self): return (self.v,), None
    ...     @classmethod
    ...     def tree_unflatten(cls, aux, children): return cls(*children)
    >>> tree_map(lambda v: 2 * v, Box(3.0)).v
    6.0
    """
    return register_pytree_node(cls, lambda node: node.tree_flatten(), cls.tree_unflatten)


def register_dataclass(cls: type, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None) -> type:
    """Make a dataclass a container: its ``data_fields`` (all fields but ``meta_fields``, by default)
    hold leaves; ``meta_fields`` (by default those declared ``field(metadata={"static": True})``) are
    static: part of the structure, hashable. Also a decorator.

    >>> @register_dataclass
    ... @dataclasses.dataclass
    ... class Params:
    ...     W: Any
    ...     b: Any
    >>> tree_map(lambda v: v + 1, Params(W=1.0, b=2.0))
    Params(W=2.0, b=3.0)
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_dataclass: {cls.__name__} is not a dataclass")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    meta = tuple(f.name for f in fields if f.metadata.get("static")) if meta_fields is None else tuple(meta_fields)
    data = tuple(n for n in names if n not in meta) if data_fields is None else tuple(data_fields)
    unknown = sorted(set(data + meta) - set(names))
    if unknown:
        raise ValueError(f"register_dataclass: {cls.__name__} has no field {', '.join(unknown)}")

    def flatten_fn(node: Any) -> tuple[list, tuple]:
        return [getattr(node, n) for n in data], tuple(getattr(node, n) for n in meta)

    def unflatten_fn(aux: tuple, children: list) -> Any:
        return cls(**dict(zip(data, children)), **dict(zip(meta, aux)))
    _REGISTRY[cls] = (flatten_fn, unflatten_fn, data)
    return cls


def _children(node: Any) -> tuple[Any, list] | None:
    """(what rebuilds the node, its children) for a container; None for a leaf."""
    kind = type(node)
    if kind in _REGISTRY:
        children, aux = _REGISTRY[kind][0](node)
        return ("node", kind, aux), list(children)
    if kind is tuple or kind is list:
        return kind, list(node)
    if isinstance(node, tuple) and hasattr(node, "_fields"):  # a namedtuple
        return kind, list(node)
    if kind is dict:
        keys = sorted(node)  # JAX's order: a dict's leaves follow its sorted keys
        return ("dict", tuple(keys)), [node[k] for k in keys]
    if node is None:
        return "none", []
    return None


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, Any]:
    """The leaves of ``tree`` in order, and its structure (iterative: any depth); ``is_leaf(node)``
    true makes a container a leaf.

    >>> flatten((1.0, [2.0, None]))
    ([1.0, 2.0], (<class 'tuple'>, (None, (<class 'list'>, (None, ('none', ()))))))
    """
    leaves: list = []
    # Each frame: (rebuild kind, pending children iterator, finished child treedefs).
    root: list = []
    stack = [(None, iter([tree]), root)]
    while stack:
        kind, pending, done = stack[-1]
        for child in pending:
            split = None if is_leaf is not None and is_leaf(child) else _children(child)
            if split is None:
                leaves.append(child)
                done.append(LEAF)
                continue
            stack.append((split[0], iter(split[1]), []))
            break
        else:
            stack.pop()
            if stack:
                stack[-1][2].append((kind, tuple(done)))
    return leaves, root[0]


def unflatten(treedef: Any, leaves: list) -> Any:
    """Rebuild a tree of ``treedef``'s structure from ``leaves`` (in ``flatten``'s order).

    >>> unflatten(flatten([1.0, (2.0, 3.0)])[1], ["a", "b", "c"])
    ['a', ('b', 'c')]
    """
    if treedef is LEAF:
        return leaves[0]
    kind, children = treedef
    if (kind is tuple or kind is list) and all(c is LEAF for c in children):  # (one flat level: each call)
        return kind(leaves)
    items = iter(leaves)
    # Each frame: (treedef, children built so far); a node is built once all its children are.
    stack: list = [(treedef, [])]
    result: list = []
    while stack:
        tdef, built = stack[-1]
        if tdef is LEAF:
            stack.pop()
            (stack[-1][1] if stack else result).append(next(items))
            continue
        kind, children = tdef
        if len(built) < len(children):
            stack.append((children[len(built)], []))
            continue
        stack.pop()
        (stack[-1][1] if stack else result).append(_rebuild(kind, built))
    return result[0]


def _rebuild(kind: Any, children: list) -> Any:
    if kind is tuple or kind is list:
        return kind(children)
    if kind == "none":
        return None
    if isinstance(kind, tuple) and kind[0] == "node":
        return _REGISTRY[kind[1]][1](kind[2], children)
    if isinstance(kind, tuple):  # ("dict", keys)
        return dict(zip(kind[1], children))
    return kind(*children)  # a namedtuple


def broadcast_prefix(prefix: Any, tree: Any) -> list:
    """For each leaf of ``tree``, the leaf of ``prefix`` above it: ``prefix`` has ``tree``'s structure
    down to some depth, each of its leaves (None too) standing for a whole subtree (vmap's in_axes).

    >>> broadcast_prefix({"a": 0, "b": None}, {"a": (1.0, 2.0), "b": 3.0})
    [0, 0, None]
    """
    out: list = []
    stack = [(prefix, tree)]
    while stack:
        p, t = stack.pop()
        split = None if p is None else _children(p)
        if split is None:
            out.extend([p] * len(flatten(t)[0]))
            continue
        inner = _children(t)
        if inner is None or inner[0] != split[0] or len(inner[1]) != len(split[1]):
            raise ValueError(f"{p!r} is not a prefix of the structure of {t!r}")
        stack.extend(reversed(list(zip(split[1], inner[1]))))
    return out


def is_leaf(treedef: Any) -> bool:
    """Whether a treedef is a single leaf (the argument was a number or an array itself)."""
    return treedef is LEAF


def paths(treedef: Any) -> list[str]:
    """A readable path for each leaf, as Python would index it: ``['W']``, ``[0][1]``.

    >>> paths(flatten({"W": 1.0, "b": (2.0, 3.0)})[1])
    ["['W']", "['b'][0]", "['b'][1]"]
    """
    out: list[str] = []
    stack = [(treedef, "")]
    while stack:
        tdef, prefix = stack.pop()
        if tdef is LEAF:
            out.append(prefix)
            continue
        kind, children = tdef
        named = isinstance(kind, tuple) and kind[0] == "node" and _REGISTRY[kind[1]][2]
        keys = named or (kind[1] if isinstance(kind, tuple) and kind[0] == "dict" else range(len(children)))
        for key, child in reversed(list(zip(keys, children))):
            stack.append((child, f"{prefix}.{key}" if named else f"{prefix}[{key!r}]"))
    return out


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of ``tree`` in order (JAX's ``tree_leaves``).

    >>> tree_leaves({"b": [1.0, 2.0], "a": 3.0})
    [3.0, 1.0, 2.0]
    """
    return flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """The structure of ``tree`` (what ``unflatten`` takes).

    >>> tree_structure([1.0, 2.0]) == tree_structure([5.0, 6.0])
    True
    """
    return flatten(tree, is_leaf)[1]


def tree_map(f: Callable, tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``f`` applied to each leaf of ``tree`` (and the leaves at the same places of the trees in
    ``rest``, which have ``tree``'s structure), in a tree of that structure (JAX's ``tree_map``).

    >>> tree_map(lambda a, b: a + b, {"x": 1.0, "y": (2.0,)}, {"x": 10.0, "y": (20.0,)})
    {'x': 11.0, 'y': (22.0,)}
    """
    leaves, treedef = flatten(tree, is_leaf)
    others = []
    for k, other in enumerate(rest):
        their, theirs = flatten(other, is_leaf)
        if theirs != treedef:
            raise ValueError(f"tree_map: tree {k + 1} of rest has another structure than the first tree: "
                             f"{paths(theirs)} instead of {paths(treedef)}")
        others.append(their)
    return unflatten(treedef, [f(*args) for args in zip(leaves, *others)])


def ravel_pytree(tree: Any) -> tuple[Any, Callable[[Any], Any]]:
    """All leaves of ``tree`` as one flat vector, and the function that turns such a vector back into
    a tree of that structure and those shapes (JAX's ``jax.flatten_util.ravel_pytree``).

    >>> flat, unravel = ravel_pytree({"W": np.ones((2, 2)), "b": 3.0})
    >>> flat
    array([1., 1., 1., 1., 3.])
    >>> unravel(flat * 2)["W"]
    array([[2., 2.],
           [2., 2.]])
    """
    leaves, treedef = flatten(tree)
    shapes = [np.shape(leaf) for leaf in leaves]
    sizes = [math.prod(shape) for shape in shapes]
    flat = np.concatenate([np.ravel(leaf) for leaf in leaves]) if leaves else np.zeros(0)

    def unravel(vector: Any) -> Any:
        if np.shape(vector) != (sum(sizes),):
            raise ValueError(f"unravel: a vector of {sum(sizes)} entries expected, got shape {np.shape(vector)}")
        out, at = [], 0
        for shape, size in zip(shapes, sizes):
            piece = vector[at:at + size]
            out.append(np.reshape(piece, shape) if shape else piece[0])
            at += size
        return unflatten(treedef, out)
    return flat, unravel


# JAX's names: jax.tree_util.tree_flatten / tree_unflatten, and jax.tree.map / leaves / structure / ...
tree_flatten, tree_unflatten = flatten, unflatten
map, leaves, structure = tree_map, tree_leaves, tree_structure  # noqa: A001 (sg.tree.map, as jax.tree.map)
