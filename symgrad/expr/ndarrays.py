"""NumPy on rolled arrays: array code run on ``sg.array`` inputs builds indexed expressions.

An array-valued Expr (an input ``sg.array``, a computed ``tensor``) answers NumPy as an array of
its shape: elementwise ufuncs and operators broadcast, basic slicing, reductions over axes,
``@`` / ``np.dot``, transposes and reshapes all build one ``tensor`` node over fresh index
symbols, whatever the size (issue 12: tracing array code without unrolling it). A tensor of
cheap arithmetic read by another is inlined (its body at the reader's indices), so elementwise
chains fuse into one loop; tensors holding reductions or transcendental functions are read,
not recomputed. A construct with no
rolled form raises ``TracingError`` naming it (tracing then falls back to object arrays).
"""

from __future__ import annotations

import math
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
        if n in known:
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
        level = [(a[0], b[1], apply(ops.OPS["where"], (j < float(a[1]), a[2], b[2]))) if b else a
                 for a, b in zip(level[::2], [*level[1::2], None])]
    return reshape(rolled.tensor(level[0][2], j), values.shape)


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
    return apply(ops.OPS["load"], (arr, *idx))


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


def elementwise(fn: Any, args: tuple) -> Any:
    """``fn`` applied elementwise to ``args`` (arrays, scalar expressions, numbers), broadcasting.

    >>> import symgrad as sg
    >>> x, y = sg.array("x", (2, 3)), sg.array("y", 3)
    >>> (x * y).shape  # elementwise(mul, (x, y)): x[i, j] * y[j]
    (2, 3)
    """
    note_operands(args)
    args = tuple(map(operand, args))
    shapes = [a.shape if is_array(a) else () for a in args]
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"operands could not be broadcast together with shapes {' '.join(map(str, shapes))}") \
            from None
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


