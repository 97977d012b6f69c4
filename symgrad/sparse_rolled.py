"""Sparse Hessians of functions of large arrays, without an element-by-element trace.

``sg.hessian(fn, sparse=True)`` of a function traced onto rolled arrays: the pattern is the
dependencies of the rolled gradient on the argument, found from its addresses
(``expr.sparsity.rolled_pattern``, vectorised, in proportion to the nonzeros); its columns are
coloured (``compile.colouring``); one compiled Hessian-vector product per colour, with the seed
that is 1 on that colour's columns, gives every entry of those columns at once, read back into
CSR order. The chained Rosenbrock function at a million variables: three products.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse

from symgrad.compile.colouring import colour_columns
from symgrad.expr.sparsity import rolled_pattern


class RolledSparseHessian:
    """The sparse Hessian of ``owner``'s function (an ``sg.hessian(fn, sparse=True)``) at arguments of
    one shape: the pattern and colours found once, each call ``colours`` Hessian-vector products.

    >>> import numpy as np, symgrad as sg
    >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
    >>> H = h(np.linspace(0.0, 1.0, 4000))
    >>> H.shape, H.nnz
    ((4000, 4000), 11998)
    """

    def __init__(self, owner: Any, args: tuple, kwargs: dict) -> None:
        from symgrad.trace import Function

        options = dict(argnums=owner.argnums_spec, static_argnums=tuple(owner.static_argnums),
                       static_argnames=tuple(owner.static_argnames), backend=owner.backend)
        grad = Function(owner.fn, "grad", **options)
        grad._fallback = False  # (rolled, or the element path's sparse Hessian)
        grad(*args, **kwargs)
        program = grad.compiled.program
        if not hasattr(program, "roots"):
            raise NotImplementedError("the gradient has no rolled form")
        pattern = rolled_pattern(list(program.roots), list(program.inputs.exprs))
        self.pattern = (pattern + pattern.T).tocsr()  # (a Hessian's: symmetric)
        self.pattern.sort_indices()
        self.colour = colour_columns(self.pattern)
        self.colours = int(self.colour.max(initial=-1)) + 1
        self.shape = np.shape(args[owner.argnums_spec])
        self.seeds = [(self.colour == k).astype(float).reshape(self.shape) for k in range(self.colours)]
        self.rows = np.repeat(np.arange(self.pattern.shape[0]), np.diff(self.pattern.indptr))
        self.hvp = Function(owner.fn, "hvp", **options)
        self.hvp._fallback = False

    def __call__(self, args: tuple, kwargs: dict) -> scipy.sparse.csr_matrix:
        products = np.stack([np.ravel(self.hvp(*args, seed, **kwargs)) for seed in self.seeds]) if self.seeds \
            else np.zeros((0, self.pattern.shape[0]))
        data = products[self.colour[self.pattern.indices], self.rows]
        return scipy.sparse.csr_matrix((data, self.pattern.indices, self.pattern.indptr), shape=self.pattern.shape)
