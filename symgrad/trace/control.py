"""Control flow as JAX writes it (``jax.lax.while_loop``, ``fori_loop``, ``cond``, ``switch``) on
numbers, NumPy arrays and traced values alike.

A condition that does not depend on traced values is decided in Python (the loop runs, the branch is
taken, as in a Python loop or ``if``). One that does is a graph: ``cond`` and ``switch`` compute every
branch and select (``where``, leaf by leaf); ``fori_loop`` is an ``sg.scan`` over the counter; a
``while_loop`` needs a bound, ``max_steps``: it is then a scan of that many steps that stop changing
the carry once the condition fails, which reverse mode differentiates too (JAX's ``while_loop``
cannot be reverse-differentiated at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symgrad.expr import tracing
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.scan_function import scan
from symgrad.util import pytree


def _traced(v: Any) -> bool:
    """Whether a condition (or an index) depends on traced values: Python cannot decide it."""
    if isinstance(v, Expr):
        return v.op.name != "const"
    return isinstance(v, np.ndarray) and v.dtype == object and any(
        isinstance(e, Expr) and e.op.name != "const" for e in v.ravel())


def _truth(v: Any, who: str) -> bool:
    if np.ndim(v):
        raise TypeError(f"{who}: the condition must be a scalar, got shape {np.shape(v)}")
    return bool(v.reshape(())[()] if isinstance(v, np.ndarray) else v)


def _select(go: Any, new: Any, old: Any, who: str) -> Any:
    """``new`` where ``go`` (a traced scalar, nonzero: true), else ``old``, leaf by leaf."""
    new_leaves, new_tree = pytree.flatten(new)
    old_leaves, old_tree = pytree.flatten(old)
    if new_tree != old_tree:
        raise TypeError(f"{who}: the branches (or the body and its input) give structures {new_tree} and "
                        f"{old_tree}")
    shapes = [(np.shape(a), np.shape(b)) for a, b in zip(new_leaves, old_leaves)]
    if any(a != b for a, b in shapes):
        raise TypeError(f"{who}: the branches (or the body and its input) give leaves of shapes {shapes}: each "
                        "must keep its shape")
    return pytree.unflatten(new_tree, [np.where(go, a, b) for a, b in zip(new_leaves, old_leaves)])


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, *, max_steps: int | None = None) -> Any:
    """``jax.lax.while_loop``: ``val = body_fun(val)`` while ``cond_fun(val)``; returns the last ``val``.

    A condition Python can decide (numbers, a counter in the carry) runs as a Python loop; so does one
    on traced values without ``max_steps``, decided by the values of the call being traced (the trace
    is specialised on the number of steps and traced again when a later call's differ, as JAX's grad
    without jit). With ``max_steps`` it is a scan of at most that many steps (the carry stops changing
    once the condition fails, and at ``max_steps`` the loop stops), compiled once for every call,
    which every transform differentiates, reverse mode included.

    >>> import numpy as np, symgrad as sg
    >>> sg.while_loop(lambda v: v[0] < 10, lambda v: (v[0] + 1, v[1] * 2.0), (0, 1.0))
    (10, 1024.0)
    >>> def halvings(x):  # how x shrinks below 1 depends on x: bounded, differentiable
    ...     return sg.while_loop(lambda v: v > 1.0, lambda v: v / 2.0, x, max_steps=20)
    >>> float(halvings(10.0)), float(sg.grad(halvings)(10.0))
    (0.625, 0.0625)
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer)
                                  or max_steps < 0):
        raise ValueError(f"while_loop: max_steps must be a non-negative integer, got {max_steps!r}")
    val, steps = init_val, 0
    while max_steps is None or steps < max_steps:
        go = cond_fun(val)
        if _traced(go) and max_steps is not None:
            break
        try:  # (a traced condition: decided by the traced call's values, a guard: symgrad.trace.guards)
            if not _truth(go, "while_loop"):
                return val
        except TracingError:
            raise TracingError("while_loop: the condition depends on traced values and no values are at hand, "
                               "so the number of steps is unknown until the function runs: give a bound, "
                               "sg.while_loop(cond, body, init, max_steps=N) (a scan of at most N steps, "
                               "differentiable in every mode)") from None
        val, steps = body_fun(val), steps + 1
    else:
        return val

    def step(state: tuple, _: Any) -> tuple:
        v, running = state
        go = np.where(cond_fun(v), running, 0.0)
        return (_select(go, body_fun(v), v, "while_loop"), go), None

    (val, _), _ = scan(step, (_floats(val), 1.0), length=int(max_steps - steps))
    return val


