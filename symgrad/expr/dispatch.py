"""NumPy's dispatch on rolled arrays: ``array_ufunc`` / ``array_function`` (what ``Expr.__array_ufunc__`` /
``__array_function__`` call when an argument is a rolled array) and ``FUNCTIONS``, the table of NumPy
functions with a rolled form (``composed.py`` adds its own; ``ACCUMULATE`` holds ufuncs' accumulates).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr import ops
from symgrad.expr.build import apply
from symgrad.expr.contractions import einsum, matmul, tensordot
from symgrad.expr.ndarrays import elementwise, is_array, operand, reshape
from symgrad.expr.node import TracingError
from symgrad.expr.reductions import NANS, cumsum, mean, norm, prod, reduce, std, var
from symgrad.expr.reshaping import concatenate, moveaxis, pad, split, squeeze, stack, transpose
from symgrad.expr.sorting import SORTING


def _reducer(kind: str) -> Any:
    def run(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, **rest: Any) -> Any:
        rest.pop("dtype", None)
        if out is not None or any(v is not None and v is not np._NoValue for v in rest.values()):
            raise TracingError(f"np.{kind}(..., {', '.join(rest)}) on a traced array has no rolled form")
        return reduce(kind, a, axis, keepdims)
    return run


def _mean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
          **rest: Any) -> Any:
    if out is not None or any(v is not np._NoValue for v in rest.values()):
        raise TracingError(f"np.mean(..., {', '.join(['out', *rest] if out is not None else rest)}) on a traced "
                           "array has no rolled form")
    return mean(a, axis, keepdims)


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None or y is None:
        raise TracingError("np.where(condition) gives the indices where it holds, which depend on the values "
                           "(a traced array has none); use np.where(condition, x, y)")
    return elementwise(lambda c, a, b: apply(ops.OPS["where"], (c, a, b)), (condition, x, y))


def _dot(a: Any, b: Any) -> Any:
    a, b = operand(a), operand(b)
    if not (is_array(a) and is_array(b)):
        return elementwise(lambda x, y: x * y, (a, b))
    return matmul(a, b)


FUNCTIONS: dict[Any, Any] = {
    np.sum: _reducer("sum"), np.max: _reducer("max"), np.amax: _reducer("max"), np.min: _reducer("min"),
    np.amin: _reducer("min"), np.mean: _mean, np.dot: _dot, np.matmul: matmul,
    np.transpose: transpose, np.where: _where,
    np.reshape: lambda a, shape, order="C": reshape(a, shape) if order == "C" else _no_form(
        f"np.reshape({order=})"),
    np.ravel: lambda a, order="C": reshape(a, -1) if order == "C" else _no_form(f"np.ravel({order=})"),
    np.clip: lambda a, lo, hi, out=None: _no_form("np.clip(..., out=...)") if out is not None else elementwise(
        lambda v, p, q: apply(ops.OPS["minimum"], (apply(ops.OPS["maximum"], (v, p)), q)), (a, lo, hi)),
    np.var: var, np.std: std, np.concatenate: concatenate, np.stack: stack, np.einsum: einsum,
    np.tensordot: tensordot,
    np.outer: lambda a, b, out=None: einsum("i,j->ij", reshape(a, -1), reshape(b, -1), out=out),
    np.inner: lambda a, b: einsum("i,i->", a, b) if a.ndim == b.ndim == 1 else _no_form("np.inner"),
    np.hstack: lambda arrays, **kw: concatenate(arrays, 0 if list(arrays)[0].ndim == 1 else 1, **kw),
    np.vstack: lambda arrays, **kw: concatenate([a if a.ndim > 1 else reshape(a, (1, a.size)) for a in arrays], 0,
                                                **kw),
    np.split: split, np.array_split: lambda a, sections, axis=0: split(a, sections, axis, even=False),
    np.moveaxis: moveaxis, np.swapaxes: lambda a, i, j: moveaxis(a, [i, j], [j, i]), np.squeeze: squeeze,
    np.pad: pad, np.linalg.norm: norm, np.prod: prod, np.cumsum: cumsum,
    np.sinc: lambda x: elementwise(ops.OPS["sinc"], (x,)),
    np.angle: lambda z, deg=False: np.arctan2(0.0, z) * (180.0 / np.pi if deg else 1.0),
    **NANS, **SORTING,
    np.expand_dims: lambda a, axis: reshape(a, a.shape[:int(axis) % (a.ndim + 1)] + (1,) +
                                            a.shape[int(axis) % (a.ndim + 1):]),
}
_UFUNC_REDUCE = {np.add: "sum", np.maximum: "max", np.minimum: "min"}
ACCUMULATE: dict[Any, Any] = {}  # ufunc -> (array, axis) -> its accumulate (composed.py fills it)


def array_ufunc(ufunc: Any, method: str, inputs: tuple, kwargs: dict, scalar: Any) -> Any:
    """NumPy's ``__array_ufunc__`` when an input is a rolled array: ``scalar`` maps the ufunc to the
    function of expressions it applies elementwise (arrays.ELEMENTWISE).

    >>> import numpy as np, symgrad as sg
    >>> np.sin(sg.array("x", 3)).shape  # Expr.__array_ufunc__ -> here
    (3,)
    """
    name = f"np.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        raise TracingError(f"{name}(..., out=...) on a traced array has no rolled form")
    if method == "reduce" and ufunc in _UFUNC_REDUCE:
        return reduce(_UFUNC_REDUCE[ufunc], inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims", False))
    if method == "accumulate" and ufunc is np.add and set(kwargs) <= {"axis", "dtype", "out"}:
        return cumsum(inputs[0], kwargs.get("axis", 0), out=kwargs.get("out"))
    if method == "accumulate" and ufunc in ACCUMULATE and set(kwargs) <= {"axis", "dtype", "out"}:
        return ACCUMULATE[ufunc](inputs[0], kwargs.get("axis", 0))
    if method == "__call__" and ufunc is np.matmul:
        return matmul(*inputs)
    fn = scalar.get(ufunc)
    if method != "__call__" or fn is None or set(kwargs) - {"out", "dtype", "casting"}:
        raise TracingError(f"{name}.{method} on a traced array has no rolled form")
    return elementwise(fn, inputs)


def _no_form(name: str) -> Any:
    raise TracingError(f"{name} of these traced arrays has no rolled form yet")


def array_function(func: Any, args: tuple, kwargs: dict) -> Any:
    """NumPy's ``__array_function__`` when an argument is a rolled array.

    >>> import numpy as np, symgrad as sg
    >>> np.sum(sg.array("x", 3) ** 2)  # Expr.__array_function__ -> here
    sum(x[j]**2, j=0..2)
    """
    if func not in FUNCTIONS:
        raise TracingError(f"np.{func.__name__} on a traced array has no rolled form yet")
    return FUNCTIONS[func](*args, **kwargs)
