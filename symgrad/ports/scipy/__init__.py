"""``jax.scipy`` for ports: ``from symgrad.scipy.special import logsumexp`` where JAX code has
``from jax.scipy.special import logsumexp``."""
