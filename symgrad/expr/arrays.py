"""NumPy on symbolic values: ufuncs and array functions map onto the op table.

Tracing hands a Python function :class:`SymArray` arguments (object arrays of
expressions), and single expressions for float arguments. NumPy asks both what its
functions mean through ``__array_ufunc__`` / ``__array_function__``, and this module
answers from one table: ufuncs that are ops (``np.sin``, ``np.maximum``, ``np.less``, ...)
or short compositions of ops (``np.square``, ``np.log10``, ``np.logaddexp``, ...) apply
elementwise; array functions that only index, add and multiply (``np.sum``, ``x @ W``,
``np.concatenate``, ``np.linalg.norm``, ...) run NumPy's own code on the object array;
``np.where`` and ``np.clip`` become ``sg.where`` / ``sg.maximum``; whatever needs a
concrete value raises :class:`TracingError` naming the NumPy function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr.build import FUNCS, UFUNCS
from symgrad.expr.node import Expr, TracingError

_F = FUNCS
# NumPy ufuncs that are a few ops each (the op table holds the ones that are exactly one op).
_DERIVED: dict[Any, Callable] = {
    np.square: lambda a: a * a,
    np.reciprocal: lambda a: 1.0 / a,
    np.positive: lambda a: a,
    np.fabs: _F["abs"],
    np.float_power: _F["pow"],
    np.log2: lambda a: _F["log"](a) * (1.0 / math.log(2.0)),
    np.log10: lambda a: _F["log"](a) * (1.0 / math.log(10.0)),
    np.exp2: lambda a: 2.0 ** a,
    np.logaddexp: lambda a, b: _F["maximum"](a, b) + _F["log1p"](_F["exp"](-_F["abs"](a - b))),
    np.deg2rad: lambda a: a * (math.pi / 180.0),
    np.rad2deg: lambda a: a * (180.0 / math.pi),
}
ELEMENTWISE: dict[Any, Callable] = {**UFUNCS, **_DERIVED}
# Reductions NumPy's own object loops do with Python operators (and an identity for empty input).
_NATIVE = {np.add, np.multiply, np.matmul}
# Array functions that choose by comparing values: nothing to trace.
_NEED_VALUES = {np.sort, np.argsort, np.argmax, np.argmin, np.nonzero, np.flatnonzero, np.argwhere,
                np.unique, np.searchsorted, np.partition, np.argpartition, np.median, np.percentile,
                np.quantile, np.nanmax, np.nanmin, np.nansum, np.isclose, np.allclose, np.array_equal}


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


def wrap(result: Any) -> Any:
    """An object array as a :class:`SymArray` (a 0-d one as its element); anything else as is."""
    if isinstance(result, np.ndarray) and result.dtype == object:
        return result[()] if result.ndim == 0 else result.view(SymArray)
    return result


def array_ufunc(ufunc: Any, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``ufunc.method(*inputs, **kwargs)`` with symbolic inputs (NumPy's ``__array_ufunc__``)."""
    name = f"np.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        raise TracingError(f"{name}(..., out=...) cannot store symbolic values in a float array; "
                           "use the returned array instead")
    fn = ELEMENTWISE.get(ufunc)
    if fn is None and ufunc not in _NATIVE:
        raise TracingError(f"{name} is not supported on symbolic values; use the sg.* functions "
                           f"(sg.where for conditions) or one of: {_supported()}")
    if method not in ("__call__", "reduce", "accumulate", "outer", "reduceat"):
        raise TracingError(f"{name}.{method} is not supported on symbolic values")
    if method == "__call__" and not kwargs and not any(isinstance(a, np.ndarray) for a in inputs):
        return fn(*inputs)  # scalars: no array round trip
    target = ufunc if ufunc in _NATIVE else np.frompyfunc(fn, ufunc.nin, 1)
    return wrap(getattr(target, method)(*_plain(inputs), **kwargs))


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


_OVERRIDES: dict[Any, Callable] = {np.where: _where, np.clip: _clip}


def array_function(func: Any, args: tuple, kwargs: dict) -> Any:
    """NumPy's ``__array_function__`` for symbolic arguments."""
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


class SymArray(np.ndarray):
    """An object array of expressions whose NumPy operations build expressions.

    Tracing passes array arguments as SymArrays; ``sg.vector`` and friends return plain
    object arrays, which ``wrap`` turns into one.

    >>> import numpy as np, symgrad as sg
    >>> from symgrad.expr.arrays import wrap
    >>> x = wrap(sg.vector("x", 2))
    >>> np.maximum(x, 0.0)
    SymArray([maximum(0, x[0]), maximum(0, x[1])], dtype=object)
    >>> np.where(x > 1, x, 0.0).tolist()
    [where(x[0] > 1, x[0], 0), where(x[1] > 1, x[1], 0)]
    """

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        return array_function(func, args, kwargs)
