"""Modules that are also the function of the same name.

``symgrad.compile`` is both the package of the numeric layer (``symgrad.compile.lower``, ...)
and the function users call, ``sg.compile(outputs, inputs)``; ``symgrad.parse`` is both the
module (``symgrad.parse.ParseError``) and ``sg.parse(text)``. Python keeps one object per
name, so the module is made callable: every import path and every call works, and the
directory names stay those of the design.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class CallableModule(ModuleType):
    """A module whose call is its function's call (``inspect.signature`` shows the function's)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._symgrad_function(*args, **kwargs)


def make_callable(name: str, function: Callable) -> None:
    """Make the loaded module ``name`` callable as ``function``.

    >>> import symgrad
    >>> symgrad.parse("x*y"), symgrad.parse.ParseError.__name__
    (x*y, 'ParseError')
    """
    module = sys.modules[name]
    module.__class__ = CallableModule
    module._symgrad_function = function
    module.__signature__ = inspect.signature(function)
    # help(sg.compile) shows the function first: its signature and docstring, then the module's
    doc = inspect.cleandoc(function.__doc__ or "")
    head = f"{name.rpartition('.')[2]}{module.__signature__}"
    module.__doc__ = f"{head}\n\n{doc}\n\n(The module {name}: {module.__doc__})"
