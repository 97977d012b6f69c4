"""The cases of HIPS/autograd's test suite (tests/test_numpy.py, test_systematic.py, test_scalar_ops.py,
test_binary_ops.py, test_linalg.py, test_wrappers.py; https://github.com/HIPS/autograd, MIT licence,
Copyright (c) 2014 by the Harvard Intelligent Probabilistic Systems Group), ported to plain NumPy for
tests/test_autograd_suite.py.

Each ``Case`` is one autograd test: a list of calls ``(function, args)``, as its ``check_grads(fun)(*args)``
or ``combo_check(fun, argnums)(arg lists, **kwarg lists)`` makes them (the product of the lists, as
``combo_check`` does). Autograd's own argument shapes are kept, and each case also gets calls at a size
of at least 64 elements (or a smaller one where autograd's is that large already), so that both of
symgrad's tracings run: element by element (< 64 elements) and rolled (indexed expressions). Complex
arguments are left out (symgrad differentiates real functions), and so are autograd-only functions
(``np.make_diagonal``). Every float argument (a float, a float array, or a list / tuple of them) is
differentiated; the others (strings, axes, boolean masks) are passed as they are.
"""

from __future__ import annotations

import operator as op
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import product
from typing import Any

import numpy as np

rng = np.random.default_rng(1)


def R(*shape: int) -> Any:
    """npr.randn: a float for no shape."""
    return float(rng.standard_normal()) if not shape else rng.standard_normal(shape)


def U(lo: float, hi: float, *shape: int) -> Any:
    """Uniform on [lo, hi] (autograd's ``transform(lims, npr.rand(*shape))``)."""
    return float(lo + (hi - lo) * rng.random()) if not shape else lo + (hi - lo) * rng.random(shape)


@dataclass(frozen=True)
class Call:
    fun: Callable
    args: tuple
    label: str  # argument shapes and keyword arguments, for messages


@dataclass(frozen=True)
class Case:
    name: str
    calls: tuple[Call, ...]
    order: int = 2  # autograd's check_grads checks to order 2 unless told otherwise
    numba: bool = False  # also run on the (slow to compile) straight-line Numba backend

    def __str__(self) -> str:
        return self.name


def describe(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype.kind}{a.shape}" if a.dtype != float else str(a.shape)
    if isinstance(a, (list, tuple)):
        inner = ", ".join(describe(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner},)"
    return repr(a)


CASES: list[Case] = []


def case(name: str, fun: Callable, *arg_lists: list, order: int = 2, numba: bool = False, **kwarg_lists: list):
    """autograd's combo_check: every combination of one argument from each list and one value of each keyword."""
    calls = []
    keyword_choices = [[(k, v) for v in vs] for k, vs in kwarg_lists.items()]
    for args in product(*arg_lists):
        for kw in product(*keyword_choices):
            try:  # the arguments added at a rolled size do not all go together: keep the combinations NumPy takes
                fun(*args, **dict(kw))
            except ValueError:
                continue
            label = ", ".join([describe(a) for a in args] + [f"{k}={v!r}" for k, v in kw])
            calls.append(Call(partial(fun, **dict(kw)) if kw else fun, tuple(args), label))
    assert not any(c.name == name for c in CASES), name
    CASES.append(Case(name, tuple(calls), order, numba))


def check(name: str, fun: Callable, *args_sets: tuple, order: int = 2, numba: bool = False):
    """autograd's check_grads(fun)(*args), once per argument tuple."""
    calls = tuple(Call(fun, tuple(args), ", ".join(describe(a) for a in args)) for args in args_sets)
    assert not any(c.name == name for c in CASES), name
    CASES.append(Case(name, calls, order, numba))


# ---------------------------------------------------------------------------------------- test_numpy.py

dot = lambda x, y: np.dot(x, y)
check("numpy/dot mat-vec", dot, (R(3, 4), R(4)), (R(10, 11), R(11)))
check("numpy/dot mat-mat.T", dot, (R(3, 4), R(3, 4).T), (R(10, 11), R(10, 11).T))
check("numpy/dot vec-mat", dot, (R(3), R(3, 4)), (R(10), R(10, 11)))
check("numpy/dot vec-vec", dot, (R(11), R(11)), (R(70), R(70)))
check("numpy/dot with floats", dot, (R(3, 4), R()), (R(), R(3, 4)), (R(3), R()), (R(), R(3)),
      (R(10, 11), R()), (R(), R(10, 11)), (R(70), R()), (R(), R(70)))
check("numpy/outer", lambda x, y: np.outer(x, y), (R(11), R(11)), (R(64), R(64)))
check("numpy/max", lambda x: np.max(x), (R(3, 4),), (R(10, 11),))
check("numpy/max axis", lambda x: np.max(x, axis=1), (R(3, 4, 5),), (R(4, 5, 6),))
check("numpy/max axis keepdims", lambda x: np.max(x, axis=1, keepdims=True), (R(3, 4, 5),), (R(4, 5, 6),))
check("numpy/min", lambda x: np.min(x), (R(3, 4),), (R(10, 11),))
check("numpy/min axis", lambda x: np.min(x, axis=1), (R(3, 4, 5),), (R(4, 5, 6),))
check("numpy/min axis keepdims", lambda x: np.min(x, axis=1, keepdims=True), (R(3, 4, 5),), (R(4, 5, 6),))
check("numpy/sum", lambda x: np.sum(x), (R(3, 4),), (R(10, 11),))
check("numpy/sum axis 0", lambda x: np.sum(x, axis=0), (R(3, 4),), (R(10, 11),))
check("numpy/sum axis 0 keepdims", lambda x: np.sum(x, axis=0, keepdims=True), (R(3, 4),), (R(10, 11),))
check("numpy/sum axis tuple", lambda x: np.sum(x, axis=(1, 2)), (R(2, 3, 4),), (R(10, 11, 7),))
_base = np.abs(R(5)) + 0.5
for _r in (np.sum, np.prod, np.max, np.min):
    check(f"numpy/plain {_r.__name__} of exp(a) * base", lambda a, _r=_r: _r(np.exp(a) * _base), (0.7,))
