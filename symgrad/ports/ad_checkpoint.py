"""JAX's rematerialisation API under its names (``jax.checkpoint`` / ``jax.remat``,
``jax.ad_checkpoint.checkpoint_name``, ``jax.checkpoint_policies``), so code that uses it ports
unchanged. Checkpointing never changes a value or a derivative; in JAX it trades memory for
recomputation in the backward pass. symgrad compiles a function and its derivatives as one program
whose schedule decides what is kept, so these leave the function as it is: the results are JAX's,
the memory policy is not applied.

>>> import numpy as np, symgrad as sg
>>> g = sg.checkpoint(lambda x: np.sin(np.sin(x)))
>>> float(sg.grad(g)(0.0))
1.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def checkpoint(fun: Callable | None = None, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums: int | tuple = ()) -> Any:
    """``jax.checkpoint``: ``fun`` itself (also as ``@sg.checkpoint`` and ``@sg.checkpoint(policy=...)``).

    >>> import symgrad as sg
    >>> f = sg.checkpoint(policy=sg.checkpoint_policies.nothing_saveable)(lambda x: x * x)
    >>> f(3.0)
    9.0
    """
    return (lambda f: f) if fun is None else fun


remat = checkpoint


def checkpoint_name(x: Any, name: str) -> Any:
    """``jax.ad_checkpoint.checkpoint_name``: ``x`` (a name a policy may save by).

    >>> checkpoint_name(2.0, "h")
    2.0
    """
    return x


def _policy(*_: Any, **__: Any) -> bool:
    return True


def _policy_maker(*_: Any, **__: Any) -> Callable:
    return _policy


class checkpoint_policies:  # noqa: N801 (JAX's name)
    """``jax.checkpoint_policies``: the policies by name (symgrad's schedule decides what is kept).

    >>> callable(checkpoint_policies.save_only_these_names("h"))
    True
    """

    everything_saveable = nothing_saveable = dots_saveable = checkpoint_dots = _policy
    dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = _policy
    save_only_these_names = save_any_names_but_these = save_from_both_policies = _policy_maker
    save_and_offload_only_these_names = offload_dot_with_no_batch_dims = _policy_maker
