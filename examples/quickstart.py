"""Quickstart: x*y + sin(x) end to end — formulas, values, Hessian, LaTeX, gradient check."""

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

report = sg.check_grad(f, [x, y], point)
print(report)
assert report.ok
