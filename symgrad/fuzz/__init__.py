"""A differential fuzzer: random NumPy programs, run on every backend and checked against each other.

Each program is a short Python function (source text, so a failing one can be printed and pasted)
of one or two float arrays, built from elementwise ops, gathers (permutations, integer tables,
``//`` and ``%`` index arithmetic), slices, ``np.minimum`` / ``np.where`` / ``np.clip``,
reductions, reshapes, joins, ``@`` / ``np.einsum``, ``np.cumsum`` and ``sg.scan``; it returns
``np.sum`` of something. For each program the fuzzer compares

- the value of ``sg.value_and_grad(backend="python")`` (the reference interpreter, rolled where
  the arrays have 64 elements or more) with NumPy's, and its gradient with central finite
  differences of the NumPy function along random directions;
- the element-by-element trace (``symgrad.trace.limits.ROLLED_MIN`` raised for the call) with the rolled one;
- the value and gradient on the other backends (``vm``, ``numba``) with the interpreter's;
- sometimes ``sg.jvp``, ``sg.hvp``, ``sg.hessian``, ``sg.jacobian`` and ``sg.vmap(sg.grad(f))``.

A disagreement is minimised (statements dropped, subexpressions replaced by their operands,
variables by arguments, sizes shrunk) while it still disagrees the same way.

Command line: ``python -m symgrad.fuzz --minutes 5 --backends python,vm,numba --numba-every 20``
(``--jobs 2``: two processes, seeds ``seed`` and ``seed + 1``, their counts added).
"""

from symgrad.fuzz.cli import main
from symgrad.fuzz.generator import generate
from symgrad.fuzz.minimiser import minimise
from symgrad.fuzz.oracle import EXTRAS, check, element_trace
from symgrad.fuzz.program import Disagreement, Program
from symgrad.fuzz.runner import run

__all__ = ["EXTRAS", "Disagreement", "Program", "check", "element_trace", "generate", "main", "minimise", "run"]
