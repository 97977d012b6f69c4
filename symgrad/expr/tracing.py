"""The per-thread state of tracing, in one object (``context``), and the blocks that set it.

Tracing a Python function runs the user's NumPy code on symbolic values; what that code meets on its
way (NumPy arrays of constants, integer arguments that may index, Python conditions decided by the
call's values, custom rules being traced) is noted here, per thread, for the trace that is running:
``symgrad.expr.ndarrays`` reads and writes the arrays' part, ``symgrad.trace`` the rest. Blocks nest:
an inner trace shares the outermost one's records where it must (captured constants), or stacks
its own (guards' maps, custom rules).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class Context(threading.local):
    """One thread's tracing state (``threading.local``: each thread starts from these defaults)."""

    depth = 0  # how many traces this thread is inside (a Function called there returns expressions)
    called: list = []  # the functions called in the outermost trace (whose captured values it watches too)
    # The constant arrays met while a function is traced, {id: (its node, its values, the array)};
    # the traced arrays that hold integers (arguments of an integer dtype: they may index); every
    # NumPy array that met a traced value, {id: (the array, a float64 copy or None)}.
    arrays: dict | None = None
    integers: frozenset = frozenset()
    seen: dict | None = None
    floats_met = False  # whether a float number or array met a traced value (jit's int results then floats)
    stepping = False  # a scan's step is being traced on placeholders (its NumPy arrays meet scalars rolled)
    shadow: Any = None  # the outermost trace's guards.Shadow: conditions decided by its call's values
    long_loop: int | None = None  # steps from which an element trace's loop asks for a rolled trace (``loop``)
    rolled = False  # the trace running is a rolled one (its scalars may join into rolled arrays: ``rolled_trace``)
    refusals: list | None = None  # the TracingErrors made while a rolled trace runs (``refusals``)

    def __init__(self) -> None:
        self.rules: list = []  # the custom rules being traced (a function calling itself there gives its value)


context = Context()




@contextmanager
def capturing() -> Iterator[dict]:
    """While tracing: NumPy arrays of numbers that meet traced arrays become array inputs
    (``const#1`` ...), recorded in the dict this yields (node -> values) for the caller to pass
    as parameters: JAX's captured constants. Nested uses share the outermost dict.

    >>> import numpy as np, symgrad as sg
    >>> with capturing() as found:
    ...     y = sg.array("x", 2) * np.array([2.0, 3.0])
    >>> [(str(node).split("#")[0], values.tolist()) for node, values in found.items()]
    [('const', [2.0, 3.0])]
    """
    outer = context.arrays
    if outer is not None:
        yield {}
        return
    context.arrays, context.floats_met = {}, False
    found: dict = {}
    try:
        yield found
    finally:
        found.update((node, values) for node, values, _ in context.arrays.values())
        context.arrays = None


def note_operands(args: tuple) -> None:
    """While tracing, whether a float (a Python or NumPy float, a float array) is an operand: NumPy's
    result is then a float whatever its value (``n * 1.0``), which the graph (``n``) no longer says."""
    if context.arrays is not None and not context.floats_met:
        context.floats_met = any(isinstance(a, float | np.floating) or isinstance(a, np.ndarray) and
                                   a.dtype.kind == "f" for a in args)


def floats_met() -> bool:
    """Whether ``note_operands`` saw a float operand in the trace running.

    >>> import symgrad as sg
    >>> with capturing():
    ...     _ = sg.array("n", 2) * 2
    ...     floats_met()
    False
    """
    return context.floats_met


def captured() -> dict:
    """The NumPy constants captured so far by the trace running (node -> values).

    >>> import numpy as np, symgrad as sg
    >>> with capturing():
    ...     _ = sg.array("x", 2) * np.array([2.0, 3.0])
    ...     [values.tolist() for values in captured().values()]
    [[2.0, 3.0]]
    """
    return {node: values for node, values, _ in (context.arrays or {}).values()}


def active() -> bool:
    """Whether a function is being traced (its NumPy constants captured): a scan there is a node.

    >>> with capturing():
    ...     active()
    True
    """
    return context.arrays is not None