def reduce(kind: str, arr: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.sum`` / ``np.max`` / ``np.min`` of ``arr`` over ``axis`` (None: all).

    >>> import numpy as np, symgrad as sg
    >>> A = sg.array("A", (2, 3))
    >>> sg.evaluate(reduce("max", A, axis=1), {A: np.arange(6.0).reshape(2, 3)})
    array([2., 5.])
    """
    if not is_array(arr):
        return arr
    axes = _axes(axis, arr.ndim)
    idx = fresh(arr.shape)
    body = element(arr, idx)
    for d in sorted(axes, reverse=True):
        body = rolled.reduce(kind, body, idx[d])
    kept = [idx[d] for d in range(arr.ndim) if d not in axes]
    out = rolled.tensor(body, *kept) if kept else body
    if not keepdims:
        return out
    # The size-1 axes as a view of the reduced array (inlined where read): the reduction stays one
    # tensor over its own indices, which derivatives (a max's ties) read instead of recomputing.
    shape = tuple(1 if d in axes else n for d, n in enumerate(arr.shape))
    return reshape(out, shape) if kept else rolled.tensor(out, *fresh(shape))


def mean(arr: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.mean``: the sum over the axes divided by their size.

    >>> import symgrad as sg
    >>> x = sg.array("x", 4)
    >>> sg.evaluate(mean(x), {x: [1.0, 2.0, 3.0, 6.0]})
    3.0
    """
    if not is_array(arr):
        return arr
    count = math.prod(arr.shape[d] for d in _axes(axis, arr.ndim))
    return _divide(reduce("sum", arr, axis, keepdims), float(count))


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """``np.cumsum``: the running sums along ``axis`` (None: of the raveled array), one loop adding
    each element to the sum before it (NumPy's order of additions); the gradient sums backwards.

    >>> import numpy as np, symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(np.cumsum(x), {x: [1.0, 2.0, 3.0]})
    array([1., 3., 6.])
    """
    if out is not None:
        raise TracingError("np.cumsum(..., out=...) on a traced array has no rolled form")
    if not is_array(a):  # a number's running sums: itself, as one element
        return rolled.tensor(a, *fresh((1,)))
    if axis is None:
        a, axis = reshape(a, -1), 0
    (axis,) = _axes(axis, a.ndim)
    return rolled.cumsum(a, axis)


def _divide(a: Any, b: Any) -> Any:
    return elementwise(lambda x, y: x / y, (a, b))


def _axes(axis: Any, ndim: int) -> set:
    if axis is None:
        return set(range(ndim))
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    for a in axes:
        if not -ndim <= int(a) < ndim:
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension {ndim}")
    return {int(a) % ndim for a in axes}


def matmul(a: Any, b: Any) -> Any:
    """``a @ b``: a sum over the shared axis (a BLAS product when compiled, for 2-D operands).

    >>> import symgrad as sg
    >>> (sg.array("A", (2, 3)) @ sg.array("v", 3)).shape
    (2,)
    """
    a, b = operand(a), operand(b)
    if not (is_array(a) and is_array(b)):
        raise TracingError("@ of a traced array with a scalar has no rolled form (use *)")
    if a.ndim > 2 or b.ndim > 2:
        return _batched_matmul(a, b)
    k = a.shape[-1]
    if b.shape[0] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align ({k} != {b.shape[0]})")
    s = rolled.fresh_index(rolled.index("i", k))
    rows = fresh(a.shape[:-1])
    cols = fresh(b.shape[1:])
    body = rolled.reduce("sum", element(a, (*rows, s)) * element(b, (s, *cols)), s)
    return rolled.tensor(body, *rows, *cols) if rows or cols else body


def _batched_matmul(a: Expr, b: Expr) -> Expr:
    """``a @ b`` with leading batch axes, broadcast as NumPy's matmul (a 1-D operand as a row / column).

    >>> import symgrad as sg
    >>> (sg.array("A", (5, 2, 3)) @ sg.array("B", (3, 4))).shape
    (5, 2, 4)
    """
    a_batch = a.shape[:-2] if a.ndim > 2 else ()
    b_batch = b.shape[:-2] if b.ndim > 2 else ()
    try:
        batch = np.broadcast_shapes(a_batch, b_batch)
    except ValueError:
        raise ValueError(f"matmul: batch shapes {a_batch} and {b_batch} do not broadcast") from None
    k = a.shape[-1]
    if b.shape[-2 if b.ndim > 1 else 0] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align")
    B = fresh(batch)
    rows = fresh(a.shape[-2:-1] if a.ndim > 1 else ())
    cols = fresh(b.shape[-1:] if b.ndim > 1 else ())
    s = rolled.fresh_index(rolled.index("i", k))

    def lead(x_batch: tuple) -> tuple:  # the batch indices of an operand (size-1 axes broadcast)
        at = len(batch) - len(x_batch)
        return tuple(B[at + d] if n == batch[at + d] else const(0.0) for d, n in enumerate(x_batch))

    body = rolled.reduce("sum", element(a, (*lead(a_batch), *rows, s)) * element(b, (*lead(b_batch), s, *cols)), s)
    return rolled.tensor(body, *B, *rows, *cols)


def transpose(arr: Expr, axes: Any = None) -> Expr:
    """``np.transpose``: the axes permuted (reversed by default).

    >>> import symgrad as sg
    >>> transpose(sg.array("A", (2, 3))).shape
    (3, 2)
    """
    order = tuple(reversed(range(arr.ndim))) if axes is None else tuple(int(a) % arr.ndim for a in axes)
    J = fresh(tuple(arr.shape[d] for d in order))
    idx = [None] * arr.ndim
    for j, d in zip(J, order):
        idx[d] = j
    return rolled.tensor(element(arr, tuple(idx)), *J)


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


def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False,
        **rest: Any) -> Any:
    """``np.var``: the mean squared deviation from the mean over the axes (``ddof`` as NumPy).

    >>> import symgrad as sg
    >>> x = sg.array("x", 4)
    >>> sg.evaluate(var(x, ddof=1), {x: [1.0, 2.0, 3.0, 6.0]})
    4.666666666666667
    """
    if out is not None or rest.get("where", True) is not True:
        raise TracingError("np.var(..., out= / where=) on a traced array has no rolled form")
    if not is_array(a):
        return elementwise(lambda v: v * 0.0, (a,))
    count = math.prod(a.shape[d] for d in _axes(axis, a.ndim))
    deviation = elementwise(lambda v, m: (v - m) * (v - m), (a, mean(a, axis, keepdims=True)))
    return _divide(reduce("sum", deviation, axis, keepdims), float(count - ddof))


def std(*args: Any, **kwargs: Any) -> Any:
    """``np.std``: the square root of ``np.var``.

    >>> import symgrad as sg
    >>> x = sg.array("x", 2)
    >>> sg.evaluate(std(x), {x: [1.0, 3.0]})
    1.0
    """
    return elementwise(root_of_squares, (var(*args, **kwargs),))


