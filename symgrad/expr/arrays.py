"""NumPy on symbolic values: ufuncs and array functions map onto the op table.

Tracing hands a Python function ``SymArray`` arguments (object arrays of
expressions), and single expressions for float arguments. NumPy asks both what its
functions mean through ``__array_ufunc__`` / ``__array_function__``, and this module
answers from one table: ufuncs that are ops (``np.sin``, ``np.maximum``, ``np.less``, ...)
or short compositions of ops (``np.square``, ``np.log10``, ``np.logaddexp``, ...) apply
elementwise; array functions that only index, add and multiply (``np.sum``, ``x @ W``,
``np.concatenate``, ``np.linalg.norm``, ...) run NumPy's own code on the object array;
``np.where`` and ``np.clip`` become ``sg.where`` / ``sg.maximum``; whatever needs a
concrete value raises ``TracingError`` naming the NumPy function.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import linalg, ops, reductions, sorting, tracing
from symgrad.expr.functions import FUNCS, UFUNCS, SymArray, rint, wrap
from symgrad.expr.node import Expr, TracingError

# ---- NumPy's hooks -------------------------------------------------------------------------------

_F = FUNCS
_INF = float("inf")
_LN2 = math.log(2.0)
def _fmax_fmin(pick: Callable) -> Callable:
    """np.fmax / np.fmin: a nan argument yields the other one."""
    return lambda a, b: _F["where"](a != a, b, _F["where"](b != b, a, pick(a, b)))


def _times_power_of_two(v: Any, k: Any) -> Any:
    """``v * 2**k`` exactly, as ``np.ldexp``: in two halves (2**1100 alone overflows, and 1e-300 * 2**1100
    does not), so the one rounding is the last product's."""
    half = np.floor(k * 0.5)
    return v * 2.0 ** half * 2.0 ** (k - half)


# NumPy ufuncs that are a few ops each (the op table holds the ones that are exactly one op).
_DERIVED: dict[Any, Callable] = {
    np.square: lambda a: a * a,
    np.reciprocal: lambda a: 1.0 / a,
    np.positive: lambda a: a,
    np.conjugate: lambda a: a,  # real values
    np.fabs: _F["abs"],
    np.float_power: _F["pow"],
    np.true_divide: _F["div"],
    np.log2: lambda a: _F["log"](a) * (1.0 / _LN2),
    np.log10: lambda a: _F["log"](a) * (1.0 / math.log(10.0)),
    np.exp2: lambda a: 2.0 ** a,
    np.logaddexp2: lambda a, b: _F["logaddexp"](a * _LN2, b * _LN2) * (1.0 / _LN2),
    np.deg2rad: lambda a: a * (math.pi / 180.0),
    np.rad2deg: lambda a: a * (180.0 / math.pi),
    np.fmax: _fmax_fmin(_F["maximum"]),
    np.fmin: _fmax_fmin(_F["minimum"]),
    np.ldexp: _times_power_of_two,
    np.cbrt: lambda a: _F["where"](a < 0.0, -((-a) ** (1.0 / 3.0)), a ** (1.0 / 3.0)),
    np.trunc: lambda a: _F["where"](a < 0.0, _F["ceil"](a), _F["floor"](a)),
    np.rint: rint,
    np.heaviside: lambda a, h: _F["where"](a != a, a, _F["where"](a < 0.0, 0.0, _F["where"](a > 0.0, 1.0, h))),
    # Conditions are 1.0 / 0.0, as the comparisons are.
    np.isnan: lambda a: a != a,
    np.isinf: lambda a: _F["abs"](a) == _INF,
    np.isfinite: lambda a: _F["abs"](a) < _INF,
}
_DERIVED[np.degrees], _DERIVED[np.radians] = _DERIVED[np.rad2deg], _DERIVED[np.deg2rad]
# Logical ones end in a comparison (so jit returns bool, as NumPy): nonzero (nan too) is true.
_LOGICAL: dict[Any, Callable] = {
    np.logical_and: lambda a, b: (a != 0.0) + (b != 0.0) == 2.0,
    np.logical_or: lambda a, b: (a != 0.0) + (b != 0.0) > 0.0,
    np.logical_xor: lambda a, b: (a != 0.0) != (b != 0.0),
    np.logical_not: lambda a: a == 0.0,
}


