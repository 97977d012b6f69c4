"""Helpers to compare symgrad results with SymPy's."""

import numpy as np
import sympy

import symgrad as sg


def numeric(expr: sympy.Expr, point: dict) -> float:
    """Evaluate a SymPy expression at a point, derivatives of steps taken as 0 (our convention).

    nan where SymPy cannot decide a step's side (x1 % x0 at x1 = 2 * x0 exactly: PrecisionExhausted)."""
    steps = sympy.Derivative | sympy.DiracDelta | sympy.Subs
    expr = expr.replace(lambda e: isinstance(e, steps), lambda e: sympy.S.Zero)
    subs = {sympy.Symbol(k, real=True): sympy.Float(v, 30) for k, v in point.items()}
    try:
        value = expr.evalf(30, subs=subs)
    except sympy.core.evalf.PrecisionExhausted:
        return float("nan")
    return complex(value).real if value.is_number else float("nan")


def sympy_grad(f: sg.Expr, wrt: list) -> list:
    s = sg.to_sympy(f)
    return [sympy.diff(s, sympy.Symbol(v.name, real=True)) for v in wrt]


def close(a, b, rtol=1e-7, atol=1e-9) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(1.0, float(np.max(np.abs(a), initial=0.0)))
    return bool(np.all(np.abs(a - b) <= atol * scale + rtol * np.abs(b)))
