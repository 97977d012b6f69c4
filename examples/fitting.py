"""Fit a damped oscillator a*exp(-b t)*cos(w t + phi) to 10**5 noisy samples.

The loss is one sample's squared residual, compiled once with its gradient; ``.sum`` adds
it and its gradient over all samples inside the kernel, in parallel, with no per-sample
arrays. SciPy's curve_fit (Levenberg-Marquardt, finite-difference Jacobian) is the
comparison.
"""

import time

import numpy as np
import scipy.optimize

import symgrad as sg

TRUE = np.array([2.0, 0.35, 3.1, 0.6])  # a, b, w, phi
GUESS = np.array([1.0, 0.2, 3.0, 0.0])
rng = np.random.default_rng(7)
t = np.linspace(0.0, 12.0, 100_000)


def model(t, a, b, w, phi):
    return a * np.exp(-b * t) * np.cos(w * t + phi)


y = model(t, *TRUE) + rng.normal(scale=0.1, size=t.size)
data = np.column_stack([t, y])

a, b, w, phi, ts, ys = sg.symbols("a b w phi t y")
residual = model(ts, a, b, w, phi) - ys
vg = sg.value_and_grad(0.5 * residual ** 2, [a, b, w, phi], params=[ts, ys])
print("loss per sample:", 0.5 * residual ** 2)
print("its gradient:   ", sg.format(sg.grad(0.5 * residual ** 2, [a, b, w, phi])).replace("\n", "; "))

start = time.perf_counter()
vg.sum(GUESS, data)  # the first call compiles the summing kernel
print(f"compiled ({vg.backend}, {vg.n_ops} ops) in {time.perf_counter() - start:.2f} s")
start = time.perf_counter()
res = scipy.optimize.minimize(lambda p: vg.sum(p, data), GUESS, jac=True, method="BFGS", options=dict(gtol=1e-8))
took = time.perf_counter() - start
start = time.perf_counter()
value, grad = vg.sum(res.x, data)
per_pass = time.perf_counter() - start

# Levenberg-Marquardt as curve_fit does it, with the exact Jacobian: residual and its
# gradient compiled together, evaluated at every sample by .batch.
rj = sg.compile([residual, *sg.grad(residual, [a, b, w, phi])], [a, b, w, phi], params=[ts, ys])
rows = lambda p: rj.batch(np.broadcast_to(p, (t.size, 4)), data)
rows(GUESS)
start = time.perf_counter()
lm = scipy.optimize.least_squares(lambda p: rows(p)[:, 0], GUESS, jac=lambda p: rows(p)[:, 1:], method="lm")
took_lm = time.perf_counter() - start

start = time.perf_counter()
popt, _ = scipy.optimize.curve_fit(model, t, y, p0=GUESS)
took_cf = time.perf_counter() - start

print(f"{'':<22}{'a':>9}{'b':>9}{'w':>9}{'phi':>9}")
for label, p in (("true", TRUE), ("symgrad sum + BFGS", res.x), ("symgrad Jacobian + LM", lm.x),
                 ("scipy curve_fit", popt)):
    print(f"{label:<22}" + "".join(f"{v:9.4f}" for v in p))
print(f"symgrad: {res.nit} iterations, {res.nfev} loss+gradient passes over {t.size} samples "
      f"({per_pass * 1e3:.1f} ms each), {took:.2f} s")
print(f"symgrad Jacobian + LM: {lm.nfev} residual and {lm.njev} Jacobian evaluations, {took_lm:.2f} s")
print(f"curve_fit (finite-difference Jacobian): {took_cf:.2f} s; the fits differ by at most "
      f"{max(np.abs(res.x - popt).max(), np.abs(lm.x - popt).max()):.1e}")
assert np.allclose(res.x, popt, atol=1e-4) and np.allclose(lm.x, popt, atol=1e-6)
assert np.allclose(res.x, TRUE, atol=0.02)
