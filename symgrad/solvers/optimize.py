"""Constrained optimisation with every derivative from symgrad: IPOPT (through cyipopt) and SciPy's
``trust-constr``, the objective and constraints written in NumPy.

The objective's value and gradient are one compiled call; the constraints' Jacobian and the
Hessian of the Lagrangian ``sigma * f(x) + lam @ c(x)`` are sparse (``sg.jacobian`` /
``sg.hessian`` with ``sparse=True``: for large arrays their pattern comes from the rolled
expressions' addresses, and each call is one compiled product per colour), their patterns fixed at
the first point, as IPOPT asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from symgrad.compile.tiers import building
from symgrad.trace.api import hessian, jacobian, jit, value_and_grad

if TYPE_CHECKING:
    import scipy.optimize


class Problem:
    """A nonlinear program ``min f(x)`` subject to ``lb <= c(x) <= ub`` and ``bounds`` on x, with the
    derivatives IPOPT's interface asks for (cyipopt's problem object: objective, gradient,
    constraints, jacobian(structure), hessian(structure): the lower triangle).

    >>> import numpy as np, scipy.optimize, symgrad as sg
    >>> p = Problem(lambda x: np.sum(x ** 2), [scipy.optimize.NonlinearConstraint(lambda x: x[:1] + x[1:], 1, 1)],
    ...             np.zeros(2))
    >>> p.gradient(np.array([1.0, 2.0])), p.jacobian(np.zeros(2)), p.jacobianstructure()
    (array([2., 4.]), array([1., 1.]), (array([0, 0], dtype=int32), array([0, 1], dtype=int32)))
    """

    def __init__(self, fun: Callable, constraints: Sequence[scipy.optimize.NonlinearConstraint], x0: np.ndarray,
                 args: tuple = ()) -> None:
        with building():  # (the background compiles start once every derivative is built)
            self._build(fun, constraints, x0, args)

    def _build(self, fun: Callable, constraints: Sequence[scipy.optimize.NonlinearConstraint], x0: np.ndarray,
               args: tuple) -> None:
        import scipy.sparse  # (here: SciPy's optimize and sparse cost 130 ms at symgrad's import)

        for k, con in enumerate(constraints):
            if not callable(getattr(con, "fun", None)) or not hasattr(con, "lb"):
                raise TypeError(f"sg.minimize: constraint {k} is a {type(con).__name__}; give "
                                "scipy.optimize.NonlinearConstraint(c, lb, ub) (c written in NumPy)")
        self.args, self.parts = tuple(args), [c.fun for c in constraints]
        self.value_and_grad = value_and_grad(fun)
        shapes = [np.shape(_at_start(c.fun, x0, args, f"constraint {k}")) for k, c in enumerate(constraints)]
        sides = [[np.broadcast_to(np.asarray(getattr(c, side), dtype=float), shape).ravel()
                  for c, shape in zip(constraints, shapes)] for side in ("lb", "ub")]
        self.lower, self.upper = (np.concatenate([np.zeros(0), *parts]) for parts in sides)
        _ordered(self.lower, self.upper, "constraint")

        def c(x: Any, *a: Any) -> Any:
            return np.concatenate([np.reshape(part(x, *a), -1) for part in self.parts])

        def lagrangian(x: Any, sigma: Any, lam: Any, *a: Any) -> Any:
            return sigma * fun(x, *a) + (np.sum(lam * c(x, *a)) if self.parts else 0.0)

        self.c, self.c_jacobian = jit(c), jacobian(c, sparse=True)
        self.l_hessian = hessian(lagrangian, sparse=True)
        self.at: np.ndarray | None = None
        self.m, self.iterations = self.lower.size, 0
        J = self.c_jacobian(x0, *self.args) if self.m else scipy.sparse.csr_matrix((0, np.size(x0)))
        H = scipy.sparse.csr_matrix(self.lagrangian_hessian(x0, 1.0, np.ones(self.m)))
        self.j_rows, self.j_cols = _structure(J)
        h_rows, h_cols = _structure(H)
        self.lower_triangle = h_rows >= h_cols
        self.h_rows, self.h_cols = h_rows[self.lower_triangle], h_cols[self.lower_triangle]

    def lagrangian_hessian(self, x: np.ndarray, sigma: float, lam: np.ndarray) -> scipy.sparse.csr_matrix:
        """The sparse Hessian of ``sigma * f(x) + lam @ c(x)`` (without constraints, of ``sigma * f``)."""
        return self.l_hessian(x, sigma, lam if self.m else np.zeros(1), *self.args)  # (a rolled lam: 1 or more)

    def ready(self, backend: str | None = None) -> Problem:
        """Wait until every function and derivative runs on its final compiled kernels, or on
        ``backend``'s (each first runs on the loop VM or its C kernels while Numba compiles it in the
        background: Compiled.ready), and return the problem."""
        for f in (self.value_and_grad, self.c):
            if f._last is not None:
                f.compiled.ready(backend)
        for f in (self.c_jacobian, self.l_hessian):
            for s in f._sparse_rolled.values():
                if s is not None:
                    s.ready(backend)
        return self

    def _evaluated(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        if self.at is None or not np.array_equal(self.at, x):  # (IPOPT asks for f and its gradient apart)
            self.value, self.grad = self.value_and_grad(x, *self.args)
            self.at = np.array(x)
        return self.value, self.grad

    def objective(self, x: np.ndarray) -> float:
        return float(self._evaluated(x)[0])

    def gradient(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._evaluated(x)[1], dtype=float)

    def constraints(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.c(x, *self.args), dtype=float) if self.m else np.zeros(0)

    def jacobianstructure(self) -> tuple[np.ndarray, np.ndarray]:
        return self.j_rows, self.j_cols

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        import scipy.sparse

        return scipy.sparse.csr_matrix(self.c_jacobian(x, *self.args)).data if self.m else np.zeros(0)

    def intermediate(self, alg_mod: int, iter_count: int, *rest: Any) -> bool:
        self.iterations = iter_count
        return True

    def hessianstructure(self) -> tuple[np.ndarray, np.ndarray]:
        return self.h_rows, self.h_cols

    def hessian(self, x: np.ndarray, lagrange: np.ndarray, obj_factor: float) -> np.ndarray:
        import scipy.sparse

        H = scipy.sparse.csr_matrix(self.lagrangian_hessian(x, obj_factor, np.asarray(lagrange, dtype=float)))
        return H.data[self.lower_triangle]


def _structure(M: scipy.sparse.spmatrix) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns of a CSR matrix's stored entries, in its order."""
    import scipy.sparse

    M = scipy.sparse.csr_matrix(M)
    return np.repeat(np.arange(M.shape[0], dtype=np.int32), np.diff(M.indptr)), M.indices.astype(np.int32)