check("numpy/flipud", lambda x: np.flipud(x), (R(3, 4),), (R(10, 11),))
check("numpy/fliplr", lambda x: np.fliplr(x), (R(3, 4),), (R(10, 11),))
check("numpy/rot90", lambda x: np.rot90(x), (R(3, 4),), (R(10, 11),))
check("numpy/cumsum axis 0", lambda x: np.cumsum(x, axis=0), (R(3, 4),), (R(10, 11),))
check("numpy/cumsum axis 1", lambda x: np.cumsum(x, axis=1), (R(3, 4),), (R(10, 11),))
check("numpy/cumsum 1-d", lambda x: np.cumsum(x), (R(10),), (R(70),), numba=True)
check("numpy/cumsum no axis", lambda x: np.cumsum(x), (R(3, 4),), (R(10, 11),))
check("numpy/builtin sum", lambda x, y: sum([x, y]), (R(3, 4), R(3, 4)), (R(10, 11), R(10, 11)))
check("numpy/mean", lambda x: np.mean(x), (R(3, 4),), (R(10, 11),))
check("numpy/mean axis 0", lambda x: np.mean(x, axis=0), (R(3, 4),), (R(10, 11),))
check("numpy/mean axis 0 keepdims", lambda x: np.mean(x, axis=0, keepdims=True), (R(3, 4),), (R(10, 11),))
check("numpy/mean of list", lambda x: np.mean([x, x + 2]) + np.mean((x, x + 2)), (0.0,))
check("numpy/std of list", lambda x: np.std([x, x + 2]) + np.std((x, x + 2)), (0.0,))
check("numpy/var of list", lambda x: np.var([x, x + 2]) + np.var((x, x + 2)), (0.0,))
check("numpy/index ints", lambda x: x[3, 0, 1], (R(5, 2, 4),), (R(5, 6, 4),))
check("numpy/index slice", lambda x: x[::-1, 2:4, :], (R(3, 5, 4),), (R(5, 6, 4),))
check("numpy/index lists", lambda x: x[[0, 1, 2], :, :], (R(3, 5, 4),), (R(5, 6, 4),))
check("numpy/index mixed", lambda x: x[3, 2:, [1, 3]], (R(4, 3, 4),), (R(5, 6, 4),))
check("numpy/vector slice", lambda x: x[2:4], (R(5),), (R(70),))
check("numpy/index slice fanout", lambda x: x[::-1, 2:4, :] + x[::-1, 3:5, :], (R(3, 5, 4),), (R(5, 6, 4),))
check("numpy/index multiple slices", lambda x: x[2:6][1:3], (R(7),), (R(70),))
check("numpy/reshape method", lambda x: x.reshape((x.shape[0] * 4, 6)), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/reshape call", lambda x: np.reshape(x, (x.shape[0] * 4, 6)), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/reshape method no tuple", lambda x: x.reshape(x.shape[0] * 4, 6), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/ravel method", lambda x: x.ravel(), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/ravel call", lambda x: np.ravel(x), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/flatten method", lambda x: x.flatten(), (R(2, 6, 4),), (R(5, 6, 4),))
check("numpy/append", np.append, (np.array([1.0, 2.0, 3.0]), 4.0), (R(70), 4.0))
check("numpy/append 2-D axis 0", lambda a, b: np.append(a, b, axis=0),
      (np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.array([[7.0, 8.0, 9.0]])), (R(8, 9), R(1, 9)))
_A564, _B464 = R(5, 6, 4), R(5, 6, 4)
_a, _b = R(2, 3, 4), R(2, 3, 4)
check("numpy/concatenate with constant", lambda x: np.concatenate((_a if x.size < 64 else _A564, x)),
      (R(1, 3, 4),), (R(4, 6, 4),))
check("numpy/concatenate axis 0", lambda x: np.concatenate((_b if x.size < 64 else _B464, x, _b if x.size < 64
                                                            else _B464)), (R(2, 3, 4),), (R(5, 6, 4),))
check("numpy/concatenate axis 1", lambda x: np.concatenate((_b if x.size < 64 else _B464, x, _b if x.size < 64
                                                            else _B464), axis=1), (R(2, 3, 4),), (R(5, 6, 4),))
check("numpy/concatenate axis 1 positional", lambda x: np.concatenate((_b if x.size < 64 else _B464, x,
                                                                       _b if x.size < 64 else _B464), 1),
      (R(2, 3, 4),), (R(5, 6, 4),))
check("numpy/trace offset", lambda x: np.trace(x, offset=3 if x.size > 63 else 1), (R(4, 5),), (R(10, 11),))
check("numpy/trace offset tall", lambda x: np.trace(x, offset=-4 if x.size > 63 else -1), (R(5, 4),), (R(11, 10),))
check("numpy/trace extra dims", lambda x: np.trace(x, offset=2), (R(3, 4, 2, 2),), (R(5, 6, 4, 3),))
check("numpy/diag", lambda x: np.diag(x), (R(5, 5),), (R(10, 10),))
check("numpy/transpose .T", lambda x: x.T, (R(4, 4),), (R(8, 8),))
check("numpy/roll axis 1", lambda x: np.roll(x, 2, axis=1), (R(4, 5),), (R(8, 9),))
check("numpy/roll no axis", lambda x: np.roll(x, 2), (R(4, 5),), (R(8, 9),))
check("numpy/triu k=2", lambda x: np.triu(x, k=2), (R(5, 5),), (R(9, 9),))
check("numpy/tril k=2", lambda x: np.tril(x, k=2), (R(5, 5),), (R(9, 9),))
check("numpy/clip", lambda x: np.clip(x, a_min=0.1, a_max=1.1), (R(5, 5),), (R(9, 9),))
check("numpy/prod", lambda x: np.prod(x), (R(2, 3) ** 2 / 10.0 + 0.1,), (R(8, 9) ** 2 / 10.0 + 0.9,))
check("numpy/prod axis 0", lambda x: np.prod(x, axis=0), (R(2, 3) ** 2 + 0.1,), (R(8, 9) ** 2 / 10 + 0.9,))
check("numpy/prod axis 0 keepdims", lambda x: np.prod(x, axis=0, keepdims=True), (R(2, 3) ** 2 + 0.1,),
      (R(8, 9) ** 2 / 10 + 0.9,))
check("numpy/prod 1-d", lambda x: np.prod(x), (R(7) ** 2 + 0.1,), (R(70) ** 2 / 10 + 0.95,))
check("numpy/array of scalars 1-d", lambda x: np.array([x, x * 1.0, x + 2.5]), (3.0,))
check("numpy/array of scalars 2-d", lambda x: np.array([[x, x * 1.0, x + 2.5], [x**2, x, x / 2.0]]), (3.0,))
check("numpy/array 1-d fanout", lambda x: (lambda A: A + A)(np.array([x, x * 1.0, x + 2.5])), (3.0,))
check("numpy/array 2-d fanout", lambda x: (lambda A: A + A)(np.array([[x, x * 1.0, x + 2.5], [x**2, x, x / 2.0]])),
      (3.0,))
check("numpy/array from scalar", lambda x: np.array(x), (3.0,))
check("numpy/array from arrays", lambda x: np.array([x, x]), (R(3, 2),), (R(8, 9),))
check("numpy/array from arrays 2", lambda x: np.array([[2 * x, x + 1], [x, x]]), (R(3, 2),), (R(8, 9),))
check("numpy/len", lambda x: x if len(x) == x.shape[0] else None, (R(3, 2),), (R(3, 25),))
_c32, _c325 = R(3, 2), R(3, 25)
_c = lambda x: _c32 if x.size < 64 else _c325
check("numpy/r_ basic", lambda x: np.r_[x], (R(3, 2),), (R(3, 25),))
check("numpy/r_ double", lambda x: np.r_[x, x], (R(3, 2),), (R(3, 25),))
check("numpy/no relation", lambda x: _c(x), (R(3, 2),), (R(3, 25),))
check("numpy/r_ no relation", lambda x: np.r_[_c(x)], (R(3, 2),), (R(3, 25),))
check("numpy/r_ node and const", lambda x: np.r_[x, _c(x)], (R(3, 2),), (R(3, 25),))
check("numpy/r_ mixed", lambda x: np.r_[x, _c(x), x], (R(3, 2),), (R(3, 25),))
_c10, _c70 = R(10), R(70)
check("numpy/r_ slicing", lambda x: np.r_[x, _c10 if x.size < 64 else _c70, 1:10], (R(10),), (R(70),))
check("numpy/c_", lambda x: np.c_[x, _c(x), x], (R(3, 2),), (R(3, 25),))
for _f in (np.var, np.std):
    case(f"numpy/{_f.__name__} ddof", _f, [R(3), R(3, 4), R(1, 3), R(70), R(8, 9)], axis=[None],
         keepdims=[True, False], ddof=[0, 1])
    case(f"numpy/{_f.__name__} ddof 2", _f, [R(3, 4), R(1, 3), R(8, 9)], axis=[None, 1], keepdims=[True, False],
         ddof=[2])
_C45, _C89 = R(4, 5) > 0, R(8, 9) > 0
check("numpy/where", lambda x, y: np.where(_C45 if x.size < 64 else _C89, x, y), (R(4, 5), R(4, 5)),
      (R(8, 9), R(8, 9)))
check("numpy/squeeze", lambda x: np.squeeze(x), (R(5, 1, 4),), (R(8, 1, 9),))
check("numpy/squeeze method", lambda x: x.squeeze(), (R(5, 1, 4),), (R(8, 1, 9),))
check("numpy/repeat axis 1", lambda x: np.repeat(x, 2, axis=1), (R(5, 3, 4),), (R(5, 4, 4),))
check("numpy/repeat axis 1 once", lambda x: np.repeat(x, 1, axis=1), (R(5, 3, 4),), (R(5, 4, 4),))
check("numpy/repeat axis 0", lambda x: np.repeat(x, 2, axis=0), (R(5, 3),), (R(8, 9),))
check("numpy/repeat 1-d", lambda x: np.repeat(x, 2, axis=0), (R(5),), (R(70),))
check("numpy/repeat axis 0 once", lambda x: np.repeat(x, 1, axis=0), (R(5, 1),), (R(70, 1),))
check("numpy/expand_dims", lambda x: np.expand_dims(x, 2), (R(5, 1, 4),), (R(8, 1, 9),))
check("numpy/tensordot positional axes", lambda x: np.tensordot(x * np.ones((2, 2)), x * np.ones((2, 2)), 2),
      (1.0,))
check("numpy/repeated index", lambda x: np.sum(x[[0, 0]]), (R(3),), (R(70),))
check("numpy/repeated index 2", lambda x: np.sum(x[[0, 1, 0]]), (R(3),), (R(70),))
check("numpy/dot of slices", lambda x: np.dot(x[: x.size // 2], x[x.size // 2:]), (R(4),), (R(70),))


def _cast_to_int(W):
    new_W = W[:, :-1]
    new_inds = np.int64(W[:, -1])
    return new_W[new_inds].sum()


check("numpy/cast to int", _cast_to_int, (R(5, 10),), (R(8, 10),))
check("numpy/diagonal", lambda D: np.diagonal(D, axis1=-1, axis2=-2), (R(4, 4),), (R(3, 4, 4),), (R(9, 9),))
_y_nan = np.array([0.0, np.nan, np.inf, -np.inf])
check("numpy/nan_to_num", lambda x: np.sum(np.sin(np.nan_to_num(x + np.resize(_y_nan, x.shape)))), (R(4),),
      (R(72),))
check("numpy/max of equal values", lambda x: np.max(np.array([x, x])), (1.0,))
check("numpy/max of equal values 2-d", lambda x: np.max(np.array([[x, x], [x, 0.5]]), axis=1), (1.0,), (-1.0,))
check("numpy/min 3-way equality",
      lambda x: np.min(np.array([[x, x, x], [x, 0.5, 0.5], [0.5, 0.5, 0.5], [x, x, 0.5]]), axis=0),
      (1.0,), (-1.0,))
check("numpy/maximum of equal values", lambda x: np.maximum(x, x), (1.0,))
check("numpy/maximum of equal values 2-d",
      lambda x: np.maximum(np.array([x, x, 0.5]), np.array([[x, 0.5, x], [x, x, 0.5]])), (1.0,), (-1.0,), (2.0,))
for _num in (0, 1, 5):
    check(f"numpy/linspace num={_num}", lambda x, y, num=_num: np.linspace(x, y, num), (1.2, 3.4), (1.2, -3.4),
          (1.2, 1.2))
check("numpy/astype", lambda x: np.sum(np.sin(x.astype("float64"))), (np.arange(3.0),), (np.arange(70.0) / 10,))
case("numpy/gradient", np.gradient, [R(10), R(4, 4), R(3, 3, 3), R(70), R(10, 10), R(10, 10, 10)])
case("numpy/gradient axis", np.gradient, [R(3, 3, 3), R(5, 5, 5)], axis=[None, 0, 1, -1, (0, 1), (0, -1)])

# ----------------------------------------------------------------------------------- test_systematic.py


def _stat(name: str, f: Callable):
    x, A, B, C, D = 3.5, R(), R(3), R(2, 3), R(1, 3)
    big, col = R(8, 9), R(1, 70)
    case(f"systematic/{name}", f, [x, A])
    case(f"systematic/{name} axis None,0", f, [B, C, D, R(70), big, col], axis=[None, 0], keepdims=[True, False])
    case(f"systematic/{name} axis 1", f, [C, D, big, col], axis=[1], keepdims=[True, False])


for _name, _f in [("max", np.max), ("mean", np.mean), ("min", np.min), ("sum", np.sum), ("var", np.var),
                  ("std", np.std)]:
    _stat(_name, _f)
_stat("prod", lambda x, **kw: np.prod(0.9 + x / 20.0, **kw))  # near 1: a product of 70 stays O(1)

UNARY = [  # (name, function, lims)
    ("sin", np.sin, None), ("abs", np.abs, [0.1, 4.0]), ("absolute", np.absolute, [0.1, 4.0]),
    ("arccosh", np.arccosh, [1.1, 4.0]), ("arcsinh", np.arcsinh, [-0.9, 0.9]),
    ("arctanh", np.arctanh, [-0.9, 0.9]),
    ("ceil", np.ceil, [-1.5, 1.5]), ("cos", np.cos, None), ("cosh", np.cosh, None), ("deg2rad", np.deg2rad, None),
    ("degrees", lambda x: np.degrees(x) / 50.0, None), ("exp", np.exp, None), ("exp2", np.exp2, None),
    ("expm1", np.expm1, None), ("fabs", np.fabs, None), ("floor", np.floor, [-1.5, 1.5]),
    ("log", np.log, [0.2, 2.0]), ("log10", np.log10, [0.2, 2.0]), ("log1p", np.log1p, [0.2, 2.0]),
    ("log2", np.log2, [0.2, 2.0]), ("rad2deg", lambda x: np.rad2deg(x) / 50.0, None),
    ("radians", np.radians, None),
    ("sign", np.sign, None), ("sinh", np.sinh, None), ("sqrt", np.sqrt, [1.0, 3.0]), ("square", np.square, None),
    ("tan", np.tan, [-1.1, 1.1]), ("tanh", np.tanh, None), ("real", np.real, None),
    ("real_if_close", np.real_if_close, None), ("imag", np.imag, None), ("conj", np.conj, None),
    ("conjugate", np.conjugate, None), ("angle", np.angle, None),
]
for _name, _f, _lims in UNARY:
    _lo, _hi = _lims or (-2.0, 2.0)
    case(f"systematic/{_name}", _f, [U(_lo, _hi), U(_lo, _hi, 2), U(_lo, _hi, 3, 2), U(_lo, _hi, 1, 2),
                                     U(_lo, _hi, 8, 9)])


def _binary(name: str, f: Callable, lims_A=(-2.0, 2.0), lims_B=(-2.0, 2.0), same_args: bool = True):
    """binary_ufunc_check: every pair of a scalar, (2,), (3, 2) and (1, 2) (no_same_args: different values
    on each side); rolled: (8, 2), (1, 2) and (70, 2) mixed with them."""
    As = [U(*lims_A), U(*lims_A, 2), U(*lims_A, 3, 2), U(*lims_A, 1, 2)]
    Bs = [U(*lims_B), U(*lims_B, 2), U(*lims_B, 3, 2), U(*lims_B, 1, 2)]
    if same_args:  # binary_ufunc_check draws the same values for both sides (its T_A(x), T_B(x))
        Bs = [lims_B[0] + (b - lims_A[0]) / (lims_A[1] - lims_A[0]) * (lims_B[1] - lims_B[0]) for b in As]
    big_A, big_B, row_A, row_B = U(*lims_A, 35, 2), U(*lims_B, 35, 2), U(*lims_A, 70), U(*lims_B, 70)
    case(f"systematic/{name}", lambda a, b: f(a, b), As + [big_A, row_A], Bs + [big_B, row_B])


_binary("add", np.add)
_binary("logaddexp", np.logaddexp)
_binary("logaddexp2", np.logaddexp2)
_binary("remainder", np.remainder, lims_A=[-0.9, 0.9], lims_B=[0.7, 1.9], same_args=False)
_binary("true_divide", np.true_divide, lims_B=[0.8, 1.2])
_binary("mod", np.mod, lims_B=[0.8, 2.1], same_args=False)
_binary("true_divide neg", np.true_divide, lims_B=[-0.3, -2.0])
_binary("mod neg", np.mod, lims_B=[-0.3, -2.0], same_args=False)
_binary("op.mul", op.mul)
_binary("op.add", op.add)
_binary("op.sub", op.sub)
_binary("op.mod", op.mod, lims_B=[0.3, 2.0], same_args=False)
_binary("op.mod neg", op.mod, lims_B=[-0.3, -2.0], same_args=False)

_axes = [None, [0, 1, 2], [0, 2, 1], [2, 0, 1], [2, 1, 0], [1, 0, 2], [1, 2, 0]]
case("systematic/transpose", np.transpose, [R(2, 3, 4), R(3, 4, 6)], axes=_axes)
case("systematic/moveaxis", np.moveaxis, [R(2, 3, 4), R(3, 4, 6)], source=[0, 1, 2], destination=[0, 1, 2])
case("systematic/repeat", np.repeat, [R(2, 3, 4), R(3, 1), R(3, 4, 6)], repeats=[0, 1, 2], axis=[None, 0, 1])
case("systematic/diff", np.diff, [R(5, 5), R(3, 3, 3), R(9, 9), R(5, 5, 5)], n=[1, 2], axis=[0, 1])
case("systematic/diff single", np.diff, [R(1), R(1, 1)], axis=[0])
case("systematic/diff single axis 1", np.diff, [R(1, 1), R(3, 1), R(70, 1)], axis=[1])
case("systematic/gradient", np.gradient, [R(5, 5), R(3, 3, 3), R(9, 9), R(5, 5, 5)], axis=[None, 0, 1, -1])
case("systematic/gradient axis pairs", np.gradient, [R(3, 3, 3), R(5, 5, 5)], axis=[(0, 1), (0, -1)])
case("systematic/tile 4-d", np.tile, [R(2, 1, 3, 1), R(4, 1, 5, 2)], reps=[(1, 4, 1, 2)])
case("systematic/tile", np.tile, [R(1, 2), R(1, 70)], reps=[(1, 2), (2, 3), (3, 2, 1)])
case("systematic/tile 1-d", np.tile, [R(1), R(70)], reps=[(2,), 2])
case("systematic/kron", np.kron, [R(5, 5), R(4, 4), R(5), R(5, 1), R(1, 5), R(), R(9, 9)],
     [R(3, 3), R(2, 2), R(3), R(1, 3), R(3, 1), R()])
case("systematic/inner", np.inner, [1.5, R(3), R(2, 3), R(70), R(8, 70)], [0.3, R(3), R(4, 3), R(70), R(2, 70)])
case("systematic/dot", np.dot, [1.5, R(3), R(2, 3), R(2, 2, 3), R(8, 9), R(9)], [0.3, R(3), R(3, 4), R(2, 3, 4),
                                                                                  R(9, 8), R(9)], order=3)
case("systematic/outer", np.outer, [R(3), R(64)], [R(3), R(64)], order=3)
case("systematic/matmul", np.matmul, [R(3), R(2, 3), R(2, 2, 3), R(9), R(8, 9), R(2, 8, 9)],
     [R(3), R(3, 4), R(2, 3, 4), R(9), R(9, 8), R(2, 9, 8)])
case("systematic/matmul broadcast", np.matmul, [R(1, 2, 2), R(1, 8, 9)], [R(3, 2, 1), R(3, 9, 1)])
case("systematic/tensordot 1", np.tensordot, [R(1, 3), R(2, 3, 2), R(8, 9)], [R(3), R(3, 1), R(3, 4, 2), R(9, 8)],
     axes=[[(1,), (0,)]], order=3)
case("systematic/tensordot 2", np.tensordot, [R(3), R(3, 1), R(3, 4, 2), R(9, 8)], [R(1, 3), R(2, 3, 2), R(8, 9)],
     axes=[[(0,), (1,)]], order=3)
case("systematic/tensordot 3", np.tensordot, [R(2, 3), R(2, 3, 4), R(8, 9)],
     [R(1, 2, 3), R(2, 2, 3, 4), R(2, 8, 9)],
     axes=[[(0, 1), (1, 2)], [(1, 0), (2, 1)]], order=3)
case("systematic/tensordot 4", np.tensordot, [R(2, 2), R(4, 2, 2), R(9, 9)], [R(2, 2), R(2, 2, 4), R(9, 9)],
     axes=[1, 2], order=3)
case("systematic/tensordot 5", np.tensordot, [R(4), R(70)], [R()], axes=[0], order=3)
case("systematic/tensordot 6", np.tensordot, [R(2, 6), R(8, 9)], [R(6, 3), R(9, 8)], axes=[[[-1], [0]]], order=3)
case("systematic/tensordot 7", np.tensordot, [R(2, 6), R(8, 9)], [R(6, 3), R(9, 8)], axes=[[-1, 0]], order=3)
case("systematic/tensordot 8", np.tensordot, [R(2), R(9)], [R(2, 2), R(9, 9)], axes=[[0, 1]], order=3)
for _name, _f in [("maximum", np.maximum), ("fmax", np.fmax), ("minimum", np.minimum), ("fmin", np.fmin)]:
    case(f"systematic/{_name}", _f, [R(1), R(1, 4), R(3, 4), R(8, 9)], [R(1), R(1, 4), R(3, 4), R(1, 9)])
case("systematic/sort", np.sort, [R(1), R(7), R(70)])


def _partitioned(a: Any, kth: Any) -> Any:
    """np.partition with the stretches between the kth positions each sorted: NumPy leaves their order to
    its selection algorithm (JAX's testPartition compares the same way)."""
    p = np.partition(a, kth)
    cuts = [0, *sorted(int(k) % a.shape[-1] for k in np.ravel(kth)), a.shape[-1]]
    return np.concatenate([np.sort(p[lo:hi]) for lo, hi in zip(cuts, cuts[1:]) if hi > lo])


case("systematic/partition", _partitioned, [R(7), R(14), R(70)], kth=[0, 3, 6])
case("systematic/atleast_1d", np.atleast_1d, [1.2, R(1), R(7), R(1, 4), R(2, 4), R(2, 4, 5), R(70), R(8, 9)])
case("systematic/atleast_2d", np.atleast_2d, [1.2, R(1), R(7), R(1, 4), R(2, 4), R(2, 4, 5), R(70), R(8, 9)])
case("systematic/atleast_3d", np.atleast_3d, [1.2, R(1), R(7), R(1, 4), R(2, 4), R(2, 4, 5), R(2, 4, 3, 5), R(70),
                                              R(8, 9)])
case("systematic/einsum transpose", np.einsum, ["ij->ji"], [R(1, 1), R(4, 4), R(3, 4), R(8, 9)])
case("systematic/einsum matmult", np.einsum, ["ij,jk->ik"], [R(2, 3), R(8, 9)], [R(3, 4), R(9, 8)][::1])
case("systematic/einsum matmult broadcast", np.einsum, ["...ij,...jk->...ik"], [R(2, 3), R(2, 2, 3), R(2, 8, 9)],
     [R(3, 4), R(2, 3, 4), R(2, 9, 8)])
case("systematic/einsum matmult broadcast leading zero", np.einsum, ["...ij,...jk->...ik"], [R(0, 2, 3)],
     [R(0, 3, 4)])
case("systematic/einsum covsum", np.einsum, ["ijk,lji->lki"], [R(3, 4, 4), R(5, 4, 4)], [R(4, 4, 3), R(4, 4, 5)])
case("systematic/einsum ellipses", np.einsum, ["...jk,...lj->...lk", "...,...->..."], [R(4, 4), R(3, 4, 4),
                                                                                        R(3, 8, 8)],
     [R(4, 4), R(3, 4, 4), R(3, 8, 8)])
case("systematic/einsum ellipses tail", np.einsum, ["jk...,lj...->lk..."], [R(3, 2), R(3, 2, 4), R(3, 2, 12)],
     [R(2, 3), R(2, 3, 4), R(2, 3, 12)])
case("systematic/einsum ellipses center", np.einsum, ["j...k,lj...->lk..."], [R(2, 2), R(2, 2, 2), R(2, 40, 2)],
     [R(2, 2), R(2, 2, 2), R(2, 2, 40)])
case("systematic/einsum three args", np.einsum, ["ijk,lji,lli->lki"], [R(3, 4, 4), R(5, 4, 4)],
     [R(4, 4, 3), R(4, 4, 5)], [R(4, 4, 3), R(4, 4, 5)])
case("systematic/einsum sublists transpose", np.einsum, [R(1, 1), R(4, 4), R(3, 4), R(8, 9)], [(0, 1)], [(1, 0)])
case("systematic/einsum sublists matmult", np.einsum, [R(2, 3), R(8, 9)], [(0, 1)], [R(3, 4), R(9, 8)], [(1, 2)],
     [(0, 2)])
case("systematic/einsum sublists matmult broadcast", np.einsum, [R(2, 3), R(2, 2, 3), R(2, 8, 9)],
     [(Ellipsis, 0, 1)], [R(3, 4), R(2, 3, 4), R(2, 9, 8)], [(Ellipsis, 1, 2)], [(Ellipsis, 0, 2)])
case("systematic/einsum sublists covsum", np.einsum, [R(3, 4, 4), R(5, 4, 4)], [(0, 1, 2)], [R(4, 4, 3),
                                                                                              R(4, 4, 5)],
     [(3, 1, 0)], [(3, 2, 0)])
case("systematic/einsum sublists three args", np.einsum, [R(3, 4, 4), R(5, 4, 4)], [(0, 1, 2)],
     [R(4, 4, 3), R(4, 4, 5)], [(3, 1, 0)], [R(4, 4, 3), R(4, 4, 5)], [(3, 3, 0)], [(3, 2, 0)])
case("systematic/einsum naked sum", np.einsum, ["k,nk->"], [R(5), R(9)], [R(10, 5), R(10, 9)])
case("systematic/einsum naked sum 2", np.einsum, ["abcd->bd"], [R(3, 2, 3, 2), R(3, 4, 3, 4)])
case("systematic/einsum naked sum ellipsis", np.einsum, ["...k,...nk->..."], [R(3, 5)], [R(3, 10, 5)])
case("systematic/einsum no output indices", np.einsum, ["ij,k"], [R(3, 4), R(8, 9)], [R(3)])
case("systematic/trace", np.trace, [R(5, 5), R(4, 5), R(5, 4), R(3, 4, 5), R(9, 9), R(8, 9)], offset=[-1, 0, 1])
case("systematic/diag", np.diag, [R(5, 5), R(9, 9)], k=[-1, 0, 1])
case("systematic/diag of vector", np.diag, [R(5), R(70)], k=[-1, 0, 1])
case("systematic/tril", np.tril, [R(5, 5), R(9, 9)], k=[-1, 0, 1])
case("systematic/triu", np.triu, [R(5, 5), R(9, 9)], k=[-1, 0, 1])
case("systematic/tril 3-d", np.tril, [R(3, 3, 4), R(5, 5, 4)], k=[-1, 0, 1])
case("systematic/triu 3-d", np.triu, [R(3, 3, 4), R(5, 5, 4)], k=[-1, 0, 1])
case("systematic/swapaxes", np.swapaxes, [R(3, 4, 5)], axis1=[0, 1, 2], axis2=[0, 1, 2])
case("systematic/rollaxis", np.rollaxis, [R(2, 3, 4), R(3, 4, 6)], axis=[0, 1, 2], start=[0, 1, 2])
case("systematic/cross", np.cross, [R(3, 3)], [R(3, 3)], axisa=[-1, 0, 1], axisb=[-1, 0, 1], axisc=[-1, 0, 1],
     axis=[None, -1, 0, 1])
case("systematic/cross rolled", np.cross, [R(30, 3)], [R(30, 3)])
case("systematic/vsplit 2-d", np.vsplit, [R(4, 8), R(8, 9)], [4, [1, 2]])
case("systematic/vsplit 3-d", np.vsplit, [R(4, 4, 4), R(4, 4, 5)], [2, [1, 2]])
case("systematic/hsplit 2-d", np.hsplit, [R(4, 8), R(9, 8)], [4, [1, 2]])
case("systematic/hsplit 3-d", np.hsplit, [R(4, 4, 4), R(4, 4, 5)], [2, [1, 2]])
case("systematic/dsplit 3-d", np.dsplit, [R(4, 4, 4), R(4, 5, 4)], [2, [1, 2]])
case("systematic/split 1-d", np.split, [R(1), R(7), R(70)], [1], axis=[0])
case("systematic/split 2-d", np.split, [R(4, 8), R(8, 8)], [4, [1, 2]], axis=[0, 1])
case("systematic/split 3-d", np.split, [R(4, 4, 4)], [2, [1, 2]], axis=[0, 1, 2])
case("systematic/array_split 1-d", np.array_split, [R(1), R(7), R(70)], [1, 3], axis=[0])
case("systematic/array_split 2-d", np.array_split, [R(7, 7), R(9, 9)], [4, [3, 5]], axis=[0, 1])
case("systematic/array_split 3-d", np.array_split, [R(3, 3, 3), R(7, 7, 7)], [4, [3, 5]], axis=[0, 1, 2])
case("systematic/concatenate tuple", np.concatenate, [(R(1), R(3)), (R(1), R(70))], axis=[0])
case("systematic/concatenate list", np.concatenate, [[R(1), R(3)], [R(1), R(70)]], axis=[0])
case("systematic/concatenate 2-d", np.concatenate, [(R(2, 2), R(2, 2)), (R(8, 9), R(8, 9))], axis=[0, 1])
case("systematic/concatenate 3-d", np.concatenate, [(R(2, 2, 2), R(2, 2, 2)), (R(4, 4, 4), R(4, 4, 4))],
     axis=[0, 1, 2])
case("systematic/vstack 1-d", np.vstack, [R(2), (R(2), R(2)), (R(70), R(70))])
case("systematic/vstack 2-d", np.vstack, [R(2, 3), (R(2, 4), R(1, 4)), R(8, 9), (R(8, 9), R(1, 9))])
case("systematic/vstack 3-d", np.vstack, [R(2, 3, 4), (R(2, 3, 4), R(5, 3, 4))])
case("systematic/hstack 1-d", np.hstack, [R(2), (R(2), R(2)), (R(70), R(70))])
case("systematic/hstack 2-d", np.hstack, [R(3, 2), (R(3, 4), R(3, 5)), (R(8, 9), R(8, 1))])
case("systematic/hstack 3-d", np.hstack, [R(2, 3, 4), (R(2, 1, 4), R(2, 5, 4)), (R(4, 9, 2), R(4, 1, 2))])
case("systematic/stack 1-d", np.stack, [(R(2),), (R(2), R(2)), (R(70), R(70))], axis=[0, 1])
case("systematic/row_stack 1-d", lambda a: np.vstack(a), [R(2), (R(2), R(2)), (R(70), R(70))])
case("systematic/row_stack 2-d", lambda a: np.vstack(a), [R(2, 3), (R(2, 4), R(1, 4)), (R(8, 9), R(1, 9))])
case("systematic/column_stack 1-d", np.column_stack, [R(2), (R(2), R(2)), (R(70), R(70))])
case("systematic/column_stack 2-d", np.column_stack, [R(2, 2), (R(2, 2), R(2, 2)), (R(8, 9), R(8, 9))])
_conds, _conds_big = [R(3, 4, 5) > 0 for _ in range(3)], [R(4, 4, 5) > 0 for _ in range(3)]
case("systematic/select", lambda c, xs, **kw: np.select(_conds if c else _conds_big, xs, **kw), [True],
     [[R(3, 4, 5), R(3, 4, 5), R(3, 4, 5)]], default=[0.0, 1.1])
case("systematic/select rolled", lambda c, xs, **kw: np.select(_conds if c else _conds_big, xs, **kw), [False],
     [[R(4, 4, 5), R(4, 4, 5), R(4, 4, 5)]], default=[0.0, 1.1])
case("systematic/pad", np.pad, [R(2, 2), R(8, 9)],
     [0, 3, (3,), (3, 2), ((3, 2),), ((1, 2), (3, 4)), ((0, 0), (0, 0))], ["constant"])

# ----------------------------------------------------------------------------------- test_scalar_ops.py

_y_pow, _x_pow = R() ** 2 + 1.0, R() ** 2
SCALAR = [  # (name, function, point); the rolled call is the same function on 70 points around it
    ("abs", lambda x: 3.0 * np.abs(x), 1.1), ("abs negative", lambda x: 3.0 * np.abs(x), -1.1),
    ("absolute", lambda x: 3.0 * np.absolute(x), 1.1), ("absolute negative", lambda x: 3.0 * np.absolute(x), -1.1),
    ("sin", lambda x: 3.0 * np.sin(x), R()), ("sign", lambda x: 3.0 * np.sign(x), 1.1),
    ("sign negative", lambda x: 3.0 * np.sign(x), -1.1), ("exp", lambda x: 3.0 * np.exp(x), R()),
    ("log", lambda x: 3.0 * np.log(x), abs(R())), ("log2", lambda x: 3.0 * np.log2(x), abs(R())),
    ("log10", lambda x: 3.0 * np.log10(x), abs(R())), ("log1p", lambda x: 3.0 * np.log1p(x), abs(R())),
    ("expm1", lambda x: 3.0 * np.expm1(x), abs(R())), ("exp2", lambda x: 3.0 * np.exp2(x), abs(R())),
    ("neg", lambda x: 3.0 * -x, R()), ("cos", lambda x: 3.0 * np.cos(x), R()),
    ("tan", lambda x: 3.0 * np.tan(x), R() / 3), ("cosh", lambda x: 3.0 * np.cosh(x), R()),
    ("sinh", lambda x: 3.0 * np.sinh(x), R()), ("tanh", lambda x: 3.0 * np.tanh(x), R()),
    ("arccos", lambda x: 3.0 * np.arccos(x), 0.1), ("arcsin", lambda x: 3.0 * np.arcsin(x), 0.1),
    ("arctan", lambda x: 3.0 * np.arctan(x), 0.2), ("arccosh", lambda x: 3.0 * np.arccosh(x), R() ** 2 + 1.2),
    ("arcsinh", lambda x: 3.0 * np.arcsinh(x), R()), ("arctanh", lambda x: 3.0 * np.arctanh(x), 0.2),
    ("sqrt", lambda x: 3.0 * np.sqrt(x), 10.0 * rng.random() + 0.5),
    ("power arg 0", lambda x, y=_y_pow: np.power(x, y), rng.random() ** 2 + 1.0),
    ("power arg 1", lambda y, x=_x_pow: np.power(x, y), rng.random() ** 2),
    ("power arg 1 of zero", lambda y: np.power(0.0, y), rng.random() ** 2 + 0.1),
    ("reciprocal", lambda x: np.reciprocal(x), rng.random() + 0.2), ("negative", lambda x: np.negative(x), R()),
    ("rad2deg", lambda x: 3.0 * np.rad2deg(x), 10.0 * rng.random()),
    ("deg2rad", lambda x: 3.0 * np.deg2rad(x), 10.0 * rng.random()),
    ("radians", lambda x: 3.0 * np.radians(x), 10.0 * rng.random()),
    ("degrees", lambda x: 3.0 * np.degrees(x), 10.0 * rng.random()),
    ("sinc", lambda x: 3.0 * np.sinc(x), 10.0 * rng.random()),
]
for _name, _f, _x in SCALAR:
    _spread = 1.0 + 0.02 * rng.random(70)  # the same sign and domain as the point
    check(f"scalar/{_name}", _f, (float(_x),), (float(_x) * _spread,), numba=_name == "sin")
check("scalar/abs at 0", lambda x: 3.0 * np.abs(x), (0.0,), order=1)
check("scalar/absolute at 0", lambda x: 3.0 * np.absolute(x), (0.0,), order=1)
check("scalar/power with exponent 0 at 0", lambda x: np.power(x, 0.0), (0.0,))
BINARY_SCALAR = [("mod", np.mod), ("divide", np.divide), ("multiply", np.multiply),
                 ("true_divide", np.true_divide)]
for _name, _f in BINARY_SCALAR:
    check(f"scalar/{_name}", _f, (rng.random(), rng.random() + 0.1), (rng.random(70), rng.random(70) + 0.1))

# ----------------------------------------------------------------------------------- test_binary_ops.py


def _arg_pairs():
    small = [2.0, R(4), R(3, 4), R(1, 4)]
    big = [R(8, 9), R(9), R(1, 9), 2.0]
    return list(product(small, small)) + [(a, b) for a, b in product(big, big) if np.size(a) >= 64 or
                                          np.size(b) >= 64]


def _pairs_case(name: str, fun: Callable, prepare: Callable = lambda a, b: (a, b), order: int = 2,
                skip_same: bool = False):
    calls = []
    for a, b in _arg_pairs():
        if skip_same and a is b:
            continue
        a, b = prepare(a, b)
        calls.append(Call(fun, (a, b), f"{describe(a)}, {describe(b)}"))
    CASES.append(Case(name, tuple(calls), order))


_gap = lambda x: np.sqrt(x**2 + 0.5)
_pairs_case("binary/mul", lambda x, y: x * y)
_pairs_case("binary/add", lambda x, y: x + y)
_pairs_case("binary/sub", lambda x, y: x - y)
_pairs_case("binary/div", lambda x, y: x / y, lambda a, b: (_gap(a), _gap(b)))
_pairs_case("binary/mod", lambda x, y: x % y, lambda a, b: (_gap(a), _gap(b)), skip_same=True)
_pairs_case("binary/pow", lambda x, y: x**y, lambda a, b: (np.abs(a) + 1.1, b))
_pairs_case("binary/arctan2", np.arctan2)
_pairs_case("binary/hypot", np.hypot)
for _i, _op in enumerate([op.lt, op.le, op.gt, op.ge, op.eq, op.ne]):
    _pairs_case(f"binary/comparison {_op.__name__}", lambda x, y, _op=_op: np.sum(_op(x, y)) + 0.0, order=1,
                skip_same=True)  # autograd checks that the gradient is 0, here against finite differences: no ties

# ---------------------------------------------------------------------------------------- test_linalg.py


def _psd(d: int) -> np.ndarray:
    m = R(d, d)
    return m @ m.T


def _mat(d: int) -> np.ndarray:
    m = R(d, d)
    return m @ m + np.eye(d)


def _sym(fun: Callable) -> Callable:
    """check_symmetric_matrix_grads: the function of the symmetrised lower triangle."""
    return lambda A, *rest: fun((np.tril(A) + np.swapaxes(np.tril(A), -1, -2)) / 2.0, *rest)


_B4, _B8 = R(4, 3), R(8, 7)
check("linalg/inv", np.linalg.inv, (_mat(4),), (_mat(8),))
check("linalg/inv 3-d", np.linalg.inv, (R(2, 3, 3) + 5 * np.eye(3),), (R(4, 4, 4) + 5 * np.eye(4),),
      (R(4, 4, 4, 4) + 5 * np.eye(4),))
check("linalg/solve arg 1", lambda a: np.linalg.solve(a, _B4 if a.shape[0] == 4 else _B8),
      (R(4, 4) + 10 * np.eye(4),), (R(8, 8) + 10 * np.eye(8),))
check("linalg/solve arg 1 1-d", lambda a: np.linalg.solve(a, _B4[:, 0] if a.shape[0] == 4 else _B8[:, 0]),
      (R(4, 4) + 10 * np.eye(4),), (R(8, 8) + 10 * np.eye(8),))
_A6, _A8 = R(6, 6) + np.eye(6), R(8, 8) + 4 * np.eye(8)
check("linalg/solve arg 2", lambda b: np.linalg.solve(_A6 if b.shape[0] == 6 else _A8, b), (R(6, 5),), (R(8, 9),))
_B3d, _B3d_big = R(5, 4), R(5, 4, 6)
check("linalg/solve arg 1 3-d", lambda A: np.linalg.solve(A, _B3d[..., None])[..., 0],
      (R(5, 4, 4) + 5 * np.eye(4),))
check("linalg/solve arg 1 3-d 3-d", lambda A: np.linalg.solve(A, _B3d_big), (R(5, 4, 4) + 5 * np.eye(4),))
check("linalg/det", np.linalg.det, (R(6, 6),))
check("linalg/det 3-d", np.linalg.det, (R(3, 3, 3),), (R(3, 5, 5),))
check("linalg/slogdet", lambda x: np.linalg.slogdet(x)[1], (R(6, 6),), (-R(6, 6),))
check("linalg/slogdet 3-d", lambda x: np.sum(np.linalg.slogdet(x)[1]),
      (np.stack([_psd(5) + 5 * np.eye(5) for _ in range(3)]),))
check("linalg/vector 2-norm", np.linalg.norm, (R(6),), (R(70),))
check("linalg/norm of list", lambda x: np.linalg.norm([x, x + 2]) + np.linalg.norm((x, x + 2)), (0.0,))
check("linalg/frobenius norm", np.linalg.norm, (R(6, 5),), (R(8, 9),))
check("linalg/frobenius norm axis", lambda x: np.linalg.norm(x, axis=(0, 1)), (R(3, 4, 2),), (R(6, 5, 4),))
for _ord in (2, 3, 4):
    check(f"linalg/vector norm ord={_ord}", lambda x, o=_ord: np.linalg.norm(x, ord=o), (R(6),), (R(70),))
case("linalg/norm axis", np.linalg.norm, [R(3, 2, 4), R(6, 5, 4)], axis=[0, 1, 2])
check("linalg/cholesky", _sym(np.linalg.cholesky), (_psd(6) + np.eye(6),))
check("linalg/cholesky broadcast", _sym(np.linalg.cholesky), (np.stack([_psd(3) + np.eye(3) for _ in range(3)]),),
      (np.stack([_psd(6) + np.eye(6) for _ in range(3)]),))
_z6, _z8 = np.random.RandomState(0).randn(6), np.random.RandomState(0).randn(8)
check("linalg/cholesky reparameterization trick",
      _sym(lambda A: np.linalg.norm(np.dot(np.linalg.cholesky(A), _z6 if A.shape[0] == 6 else _z8))),
      (_psd(6) + np.eye(6),))

# -------------------------------------------------------------------------------------- test_wrappers.py
# (the ones that are gradient checks: the others compare symgrad's transforms with each other, in the test file)

_H5 = R(5, 5)
check("wrappers/return both", lambda x: 3.0 * x**3.2, (1.7,), (1.7 + rng.random(70),))
check("wrappers/value_and_grad", lambda x: np.sum(np.sin(x) ** 2), (R(5),), (R(70),), numba=True)
check("wrappers/quadratic form", lambda x: np.dot(np.dot(x, _H5), x), (R(5),))
check("wrappers/multigrad", lambda a, b, c, d, e, f=0.6, g=-0.1: a + np.sin(b) + np.cosh(c) + np.cos(d) + np.tan(e)
      + f + g, (0.5, -0.3, 0.2, -1.1, 0.7))
check("wrappers/multigrad one arg", lambda x, y: np.sum(x + np.sin(y)), (R(3), R(3)), (R(70), R(70)))
check("wrappers/elementwise", lambda a: a + np.sin(a) + np.cosh(a), (R(10),), (R(70),))
check("wrappers/sum of sin", lambda a: np.sum(np.sin(a)), (R(5),), (R(5, 4),), (R(5, 4, 3),), (R(8, 9),))
check("wrappers/roll of sin", lambda a: np.roll(np.sin(a), 1), (R(5),), (R(5, 4),), (R(5, 4, 3),), (R(8, 9),))
