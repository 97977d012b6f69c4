"""Function-level API: trace a Python function with symbolic arguments, differentiate, compile.

``sg.jit``, ``sg.grad``, ``sg.value_and_grad``, ``sg.jacobian``, ``sg.hessian`` and
``sg.hvp`` return a ``Function``; ``sg.jvp`` and ``sg.vjp`` apply at once. The first
call with given argument shapes calls ``fn`` once on symbolic arguments (an expression for
each float, a ``SymArray`` of variables for each array, leaf by
leaf through tuples, lists and dicts: JAX's pytrees), differentiates what ``fn`` returns
and compiles the result; later calls with those shapes go straight to the compiled kernel.

Conventions follow JAX: ``argnums`` (an int or a tuple, negative counts from the end) picks
the differentiated arguments and derivatives come in their structure; ``has_aux=True``
returns a second output undifferentiated. The other arguments are data: traced as
parameters, so new values need no recompile. Arguments named in ``static_argnums`` /
``static_argnames`` are passed to ``fn`` as they are and a new value traces again.

Transforms compose as in JAX. Called with symbolic arguments (inside another transform's
trace), a ``Function`` traces ``fn`` on fresh variables, differentiates, and puts the
caller's expressions in place of those variables: ``sg.grad(sg.grad(f))`` is the second
derivative, and a closure over the outer function's variables is differentiated correctly.

Given expressions instead of a function, the same names are the symbolic operations:
``sg.grad(f, wrt)`` is the gradient formula, ``sg.hessian(f, wrt, sparse=True)`` the sparse
Hessian's formulas.
"""

from symgrad.trace.api import (
    grad,
    hessian,
    hvp,
    jacfwd,
    jacobian,
    jacrev,
    jit,
    jvp,
    linearize,
    make_jaxpr,
    value_and_grad,
    vjp,
    vmap,
)
from symgrad.trace.function import Function
from symgrad.trace.record import Trace as Trace  # (symgrad.trace.Trace; not star-exported to symgrad)

__all__ = ["Function", "grad", "hessian", "hvp", "jacfwd", "jacobian", "jacrev", "jit", "jvp",
           "linearize", "make_jaxpr", "value_and_grad", "vjp", "vmap"]


def __getattr__(name: str) -> None:
    """The trace limits live in symgrad.trace.limits, where setting one takes effect: say so."""
    from symgrad.trace import limits

    if hasattr(limits, name):
        raise AttributeError(f"symgrad.trace.{name} is symgrad.trace.limits.{name} (read and set it there)")
    raise AttributeError(f"module 'symgrad.trace' has no attribute {name!r}")
