"""What a failed trace says: the user's line, SciPy's functions named with their traced namesakes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.expr.node import TracingError
from symgrad.util import pytree
from symgrad.util.progress import phase


def traced(make: Callable[[], Trace]) -> Trace:
    """``make()``; a TracingError that NumPy's own code turned into a ValueError (converting expressions
    to floats: ``np.asarray(x, dtype=float)``) raised as itself; an error inside SciPy's code as a
    TracingError naming the function and its traced namesake (``_foreign``)."""
    try:
        with phase("tracing"):
            return make()
    except Exception as e:
        cause = e.__cause__ or e.__context__
        if isinstance(e, ValueError) and isinstance(cause, TracingError):
            raise cause from None
        foreign = _foreign(e)
        if foreign is None:
            raise
        raise foreign from e

if TYPE_CHECKING:
    from symgrad.trace.record import Trace


TRACED_PORTS = {"scipy": "symgrad.scipy"}  # libraries that compute on numbers -> their traced namesakes


def _foreign(e: BaseException) -> TracingError | None:
    """A TracingError for ``e`` raised inside a library of ``TRACED_PORTS`` (SciPy's functions compute on
    numbers; given traced arrays they fail deep inside): which function, where, and what to call instead."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__", "").split(".")[0] not in TRACED_PORTS:
        tb = tb.tb_next
    if tb is None:
        return None
    module, name = tb.tb_frame.f_globals["__name__"], tb.tb_frame.f_code.co_name
    public = ".".join(part for part in module.split(".") if not part.startswith("_"))
    ours = TRACED_PORTS[module.split(".")[0]] + public[public.index("."):] if "." in public else ""
    try:
        has = name in getattr(__import__(ours, fromlist=["_"]), "__all__", ())
    except ImportError:
        has = False
    advice = (f"use {ours}.{name}, its traced form" if has else
              "compute it with NumPy's functions, or give it a derivative with sg.custom_jvp / sg.custom_vjp")
    return TracingError(f"{public}.{name} computes on numbers, not traced arrays ({type(e).__name__}: "
                        f"{str(e)[:120]} at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}): "
                        f"{advice}")


def int_use(e: Exception) -> bool:
    """Whether tracing may have failed because a traced value was used as a Python integer (a size,
    a range, np.arange(n), np.zeros(n)): then Python ints are traced again as their values."""
    return isinstance(e, TracingError | TypeError)


def holds_int(values: Any) -> bool:
    return any(type(leaf) is int for leaf in pytree.tree_leaves(values))


_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (np, os))
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # symgrad/


def user_line(e: BaseException) -> str:
    """The line of the user's code an exception came from: its last frame outside symgrad, NumPy
    and the standard library (``file.py:12``)."""
    found, tb = None, e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith((_OWN_DIR, *_LIBRARY_DIRS)) and not name.startswith("<frozen"):
            found = f"{os.path.basename(name)}:{tb.tb_lineno}"
        tb = tb.tb_next
    if found is None and e.__cause__ is not None:  # (raised for another one: its line)
        return user_line(e.__cause__)
    return found or "inside symgrad"


def caught(errors: list[TracingError]) -> tuple[TracingError, str] | None:
    """One of ``errors`` that the traced code caught itself (its traceback starts in the frame that caught
    it: outside symgrad, NumPy and the standard library), and that line (``file.py:12``); else None.

    >>> caught([TracingError("never raised")]) is None
    True
    """
    for e in errors:
        tb = e.__traceback__
        if tb is not None and not tb.tb_frame.f_code.co_filename.startswith((_OWN_DIR, *_LIBRARY_DIRS, "<frozen")):
            return e, f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    return None


def user_level() -> int:
    """The stacklevel of a warning given by the caller: the first frame outside symgrad."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
        frame, level = frame.f_back, level + 1
    return level


def describe(fn: Any) -> str:
    """A name for a callable without ``__name__`` (functools.partial, a callable object)."""
    inner = getattr(fn, "func", None)
    if inner is not None:
        return f"partial({getattr(inner, '__name__', type(inner).__name__)})"
    return type(fn).__name__


