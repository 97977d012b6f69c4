"""Catching a wrong hand-written gradient with sg.check_grad.

A hand-derived gradient (with a dropped chain-rule factor) is checked against central
finite differences: the check names the wrong component. symgrad's own gradient passes.
"""

import symgrad as sg

x, y = sg.symbols("x y")
f = x * sg.exp(-x * y) + sg.log(1 + x * x * y)

# By hand: d/dx [x e^{-xy}] = e^{-xy} - x y e^{-xy}; d/dx log(1 + x^2 y) = 2 x y / (1 + x^2 y)
#          d/dy [x e^{-xy}] = -x^2 e^{-xy};          d/dy log(1 + x^2 y) = x^2 / (1 + x^2 y)
hand_written = [
    sg.exp(-x * y) - x * y * sg.exp(-x * y) + 2 * x * y / (1 + x * x * y),
    -x * sg.exp(-x * y) + x * x / (1 + x * x * y),  # bug: -x e^{-xy} instead of -x^2 e^{-xy}
]
point = [1.3, 0.4]

print("f =", f)
print("hand-written gradient:")
report = sg.check_grad(f, [x, y], point, grad_exprs=hand_written)
print(report)
failed = [n for n, s in zip(report.names, report.status) if s == "FAIL"]
print("wrong components:", failed)

print("symgrad's gradient:", sg.grad(f, [x, y]))
ok = sg.check_grad(f, [x, y], point)
print(ok)
try:
    sg.check_grad(f, [x, y], point, grad_exprs=hand_written, raise_on_failure=True)
except sg.GradientCheckError as err:
    print("raise_on_failure=True raises GradientCheckError:", str(err).splitlines()[0])
assert failed == ["y"] and ok.ok