def _at_start(fn: Callable, x0: np.ndarray, args: tuple, what: str) -> Any:
    """``fn(x0, *args)``, an error in it re-raised as the same type naming ``what`` (a constraint's
    bare IndexError told nothing of which one)."""
    try:
        return fn(x0, *args)
    except (IndexError, ValueError, TypeError) as e:
        if type(e) not in (IndexError, ValueError, TypeError):  # (symgrad's own errors name their culprit)
            raise
        raise type(e)(f"sg.minimize: {what} fails at the starting point x0 (of shape {np.shape(x0)}): {e}") from e


def minimize(fun: Callable[..., Any], x0: ArrayLike, *, args: tuple = (),
             bounds: scipy.optimize.Bounds | Sequence[tuple[float | None, float | None]]
             | tuple[ArrayLike, ArrayLike] | None = None,
             constraints: scipy.optimize.NonlinearConstraint | Sequence[scipy.optimize.NonlinearConstraint] = (),
             method: Literal["ipopt", "trust-constr"] = "ipopt", options: dict[str, Any] | None = None,
             library: str | None = None) -> scipy.optimize.OptimizeResult:
    """Minimise ``fun(x, *args)`` subject to ``constraints`` (``scipy.optimize.NonlinearConstraint``:
    ``lb <= c(x) <= ub``, ``c`` written in NumPy, no derivatives given) and ``bounds`` (a
    ``scipy.optimize.Bounds``, SciPy's (min, max) pair per variable, or a tuple (lb, ub) of arrays),
    with IPOPT (``method="ipopt"``, the ``symgrad[ipopt]`` extra) or SciPy's ``"trust-constr"``;
    symgrad supplies the gradient, the constraints' sparse Jacobian and the sparse Hessian of the
    Lagrangian. ``options``: the solver's
    (IPOPT's by name: ``{"tol": 1e-8, "print_level": 0}``); ``library``: another IPOPT build
    than the default (CasADi's wheel's): a shared library's path (one with HSL's solvers, say) or a
    name in ``sg.ipopt.builds()``.

    >>> import numpy as np, scipy.optimize, symgrad as sg
    >>> circle = scipy.optimize.NonlinearConstraint(lambda x: np.sum(x ** 2, keepdims=True), 1.0, 1.0)
    >>> r = sg.minimize(lambda x: x[0] + 2 * x[1], np.array([1.0, 0.0]), constraints=[circle],
    ...                 method="trust-constr")
    >>> np.round(r.x * np.sqrt(5), 4)
    array([-1., -2.])
    """
    import scipy.optimize

    if x0 is None:
        raise TypeError("sg.minimize: x0, the starting point, is None: give an array of floats")
    x0 = np.asarray(x0, dtype=float)
    if not np.all(np.isfinite(x0)):
        bad = np.flatnonzero(~np.isfinite(x0.ravel()))
        raise ValueError(f"sg.minimize: the starting point x0 has nan or inf at {bad[:5].tolist()}")
    if isinstance(constraints, scipy.optimize.NonlinearConstraint):
        constraints = [constraints]
    problem = Problem(fun, list(constraints), x0, args)
    lb, ub = _bounds(bounds, x0.size)
    if method == "ipopt":
        return _ipopt(problem, x0, lb, ub, options or {}, library)
    if method != "trust-constr":
        raise ValueError(f"sg.minimize: method must be 'ipopt' or 'trust-constr', got {method!r}")
    kept = [scipy.optimize.NonlinearConstraint(
        problem.constraints, problem.lower, problem.upper, jac=lambda x: problem.c_jacobian(x, *problem.args),
        hess=lambda x, v: problem.lagrangian_hessian(x, 0.0, np.asarray(v, dtype=float)))
    ] if problem.m else []
    return scipy.optimize.minimize(
        problem.objective, x0, jac=problem.gradient, method="trust-constr", constraints=kept,
        hess=lambda x: problem.lagrangian_hessian(x, 1.0, np.zeros(problem.m)),
        bounds=scipy.optimize.Bounds(lb, ub) if bounds is not None else None, options=options or {})


