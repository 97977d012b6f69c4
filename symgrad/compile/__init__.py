"""The numeric layer: expression DAGs lowered to Programs and compiled kernels."""
