"""Quickstart: x*y + sin(x) end to end — formulas, compiled value-and-gradient, Hessian, LaTeX,
gradient check; then the same from a plain Python function."""

import numpy as np

import symgrad as sg

x, y = sg.symbols("x y")
f = x * y + sg.sin(x)
g = sg.grad(f, [x, y])
print("f        =", f)
print("df/dx    =", g[0])
print("df/dy    =", g[1])
print("Hessian  =", sg.hessian(f, [x, y]).tolist())
print("LaTeX    =", sg.latex(f))

point = {x: 2.0, y: 3.0}
value, *grad = sg.evaluate([f, *g], point)
print(f"at x=2, y=3: f = {value:.12f}, grad = {grad}")

vg = sg.value_and_grad(f, [x, y])  # compiled: a float64 vector in, (value, gradient) out
print(f"compiled ({vg.backend}, {vg.n_ops} ops): vg([2, 3]) = {vg(np.array([2.0, 3.0]))}")


def g_py(v):  # the same formula as a Python function of an array
    return v[0] * v[1] + np.sin(v[0])


dg = sg.value_and_grad(g_py)
print("traced:", dg(np.array([2.0, 3.0])))
print(dg.formulas())

report = sg.check_grad(f, [x, y], point)
print(report)
assert report.ok
