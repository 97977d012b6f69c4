"""The symbolic layer: expressions, derivatives, evaluation, printing. Knows nothing of Numba."""

# node.py and build.py need each other (nodes get their operators from build); loading build first makes
# every import order work (importing node.py first would run build's table before node is complete).
from symgrad.expr import build as _build  # noqa: F401
