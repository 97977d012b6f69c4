"""``jax.nn`` for ports: ``softmax``, ``log_softmax``, ``logsumexp``, ``sigmoid``, ``relu``,
``softplus``, ``tanh``, as symgrad's.

>>> import numpy as np, symgrad as sg
>>> from symgrad import nn
>>> sg.grad(lambda x: np.sum(nn.relu(x) + nn.softplus(x)))(np.array([-1.0, 2.0])).round(4)
array([0.2689, 1.8808])
"""

from __future__ import annotations

from symgrad.expr.functions import FUNCS
from symgrad.expr.special import log_softmax, logsumexp, softmax

relu, sigmoid, softplus, tanh = FUNCS["relu"], FUNCS["sigmoid"], FUNCS["softplus"], FUNCS["tanh"]

__all__ = ["log_softmax", "logsumexp", "relu", "sigmoid", "softmax", "softplus", "tanh"]
