"""NumPy on rolled arrays: array code run on ``sg.array`` inputs builds indexed expressions.

An array-valued Expr (an input ``sg.array``, a computed ``tensor``) answers NumPy as an array of
its shape: elementwise ufuncs and operators broadcast, basic slicing, reductions over axes,
``@`` / ``np.dot``, transposes and reshapes all build one ``tensor`` node over fresh index
symbols, whatever the size (issue 12: tracing array code without unrolling it). A tensor of
cheap arithmetic read by another is inlined (its body at the reader's indices), so elementwise
chains fuse into one loop; tensors holding reductions or transcendental functions are read,
not recomputed. A construct with no
rolled form raises ``TracingError`` naming it (tracing then falls back to object arrays).

This module is the core the others build on: operands (captured constants), elements and back,
``element`` / ``elementwise`` (broadcasting), indexing (``getitem``, gathers: ``take``),
``reshape``, and which values hold integers (``integral``, ``integer_valued``,
``holds_integers``). Beside it: ``reductions.py`` (sums, means, norms, products),
``reshaping.py`` (transposes, joins, splits, pads), ``contractions.py`` (``@``, einsum) and
``dispatch.py`` (NumPy's ``__array_ufunc__`` / ``__array_function__`` answered from them).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np

from symgrad.expr import functions, ops, rolled
from symgrad.expr.build import apply, const
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.tracing import context, note_operands


def is_array(v: Any) -> bool:
    """Whether ``v`` is an array-valued expression (an ``sg.array``, a tensor, a table).

    >>> import symgrad as sg
    >>> is_array(sg.array("x", 3)), is_array(sg.Var("y"))
    (True, False)
    """
    return isinstance(v, Expr) and v.op.array_valued


_INTEGER_OPS = frozenset({"add", "sub", "mul", "neg", "mod", "floor_divide", "abs", "minimum", "maximum"})


def integral(e: Any) -> bool:
    """Whether the scalar ``e`` is an integer while tracing: one that holds integers (``integers``),
    or computed from such with + - * % // abs min max and integral constants (``(i + 1) % n`` of a
    loop's counter ``i``).

    >>> import symgrad as sg
    >>> i = sg.Var("i")
    >>> from symgrad.expr.tracing import integers
    >>> with integers([i]):
    ...     integral((i + 1) % 5), integral(i / 2)
    (True, False)
    """
    return isinstance(e, Expr) and not e.op.array_valued and integer_valued(e, context.integers)


_FOLLOWED = {"load": slice(0, 1), "where": slice(1, 3), "tensor": slice(0, 1), "sum": slice(0, 1),
             "max": slice(0, 1), "min": slice(0, 1), "cumsum": slice(0, 1)}  # the operands that give the value


def integer_valued(e: Expr, known: frozenset | set) -> bool:
    """Whether ``e`` (a scalar, or a rolled array's elements) holds integers: computed from ``known``
    (integer variables and arrays) and index symbols with + - * % // abs min max, where, gathers, sums
    and whole constants, at least one of ``known`` among them (``3.0`` alone is a float).

    >>> import symgrad as sg
    >>> n, x = sg.array("n", 4), sg.Var("x")
    >>> integer_valued(sg.sum(n[1:] // 2), {n}), integer_valued(n[0] * x, {n})
    (True, False)
    """
    stack, seen, found = [e], set(), False
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        name = n.op.name
        if n in known or name == "argsort":  # (positions: integers whatever the array sorted)
            found = True
        elif name == "const":
            if not float(n.payload).is_integer():
                return False
        elif name in _INTEGER_OPS:
            stack.extend(n.args)
        elif name in _FOLLOWED:
            stack.extend(n.args[_FOLLOWED[name]])
        elif name != "index":
            return False
    return found


def holds_integers(value: Any) -> bool:
    """Whether an argument's value is integers that may index: an integer array or number, or a
    traced array or variable that stands for one (inside another trace, or vmap's row of one).

    >>> import numpy as np
    >>> holds_integers(np.arange(3)), holds_integers(2), holds_integers(True), holds_integers(np.ones(2))
    (True, True, False, False)
    """
    if isinstance(value, Expr):
        return value in context.integers
    return not isinstance(value, bool | np.bool_) and np.asarray(value).dtype.kind in "iu"


ELEMENTS_MAX = 4096  # the largest rolled array read element by element beside an element trace's arrays


def elements(arr: Expr) -> np.ndarray:
    """The rolled array ``arr`` as an object array of its elements (loads at constant addresses), to
    meet arrays traced element by element (a scan's ys in a function of small arrays).

    >>> import symgrad as sg
    >>> elements(sg.array("x", 2)).tolist()
    [x[0], x[1]]
    """
    if math.prod(arr.shape) > ELEMENTS_MAX:
        raise TracingError(f"the rolled array {str(arr)[:60]} of shape {arr.shape} meets arrays traced element "
                           f"by element: it has more than {ELEMENTS_MAX} elements to read one by one")
    out = np.empty(arr.shape, dtype=object)
    for at in np.ndindex(arr.shape):
        out[at] = rolled.subscript(arr, at)
    return out


def from_elements(values: np.ndarray) -> Expr:
    """An object array of scalars (traced element by element) as a rolled array: a tree of wheres over
    the position, to be gathered by a traced integer array (an index argument, integers computed from one).

    >>> import numpy as np, symgrad as sg
    >>> x, y = sg.symbols("x y")
    >>> a = from_elements(np.array([[x, y], [x * y, 2.0]], dtype=object))
    >>> a.shape, sg.evaluate(a, {x: 3.0, y: 5.0}).tolist()
    ((2, 2), [[3.0, 5.0], [15.0, 2.0]])
    """
    if values.size > ELEMENTS_MAX:
        raise TracingError(f"an array of {values.size} values traced element by element gathered by traced "
                           f"integers: more than {ELEMENTS_MAX} elements to select among")
    (j,) = fresh((values.size,))
    level = [(k, k + 1, e if isinstance(e, Expr) else const(float(e))) for k, e in enumerate(values.ravel())]
    while len(level) > 1:  # pairs joined level by level: depth log2(n), no chain of n
        level = [(a[0], b[1], apply(ops.OPS["where"], (apply(ops.OPS["lt"], (j, const(float(a[1])))), a[2], b[2])))
                 if b else a  # (built with apply: no float operand of the user's, which would make results floats)
                 for a, b in zip(level[::2], [*level[1::2], None])]
    return reshape(rolled.tensor(level[0][2], j), values.shape)


STACKED_MAX = 64  # elements of an object array of a rolled trace's scalars taken as a rolled array


def _of_scalars(a: np.ndarray) -> bool:
    """Whether an object array holds numbers and scalar expressions, at least one of them."""
    found = [e for e in a.flat if isinstance(e, Expr)]
    return bool(found) and not any(e.op.array_valued for e in found) and all(
        isinstance(e, Expr | Real) for e in a.flat)


def repeated(a: Any) -> Any:
    """An object array holding one scalar expression everywhere (``x[1] * np.ones(n)``: NumPy broadcast
    a traced scalar) as the rolled array of it, in a rolled trace, whatever its size; anything else as
    it is (a scan over its rows then reads the one row, not a Python loop over elements).

    >>> import numpy as np, symgrad as sg
    >>> a = np.array([sg.Var("s")] * 3, dtype=object)
    >>> repeated(a) is a  # (outside a rolled trace: as it is)
    True
    """
    if not (isinstance(a, np.ndarray) and a.dtype == object and a.ndim and a.size and context.rolled):
        return a
    first = a.flat[0]
    if not isinstance(first, Expr) or first.op.array_valued or any(e is not first for e in a.flat):
        return a
    return elementwise(lambda v: v, (first,), a.shape)


class ElementsMet(TracingError):
    """Values traced element by element (an object array) met a rolled operation: only a loop has them."""


def operand(a: Any) -> Any:
    """``a`` as an operand beside traced arrays: a NumPy array of numbers as a captured constant
    (while tracing), anything else as it is.

    >>> operand(2.0)
    2.0
    """
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        return a
    rolled_one = repeated(a)
    if rolled_one is not a:
        return rolled_one
    if a.dtype == object and context.rolled and 0 < a.size <= STACKED_MAX and _of_scalars(a):
        return from_elements(a)  # (``np.stack([v, -g * np.sin(x)])`` in an ODE's step: NumPy made it objects)
    if a.dtype.kind not in "biuf" or a.size == 0:
        error = ElementsMet if a.dtype == object else TracingError
        raise error(f"a NumPy array of dtype {a.dtype}, shape {a.shape} combined with a traced array")
    if context.arrays is None:
        raise TracingError("a NumPy array of constants combined with a traced array (outside a trace): pass it "
                           "as an argument (data), or build it from the traced values")
    key = id(a)
    if key not in context.arrays:
        values = np.array(a, dtype=np.float64)  # a copy: the values when traced, as JAX captures them
        # Numbered within the trace: tracing again after a captured value changed gives the same
        # formulas, so the compiled kernel is found again (the values are parameters, not in them).
        node = rolled.array(f"const#{len(context.arrays) + 1}", a.shape)
        # The array itself is held until the trace ends: a temporary freed meanwhile would let a
        # later array take its id and be read as this one.
        context.arrays[key] = (node, values, a)
        if context.seen is not None:  # (its copy doubles as the snapshot a later change is checked against)
            context.seen[key] = (a, values if a.dtype == values.dtype else None)
    return context.arrays[key][0]


def fresh(shape: tuple) -> tuple:
    """New index symbols over ``shape``.

    >>> [i.payload[1] for i in fresh((2, 3))]
    [2, 3]
    """
    return tuple(rolled.fresh_index(rolled.index("i", n)) for n in shape)


def element(arr: Expr, idx: tuple) -> Expr:
    """``arr`` at the index expressions ``idx``: a cheap pointwise tensor's body there (inlined, so
    chains of elementwise arithmetic fuse), else a load.

    >>> import symgrad as sg
    >>> x = sg.array("x", 4)
    >>> element(x * 2.0, (sg.const(1.0),))
    2*x[1]
    """
    if arr.op.name == "tensor" and _pointwise(arr.args[0]):
        return rolled.substitute_indices(arr.args[0], dict(zip(arr.args[1:], idx)))
    if arr.op.name == "scatter":
        arr, idx = _scatter_row(arr, idx)
    return apply(ops.OPS["load"], (arr, *idx)) if arr is not None else const(0.0)


def _scatter_row(sc: Expr, idx: tuple) -> tuple[Expr | None, tuple]:
    """A scatter read where its address along an axis takes one value and the read's is a constant: the
    scatter without that axis (equal), None where they differ (zero there). A loss reading the last
    carry of a scan seeds the reverse scan with a row of an array of zeros but one entry, which was
    stored whole to read that row (8 MB for GradBench's ODE gradient)."""
    body, k = sc.args[0], sc.payload[1]
    addresses, indices, shape = sc.args[1:1 + k], sc.args[1 + k:], sc.payload[0]
    same = [d for d, (a, i) in enumerate(zip(addresses, idx)) if i.op.name == "const" and len(set(
        rolled.value_range(a))) == 1]
    if any(rolled.value_range(addresses[d])[0] != idx[d].payload for d in same):
        return None, idx
    if not same or len(same) == k:
        return sc, idx
    keep = [d for d in range(k) if d not in same]
    return (rolled.scatter(body, tuple(addresses[d] for d in keep), indices, tuple(shape[d] for d in keep)),
            tuple(idx[d] for d in keep))


def _pointwise(body: Expr) -> bool:
    """Whether ``body`` is cheap arithmetic: no reduction, no transcendental function (the arrays it
    reads may hold them: they stay loads; so may a value not varying over any index, such as a
    whole sum, computed once wherever it is read). A costly body stays a tensor, computed once: its
    derivative (``1 - tanh(u)**2``) then reads the forward values from it. So does a sum of
    scatters (a gradient scattered from several sites): the scatters add into its buffer (the
    schedule's accumulating tensors), where inlined each would fill a buffer of its own."""
    seen, stack, scatters = {body}, [body], 0
    while stack:
        node = stack.pop()
        if rolled.costly(node) and node.free:  # (a whole reduction, x - max(x)'s max: computed once)
            return False
        for a in node.args if node.free else ():  # (what varies over no index is computed once)
            scatters += a.op.name == "scatter"
            if a not in seen and not a.op.array_valued:
                seen.add(a)
                stack.append(a)
    return scatters < 2


def elementwise(fn: Any, args: tuple, shape: tuple | None = None) -> Any:
    """``fn`` applied elementwise to ``args`` (arrays, scalar expressions, numbers), broadcasting (to
    ``shape`` where given: ``np.broadcast_to``, ``np.full``).

    >>> import symgrad as sg
    >>> x, y = sg.array("x", (2, 3)), sg.array("y", 3)
    >>> (x * y).shape  # elementwise(mul, (x, y)): x[i, j] * y[j]
    (2, 3)
    >>> elementwise(lambda v: v, (y,), (4, 3)).shape
    (4, 3)
    """
    note_operands(args)
    args = tuple(map(operand, args))
    shapes = [a.shape if is_array(a) else () for a in args]
    try:
        out = np.broadcast_shapes(*shapes, *([] if shape is None else [shape]))
    except ValueError:
        out = None
    if out is None or shape is not None and out != tuple(shape):
        raise ValueError(f"operands could not be broadcast together with shapes {' '.join(map(str, shapes))}" +
                         ("" if shape is None else f" and requested shape {tuple(shape)}"))
    if not out:
        return fn(*args)
    J = fresh(out)
    values = []
    for a, s in zip(args, shapes):
        if not s:
            values.append(a)
            continue
        k = len(out) - len(s)
        # (an axis of one element is read at 0: the same node as a reduction over it, so x - mean(x) folds)
        values.append(element(a, tuple(J[k + d] if s[d] == out[k + d] > 1 else const(0.0) for d in range(len(s)))))
    return rolled.tensor(fn(*values), *J)


def getitem(arr: Expr, key: Any) -> Expr:
    """``arr[key]``: index expressions as ``rolled.subscript``; integers, slices (any step), ``None``
    and ``...`` as NumPy's basic indexing; an array of integers as a gather (``take``).

    >>> import symgrad as sg
    >>> x = sg.array("x", 10)
    >>> x[8:1:-3].shape, sg.evaluate(x[8:1:-3], {x: range(10)})
    ((3,), array([8., 5., 2.]))
    """
    key = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, np.ndarray | list) or is_array(k) or integral(k) for k in key):
        return take(arr, key)
    if any(isinstance(k, Expr) for k in key):
        return rolled.subscript(arr, key)
    n_axes = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_axes > arr.ndim:
        raise IndexError(f"too many indices for array: array is {arr.ndim}-dimensional, but {n_axes} were indexed")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (arr.ndim - n_axes) + key[at + 1:]
    else:
        key = key + (slice(None),) * (arr.ndim - n_axes)
    addresses, out, dim = [], [], 0
    for k in key:
        if k is None:
            out.append(rolled.fresh_index(rolled.index("i", 1)))
            continue
        n = arr.shape[dim]
        dim += 1
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            size = len(range(start, stop, step))
            if size == 0:
                raise TracingError(f"the slice {k} of an axis of size {n} is empty: no rolled form")
            j = rolled.fresh_index(rolled.index("i", size))
            out.append(j)
            addresses.append(j * step + start if step != 1 else j + start if start else j)
        else:
            if isinstance(k, bool | np.bool_) or not isinstance(k, int | np.integer):
                raise IndexError(f"only integers, slices, None, ... and integer arrays index a traced array, got "
                                 f"{type(k).__name__} {k!r}")
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim - 1} with size {n}")
            addresses.append(const(float(i % n)))
    value = element(arr, tuple(addresses))
    return rolled.tensor(value, *out) if out else value


def _axes(axis: Any, ndim: int) -> set:
    if axis is None:
        return set(range(ndim))
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    for a in axes:
        if not -ndim <= int(a) < ndim:
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension {ndim}")
    return {int(a) % ndim for a in axes}


def reshape(arr: Expr, shape: Any) -> Expr:
    """``np.reshape`` (C order): each element at its flat position's multi-index in ``arr``.

    >>> import symgrad as sg
    >>> x = sg.array("x", 6)
    >>> sg.evaluate(reshape(x, (2, -1)), {x: range(6)})[1]
    array([3., 4., 5.])
    """
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(int(d) for d in shape)
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape = tuple(arr.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != arr.size:
        raise ValueError(f"cannot reshape array of size {arr.size} into shape {shape}")
    if tuple(d for d in shape if d != 1) == tuple(d for d in arr.shape if d != 1):  # only size-1 axes change
        J = fresh(shape)
        big = iter([j for j, d in zip(J, shape) if d != 1])
        return rolled.tensor(element(arr, tuple(next(big) if d != 1 else const(0.0) for d in arr.shape)), *J)
    J = fresh(shape)
    flat, stride = const(0.0), 1
    for j, d in reversed(list(zip(J, shape))):
        flat = flat + j * stride if stride != 1 else flat + j
        stride *= d
    idx, stride = [], arr.size
    for d in arr.shape:
        stride //= d
        idx.append(rolled.canonical((flat // stride) % d if stride != 1 else flat % d))
    return rolled.tensor(element(arr, tuple(idx)), *J)


def take(a: Expr, key: tuple) -> Expr:
    """``a[key]`` where entries of ``key`` are arrays of integer indices (gathers through constant
    tables), with NumPy's advanced indexing: the index arrays (and integers beside them) broadcast
    together; their axes replace theirs where they stand side by side, else come first. The
    other entries are full slices (``...`` stands for the axes left).

    >>> import numpy as np, symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(take(x, (np.array([2, 0, 2]),)), {x: [10.0, 11.0, 12.0]})
    array([12., 10., 12.])
    >>> A = sg.array("A", (2, 3))
    >>> sg.evaluate(A[[0, 1, 1], [2, 0, 2]], {A: np.arange(6.0).reshape(2, 3)})
    array([2., 3., 5.])
    """
    if any(v is Ellipsis for v in key):
        at = next(k for k, v in enumerate(key) if v is Ellipsis)
        key = key[:at] + (slice(None),) * (a.ndim - len(key) + 1) + key[at + 1:]
    if len(key) > a.ndim or any(not isinstance(v, np.ndarray | list | int | np.integer | Expr) and v != slice(None)
                                or isinstance(v, bool | np.bool_) for v in key):
        raise TracingError("indexing a traced array with boolean masks, None or sliced axes beside index arrays "
                           "has no rolled form")
    key = key + (slice(None),) * (a.ndim - len(key))
    picks = {k: v if isinstance(v, Expr) else _constant_indices(v, k, a.shape[k])
             for k, v in enumerate(key) if not isinstance(v, slice)}
    shape = np.broadcast_shapes(*(v.shape for v in picks.values()))
    if 0 in shape:
        raise TracingError("indexing a traced array with an empty index array has no rolled form")
    J = fresh(shape)
    slices = {k: rolled.fresh_index(rolled.index("i", a.shape[k])) for k in range(a.ndim) if k not in picks}
    addresses = [slices[k] if k in slices else _read(picks[k], J, a.shape[k]) if isinstance(picks[k], Expr)
                 else _picked(np.broadcast_to(picks[k], shape), J) for k in range(a.ndim)]
    side_by_side = max(picks) - min(picks) + 1 == len(picks)
    before = [k for k in sorted(slices) if side_by_side and k < min(picks)]  # (axes: == on Exprs builds nodes)
    out = [*(slices[k] for k in before), *J, *(slices[k] for k in sorted(slices) if k not in before)]
    return rolled.tensor(element(a, tuple(addresses)), *out) if out else element(a, tuple(addresses))


def _constant_indices(v: Any, axis: int, n: int) -> np.ndarray:
    """An index array (or integer) of the key as values in 0 .. n-1, checked as NumPy does."""
    v = np.asarray(v)
    if v.dtype.kind not in "iu":
        raise TracingError(f"indexing a traced array with an array of {v.dtype} has no rolled form")
    if v.size and (v.min() < -n or v.max() >= n):
        raise IndexError(f"index {v.min() if v.min() < -n else v.max()} is out of bounds for axis {axis} with "
                         f"size {n}")
    return v % n


def _read(indices: Expr, J: tuple, n: int) -> Expr:
    """The address a traced integer array gives at ``J`` (broadcast: its trailing axes), on an axis of
    size ``n``: its value there, checked where it runs."""
    if not integer_valued(indices, context.integers):  # (a slice of an integer argument: obs[:, 0])
        if indices.op.name == "tensor" and indices.args[0].op.name in functions._CONDITIONS:
            raise TracingError(functions.MASK_MESSAGE)
        raise IndexError("arrays used as indices must be of integer type: a traced index array must be an "
                         "argument of an integer dtype itself (not a float array, nor one computed from traced "
                         "values)")
    if not is_array(indices):  # an integer argument (a label per example, under vmap)
        return apply(ops.OPS["as_index"], (indices, const(float(n))))
    at = J[len(J) - indices.ndim:]
    return apply(ops.OPS["as_index"], (element(indices, tuple(
        const(0.0) if d == 1 and m != 1 else j for d, j, m in zip(indices.shape, at, (i.payload[1] for i in at)))),
        const(float(n))))


def _picked(values: np.ndarray, J: tuple) -> Expr:
    """The address the index values give at ``J``: a constant, an index itself where the values
    count along one axis (``np.arange(n)[:, None]``: then derivatives gather), else a table load."""
    flat = values.ravel()
    if (flat == flat[0]).all():
        return const(float(flat[0]))
    for m, j in enumerate(J):
        counting = np.arange(values.shape[m]).reshape([-1 if d == m else 1 for d in range(values.ndim)])
        if np.array_equal(values, np.broadcast_to(counting, values.shape)):
            return j
    return apply(ops.OPS["load"], (rolled.table(np.ascontiguousarray(values)), *J))
