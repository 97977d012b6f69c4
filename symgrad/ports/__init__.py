"""JAX's modules under symgrad's names, for code ported by renames: ``symgrad.numpy`` (``jax.numpy``),
``symgrad.lax``, ``symgrad.nn``, ``symgrad.scipy.special``, ``symgrad.config``, ``symgrad.ad_checkpoint``
(``import symgrad`` registers each under its public name)."""