def _floats(tree: Any) -> Any:
    """A carry's Python ints and bools as floats (a scan's carry is floats)."""
    return pytree.tree_map(lambda v: float(v) if isinstance(v, int | np.integer | np.bool_) else v, tree)


def fori_loop(lower: int, upper: int, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.fori_loop``: ``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)``.

    On traced values it is one ``sg.scan`` over ``i`` (a traced counter: it may index arrays);
    where the body needs ``i`` as a Python int (a shape, a slice), a Python loop.

    >>> import numpy as np, symgrad as sg
    >>> sg.fori_loop(0, 4, lambda i, total: total + i, 0.0)
    6.0
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> sg.grad(lambda x: sg.fori_loop(0, 3, lambda i, s: s + x[i] ** 2, 0.0))(x)
    array([2., 4., 6.])
    """
    lower, upper = _bound(lower, "lower"), _bound(upper, "upper")
    if upper > lower and (tracing.active() or any(map(_traced_leaf, pytree.tree_leaves(init_val)))):
        try:
            carry, _ = scan(lambda v, i: (body_fun(i, v), None), _floats(init_val), np.arange(lower, upper))
            return carry
        except (TracingError, IndexError, TypeError):  # i used as a Python int (an index of an object array,
            pass  # a shape): the loop below, where it is one (an error there is the body's own)
        tracing.loop(upper - lower)
    val = init_val
    for i in range(lower, upper):
        val = body_fun(i, val)
    return val


def _traced_leaf(v: Any) -> bool:
    return isinstance(v, Expr) and v.op.name != "const" or _traced(v)


def _bound(v: Any, what: str) -> int:
    if _traced(v):
        raise TracingError(f"fori_loop: {what} depends on traced values: the number of steps must be known "
                           "when the function is traced (pass it as a static argument)")
    if isinstance(v, bool) or not isinstance(v, int | np.integer):
        raise TypeError(f"fori_loop: {what} must be an integer, got {v!r}")
    return int(v)


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``jax.lax.cond``: ``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    A traced ``pred`` computes both branches and selects, leaf by leaf (their structures and shapes
    must agree); derivatives are those of the branch taken.

    >>> import numpy as np, symgrad as sg
    >>> f = lambda x: sg.cond(x > 0, lambda x: x ** 2, lambda x: -x, x)
    >>> float(f(3.0)), float(sg.grad(f)(3.0)), float(sg.grad(f)(-1.0))
    (9.0, 6.0, -1.0)
    """
    if not _traced(pred):
        return true_fun(*operands) if _truth(pred, "cond") else false_fun(*operands)
    return _select(pred, true_fun(*operands), false_fun(*operands), "cond")


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``jax.lax.switch``: ``branches[index](*operands)``, ``index`` clamped to the branches' range.

    >>> import numpy as np, symgrad as sg
    >>> fs = [lambda x: x, lambda x: 2.0 * x, lambda x: x ** 2]
    >>> float(sg.switch(1, fs, 3.0)), float(sg.grad(lambda x, k: sg.switch(k, fs, x))(3.0, 2.0))
    (6.0, 6.0)
    """
    if not branches:
        raise ValueError("switch: no branches")
    if not _traced(index):
        return branches[int(np.clip(int(np.asarray(index).reshape(())), 0, len(branches) - 1))](*operands)
    out = branches[-1](*operands)
    for k in range(len(branches) - 2, -1, -1):
        out = _select(index <= k, branches[k](*operands), out, "switch")
    return out
