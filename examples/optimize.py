"""Extended Rosenbrock, n = 1000: SciPy with symgrad's compiled gradient and sparse Hessian,
against SciPy estimating the gradient by finite differences."""

import time

import numpy as np
import scipy.optimize

import symgrad as sg

N = 1000


def rosen(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


x0 = np.tile([-1.2, 1.0], N // 2)
start = time.perf_counter()
vg = sg.value_and_grad(rosen)  # traced, differentiated and compiled on the first call
hess = sg.hessian(rosen, sparse=True)
vg(x0), hess(x0)
ready = time.perf_counter() - start
H = hess(x0)
print(f"n = {N}: gradient ({vg.compiled.n_ops} ops) and sparse Hessian ({H.nnz} nonzeros of {N * N}: one "
      f"Hessian-vector product per colour of its columns) ready in {ready:.2f} s")


def solve(label, **kw):
    start = time.perf_counter()
    res = scipy.optimize.minimize(x0=x0, **kw)
    took = time.perf_counter() - start
    err = np.abs(res.x - 1).max()
    print(f"{label:<46} {res.nit:>6} {res.nfev:>7} {took:>8.3f} s  f = {res.fun:.2e}  max|x - 1| = {err:.1e}")
    return res, took


print(f"{'method':<46} {'iters':>6} {'f evals':>7} {'time':>10}")
res_newton, t_newton = solve("Newton-CG, symgrad gradient + sparse Hessian", fun=vg, jac=True, hess=hess,
                             method="Newton-CG", options=dict(xtol=1e-10, maxiter=5000))
CAP = 100  # finite differences cost n + 1 evaluations per gradient: compare the first CAP iterations
_, t_lbfgs = solve(f"L-BFGS-B, symgrad gradient ({CAP} iterations)", fun=vg, jac=True, method="L-BFGS-B",
                   options=dict(maxiter=CAP))
_, t_fd = solve(f"L-BFGS-B, finite differences ({CAP} iterations)", fun=scipy.optimize.rosen,
                method="L-BFGS-B", options=dict(maxiter=CAP, maxfun=10**8))
print(f"same {CAP} L-BFGS-B iterations: symgrad's gradient {t_fd / t_lbfgs:.0f}x faster than finite differences; "
      f"the full Newton-CG solve with the sparse Hessian took {t_newton / t_fd:.2f}x the time of those {CAP} "
      "finite-difference iterations")
assert np.allclose(res_newton.x, 1.0, atol=1e-6)