def _on_conditions(ufunc: Any, logical: Callable) -> Callable:
    """``&``, ``|``, ``^``, ``~`` of conditions (comparisons, bools): the logical ufunc; of other
    traced values (integers, which graphs hold as floats): TypeError."""
    def on(*args: Any) -> Any:
        bad = next((a for a in args if not _condition(a)), None)
        if bad is not None:
            raise TypeError(f"np.{ufunc.__name__} (&, |, ^, ~) of traced values combines conditions only "
                            f"(comparisons, bools), not {str(bad)[:40]}: integers are floats in symgrad's graphs")
        return logical(*args)
    return on


def _condition(a: Any) -> bool:
    if isinstance(a, Expr):
        return a.op.name in ops.COMPARISONS or a.op.name == "const" and a.payload in (0.0, 1.0)
    return isinstance(a, bool | np.bool_)


_DERIVED.update(_LOGICAL)
_DERIVED.update({np.bitwise_and: _on_conditions(np.bitwise_and, _LOGICAL[np.logical_and]),
                 np.bitwise_or: _on_conditions(np.bitwise_or, _LOGICAL[np.logical_or]),
                 np.bitwise_xor: _on_conditions(np.bitwise_xor, _LOGICAL[np.logical_xor]),
                 np.invert: _on_conditions(np.invert, _LOGICAL[np.logical_not])})
ELEMENTWISE: dict[Any, Callable] = {**UFUNCS, **_DERIVED}
# scipy.special's ufuncs, by name (SciPy is not imported for them: one met is SciPy's, already loaded).
_SCIPY: dict[str, Callable] = {
    "expit": _F["sigmoid"],
    "log_expit": lambda a: -_F["softplus"](-a),
    "logit": lambda a: _F["log"](a) - _F["log1p"](-a),
    "erf": _F["erf"],
    "erfc": lambda a: 1.0 - _F["erf"](a),
    "ndtr": lambda a: 0.5 + 0.5 * _F["erf"](a * (1.0 / math.sqrt(2.0))),
    # 0 at x == 0 whatever y (SciPy's), guarding only where log is not finite there: at x == 0 < y the
    # derivatives are the product's (d/dx = log y, JAX's rule), which a guard on x == 0 would make 0
    "xlogy": lambda x, y: x * _F["log"](_F["where"]((x == 0.0) * ((y <= 0.0) + (y == _INF)), 1.0, y)),
    "xlog1py": lambda x, y: x * _F["log1p"](_F["where"]((x == 0.0) * ((y <= -1.0) + (y == _INF)), 0.0, y)),
    "entr": lambda a: _F["where"](a > 0.0, -a * _F["log"](a), _F["where"](a == 0.0, 0.0, -_INF)),
    "softplus": _F["softplus"],
    "gammaln": _F["gammaln"],
    "erfinv": _F["erfinv"],
    "ive": _F["ive"],
    "i0e": lambda a: _F["ive"](0.0, a),
    "i1e": lambda a: _F["ive"](1.0, a),
    "psi": _F["digamma"],  # (scipy.special.digamma is psi)
}


def known(ufunc: Any) -> None:
    """Add ``ufunc`` to ELEMENTWISE where it is one of scipy.special's that symgrad writes with its ops."""
    if ufunc in ELEMENTWISE:
        return
    special = sys.modules.get("scipy.special")
    name = getattr(ufunc, "__name__", "")
    if special is not None and name in _SCIPY and getattr(special, name, None) is ufunc:
        ELEMENTWISE[ufunc] = _SCIPY[name]
