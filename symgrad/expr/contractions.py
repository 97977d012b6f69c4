"""Sums of products on rolled arrays: ``@`` / ``np.matmul`` (batched: leading axes broadcast),
``np.einsum`` and ``np.tensordot`` (a BLAS product when compiled, for matrix products).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.expr import rolled
from symgrad.expr.build import const
from symgrad.expr.ndarrays import element, fresh, is_array, operand
from symgrad.expr.node import Expr, TracingError


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
