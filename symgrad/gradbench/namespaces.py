"""The namespace ``J`` the problems are written against: jax or symgrad (JAX's names)."""

from __future__ import annotations

from types import SimpleNamespace


def namespace(which: str) -> SimpleNamespace:
    """``J`` for ``"jax"`` or ``"symgrad"``: ``J.np`` (jax.numpy or symgrad.numpy), ``J.lax``,
    ``J.grad``, ``J.jvp``, ``J.vmap``, ``J.jit``, ``J.value_and_grad``.

    >>> namespace("symgrad").name
    'symgrad'
    """
    if which == "jax":
        import jax
        import jax.numpy as jnp

        return SimpleNamespace(np=jnp, lax=jax.lax, grad=jax.grad, jvp=jax.jvp, vmap=jax.vmap, jit=jax.jit,
                               value_and_grad=jax.value_and_grad, name="jax")
    import symgrad as sg
    import symgrad.numpy as snp

    return SimpleNamespace(np=snp, lax=sg.lax, grad=sg.grad, jvp=sg.jvp, vmap=sg.vmap, jit=sg.jit,
                           value_and_grad=sg.value_and_grad, name="symgrad")


SG = namespace("symgrad")
