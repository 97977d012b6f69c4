"""``jax.test_util`` under symgrad's name: ``from symgrad.test_util import check_grads`` where JAX
code reads ``from jax.test_util import check_grads``.

>>> import numpy as np
>>> from symgrad.test_util import check_grads
>>> check_grads(np.sin, (0.5,), order=2)
"""

from symgrad.check import check_grads

__all__ = ["check_grads"]
