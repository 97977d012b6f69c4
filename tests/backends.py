"""Helpers to compare compiled backends with the reference interpreter."""

import numpy as np

import symgrad as sg


def agree(got, ref, rtol: float = 1e-9, scale=None) -> bool:
    """Same nan positions, same infinities, finite values within ``rtol`` (times max(1, |ref|),
    or max(1, ``scale``): for sums, the sum of the terms' magnitudes).

    Backends use the C library where the interpreter uses NumPy: each op may differ in the
    last bit, and a random graph can amplify that, hence not bit equality.
    """
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        return False
    both_nan = np.isnan(got) & np.isnan(ref)
    with np.errstate(invalid="ignore"):
        near = np.abs(got - ref) <= rtol * np.maximum(1.0, np.abs(ref) if scale is None else scale)
    return bool(np.all(both_nan | (got == ref) | near))


def reference(outputs, names, X):
    """The interpreter's values of ``outputs`` at each row of ``X`` (columns named ``names``)."""
    X = np.asarray(X, dtype=float)
    got = sg.evaluate(list(outputs), {n: X[:, i] for i, n in enumerate(names)})
    return np.array([np.broadcast_to(g, len(X)) for g in got]).T


def agree_sum(got, terms, rtol: float = 1e-9) -> bool:
    """``got`` is the column sum of ``terms`` (rows), up to rounding in another order."""
    terms = np.asarray(terms, dtype=float)
    with np.errstate(invalid="ignore"):
        return agree(got, terms.sum(axis=0), rtol, scale=np.abs(terms).sum(axis=0))


def central_differences(f, x, h=1e-6):
    """The gradient of the scalar function ``f`` at the float array ``x`` by central differences."""
    out = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        out.flat[k] = (f(x + e) - f(x - e)) / (2 * h)
    return out