def _bounds(bounds: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(lb, ub) from a ``scipy.optimize.Bounds``, SciPy's list of (min, max) pairs, one per variable
    (None: no bound), or a tuple (lb, ub) of numbers or arrays."""
    import scipy.optimize

    if bounds is None:
        return np.full(n, -np.inf), np.full(n, np.inf)
    if isinstance(bounds, scipy.optimize.Bounds):
        lb, ub = bounds.lb, bounds.ub
    elif not isinstance(bounds, tuple) and len(bounds) == n and all(np.size(b) == 2 for b in bounds):
        lb, ub = ([b[k] for b in bounds] for k in (0, 1))  # (SciPy's form: one pair a variable)
    elif len(bounds) == 2:
        lb, ub = bounds
    else:
        raise ValueError(f"sg.minimize: bounds must be scipy.optimize.Bounds, {n} (min, max) pairs or a tuple "
                         f"(lb, ub), got {type(bounds).__name__} of length {len(bounds)}")
    try:
        lb, ub = (np.broadcast_to(np.where(np.equal(np.asarray(side, dtype=object), None), fill, side)
                                  .astype(float), (n,)).copy() for side, fill in ((lb, -np.inf), (ub, np.inf)))
    except ValueError:
        raise ValueError(f"sg.minimize: bounds of shapes {np.shape(lb)} and {np.shape(ub)} for {n} variables") \
            from None
    return _ordered(lb, ub, "variable")


def _ordered(lb: np.ndarray, ub: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    wrong = np.flatnonzero(lb > ub)
    if wrong.size:
        k = wrong[0]
        raise ValueError(f"sg.minimize: {what} {k} has its lower bound {lb[k]} above its upper bound {ub[k]}")
    return lb, ub


def _ipopt(problem: Problem, x0: np.ndarray, lb: np.ndarray, ub: np.ndarray, options: dict,
           library: str | None = None) -> scipy.optimize.OptimizeResult:
    import scipy.optimize

    from symgrad.solvers.ipopt import solve

    info = solve(problem, x0, lb, ub, {"print_level": 0, "sb": "yes", **options}, library)
    return scipy.optimize.OptimizeResult(
        x=info["x"], fun=info["obj_val"], success=info["status"] in (0, 1), status=info["status"],
        nit=problem.iterations, message=info["status_msg"], constr=info["g"], multipliers=info["mult_g"],
        info=info)
