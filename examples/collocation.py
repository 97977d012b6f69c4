"""A cart-pole swing-up by direct collocation, solved with IPOPT: the minimum-effort push that swings
the pole from hanging down to upright in T seconds, as CasADi's users set it up with nlpsol.

States (cart position, pole angle, their rates) and the force on the cart at N + 1 knots are the
unknowns (5 (N + 1): 10,005 at N = 2000); the trapezoidal rule ties each knot to the next (the
defects, 4 N equality constraints), the ends are fixed, the force and the track bounded. Written in
NumPy; symgrad supplies the gradient, the constraints' sparse Jacobian and the sparse Hessian of the
Lagrangian (`sg.minimize(..., method="ipopt")`). `benchmarks/run.py collocation` solves the same
problem with CasADi beside it.
"""

import sys
import time

import numpy as np
import scipy.optimize

import symgrad as sg

N = 2000  # intervals (python examples/collocation.py N: another)
T, DISTANCE, FORCE, TRACK = 2.0, 1.0, 20.0, 2.0
CART, POLE, LENGTH, G = 1.0, 0.3, 0.5, 9.81


def dynamics(q, theta, dq, dtheta, u, lib=np):
    """The cart-pole's accelerations (cart, pole): ``lib`` is NumPy, or CasADi for the comparison."""
    s, c = lib.sin(theta), lib.cos(theta)
    mass = CART + POLE * s ** 2
    ddq = (u + POLE * s * (LENGTH * dtheta ** 2 + G * c)) / mass
    ddtheta = -(u * c + POLE * LENGTH * dtheta ** 2 * c * s + (CART + POLE) * G * s) / (LENGTH * mass)
    return ddq, ddtheta


def unpack(z):
    return z[:N + 1], z[N + 1:2 * (N + 1)], z[2 * (N + 1):3 * (N + 1)], z[3 * (N + 1):4 * (N + 1)], z[4 * (N + 1):]


def defects(z, lib=np, join=np.concatenate):
    """The trapezoidal rule between knots, then the two ends (hanging at 0, upright at DISTANCE)."""
    h = T / N
    q, theta, dq, dtheta, u = unpack(z)
    ddq, ddtheta = dynamics(q, theta, dq, dtheta, u, lib)
    rule = [x[1:] - x[:-1] - h / 2 * (r[1:] + r[:-1]) for x, r in ((q, dq), (theta, dtheta), (dq, ddq),
                                                                     (dtheta, ddtheta))]
    ends = [q[:1], theta[:1], dq[:1], dtheta[:1], q[-1:] - DISTANCE, theta[-1:] - np.pi, dq[-1:], dtheta[-1:]]
    return join(rule + ends)


def effort(z):
    """The integral of the squared force (trapezoidal)."""
    u = unpack(z)[4]
    return T / N * (np.sum(u ** 2) - (u[0] ** 2 + u[-1] ** 2) / 2)


def guess():
    t = np.linspace(0.0, 1.0, N + 1)
    return np.concatenate([DISTANCE * t, np.pi * t, np.full(N + 1, DISTANCE / T), np.full(N + 1, np.pi / T),
                           np.zeros(N + 1)])


def bounds():
    lower = np.concatenate([np.full(N + 1, -TRACK), np.full(3 * (N + 1), -np.inf), np.full(N + 1, -FORCE)])
    return lower, -lower


if __name__ == "__main__":
    N = int(sys.argv[1]) if len(sys.argv) > 1 else N
    start = time.perf_counter()
    result = sg.minimize(effort, guess(), bounds=bounds(), method="ipopt",
                         constraints=[scipy.optimize.NonlinearConstraint(defects, 0.0, 0.0)],
                         options={"tol": 1e-8})
    took = time.perf_counter() - start
    print(f"N = {N}: {5 * (N + 1)} variables, {4 * N + 8} constraints; IPOPT: {result.message} "
          f"({result.nit} iterations), effort {result.fun:.6f}, {took:.2f} s in all, largest defect "
          f"{np.abs(defects(result.x)).max():.1e}")
    assert result.success and np.abs(defects(result.x)).max() < 1e-6
