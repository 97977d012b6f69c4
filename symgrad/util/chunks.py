"""Data held in chunks (Dask arrays) among a call's arguments: the layers below the public API ask
``holds_chunks`` and hand such a call to ``run``, which goes to the module the layer above installed
(``symgrad.distributed``, imported on the first chunked call: Dask stays optional, and nothing below
the public API imports it)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from symgrad.util import pytree

_runner: str | None = None  # the module that runs chunked calls: its lazy_map and lazy_sum


def install(module: str) -> None:
    """Name the module whose ``lazy_map`` / ``lazy_sum`` run calls on chunked data (imported at the first).

    >>> install("symgrad.distributed")
    """
    global _runner
    _runner = module


def run(what: str, f: Any, *args: Any, **kwargs: Any) -> Any:
    """``what`` ("lazy_map", "lazy_sum" or "sum_now") of the installed module, on ``f`` and its chunked
    arguments."""
    if _runner is None:
        raise TypeError("a Dask array was passed, but no module runs chunked data (import symgrad first)")
    return getattr(importlib.import_module(_runner), what)(f, *args, **kwargs)


def is_chunked(value: Any) -> bool:
    """Whether ``value`` is a Dask collection (it has ``__dask_graph__``), which symgrad hands to Dask.

    >>> import numpy as np
    >>> is_chunked(np.ones(3)), is_chunked(2.0)
    (False, False)
    """
    return hasattr(type(value), "__dask_graph__")


def holds_chunks(args: tuple, kwargs: dict | None = None) -> bool:
    """Whether a leaf of the arguments (pytrees) is a Dask collection; NumPy arrays and numbers are passed over
    at once (it is asked on each ``.sum``).

    >>> import dask.array as da
    >>> holds_chunks((1.0, {"x": da.ones(4, chunks=2)})), holds_chunks((np.ones(3),), {"y": 2.0})
    (True, False)
    """
    for a in (*args, *kwargs.values()) if kwargs else args:
        kind = type(a)
        if kind is not _ndarray and kind is not float and kind is not int and any(
                map(is_chunked, pytree.flatten(a)[0])):
            return True
    return False


_ndarray = np.ndarray
