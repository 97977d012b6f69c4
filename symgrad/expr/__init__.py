"""The symbolic layer: expressions, derivatives, evaluation, printing. Knows nothing of Numba.

Imports form a tree except ops <-> build (op rows build nodes; building reads rows); methods.py
installs Expr's operators, printing, pickling and NumPy hooks once everything they use exists.
"""

from symgrad.expr import methods as _methods  # noqa: F401