def root_of_squares(v: Any) -> Expr:
    """The square root of a sum of squares (np.std, np.linalg.norm), whose derivative is 0 where it is 0
    (as ``|x|``'s at 0, and central differences: the spread of a constant, the norm of 0, moves as fast
    up as down; sqrt's partial there is inf).

    >>> import symgrad as sg
    >>> x = sg.Var("x")
    >>> sg.evaluate(sg.diff(root_of_squares(x * x), x), {x: 0.0})
    0.0
    """
    return apply(ops.OPS["where"], (apply(ops.OPS["eq"], (v, 0.0)), 0.0, apply(ops.OPS["sqrt"], (v,))))


MAX_PIECES = 16  # arrays joined by one concatenate / stack in rolled form (a constraint vector: 12)
INLINED_PARTS = 8  # parts up to which a concatenation inlines their formulas (an LSTM's gates: 4)


def concatenate(arrays: Any, axis: int | None = 0, out: Any = None, **rest: Any) -> Expr:
    """``np.concatenate``: each output element read from the array its position falls in (the
    others' reads, out of their range there, guarded).

    >>> import symgrad as sg
    >>> x, y = sg.array("x", 2), sg.array("y", 1)
    >>> concatenate([x, y])
    tensor(where(j < 2, x[j], y[j - 2]), j=0..2)
    """
    arrays = [operand(a if isinstance(a, Expr | np.ndarray) else _listed(a)) for a in arrays]
    if axis is None:
        arrays, axis = [reshape(a, -1) if is_array(a) else a for a in arrays], 0
    if out is not None or not all(is_array(a) for a in arrays):
        raise TracingError("np.concatenate of traced arrays with scalars or out= has no rolled form")
    if len(arrays) > MAX_PIECES:  # each element a chain of that many branches (and its derivative worse)
        raise TracingError(f"np.concatenate / np.stack of {len(arrays)} arrays (a Python loop over rows?): "
                           "traced element by element; sg.vmap maps a function over rows as one loop")
    axis = int(axis) % arrays[0].ndim
    shapes = [a.shape[:axis] + a.shape[axis + 1:] for a in arrays]
    if any(len(a.shape) != arrays[0].ndim or s != shapes[0] for a, s in zip(arrays, shapes)):
        raise ValueError(f"concatenate: shapes {[a.shape for a in arrays]} differ off axis {axis}")
    sizes = [a.shape[axis] for a in arrays]
    J = fresh(arrays[0].shape[:axis] + (sum(sizes),) + arrays[0].shape[axis + 1:])
    starts = np.cumsum([0, *sizes]).tolist()
    value = None
    for a, start, stop in reversed(list(zip(arrays, starts, starts[1:]))):
        at = J[:axis] + (J[axis] - start if start else J[axis],) + J[axis + 1:]
        # Past INLINED_PARTS parts, a part computed is read, not inlined: each element tests its
        # index against every part, and so does each read's adjoint (a constraint vector of 12 parts:
        # its Lagrangian's gradient took 7x the primal's time, not 3x).
        inline = len(arrays) <= INLINED_PARTS or a.op.name != "tensor" or a.args[0].op.name in ("load", "const")
        at = element(a, at) if inline else apply(ops.load, (a, *at))
        value = at if value is None else apply(ops.OPS["where"], (J[axis] < float(stop), at, value))
    return rolled.tensor(rolled.tidy(value), *J)


def _listed(a: Any) -> Any:
    """A list (or tuple) in a concatenation as an array: of numbers, NumPy's; holding traced scalars
    (``[np.sum(x) - 1]`` closing a constraint vector), a rolled array of them."""
    values = np.array(a, dtype=object)
    if any(isinstance(e, Expr) for e in values.ravel()):
        return from_elements(values)
    return np.asarray(a, dtype=float)


def stack(arrays: Any, axis: int = 0, out: Any = None, **rest: Any) -> Expr:
    """``np.stack``: the arrays along a new axis.

    >>> import symgrad as sg
    >>> stack([sg.array("x", 3), sg.array("y", 3)], axis=1).shape
    (3, 2)
    """
    arrays = [operand(a) for a in arrays]
    if not all(is_array(a) for a in arrays):
        raise TracingError("np.stack of traced arrays with scalars or constants has no rolled form")
    axis = int(axis) % (arrays[0].ndim + 1)
    grown = [reshape(a, a.shape[:axis] + (1,) + a.shape[axis:]) for a in arrays]
    return concatenate(grown, axis, out)


