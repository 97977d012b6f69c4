"""Expr's behaviour that needs the rest of the symbolic layer, installed in one place.

``node.py`` defines the node and imports nothing of symgrad; this module gives it its
operators and comparisons (built through ``build.apply``), one method per op row
(``x.sin()``, NumPy's method names), the scalar side of NumPy's array interface, printing
(``str``, ``repr``, ``_repr_latex_``), pickling, and NumPy's ufunc / function hooks.
``symgrad.expr`` imports it first, so every Expr has all of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import numpy as np

from symgrad.expr import (
    arrays,
    composed,  # noqa: F401 (registers its NumPy functions for rolled arrays)
    contractions,
    dispatch,
    functions,
    ndarrays,
    ops,
    printing,
    reductions,
    reshaping,
    rolled,
    sorting,
    tracing,
    traverse,
    updates,
)
from symgrad.expr.build import apply
from symgrad.expr.functions import SymArray, rint
from symgrad.expr.node import Expr, TracingError, intern


def _operator(name: str, reflected: bool = False) -> Callable:
    op = ops.OPS[name]

    def method(self: Expr, other: Any) -> Any:
        if not isinstance(other, Expr | Real | np.bool_):
            return NotImplemented
        args = (other, self) if reflected else (self, other)
        tracing.note_operands(args)
        if self.op.array_valued or isinstance(other, Expr) and other.op.array_valued:
            return ndarrays.elementwise(lambda a, b: apply(op, (a, b)), args)
        return apply(op, args)
    return method


for _name, _opname in {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "pow": "pow", "mod": "mod",
                       "floordiv": "floor_divide"}.items():
    setattr(Expr, f"__{_name}__", _operator(_opname))
    setattr(Expr, f"__r{_name}__", _operator(_opname, reflected=True))
# == and != build comparison nodes, as every other comparison does (and as in JAX): a traced
# `x == y` must never answer from identity. Structural identity is `is`; hashing stays by identity.
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(Expr, f"__{_name}__", _operator(_name))
for _name, _ufunc in {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}.items():  # conditions
    setattr(Expr, f"__{_name}__", lambda self, other, _u=_ufunc: _u(self, other))
    setattr(Expr, f"__r{_name}__", lambda self, other, _u=_ufunc: _u(other, self))
Expr.__invert__ = lambda self: np.invert(self)
Expr.__divmod__ = lambda self, other: (self // other, self % other)
Expr.__rdivmod__ = lambda self, other: (other // self, other % self)
Expr.__neg__ = lambda self: ndarrays.elementwise(lambda a: apply(ops.neg, (a,)), (self,)) if \
    self.op.array_valued else apply(ops.neg, (self,))
Expr.__pos__ = lambda self: self
for _name, _op in ops.FUNCTIONS.items():
    for _method in (_name, *_op.aliases):
        setattr(Expr, _method, lambda self, *rest, _op=_op: apply(_op, (self, *rest)))


def _astype(self: Expr, dtype: Any, *args: Any, **kwargs: Any) -> Expr:
    if np.dtype(dtype).kind in "fO":
        return self
    raise TypeError(f"astype({np.dtype(dtype)}) of a symbolic value: only float types are traced; "
                    "use np.floor / np.rint for integral values")


# NumPy's array interface: the scalar side for traced scalars (shape ()), an array's own shape for
# rolled array nodes (sg.array, sg.tensor), which subscript into loads.
Expr.shape = property(rolled.shape_of)
Expr.ndim = property(lambda self: len(rolled.shape_of(self)))
Expr.size = property(lambda self: math.prod(rolled.shape_of(self)))
Expr.__getitem__ = lambda self, key: ndarrays.getitem(self, key) if self.op.array_valued else \
    rolled.subscript(self, key)
Expr.dtype = np.dtype(object)  # as a traced array's: np.zeros(n, dtype=x.dtype) can hold expressions
Expr.real = property(lambda self: self)
Expr.imag = property(lambda self: intern(ops.OPS["const"], (), 0.0))
Expr.conjugate = Expr.conj = lambda self: self
Expr.astype = _astype
Expr.at = SymArray.at = property(lambda self: updates.At(self), doc="JAX's functional updates: x.at[i].set(v)")
Expr.__round__ = lambda self, ndigits=None: rint(self * 10.0 ** (ndigits or 0)) / 10.0 ** (ndigits or 0)
Expr.rint = rint


def _repr_latex_(self: Expr) -> str:
    """Jupyter shows expressions as typeset math (the let-form as aligned lines)."""
    text = printing.latex(self)
    if "\n" not in text:
        return f"${text}$"
    return r"$\begin{aligned}" + text.replace(" = ", " &= ") + r"\end{aligned}$"


Expr.__str__ = Expr.__repr__ = printing.to_str
Expr._repr_latex_ = _repr_latex_


def _unpickle(nodes: list, outputs: list) -> Expr:
    return traverse.from_flat(nodes, outputs)[0]


Expr.__reduce__ = lambda self: (_unpickle, traverse.to_flat(self))  # flat: no recursion, then interned


def _has_array(values: Any) -> bool:
    """Whether a rolled array is among ``values`` (or in a list or tuple among them: np.concatenate's)."""
    return any(isinstance(v, Expr) and v.op.array_valued or isinstance(v, list | tuple) and _has_array(v)
               for v in values)


def _has_objects(values: Any) -> bool:
    """Whether an array traced element by element (an object array) is among ``values``."""
    return any(isinstance(v, np.ndarray) and v.dtype == object or isinstance(v, list | tuple) and _has_objects(v)
               for v in values)


def _as_elements(values: Any) -> Any:
    """``values`` with each rolled array an object array of its elements (see ndarrays.elements)."""
    if isinstance(values, list | tuple):
        return type(values)(_as_elements(v) for v in values)
    return functions.wrap(ndarrays.elements(values)) if isinstance(values, Expr) and \
        values.op.array_valued else values


def _array_ufunc(self: Any, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    if method == "__call__" and ufunc in arrays.PAIRS and not kwargs:
        return arrays.PAIRS[ufunc](*inputs)
    if tracing.stepping_now() and not _has_objects(inputs) and any(
            isinstance(a, np.ndarray) and a.ndim and a.dtype.kind in "biuf" for a in inputs):
        inputs = tuple(map(ndarrays.operand, inputs))  # (a scan's step: rolled, see tracing.stepping)
    if _has_array(inputs) and _has_objects(inputs):  # beside an element trace's arrays: element by element
        inputs = _as_elements(inputs)
    if _has_array(inputs):  # a rolled array: NumPy's meaning, as indexed expressions
        arrays.known(ufunc)
        return dispatch.array_ufunc(ufunc, method, inputs, kwargs, arrays.ELEMENTWISE)
    return arrays.array_ufunc(ufunc, method, inputs, kwargs)


def _array_function(self: Any, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    if (_has_array(args) or _has_array(kwargs.values())) and (_has_objects(args) or _has_objects(kwargs.values())):
        args, kwargs = _as_elements(args), dict(zip(kwargs, _as_elements(tuple(kwargs.values()))))
    if _has_array(args) or _has_array(kwargs.values()):
        return dispatch.array_function(func, args, kwargs)
    return arrays.array_function(func, args, kwargs)


def _array(self: Expr, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """NumPy's ``__array__``, for NumPy's own code that makes arrays of its arguments (``np.array([x, y])``,
    ``np.r_``, ``np.asarray``): a rolled array is an object array of its elements (read one by one, as
    the element trace's arrays), an expression an object array's entry."""
    if dtype is not None and np.dtype(dtype) != object:
        if self.op.array_valued:
            raise TracingError(f"np.asarray(..., dtype={np.dtype(dtype)}) of the traced array {str(self)[:60]}: "
                               "a traced array has no numbers until it is evaluated; leave out dtype=")
        return np.array(float(self), dtype=dtype)  # (a constant; anything else raises float()'s error)
    if self.op.array_valued:
        return ndarrays.elements(self)
    out = np.empty(1, dtype=object)
    out[0] = self  # (np.array(self) would ask __array__ again)
    return out.reshape(())


Expr.__array__ = _array


def _len(self: Expr) -> int:
    """``len(x)`` of a rolled array: its first axis' length, as NumPy's."""
    if not (self.op.array_valued and self.shape):
        raise TypeError(f"len() of a scalar expression ({str(self)[:40]}): it has no length")
    return self.shape[0]


Expr.__len__ = _len
Expr.__array_ufunc__ = SymArray.__array_ufunc__ = _array_ufunc
functions.ON_ARRAYS[:] = [ndarrays.elementwise]  # sg.sin(x) of a rolled array
functions.GATHER[:] = [lambda arr, key: ndarrays.getitem(ndarrays.from_elements(arr), key)]
Expr.__array_function__ = SymArray.__array_function__ = _array_function
def _matmul(a: Any, b: Any) -> Any:
    if _has_array((a, b)) and _has_objects((a, b)):  # beside an element trace's arrays: element by element
        return functions.wrap(np.matmul(*_as_elements((a, b))))
    return contractions.matmul(a, b)


Expr.__matmul__ = lambda self, other: _matmul(self, other)
Expr.__rmatmul__ = lambda self, other: _matmul(other, self)
# NumPy's array methods, for rolled arrays (a scalar is its own sum, mean, max ...).
for _kind in ("sum", "max", "min"):
    setattr(Expr, _kind, lambda self, axis=None, dtype=None, out=None, keepdims=False, _kind=_kind, **rest:
            dispatch.FUNCTIONS[getattr(np, _kind)](self, axis=axis, out=out, keepdims=keepdims, **rest))
Expr.mean = lambda self, axis=None, dtype=None, out=None, keepdims=False, **rest: dispatch.FUNCTIONS[np.mean](
    self, axis=axis, out=out, keepdims=keepdims, **rest)
Expr.T = property(lambda self: reshaping.transpose(self) if self.op.array_valued else self)
Expr.transpose = lambda self, *axes: reshaping.transpose(self, axes[0] if len(axes) == 1 and isinstance(
    axes[0], tuple | list) else axes or None) if self.op.array_valued else self
Expr.reshape = lambda self, *shape: ndarrays.reshape(self, shape[0] if len(shape) == 1 else shape)
Expr.ravel = Expr.flatten = lambda self: ndarrays.reshape(self, -1)
Expr.dot = lambda self, other: dispatch.array_function(np.dot, (self, other), {})
Expr.swapaxes = lambda self, i, j: reshaping.moveaxis(self, [i, j], [j, i])
Expr.squeeze = lambda self, axis=None: reshaping.squeeze(self, axis)
Expr.cumsum = lambda self, axis=None, dtype=None, out=None: reductions.cumsum(self, axis, dtype, out)
Expr.argsort = lambda self, axis=-1, kind=None, order=None, **rest: sorting.argsort(self, axis, kind, order)


def _in_place(name: str) -> Callable:
    def refuse(self: Expr, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"x.{name}() sorts a NumPy array in place, which a traced array cannot be: write "
                        f"x = np.{name}(x, ...)")
    return refuse


Expr.sort, Expr.partition = _in_place("sort"), _in_place("partition")
Expr.prod = lambda self, axis=None, dtype=None, out=None, keepdims=False, **rest: reductions.prod(
    self, axis, dtype, out, keepdims, **rest)


def _numpy_method(name: str) -> property:
    """``x.name(...)`` of a rolled array: ``np.name(x, ...)``. A scalar has no such attribute: NumPy's
    own functions, which call the method where there is one, then treat it as a 0-d array."""
    f = getattr(np, name)

    def get(self: Expr) -> Any:
        if not self.op.array_valued:
            raise AttributeError(f"a scalar expression has no method {name}: use np.{name}(x)")
        if isinstance(f, np.ufunc):
            return lambda *args, **kwargs: f(self, *args, **kwargs)
        return lambda *args, **kwargs: dispatch.array_function(f, (self, *args), kwargs)

    return property(get)


for _kind in ("repeat", "clip", "round", "var", "std", "cumprod", "take", "trace"):
    setattr(Expr, _kind, _numpy_method(_kind))
Expr.copy = lambda self, order="C": self  # (immutable: a copy is the same node)


def _astype(self: Expr, dtype: Any, *args: Any, **kwargs: Any) -> Expr:
    """``x.astype(float)``: the same expression; an integer or bool dtype has no traced form."""
    if np.dtype(dtype).kind != "f":
        raise TracingError(f"x.astype({np.dtype(dtype)}) of a traced value: only float dtypes (the values are "
                           "floats until the function runs)")
    return self


Expr.astype = _astype
Expr.at = SymArray.at = property(lambda self: updates.At(self), doc="JAX's functional updates: x.at[i].set(v)")
