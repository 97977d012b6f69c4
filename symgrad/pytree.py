"""Pytrees, as in JAX: tuples, lists, dicts (keys sorted), namedtuples and None hold leaves.

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

from typing import Any

LEAF = None  # the treedef of a leaf


def _children(node: Any) -> tuple[Any, list] | None:
    """(what rebuilds the node, its children) for a container; None for a leaf."""
    kind = type(node)
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


def flatten(tree: Any) -> tuple[list, Any]:
    """The leaves of ``tree`` in order, and its structure (iterative: any depth).

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
            split = _children(child)
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
    """Rebuild a tree of ``treedef``'s structure from ``leaves`` (in :func:`flatten`'s order).

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
    if isinstance(kind, tuple):  # ("dict", keys)
        return dict(zip(kind[1], children))
    return kind(*children)  # a namedtuple


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
        keys = kind[1] if isinstance(kind, tuple) else range(len(children))
        for key, child in reversed(list(zip(keys, children))):
            stack.append((child, f"{prefix}[{key!r}]"))
    return out
