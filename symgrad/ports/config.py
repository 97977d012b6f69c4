"""``jax.config`` for ports: ``sg.config.update("jax_enable_x64", True)`` runs as the first line of
a JAX file does. symgrad computes in float64 always, so the flags that choose precision or a
platform are accepted and change nothing; any other flag is refused by name.

>>> import symgrad as sg
>>> sg.config.update("jax_enable_x64", True)
"""

from __future__ import annotations

from typing import Any

ACCEPTED = frozenset({"jax_enable_x64", "jax_platform_name", "jax_platforms", "jax_default_matmul_precision",
                      "jax_numpy_rank_promotion"})


def update(name: str, value: Any) -> None:
    """Accept one of JAX's configuration flags that changes nothing here (see the module's docstring).

    >>> update("jax_platforms", "cpu")
    """
    if name not in ACCEPTED:
        raise ValueError(f"sg.config.update: {name!r} is not a flag symgrad has; it accepts {sorted(ACCEPTED)}, "
                         "which change nothing (symgrad computes in float64 on the CPU)")
