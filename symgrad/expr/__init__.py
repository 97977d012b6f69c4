"""The symbolic layer: expressions, derivatives, evaluation, printing. Knows nothing of Numba."""
