"""The numeric layer: expression DAGs lowered to Programs and compiled kernels.

Calling the package, ``symgrad.compile(outputs, inputs)``, calls
``symgrad.compile.function.compile`` (see ``symgrad/callmodule.py``).
"""

from symgrad.compile.function import compile as _compile
from symgrad.util.callmodule import make_callable

make_callable(__name__, _compile)
