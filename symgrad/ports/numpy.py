"""NumPy for JAX ports: ``import symgrad.numpy as jnp`` and a file written for ``jax.numpy`` runs.

Every NumPy name is here (``jnp.sin``, ``jnp.sum``, ``jnp.linalg`` ...: NumPy's own, which symgrad
traces); the arrays made here (``jnp.zeros``, ``jnp.array``, ``jnp.arange`` ...) are NumPy arrays
with JAX's functional updates, ``x.at[i].set(v)`` (as traced arrays have); and ``jnp.ndarray`` is
NumPy's. ``jnp.array([a, b])`` of traced arrays stacks them whole (NumPy's ``np.array`` reads them
element by element). Values are float64 (JAX's default is float32).

>>> import symgrad as sg
>>> import symgrad.numpy as jnp
>>> def f(x):
...     return jnp.sum(jnp.zeros(3).at[1].set(x) ** 2)
>>> sg.grad(f)(3.0)
6.0
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as _np

from symgrad.expr import ndarrays, rolled
from symgrad.expr.functions import wrap
from symgrad.expr.node import Expr
from symgrad.expr.updates import At
from symgrad.trace import limits


class Array(_np.ndarray):
    """A NumPy array with ``.at`` (what this module's array makers return)."""

    @property
    def at(self) -> At:
        """JAX's functional updates: ``x.at[i].set(v)`` is a new array."""
        return At(self)


def _rolled_inside(values: Any) -> bool:
    """Whether nested lists / tuples hold a rolled (traced) array."""
    if isinstance(values, list | tuple):
        return any(_rolled_inside(v) for v in values)
    return isinstance(values, Expr) and values.op.array_valued


def _traced_scalar(v: Any) -> bool:
    return isinstance(v, Expr) and not v.op.array_valued and v.op.name != "const"


def _stacked(values: Any) -> Any:
    """Nested lists of rolled arrays stacked (``jnp.array([a, b])``), rolled: NumPy's own conversion
    would read every element of them one by one."""
    return _np.stack([_stacked(v) for v in values]) if isinstance(values, list | tuple) else values


def _making(make: Callable) -> Callable:
    @functools.wraps(make)
    def made(*args: Any, **kwargs: Any) -> Any:
        if make in (_np.asarray, _np.array) and args and (isinstance(args[0], Expr) or isinstance(
                args[0], _np.ndarray) and args[0].dtype == object):
            return args[0]  # a traced array already has .at (NumPy's conversion would take it apart)
        if make in (_np.asarray, _np.array) and args and _rolled_inside(args[0]):
            return _stacked(args[0])
        shape = args[0] if args else kwargs.get("shape")
        fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
        if make is _np.full and _traced_scalar(fill) and _np.prod(shape) >= limits.ROLLED_MIN:
            return rolled.tensor(fill, *ndarrays.fresh(tuple(_np.atleast_1d(shape))))  # (not n copies)
        out = make(*args, **kwargs)
        if type(out) is _np.ndarray and out.dtype == object:  # traced scalars among numbers: NumPy's
            return wrap(out)  # ufuncs would call .exp() on the numbers; a SymArray applies symgrad's
        return out.view(Array) if type(out) is _np.ndarray else out
    return made


for _name in ("array", "asarray", "zeros", "ones", "full", "empty", "arange", "linspace", "logspace", "eye",
              "identity", "zeros_like", "ones_like", "full_like", "empty_like", "concatenate", "stack",
              "hstack", "vstack", "tile", "repeat", "diag", "outer", "meshgrid"):
    globals()[_name] = _making(getattr(_np, _name))
_repeat = globals()["repeat"]  # (NumPy's, made here: the one below adds JAX's keyword)

ndarray = _np.ndarray


def repeat(a: Any, repeats: Any, axis: int | None = None, *, total_repeat_length: int | None = None) -> Any:
    """NumPy's ``repeat``, with JAX's ``total_repeat_length``: the result cut to that length, or its last
    entry repeated up to it.

    >>> repeat(_np.arange(3), [1, 2, 0], total_repeat_length=4).tolist()
    [0, 1, 1, 1]
    """
    out = _repeat(a, repeats, axis)
    if total_repeat_length is None:
        return out
    axis = 0 if axis is None else axis
    n = out.shape[axis]
    if total_repeat_length <= n:
        return _np.take(out, _np.arange(total_repeat_length), axis=axis)
    return _np.take(out, _np.minimum(_np.arange(total_repeat_length), n - 1), axis=axis)


def __getattr__(name: str) -> Any:
    return getattr(_np, name)