def einsum(subscripts: str, *operands: Any, **options: Any) -> Any:
    """``np.einsum`` (explicit or implicit output, no ``...``): a sum over the letters not in the output
    of the product of the operands' elements (a BLAS product when it is a matrix product).

    >>> import numpy as np, symgrad as sg
    >>> A = sg.array("A", (2, 2))
    >>> sg.evaluate(einsum("ii", A), {A: np.array([[1.0, 2.0], [3.0, 4.0]])})
    5.0
    """
    operands = tuple(map(operand, operands))
    if options.get("out") is not None or "..." in subscripts or not all(is_array(a) for a in operands):
        raise TracingError("np.einsum with '...', out= or constant operands has no rolled form")
    spec = subscripts.replace(" ", "")
    inputs, _, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: {len(terms)} operand subscripts for {len(operands)} operands")
    if "->" not in spec:
        output = "".join(sorted(c for c in set(inputs) - {","} if inputs.count(c) == 1))
    sizes: dict[str, int] = {}
    for term, a in zip(terms, operands):
        if len(term) != a.ndim:
            raise ValueError(f"einsum: subscripts {term!r} for an operand of shape {a.shape}")
        for c, n in zip(term, a.shape):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: {c!r} is {sizes[c]} and {n}")
    letters = {c: rolled.fresh_index(rolled.index("i", n)) for c, n in sizes.items()}
    body = None
    for term, a in zip(terms, operands):
        value = element(a, tuple(letters[c] for c in term))
        body = value if body is None else body * value
    for c in sorted(set(sizes) - set(output), reverse=True):
        body = rolled.reduce("sum", body, letters[c])
    return rolled.tensor(body, *(letters[c] for c in output)) if output else body


def tensordot(a: Expr, b: Expr, axes: Any = 2) -> Any:
    """``np.tensordot``: a sum over the paired axes (as ``einsum``).

    >>> import symgrad as sg
    >>> tensordot(sg.array("A", (2, 3, 4)), sg.array("B", (3, 4, 5))).shape
    (2, 5)
    """
    if isinstance(axes, int | np.integer):
        pairs = list(zip(range(a.ndim - int(axes), a.ndim), range(int(axes))))
    else:
        first, second = (np.atleast_1d(x).tolist() for x in axes)
        pairs = [(int(i) % a.ndim, int(j) % b.ndim) for i, j in zip(first, second)]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in pairs:
        sb[j] = sa[i]
    shared = {sa[i] for i, _ in pairs}
    output = [c for c in sa if c not in shared] + [c for c in sb if c not in shared]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(output)}", a, b)


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


