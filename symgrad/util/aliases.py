"""Public module names for modules that live elsewhere in the package (``symgrad.numpy`` is
``symgrad.ports.numpy``): an import of the public name gives the module itself, loaded on first use, so
an alias costs nothing until used (``symgrad.scipy.special`` imports SciPy's special functions, 55 ms)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any


class Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import hook: each public name in ``names`` (a dict public -> real module name) imports the real
    module and answers with it (one module object under both names, not a second copy).

    >>> hook = Aliases({"symgrad.example_alias": "symgrad.util.pytree"})
    >>> hook.install()
    >>> import symgrad.example_alias as m, symgrad.util.pytree as p
    >>> m is p
    True
    >>> sys.meta_path.remove(hook)
    """

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.names else None

    def create_module(self, spec: Any) -> ModuleType:
        return importlib.import_module(self.names[spec.name])  # (its own __name__ and __spec__ are kept)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the real module ran when it was imported."""
