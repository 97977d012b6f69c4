"""The on-disk cache of generated modules, so Numba's ``cache=True`` works across processes.

A generated module is written to ``<cache dir>/<name>.py`` (the name carries the program's
structural hash) and imported from that file: Numba then stores the machine code beside it
in ``__pycache__`` and a second process loads it instead of compiling. Writes go to a
temporary file renamed into place (atomic), an existing file is used only if its text is
exactly the text wanted (a partial or corrupt file is rewritten), and a corrupt Numba
cache entry is dropped and recompiled.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numba

# Modules loaded in this process, held weakly: the Compiled objects using one keep it alive.
_LOADED: weakref.WeakValueDictionary[str, ModuleType] = weakref.WeakValueDictionary()
_LOCK = threading.RLock()


def cache_dir() -> Path:
    """Where generated modules live: ``$SYMGRAD_CACHE_DIR``, else the user's cache folder.

    >>> cache_dir().is_dir() or not cache_dir().exists()
    True
    """
    if os.environ.get("SYMGRAD_CACHE_DIR"):
        return Path(os.environ["SYMGRAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "symgrad"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def load(name: str, text: str) -> ModuleType:
    """Import the module ``name`` with source ``text`` from the cache directory.

    >>> mod = load("doc_example", "def f():\\n    return 42\\n")
    >>> mod.f()
    42
    """
    with _LOCK:
        return _LOADED.get(name) or _load(name, text)


def _load(name: str, text: str) -> ModuleType:
    folder = cache_dir() / f"numba-{numba.__version__}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if _read(path) != text:
        _write_atomic(path, text)
    spec = importlib.util.spec_from_file_location(f"symgrad._generated.{name}", path)
    mod = importlib.util.module_from_spec(spec)
    with _registered(mod):
        spec.loader.exec_module(mod)
    _LOADED[name] = mod
    return mod


@contextmanager
def _registered(mod: ModuleType) -> Iterator[None]:
    """Numba finds a function's module through sys.modules while it compiles or loads
    from its cache; the entry is there only then, so that sys.modules does not grow."""
    sys.modules[mod.__name__] = mod
    try:
        yield
    finally:
        sys.modules.pop(mod.__name__, None)


def typed(module: ModuleType, name: str, signature: tuple) -> Any:
    """Kernel ``name`` of ``module``, compiled (or loaded from disk) for ``signature`` only.

    The dispatcher is then frozen: other argument types raise TypeError instead of
    compiling a new specialisation; callers catch that and convert their arguments.

    >>> mod = load("doc_typed", "import numba\\n\\n@numba.njit\\ndef f(x):\\n    return x + 1.0\\n")
    >>> typed(mod, "f", (numba.float64,))(1.0)
    2.0
    """
    dispatcher = getattr(module, name)
    with _LOCK:
        if not getattr(dispatcher, "_symgrad_frozen", False):
            with _registered(module):
                _compile(dispatcher, signature)
            dispatcher.disable_compile()
            dispatcher._symgrad_frozen = True
    return dispatcher


def _compile(dispatcher: Any, signature: tuple) -> None:
    try:
        dispatcher.compile(signature)
    except Exception as first:
        # A corrupt or foreign Numba cache entry: drop this function's index and compile.
        cache = getattr(dispatcher, "_cache", None)
        if cache is None:
            raise
        try:
            cache.flush()
        except OSError:
            raise first from None
        dispatcher.compile(signature)