# Reductions NumPy's own object loops do with Python operators (and an identity for empty input).
_NATIVE = {np.add, np.multiply, np.matmul}
# Array functions that choose by comparing values: nothing to trace.
_NEED_VALUES = {np.argmax, np.argmin, np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.searchsorted,
                np.argpartition, np.isclose, np.allclose, np.array_equal}


def frexp(x: Any) -> tuple[Any, Any]:
    """``np.frexp``: mantissa and exponent, ``x = m * 2**e`` with 0.5 <= |m| < 1 (0 for 0, inf and nan);
    ``e`` as floats. The exponent from log2, set right where rounding put it one off; the mantissa's
    derivative is ``2**-e``, the exponent's 0 (integer data, as JAX's).

    >>> import symgrad as sg
    >>> sg.grad(lambda v: np.sum(np.frexp(v)[0]))(np.array([3.0, -0.1]))
    array([0.25, 8.  ])
    """
    a = np.abs(x)
    e = np.floor(np.log2(np.where(a > 0.0, a, 1.0))) + 1.0
    m = _times_power_of_two(a, -e)
    e = e + np.where(m >= 1.0, 1.0, 0.0) - np.where(m < 0.5, 1.0, 0.0)
    e = np.where((a > 0.0) * (a < _INF), e, 0.0)
    return _times_power_of_two(x, -e), e


# ufuncs of two results, on traced values: ufunc -> (its arguments) -> both
PAIRS: dict[Any, Callable] = {np.frexp: frexp}


def _name(func: Any) -> str:
    module = getattr(func, "__module__", None) or "numpy"
    prefix = "np" + module[len("numpy"):] if module.startswith("numpy") else module
    return f"{prefix.replace('.core', '').replace('._core', '')}.{func.__name__}"


def _supported() -> str:
    return ", ".join(sorted(f"np.{u.__name__}" for u in ELEMENTWISE))


def _plain(inputs: tuple) -> list:
    """Inputs NumPy will not hand back to us: plain object arrays (a lone Expr becomes 0-d)."""
    return [a.view(np.ndarray) if isinstance(a, SymArray) else
            np.asarray(a, dtype=object) if isinstance(a, Expr) else a for a in inputs]


def _observe(values: Any) -> None:
    """Note the NumPy arrays among a call's arguments (and in a list or tuple of them): their values
    go into the traced formulas, so the trace must know if one changes later (tracing.observing)."""
    for v in values:
        if isinstance(v, list | tuple):
            _observe([u for u in v if isinstance(u, np.ndarray)])
        elif isinstance(v, np.ndarray):
            tracing.observe(v)


