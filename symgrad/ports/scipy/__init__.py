"""``jax.scipy`` for ports: ``from symgrad.scipy.special import logsumexp`` where JAX code has
``from jax.scipy.special import logsumexp``."""

from symgrad.ports.scipy import special  # noqa: F401 (sg.scipy.special, as jax.scipy.special)
