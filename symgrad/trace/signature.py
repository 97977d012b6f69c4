"""Arguments as traced: what keys a trace (shapes, trees, static values), each leaf's symbol and dtype."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.expr import rolled
from symgrad.expr.build import Var
from symgrad.expr.functions import SymArray
from symgrad.expr.node import Expr
from symgrad.expr.traverse import as_expr_list
from symgrad.util import chunks, pytree

F64, OBJECT = np.dtype(np.float64), np.dtype(object)
SYMBOLIC = object()  # a signature marker: the argument holds expressions (we are inside another trace)
OTHER = object()  # a signature marker: bools, strings or other objects, static where not differentiated
CHUNKED = object()  # a signature marker: a Dask array (rows in chunks: never traced, run by symgrad.distributed)
fresh_names = itertools.count(1)  # distinct variable names for each trace inside another trace

if TYPE_CHECKING:
    from symgrad.trace.function import Function


@dataclass
class Slot:
    """One traced argument: its tree structure, each leaf's shape and dtype, and its symbolic leaves."""

    treedef: Any
    shapes: list[tuple]
    dtypes: list[Any]  # a float dtype to return derivatives in (float32 ...), or None for float64
    syms: list[Any]  # an Expr or a SymArray of variables per leaf
    integer: list[Expr]  # the rolled leaves of an integer dtype (they may index other arrays)

    def variables(self) -> list[Expr]:
        return [v for s in self.syms for v in as_expr_list(s)]


def leaf_info(leaf: Any, who: str, name: str) -> tuple[tuple, Any]:
    """(shape, dtype to return derivatives in) of a leaf, or a TypeError naming it."""
    if isinstance(leaf, Expr):
        return leaf.shape, None
    if isinstance(leaf, np.ndarray) and leaf.dtype == object:
        if not is_symbolic(leaf):  # (an object array of numbers: traced as their float64 values, as NumPy would)
            try:
                leaf.astype(float)
            except (TypeError, ValueError):
                raise TypeError(f"{who}: argument {name!r} is an object array holding neither numbers nor "
                                "symgrad expressions") from None
        return leaf.shape, None
    arr = np.asarray(leaf) if isinstance(leaf, np.ndarray | np.generic | int | float) else None
    if isinstance(leaf, int) and arr.dtype.kind == "O":  # beyond int64
        try:
            arr = np.asarray(float(leaf))
        except OverflowError:
            raise ValueError(f"{who}: argument {name!r} = {str(leaf)[:30]}... is too large for a float64") \
                from None
    if arr is None or arr.dtype.kind not in "biuf":
        kind = "complex" if arr is not None and arr.dtype.kind == "c" or isinstance(leaf, complex) else None
        if kind:
            raise TypeError(f"{who}: argument {name!r} is complex; complex inputs are not supported "
                            "(split it into real and imaginary parts)")
        raise TypeError(f"{who}: argument {name!r} is {type(leaf).__name__}; numbers, arrays of numbers and "
                        "tuples / lists / dicts of them are traced, anything else must be static "
                        "(static_argnums / static_argnames)")
    low = arr.dtype.kind == "f" and arr.dtype != F64
    return arr.shape, (arr.dtype if low else None)


def symbolic_leaf(name: str, shape: tuple, indexed: bool = False) -> Any:
    """A variable for a scalar leaf, an array of variables named ``name[i, j]`` for an array, or
    (``indexed``) one rolled array ``sg.array(name, shape)``."""
    if shape == ():
        return Var(name)
    if indexed:
        return rolled.array(name, shape)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = Var(f"{name}[{', '.join(map(str, index))}]")
    return out.view(SymArray)


def tangent_of(v: Expr) -> Expr:
    """The tangent input of the variable or array ``v`` (hvp's and jvp's direction): ``Δx``."""
    return Var(f"Δ{v.payload}") if v.op.name == "var" else rolled.array(f"Δ{v.payload[0]}", v.shape)


def is_symbolic(leaf: Any) -> bool:
    return isinstance(leaf, Expr) or isinstance(leaf, np.ndarray) and leaf.dtype == object and \
        any(isinstance(v, Expr) for v in leaf.flat)


def is_rolled(leaf: Any) -> bool:
    return isinstance(leaf, Expr) and leaf.op.array_valued


def signature(value: Any, data: bool = False) -> Any:
    """What keys a trace for one argument: its shape, or its tree of leaf shapes and dtypes; ``OTHER``
    where it holds a Python bool, string or another object (unless ``data``: traced, as numbers)."""
    kind = type(value)
    if kind is np.ndarray and (value.dtype is F64 or value.dtype == F64):  # (unpickled: equal, not it)
        return value.shape
    if kind is float or kind is int:
        return ()
    if kind in PLAIN:
        return () if data else OTHER
    leaves, treedef = pytree.flatten(value)
    sig = []
    for leaf in leaves:
        if is_symbolic(leaf):
            return SYMBOLIC
        if chunks.is_chunked(leaf):  # (its key must not find a trace made for NumPy arrays of its shape)
            return CHUNKED
        if not data and (type(leaf) in PLAIN or not is_number(leaf)):
            return OTHER
        sig.append((np.shape(leaf), getattr(leaf, "dtype", None)))
    return treedef, tuple(sig)


PLAIN = (bool, str)  # Python values a function uses as flags or names


def is_number(leaf: Any) -> bool:
    return isinstance(leaf, int | float | complex | np.ndarray | np.generic) or hasattr(leaf, "__array__")


def auto_static(value: Any, ints: bool) -> bool:
    """Whether an argument is a Python bool or string (or an int, with ``ints``), or a pytree of only
    those or of objects that are no numbers (``self`` of a method, a callable): specialised on its
    value where not differentiated (a flag, a name, a size), as ``static_argnums`` would make it."""
    leaves = pytree.tree_leaves(value)
    return bool(leaves) and all(type(leaf) in PLAIN or ints and type(leaf) is int or not is_number(leaf)
                                for leaf in leaves)


def has_symbolic(tree: Any) -> bool:
    return any(is_symbolic(leaf) for leaf in pytree.flatten(tree)[0])


def int_tuple(spec: Any, what: str) -> tuple[int, ...]:
    """``spec`` (an int or a sequence of ints) as a tuple, each named once."""
    items = (spec,) if isinstance(spec, int | np.integer) else spec
    if isinstance(items, str | bytes) or not isinstance(items, tuple | list | range) or not all(
            isinstance(i, int | np.integer) and not isinstance(i, bool) for i in items):
        raise TypeError(f"{what} must be an int or a tuple of ints (argument positions), got {spec!r}")
    items = tuple(int(i) for i in items)
    if len(set(items)) < len(items):
        raise ValueError(f"{what} {spec!r} names an argument twice")
    return items


def static_key(value: Any, where: Any, owner: Function) -> Any:
    key = ("static", value)
    try:
        hash(key)
    except TypeError:
        leaves, treedef = pytree.flatten(value)  # a list of sizes: its structure and values
        key = ("static", treedef, tuple(leaves))
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"{owner.__name__}: static argument {where!r} must be hashable (it keys the trace "
                            f"cache), got {type(value).__name__}") from None
    return key