def array_ufunc(ufunc: Any, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``ufunc.method(*inputs, **kwargs)`` with symbolic inputs (NumPy's ``__array_ufunc__``)."""
    name = f"np.{ufunc.__name__}"
    known(ufunc)
    _observe(inputs)
    out = kwargs.pop("out", None)
    outs = out if isinstance(out, tuple) else (out,) if out is not None else ()
    if any(isinstance(o, Expr) for o in outs):  # a 0-d temporary of NumPy's own code (np.var of a scalar):
        outs = ()  # an Expr cannot be written into, and that code uses the returned value
    if any(not (isinstance(o, np.ndarray) and o.dtype == object) for o in outs):
        raise TracingError(f"{name}(..., out=...) cannot store symbolic values in a float array; "
                           "use the returned array instead")
    fn = ELEMENTWISE.get(ufunc)
    if fn is None and ufunc not in _NATIVE:
        raise TracingError(f"{name} is not supported on symbolic values; use the sg.* functions "
                           f"(sg.where for conditions) or one of: {_supported()}")
    if method not in ("__call__", "reduce", "accumulate", "outer", "reduceat"):
        raise TracingError(f"{name}.{method} is not supported on symbolic values")
    if kwargs.get("dtype") is not None and np.dtype(kwargs["dtype"]).kind in "biuf":
        del kwargs["dtype"]  # the values stay expressions; they are floats once evaluated
    if method == "__call__" and not kwargs and not outs and not any(isinstance(a, np.ndarray) for a in inputs):
        return fn(*inputs)  # scalars: no array round trip
    # Object loops only build expressions (numbers come later, from the compiled code), but NumPy reads the
    # floating-point flags after them: a nan or inf constant folded into a node (x + [nan, inf, -inf]) would
    # warn "invalid value encountered in add" about no computation of the user's.
    with np.errstate(all="ignore"):
        if method == "reduce":
            result = _reduce(ufunc, _plain(inputs)[0], **kwargs)
        else:
            result = getattr(_object_ufunc(ufunc), method)(*_plain(inputs), **kwargs)
    if not outs:
        return wrap(result)
    outs[0][...] = result  # NumPy's own code (np.mean, np.var ...) divides into its object temporaries
    return wrap(outs[0])


@functools.cache  # one per NumPy ufunc: bounded
def _object_ufunc(ufunc: Any) -> Any:
    """The ufunc to run on object arrays: NumPy's own for + * @, else one that builds expressions."""
    return ufunc if ufunc in _NATIVE else np.frompyfunc(ELEMENTWISE[ufunc], ufunc.nin, 1)


_IDENTITY = {np.add: 0.0, np.multiply: 1.0}


def _reduce(ufunc: Any, a: np.ndarray, axis: Any = 0, dtype: Any = None, keepdims: bool = False,
            initial: Any = np._NoValue, where: Any = True) -> Any:
    """``ufunc.reduce`` over any axes. Only + and * are reorderable in NumPy's object loops, so the
    others (np.max, np.min ...) reduce the axes moved to the end and merged into one."""
    if where is not True and initial is np._NoValue:
        if ufunc not in _IDENTITY:
            raise TracingError(f"np.{ufunc.__name__}.reduce(..., where=...) needs initial= on symbolic values")
        initial = _IDENTITY[ufunc]
    a = np.asarray(a, dtype=object)
    extra = {} if initial is np._NoValue else {"initial": initial}
    if ufunc in _NATIVE or where is not True:
        return _object_ufunc(ufunc).reduce(a, axis=axis, keepdims=keepdims, where=where, **extra)
    axes = tuple(range(a.ndim)) if axis is None else tuple(sorted({int(k) % a.ndim for k in np.atleast_1d(axis)}))
    moved = np.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    merged = moved.reshape(moved.shape[:a.ndim - len(axes)] + (-1,))
    result = _object_ufunc(ufunc).reduce(merged, axis=-1, **extra)
    return np.expand_dims(result, axes) if keepdims else result


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None or y is None:
        raise TracingError("np.where(condition) lists the indices where a symbolic condition holds, which "
                           "is unknown while tracing; use np.where(condition, x, y) or sg.where")
    return wrap(_F["where"](*_plain((condition, x, y))))


def _clip(a: Any, a_min: Any = None, a_max: Any = None, **kwargs: Any) -> Any:
    a_min, a_max = kwargs.pop("min", a_min), kwargs.pop("max", a_max)
    if kwargs:
        raise TracingError(f"np.clip: keyword arguments {sorted(kwargs)} are not supported on symbolic values")
    out = a if a_min is None else np.maximum(a, a_min)
    return out if a_max is None else np.minimum(out, a_max)


def _nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Any:
    big = np.finfo(np.float64).max
    posinf, neginf = (big if posinf is None else posinf), (-big if neginf is None else neginf)
    w = _F["where"]
    return wrap(w(x != x, nan, w(x == _INF, posinf, w(x == -_INF, neginf, x))))


def _select(condlist: Any, choicelist: Any, default: Any = 0.0) -> Any:
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = _F["where"](cond, choice, out)
    return wrap(np.broadcast_to(np.asarray(out, dtype=object), np.broadcast_shapes(
        *(np.shape(c) for c in (*condlist, *choicelist)))).copy())


def _linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False,
              dtype: Any = None, axis: int = 0) -> Any:
    div = (num - 1) if endpoint else num
    start, stop = np.asarray(start, dtype=object), np.asarray(stop, dtype=object)
    step = (stop - start) / div if div > 0 else stop - start
    frac = np.arange(num, dtype=float).reshape((-1,) + (1,) * start.ndim)
    y = start + frac * step if div > 0 else start + 0.0 * frac
    if endpoint and num > 1:
        y[-1, ...] = stop
    y = wrap(np.moveaxis(y, 0, axis))
    return (y, wrap(step)) if retstep else y


def _gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    f = np.asarray(f, dtype=object)
    axes = list(range(f.ndim)) if axis is None else [int(a) % f.ndim for a in np.atleast_1d(axis)]
    spacing = list(varargs) if len(varargs) > 1 else list(varargs) * len(axes) if varargs else [1.0] * len(axes)
    if len(spacing) != len(axes) or any(np.ndim(h) != 0 for h in spacing):
        raise TracingError("np.gradient on symbolic arrays takes scalar spacings (one, or one per axis)")
    out = []
    for ax, h in zip(axes, spacing):
        g = np.moveaxis(f, ax, 0)
        if g.shape[0] < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, "
                             "at least (edge_order + 1) elements are required.")
        d = np.empty_like(g)
        d[1:-1] = (g[2:] - g[:-2]) / (2.0 * h)
        if edge_order == 1:
            d[0], d[-1] = (g[1] - g[0]) / h, (g[-1] - g[-2]) / h
        else:
            d[0] = (-1.5 * g[0] + 2.0 * g[1] - 0.5 * g[2]) / h
            d[-1] = (0.5 * g[-3] - 2.0 * g[-2] + 1.5 * g[-1]) / h
        out.append(wrap(np.moveaxis(d, 0, ax)))
    return out[0] if len(out) == 1 else tuple(out)


