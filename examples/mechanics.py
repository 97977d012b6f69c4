"""Double pendulum: from the Lagrangian to the Euler-Lagrange equations (as formulas and LaTeX),
then integrated with the compiled right-hand side, and checked against the textbook equations
and conservation of energy."""

import time

import numpy as np
import scipy.integrate

import symgrad as sg

m1, m2, l1, l2, g = 1.0, 2.0, 1.0, 0.7, 9.81
th1, th2, w1, w2 = sg.symbols("theta1 theta2 omega1 omega2")
q, qdot = [th1, th2], [w1, w2]

T = 0.5 * (m1 + m2) * l1**2 * w1**2 + 0.5 * m2 * l2**2 * w2**2 + m2 * l1 * l2 * w1 * w2 * sg.cos(th1 - th2)
V = -(m1 + m2) * g * l1 * sg.cos(th1) - m2 * g * l2 * sg.cos(th2)
L = T - V

# Euler-Lagrange: d/dt dL/dqdot_i = dL/dq_i, where d/dt p = sum_j dp/dq_j qdot_j + dp/dqdot_j qddot_j.
# The equations are linear in the accelerations: M qddot = r.
p = sg.grad(L, qdot)
M = sg.jacobian(p, qdot)
r = [sg.diff(L, q[i]) - sum(sg.diff(p[i], q[j]) * qdot[j] for j in range(2)) for i in range(2)]
a1, a2 = sg.symbols("alpha1 alpha2")
equations = {f"EL[{i}]": M[i, 0] * a1 + M[i, 1] * a2 - r[i] for i in range(2)}
print("Euler-Lagrange equations (= 0):")
print(sg.format(equations))
print("LaTeX:")
print(sg.latex(equations))

det = M[0, 0] * M[1, 1] - M[0, 1] * M[1, 0]
alpha = [(r[0] * M[1, 1] - M[0, 1] * r[1]) / det, (M[0, 0] * r[1] - M[1, 0] * r[0]) / det]
print("accelerations:")
print(sg.format({"alpha1": alpha[0], "alpha2": alpha[1]}))

start = time.perf_counter()
rhs = sg.compile([w1, w2, *alpha], [th1, th2, w1, w2])
energy = sg.compile(T + V, [th1, th2, w1, w2])
state0 = np.array([2.0, -1.0, 0.0, 0.5])
rhs(state0)
print(f"right-hand side compiled ({rhs.backend}, {rhs.n_ops} ops) in {time.perf_counter() - start:.2f} s")


def textbook(s):
    """The double pendulum's accelerations as usually derived by hand (e.g. myphysicslab.com)."""
    t1, t2, o1, o2 = s
    d, den = t1 - t2, 2 * m1 + m2 - m2 * np.cos(2 * t1 - 2 * t2)
    al1 = (-g * (2 * m1 + m2) * np.sin(t1) - m2 * g * np.sin(t1 - 2 * t2)
           - 2 * np.sin(d) * m2 * (o2**2 * l2 + o1**2 * l1 * np.cos(d))) / (l1 * den)
    al2 = (2 * np.sin(d) * (o1**2 * l1 * (m1 + m2) + g * (m1 + m2) * np.cos(t1) + o2**2 * l2 * m2 * np.cos(d))
           / (l2 * den))
    return np.array([al1, al2])


states = np.random.default_rng(3).uniform(-3, 3, size=(1000, 4))
worst = np.max(np.abs(rhs.batch(states)[:, 2:] - np.array([textbook(s) for s in states])))
print(f"against the textbook equations at 1000 random states: max difference {worst:.1e}")

start = time.perf_counter()
sol = scipy.integrate.solve_ivp(lambda t, s: rhs(s), (0.0, 20.0), state0, method="DOP853", rtol=1e-11,
                                atol=1e-11, dense_output=True)
took = time.perf_counter() - start
E = energy.batch(sol.y.T)
print(f"integrated 20 s in {took:.2f} s ({sol.nfev} right-hand-side calls, {took / sol.nfev * 1e6:.1f} us each)")
print(f"theta1(20 s) = {sol.y[0, -1]:.6f}, theta2(20 s) = {sol.y[1, -1]:.6f}; energy drift "
      f"{np.max(np.abs(E - E[0])) / abs(E[0]):.1e} (relative)")
assert worst < 1e-9 and np.max(np.abs(E - E[0])) < 1e-6 * abs(E[0])
