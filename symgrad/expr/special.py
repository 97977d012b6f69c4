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
    """``log |Gamma(x)|`` (SciPy's and JAX's ``gammaln``), elementwise; its derivative is ``digamma``.

    >>> import symgrad as sg
    >>> round(float(gammaln(5.0)), 12) == round(float(np.log(24.0)), 12)
    True
    >>> round(float(sg.grad(lambda x: np.sum(gammaln(x)))(np.array([1.0]))[0]), 12)  # -Euler's gamma
    -0.577215664902
    """
    return FUNCS["gammaln"](x)


def digamma(x: Any) -> Any:
    """``psi(x)``, the derivative of ``gammaln`` (SciPy's ``digamma`` / ``psi``), elementwise.

    >>> round(float(digamma(1.0)), 12)
    -0.577215664902
    """
    return FUNCS["digamma"](x)


def polygamma(n: Any, x: Any) -> Any:
    """The ``n``-th derivative of ``digamma`` (SciPy's and JAX's ``polygamma``; ``n`` a whole number
    known while tracing), elementwise.

    >>> round(float(polygamma(1, 1.0)), 12) == round(np.pi ** 2 / 6, 12)
    True
    """
    n = _known(n, "polygamma's order n")
    if not np.all(np.floor(n) == n) or np.any(np.asarray(n) < 0):
        raise ValueError(f"polygamma: the order n must be a whole number >= 0, got {n!r}")
    return FUNCS["polygamma"](np.asarray(n, dtype=float)[()], x)


def multigammaln(a: Any, d: int) -> Any:
    """The log of the multivariate gamma function of dimension ``d`` (SciPy's and JAX's
    ``multigammaln``: a Wishart prior's constant): ``d (d - 1) / 4 log(pi)`` plus the ``gammaln``
    of ``a - j / 2`` for j below d.

    >>> import symgrad as sg
    >>> g = sg.grad(lambda a: multigammaln(a, 2))(1.5)
    >>> round(float(g), 12) == round(float(digamma(1.5) + digamma(1.0)), 12)
    True
    """
    d = int(_known(d, "multigammaln's dimension d"))
    if d < 1:
        raise ValueError(f"multigammaln: the dimension d must be >= 1, got {d}")
    return d * (d - 1) / 4 * np.log(np.pi) + sum(gammaln(a - j / 2) for j in range(d))


def _known(x: Any, name: str) -> Any:
    if isinstance(x, Expr) or isinstance(x, np.ndarray) and x.dtype == object:
        raise TracingError(f"{name} is traced: it must be a number known while tracing (a Python int "
                           "argument is specialised on its value)")
    return x