def split(a: Expr, indices_or_sections: Any, axis: int = 0, even: bool = True) -> list[Expr]:
    """``np.split`` / ``np.array_split`` (``even=False``): slices along ``axis``.

    >>> import symgrad as sg
    >>> [p.shape for p in split(sg.array("x", 10), [3, 8])]
    [(3,), (5,), (2,)]
    """
    axis = int(axis) % a.ndim
    n = a.shape[axis]
    if isinstance(indices_or_sections, int | np.integer):
        k = int(indices_or_sections)
        if k < 1 or even and n % k:
            raise ValueError(f"array split does not result in an equal division: {n} into {k}")
        cuts = [i * (n // k) + min(i, n % k) for i in range(1, k)]
    else:
        cuts = [int(c) for c in indices_or_sections]
    bounds = zip([0, *cuts], [*cuts, n])
    return [getitem(a, (slice(None),) * axis + (slice(lo, hi),)) for lo, hi in bounds]


def moveaxis(a: Expr, source: Any, destination: Any) -> Expr:
    """``np.moveaxis`` (and ``np.swapaxes`` through it): a transpose.

    >>> import symgrad as sg
    >>> moveaxis(sg.array("A", (2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    src = [int(s) % a.ndim for s in np.atleast_1d(source)]
    dst = [int(d) % a.ndim for d in np.atleast_1d(destination)]
    order = [d for d in range(a.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def squeeze(a: Expr, axis: Any = None) -> Expr:
    """``np.squeeze``: the size-1 axes (or those named) dropped.

    >>> import symgrad as sg
    >>> squeeze(sg.array("A", (1, 3, 1))).shape
    (3,)
    """
    axes = {d for d in range(a.ndim) if a.shape[d] == 1} if axis is None else _axes(axis, a.ndim)
    if any(a.shape[d] != 1 for d in axes):
        raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one (shape {a.shape})")
    shape = tuple(d for i, d in enumerate(a.shape) if i not in axes)
    return reshape(a, shape) if shape else element(a, (const(0.0),) * a.ndim)


def pad(a: Expr, pad_width: Any, mode: str = "constant", constant_values: Any = 0.0) -> Expr:
    """``np.pad`` in modes ``constant`` (one value) and ``wrap``: each element read where it
    falls in ``a``, or the constant.

    >>> import symgrad as sg
    >>> x = sg.array("x", 3)
    >>> sg.evaluate(pad(x, (1, 2)), {x: [1, 2, 3]})
    array([0., 1., 2., 3., 0., 0.])
    """
    widths = np.broadcast_to(np.asarray(pad_width, dtype=int), (a.ndim, 2))
    if mode not in ("constant", "wrap") or np.ndim(constant_values) or (widths < 0).any():
        raise TracingError(f"np.pad(mode={mode!r}, constant_values={constant_values!r}) of a traced array has no "
                           "rolled form (modes constant, with one value, and wrap have)")
    J = fresh(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, widths.tolist())))
    inside, address = [], []
    for j, n, (lo, hi) in zip(J, a.shape, widths.tolist()):
        at = j - lo if lo else j
        address.append(rolled.canonical(at % n) if mode == "wrap" and (lo or hi) else at)
        if mode == "constant" and lo:
            inside.append(j >= float(lo))
        if mode == "constant" and hi:
            inside.append(j <= float(lo + n - 1))
    value = element(a, tuple(address)) if not inside else rolled.subscript(a, tuple(address), guarded=True)
    for condition in inside:
        value = apply(ops.OPS["where"], (condition, value, float(constant_values)))
    return rolled.tensor(rolled.tidy(value), *J)


def norm(x: Expr, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.linalg.norm`` of vectors (``ord`` None/2, 1, inf, -inf, p) and the Frobenius norm of
    matrices (``ord`` None or "fro").

    >>> import symgrad as sg
    >>> x = sg.array("x", 2)
    >>> float(sg.evaluate(norm(x), {x: [3, 4]}))
    5.0
    """
    vector = axis is not None and np.ndim(axis) == 0 or axis is None and x.ndim == 1
    if vector and ord == "fro":
        raise ValueError("Invalid norm order 'fro' for vectors")
    absolute = elementwise(lambda v: apply(ops.OPS["abs"], (v,)), (x,))
    if ord in (None, 2, "fro") and (vector or ord != 2):
        return elementwise(root_of_squares, (reduce("sum", elementwise(lambda v: v * v, (x,)), axis, keepdims),))
    if not vector:
        raise TracingError(f"np.linalg.norm(ord={ord!r}) of a matrix has no rolled form")
    if ord in (np.inf, -np.inf):
        return reduce("max" if ord > 0 else "min", absolute, axis, keepdims)
    if ord == 1:
        return reduce("sum", absolute, axis, keepdims)
    if isinstance(ord, int | float) and ord > 0:
        power = reduce("sum", elementwise(lambda v: v ** float(ord), (absolute,)), axis, keepdims)
        return elementwise(lambda v: v ** (1.0 / ord), (power,))
    raise TracingError(f"np.linalg.norm(ord={ord!r}) of a traced array has no rolled form")


PROD_MAX = 16  # np.prod multiplies out axes up to this size (a product has no rolled reduction)


def prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **rest: Any) -> Any:
    """``np.prod`` over axes of at most ``PROD_MAX`` elements, multiplied out (exact derivatives at zeros).

    >>> import symgrad as sg
    >>> A = sg.array("A", (2, 3))
    >>> sg.evaluate(prod(A, axis=1), {A: [[1, 2, 3], [4, 5, 6]]})
    array([  6., 120.])
    """
    if out is not None or rest:
        raise TracingError(f"np.prod(..., {', '.join(['out', *rest] if out is not None else rest)}) on a traced "
                           "array has no rolled form")
    if not is_array(a):
        return a
    axes = sorted(_axes(axis, a.ndim))
    if math.prod(a.shape[d] for d in axes) > PROD_MAX:
        raise TracingError(f"np.prod over {math.prod(a.shape[d] for d in axes)} elements (more than {PROD_MAX}) "
                           "has no rolled form")
    moved = moveaxis(a, axes, list(range(len(axes)))) if axes != list(range(len(axes))) else a
    rest_shape = moved.shape[len(axes):]
    flat = reshape(moved, (math.prod(moved.shape[:len(axes)]), *rest_shape)) if len(axes) != 1 else moved
    parts = [getitem(flat, (k,)) for k in range(flat.shape[0])]
    total = parts[0]
    for p in parts[1:]:
        total = elementwise(lambda u, v: u * v, (total, p))
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape))
        return reshape(total, shape) if is_array(total) else rolled.tensor(total, *fresh(shape))
    return total


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
