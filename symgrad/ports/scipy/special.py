"""``jax.scipy.special`` for ports: symgrad's ``logsumexp`` (stable, and traced where SciPy's assigns
through a mask), ``gammaln``, ``digamma`` (``psi``), ``polygamma`` and ``multigammaln`` (ops of
their own, derivatives to any order); every other name is SciPy's own (``expit``, ``erf``, ``xlogy``
...: traced as symgrad's ops).

>>> import numpy as np, symgrad as sg
>>> from symgrad.ports.scipy.special import expit, logsumexp
>>> sg.grad(lambda x: logsumexp(x) + np.sum(expit(x)))(np.zeros(2))
array([0.75, 0.75])
"""

from __future__ import annotations

from typing import Any

import scipy.special as _special

from symgrad.expr.special import digamma, gammaln, logsumexp, multigammaln, polygamma

psi = digamma
__all__ = ["digamma", "gammaln", "logsumexp", "multigammaln", "polygamma", "psi"]


def __getattr__(name: str) -> Any:
    return getattr(_special, name)