def _roots(v: Any) -> Any:
    return wrap(np.frompyfunc(reductions.root_of_squares, 1, 1)(np.asarray(v, dtype=object)))


def _norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    x = wrap(np.asarray(x, dtype=object))
    if axis is None:
        axis = tuple(range(x.ndim)) if ord is None or x.ndim == 2 else 0
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    a = np.abs(x)
    if len(axes) == 1 or ord is None:
        if ord is None or ord == 2:
            r = _roots(np.sum(x * x, axis=axes, keepdims=keepdims))
        elif ord == np.inf:
            r = np.max(a, axis=axes, keepdims=keepdims)
        elif ord == -np.inf:
            r = np.min(a, axis=axes, keepdims=keepdims)
        elif ord == 0:
            r = np.sum(a != 0.0, axis=axes, keepdims=keepdims)
        else:
            r = np.sum(a ** float(ord), axis=axes, keepdims=keepdims) ** (1.0 / float(ord))
        return wrap(r)
    if ord is None and len(axes) > 1 or ord == "fro":
        return _roots(np.sum(x * x, axis=axes, keepdims=keepdims))
    row, col = (int(k) % x.ndim for k in axes)
    reductions = {1: (row, np.max), -1: (row, np.min), np.inf: (col, np.max),
                  -np.inf: (col, np.min)}
    if ord not in reductions:
        raise TracingError(f"np.linalg.norm(ord={ord!r}) of a symbolic matrix needs its singular values; "
                           "use ord='fro', 1, -1, inf or -inf")
    summed_axis, pick = reductions[ord]
    other = col if summed_axis == row else row
    s = np.sum(a, axis=summed_axis, keepdims=True)
    r = pick(s, axis=other, keepdims=True)
    return wrap(r if keepdims else np.squeeze(r, axis=(row, col)))