@contextmanager
def observing() -> Iterator[list]:
    """While tracing: every NumPy array of numbers that meets a traced value (rolled or element by
    element), listed as (a weak reference to it, a copy of it or None) when the block ends, for the
    caller to check later whether it changed in place (its values are in the traced formulas). Weak:
    a temporary made inside the traced function is gone by then, and nothing can change it. Nested
    uses share the outermost list.

    >>> import numpy as np, symgrad as sg
    >>> a = np.array([2.0, 3.0])
    >>> with capturing(), observing() as met:
    ...     y = sg.array("x", 2) * a + np.ones(2)
    >>> [ref() is a for ref, _ in met]
    [True, False]
    """
    if context.seen is not None:
        yield []
        return
    context.seen = {}
    met: list = []
    try:
        yield met
    finally:
        met.extend((weakref.ref(a), snapshot) for a, snapshot in context.seen.values())
        context.seen = None


def observe(a: Any) -> None:
    """Note a NumPy array met while tracing (see ``observing``); anything else is ignored."""
    seen = context.seen
    if seen is not None and type(a) is np.ndarray and a.dtype.kind in "biuf" and id(a) not in seen:
        seen[id(a)] = (a, None)


@contextmanager
def integers(nodes: Any) -> Iterator[None]:
    """While tracing: the rolled arrays ``nodes`` hold integers (arguments of an integer dtype), so
    they may index other arrays (a gather at addresses read from them, checked when run).

    >>> import numpy as np, symgrad as sg
    >>> y, z = sg.array("y", 3), sg.array("z", (3, 4))
    >>> with integers([y]):
    ...     picked = z[np.arange(3), y]
    >>> sg.evaluate(picked, {y: [3.0, 0.0, -1.0], z: np.arange(12.0).reshape(3, 4)})
    array([ 3.,  4., 11.])
    """
    outer = context.integers
    context.integers = outer | frozenset(nodes)
    try:
        yield
    finally:
        context.integers = outer


@contextmanager
def stepping() -> Iterator[None]:
    """While a scan's step is traced: a NumPy array meeting a scalar expression in a ufunc (``b * x``, x a
    scalar row of the stacked inputs) is a rolled operand, not an object array of its elements (which
    would leave the scan to a Python loop and the whole function to the element trace).

    >>> with stepping():
    ...     stepping_now()
    True
    """
    outer = context.stepping
    context.stepping = True
    try:
        yield
    finally:
        context.stepping = outer


def stepping_now() -> bool:
    return context.stepping


@contextmanager
def rolled_trace(on: bool) -> Iterator[None]:
    """While a trace runs: whether it is a rolled one, whose scalars (a 0-d argument, an element read from
    a rolled array) NumPy may put in an object array (``np.stack([v, -g * np.sin(x)])``) to be taken as a
    rolled array of them; an element trace's are its variables, which only its loops can read.

    >>> with rolled_trace(True):
    ...     context.rolled
    True
    """
    outer = context.rolled
    context.rolled = on
    try:
        yield
    finally:
        context.rolled = outer


@contextmanager
def refusals() -> Iterator[list]:
    """While a rolled trace runs: the TracingErrors made (node.TracingError notes itself here), to find one
    the traced code caught in an ``except`` of its own, whose branch would give a value NumPy's would not.

    >>> from symgrad.expr.node import TracingError
    >>> with refusals() as seen:
    ...     _ = TracingError("no rolled form")
    >>> [str(e) for e in seen]
    ['no rolled form']
    """
    outer = context.refusals
    context.refusals = seen = []
    try:
        yield seen
    finally:
        context.refusals = outer


class LongLoop(BaseException):  # noqa: N818 (a signal, not an error)
    """An element-by-element trace met a scan (or ``fori_loop``) of many steps: its Python loop would
    repeat the step's nodes per step (an ODE's 1000 RK4 steps over a state of 10: 10**6 lines of C,
    40 s to compile), where a rolled trace makes it one loop. Raised only inside ``rolling_long_loops``;
    a BaseException, so that an ``except Exception`` in the traced code does not swallow it."""


@contextmanager
def rolling_long_loops(steps: int) -> Iterator[None]:
    """While an element trace runs that could be traced rolled instead: a loop of at least ``steps`` steps
    over traced values raises LongLoop (``loop``) rather than running.

    >>> with rolling_long_loops(10):
    ...     loop(3)
    >>> with rolling_long_loops(10):
    ...     loop(10)
    Traceback (most recent call last):
    ...
    symgrad.expr.tracing.LongLoop: a loop of 10 steps
    """
    outer = context.long_loop
    context.long_loop = steps
    try:
        yield
    finally:
        context.long_loop = outer


def loop(steps: int) -> None:
    """Before a scan runs as a Python loop of ``steps`` steps on traced values: LongLoop where
    ``rolling_long_loops`` says a rolled trace should take it instead."""
    if context.long_loop is not None and steps >= context.long_loop:
        raise LongLoop(f"a loop of {steps} steps")
