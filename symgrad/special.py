"""Functions classifiers and likelihoods need, stable at any magnitude (JAX's ``jax.nn`` and
``jax.scipy.special`` ones): on NumPy arrays, traced arrays (rolled or element by element) alike.

Each shifts by the maximum with its gradient stopped: the shift cancels in exact arithmetic, so
the derivative is the textbook one (softmax for logsumexp), without the maximum's ties.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr.functions import FUNCS
from symgrad.expr.node import Expr, TracingError

_stop = FUNCS["stop_gradient"]


def _shift(a: Any, axis: Any, keepdims: bool) -> Any:
    """The maximum over ``axis``, 0 where it is not finite (all -inf: exp(-inf - 0) = 0), constant."""
    top = np.max(a, axis=axis, keepdims=keepdims)
    return _stop(np.where(np.isfinite(top), top, 0.0))


def logsumexp(a: Any, axis: Any = None, b: Any = None, keepdims: bool = False, return_sign: bool = False) -> Any:
    """``log(sum(b * exp(a)))`` over ``axis``, without overflow (SciPy's and JAX's ``logsumexp``);
    ``return_sign``: also the sign of the sum, whose logarithm of the magnitude is returned.

    >>> import numpy as np, symgrad as sg
    >>> float(sg.logsumexp(np.array([1000.0, 1000.0])))
    1000.6931471805599
    >>> sg.grad(lambda x: sg.logsumexp(x))(np.array([0.0, np.log(3.0)]))  # the softmax
    array([0.25, 0.75])
    """
    a = np.asarray(a) if isinstance(a, list | tuple) else a
    e = np.exp(a - _shift(a, axis, True))
    total = np.sum(e if b is None else b * e, axis=axis, keepdims=keepdims)
    with np.errstate(divide="ignore"):  # (a sum of 0: -inf, as SciPy)
        out = np.log(np.abs(total) if return_sign else total) + _shift(a, axis, keepdims)
    return (out, np.sign(total)) if return_sign else out


def softmax(x: Any, axis: Any = -1) -> Any:
    """``exp(x) / sum(exp(x))`` over ``axis`` (JAX's ``jax.nn.softmax``; SciPy's has ``axis=None``).

    >>> import numpy as np, symgrad as sg
    >>> sg.softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    e = np.exp(x - _shift(x, axis, True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x: Any, axis: Any = -1) -> Any:
    """``x - logsumexp(x)`` over ``axis`` (JAX's ``jax.nn.log_softmax``), accurate where softmax
    underflows.

    >>> import numpy as np, symgrad as sg
    >>> sg.log_softmax(np.array([0.0, 1000.0]))
    array([-1000.,     0.])
    """
    shifted = x - _shift(x, axis, True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def gammaln(x: Any) -> Any:
    """``log |Gamma(x)|`` (SciPy's and JAX's ``gammaln``) of numbers known while tracing (a Python int
    argument is specialised on its value); a traced value raises TracingError (no op for it yet).

    >>> round(float(gammaln(5.0)), 12) == round(float(np.log(24.0)), 12)
    True
    """
    import scipy.special

    return scipy.special.gammaln(_known(x, "gammaln"))


def multigammaln(a: Any, d: int) -> Any:
    """The log of the multivariate gamma function of dimension ``d`` (SciPy's and JAX's
    ``multigammaln``: a Wishart prior's constant), of numbers known while tracing, as ``gammaln``.

    >>> import symgrad as sg
    >>> bool(sg.grad(lambda x, m: x * multigammaln(0.5 * (m + 3), 2))(1.0, 0) == multigammaln(1.5, 2))
    True
    """
    import scipy.special

    return scipy.special.multigammaln(_known(a, "multigammaln"), d)


def _known(x: Any, name: str) -> Any:
    if isinstance(x, Expr) or isinstance(x, np.ndarray) and x.dtype == object:
        raise TracingError(f"{name} of a traced value: no op for it yet (pass the value as a Python int or "
                           "float that is not differentiated, or compute it outside the traced function)")
    return x