def _rounded(a: Any, scale: float) -> Any:
    """``np.round`` to the places of ``scale`` (a power of 10) of an expression or an object array."""
    if isinstance(a, Expr):
        return _F["div"](rint(a * scale), scale)
    return wrap(_F["div"](np.frompyfunc(rint, 1, 1)(np.asarray(a, dtype=object) * scale), scale))


def _needs_values(alternative: str) -> Callable:
    def raise_(*args: Any, **kwargs: Any) -> Any:
        raise TracingError(f"this NumPy function needs the values of its arguments, which are symbolic while "
                           f"tracing; {alternative}")
    return raise_


_OVERRIDES: dict[Any, Callable] = {
    np.where: _where, np.clip: _clip, np.nan_to_num: _nan_to_num, np.select: _select, np.linspace: _linspace,
    np.gradient: _gradient, np.linalg.norm: _norm, np.std: lambda *args, **kwargs: _roots(np.var(*args, **kwargs)),
    np.round: lambda a, decimals=0, out=None: _rounded(a, 10.0 ** decimals), np.sinc: _F["sinc"],
    np.linalg.solve: linalg.solve, np.linalg.inv: linalg.inv, np.linalg.det: linalg.det,
    np.linalg.slogdet: linalg.slogdet, np.linalg.cholesky: linalg.cholesky,
    np.piecewise: _needs_values("np.piecewise needs boolean masks: use np.select or np.where"),
    np.interp: _needs_values("np.interp searches the points: pass x as data, or write it with np.where"),
}
_OVERRIDES[np.around] = _OVERRIDES[np.round]
# np.angle of real values: arctan2(0, x), pi where x < 0 or is -0.0 (traced values are real)
_OVERRIDES[np.angle] = lambda z, deg=False: np.arctan2(0.0, z) * (180.0 / np.pi if deg else 1.0)
_OVERRIDES.update(reductions.NANS)
_OVERRIDES.update(sorting.SORTING)
_OVERRIDES.update({f: _needs_values(f"np.{f.__name__}'s sorted entries depend on how many are nan, known only "
                                    "from the values: not supported yet; write np.median / np.quantile of "
                                    "np.where(np.isnan(x), fill, x), or pass x as data")
                   for f in (np.nanmedian, np.nanquantile, np.nanpercentile)})


def _scalar_like(func: Any, fill: float | None) -> Callable:
    """``np.zeros_like`` and its kin of a symbolic scalar: the number (NumPy's own code fails on it)."""
    def like(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, Expr) and not kwargs.get("shape"):
            value = fill if fill is not None else (args[0] if args else kwargs["fill_value"])
            return float(value) if isinstance(value, int | float | np.number) else value
        return wrap(func._implementation(a, *args, **kwargs))
    return like


_OVERRIDES.update({f: _scalar_like(f, fill) for f, fill in (
    (np.zeros_like, 0.0), (np.ones_like, 1.0), (np.empty_like, 0.0), (np.full_like, None))})


def array_function(func: Any, args: tuple, kwargs: dict) -> Any:
    """NumPy's ``__array_function__`` for symbolic arguments."""
    _observe(args)
    if func in _OVERRIDES:
        return _OVERRIDES[func](*args, **kwargs)
    if func in _NEED_VALUES:
        raise TracingError(f"{_name(func)} needs the values of its arguments, which are symbolic while "
                           "tracing; rewrite it with np.maximum / np.minimum / sg.where")
    try:
        return wrap(func._implementation(*args, **kwargs))
    except TracingError:
        raise
    except Exception as e:
        raise TracingError(f"{_name(func)} cannot run on symbolic arrays ({type(e).__name__}: {e}); "
                           "write it with operators, np.sum / np.dot / @ and sg.* functions, or pass "
                           "the array as data (a non-differentiated argument)") from e


