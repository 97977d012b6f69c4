"""The ``jax.lax`` functions symgrad has, under JAX's names: where JAX code reads
``from jax import lax``, ``from symgrad import lax`` runs it unchanged.

>>> import numpy as np
>>> from symgrad import lax
>>> lax.fori_loop(0, 3, lambda i, v: v * 2.0, 1.0)
8.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.control import cond, fori_loop, switch, while_loop
from symgrad.expr.functions import FUNCS
from symgrad.expr.scans import scan

stop_gradient = FUNCS["stop_gradient"]

__all__ = ["cond", "fori_loop", "map", "scan", "select", "stop_gradient", "switch", "while_loop"]


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``jax.lax.select``: ``on_true`` where ``pred``, else ``on_false`` (``np.where``).

    >>> select(np.array([True, False]), np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    array([1., 4.])
    """
    return np.where(pred, on_true, on_false)


def map(f: Callable, xs: Any) -> Any:  # noqa: A001 (JAX's name)
    """``jax.lax.map``: ``f`` applied to each row of ``xs`` (a pytree), results stacked: one scan.

    >>> map(lambda row: row * 2.0, np.array([1.0, 2.0]))
    array([2., 4.])
    """
    return scan(lambda carry, x: (carry, f(x)), 0.0, xs)[1]
