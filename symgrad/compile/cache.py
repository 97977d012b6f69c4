"""The on-disk cache of Numba machine code, and the modules holding the kernels.

A generated module is executed from the text symgrad generated (never imported from a
file: no ``.pyc`` route, nothing read back from disk is run as Python). When the disk
cache is usable, Numba's machine code for its kernels is saved to and loaded from
``<cache dir>/numba-<version>/__pycache__``, stamped with the hash of that text, and the
text itself is written beside it for people to read. Numba's files are pickles, so the
cache directory must be trusted: it is used only when it and every level symgrad uses
below it are real directories (not symbolic links) owned by this user and writable by
nobody else; new ones are created 0o700. Otherwise symgrad falls back to the private
user cache, and failing that compiles in memory, with one warning per process: the cache
is an optimisation, never a requirement. The disk cache is kept under
``$SYMGRAD_CACHE_SIZE`` by evicting the least recently used programs.

Machine code Numba has compiled is never freed (LLVM's MCJIT keeps it until the process
exits, numba/numba#5976), so at most ``$SYMGRAD_MAX_PROGRAMS`` programs are compiled with
Numba in one process; ``has_room`` tells the caller when to use the VM instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import llvmlite.binding
import numba
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    IndexDataCacheFile,
    _CacheLocator,
)
from numba.core.registry import CPUDispatcher

from symgrad.util.progress import phase

# LLVM 21 and later (llvmlite 0.50 has 22) can abort the whole process on an assertion in LoopPeel
# ("when peeling the last iteration ... can only peel a single iteration") for a loop whose last
# iterations each settle a compare, which guarded reads make (a gradient gathered from slices of a
# parameter vector, inside a loop with a reduction: found in a scan's gradient). Peeling at most one
# iteration never reaches it; one-dimensional loops run their guarded boundary iterations apart
# (loop_ranges._partition), so LLVM has nothing to peel there.
if llvmlite.binding.llvm_version_info >= (21,):
    llvmlite.binding.set_option("symgrad", "--unroll-peel-max-count=1")
# LLVM vectorises no loop of a known trip count under 16: a layer of 14 units (GradBench's LSTM)
# ran its loops one element at a time, fastmath's select-only exp at 7.2 ns an element (2.6 from 4).
llvmlite.binding.set_option("symgrad", "--vectorizer-min-trip-count=4")

# Modules loaded in this process, held strongly: their machine code stays in memory anyway.
_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.RLock()  # held briefly: never while Numba compiles (a background compile would stall all)
_COMPILING: dict[str, threading.RLock] = {}  # a module's name -> held while one of its kernels compiles
DEFAULT_SIZE = 256 * 2**20
DEFAULT_MAX_PROGRAMS = 256
_EVICT_EVERY = 32  # new entries written by this process between two eviction passes
STALE_BUILD = 3600  # seconds past which a C build folder left behind is removed (a build times out at 600)


def _after_fork() -> None:
    global _LOCK
    _LOCK = threading.RLock()  # a thread of the parent may have held it at the fork
    for name in _COMPILING:
        _COMPILING[name] = threading.RLock()


os.register_at_fork(after_in_child=_after_fork)


class _State:
    """Where the cache lives for this process (worked out once per setting) and what it warned."""

    def __init__(self) -> None:
        self.setting: tuple | None = None
        self.folder: Path | None = None
        self.warned: set[str] = set()
        self.written = 0


_STATE = _State()


def warn_once(kind: str, message: str) -> None:
    """Warn ``message`` (a RuntimeWarning) the first time this process meets ``kind``."""
    if kind not in _STATE.warned:
        _STATE.warned.add(kind)
        warnings.warn(f"symgrad: {message}", RuntimeWarning, stacklevel=2)


def _euid() -> int:
    return os.geteuid()


def _candidates() -> list[Path]:
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "symgrad"
    chosen = os.environ.get("SYMGRAD_CACHE_DIR")
    return [Path(chosen), user] if chosen and Path(chosen) != user else [user]


def refused(path: Path) -> str | None:
    """Why the directory ``path`` cannot hold a trusted cache (creating it 0o700 if missing), or None.

    >>> import tempfile, pathlib
    >>> refused(pathlib.Path(tempfile.mkdtemp()) / "cache") is None
    True
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except (OSError, ValueError) as e:
        return f"it cannot be created ({getattr(e, 'strerror', None) or e})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != _euid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {_euid()})"
    if st.st_mode & 0o022:
        return f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "it is not writable"
    return None


def cache_dir() -> Path | None:
    """The checked folder this process keeps machine code in, or None (compiling in memory).

    ``$SYMGRAD_CACHE_DIR`` if it can be trusted, else the user cache folder
    (``$XDG_CACHE_HOME/symgrad`` or ``~/.cache/symgrad``), with one warning.

    >>> folder = cache_dir()
    >>> folder is None or folder.name.startswith("numba-")
    True
    """
    setting = (os.environ.get("SYMGRAD_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"))
    with _LOCK:
        if setting != _STATE.setting:
            _STATE.setting, _STATE.folder = setting, _checked_folder()
        return _STATE.folder


_HINT = (" (a cache directory must be yours alone: delete it, or chmod 700 it if you trust its contents; "
         "see docs/security.md)")


def _checked_folder() -> Path | None:
    reasons = []
    for root in _candidates():
        folder = root / f"numba-{numba.__version__}"
        why = next(((p, r) for p in (root, folder, folder / "__pycache__") if (r := refused(p))), None)
        if why is None:
            if reasons:
                warn_once("dir", f"not using the cache directory {reasons[0]}; using {root} instead{_HINT}")
            return folder
        reasons.append(f"{str(why[0])[:200]!r}: {why[1]}")
    warn_once("dir", f"no usable cache directory ({'; '.join(reasons)}); compiling in memory{_HINT}")
    return None


def _unusable(error: OSError) -> None:
    """A write into the cache failed (read-only, full disk, ...): memory from now on."""
    warn_once("io", f"the disk cache at {_STATE.folder} failed ({error}); compiling in memory from now on")
    _STATE.folder = None


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def has_room(name: str) -> bool:
    """Whether module ``name`` is loaded, or one more fits under ``$SYMGRAD_MAX_PROGRAMS``.

    >>> has_room("k_not_loaded") == (len(_LOADED) < max_programs())
    True
    """
    return name in _LOADED or len(_LOADED) < max_programs()


def max_programs() -> int:
    """How many generated modules one process loads at most (``$SYMGRAD_MAX_PROGRAMS``, default 256).

    >>> max_programs() >= 1
    True
    """
    return int(_size_setting("SYMGRAD_MAX_PROGRAMS", DEFAULT_MAX_PROGRAMS, units=False))


def size_limit() -> int:
    """The disk cache's size limit in bytes: ``$SYMGRAD_CACHE_SIZE`` (``500M``, ``2G``, bytes), default 256 MiB.

    >>> size_limit() > 0
    True
    """
    return _size_setting("SYMGRAD_CACHE_SIZE", DEFAULT_SIZE, units=True)


def _size_setting(name: str, default: int, units: bool) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    m = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?" if units else r"(\d+)", text, re.IGNORECASE)
    if not m or int(m[1]) < 1:
        what = "a size such as 500M or 2G" if units else "a positive integer"
        raise ValueError(f"${name}: expected {what}, got {text[:40]!r}")
    scale = 2 ** (10 * "KMG".find(m[2].upper()) + 10) if units and m[2] else 1
    return int(m[1]) * scale


def load(name: str, text: str) -> ModuleType:
    """The module ``name`` executed from ``text``, its kernels cached on disk when the cache is usable.

    >>> mod = load("doc_example", "def f():\\n    return 42\\n")
    >>> mod.f()
    42
    """
    with _LOCK:
        if name not in _LOADED:
            _LOADED[name] = _load(name, text)
            _COMPILING[_LOADED[name].__name__] = threading.RLock()
        return _LOADED[name]


def _load(name: str, text: str) -> ModuleType:
    folder = cache_dir()
    path = None if folder is None else folder / f"{name}.py"
    if path is not None:
        try:
            _store(path, text)
        except OSError as e:
            _unusable(e)
            path = None
    mod = ModuleType(f"symgrad._generated.{name}")
    mod.__file__ = str(path) if path else f"<symgrad {name}>"
    code = compile(text, mod.__file__, "exec")
    with _registered(mod):
        exec(code, mod.__dict__)  # noqa: S102 - symgrad's own generated text, never read back from disk
    if path is not None:
        stamp = hashlib.sha256(text.encode()).digest()
        for value in list(mod.__dict__.values()):
            if isinstance(value, CPUDispatcher):
                value._cache = _DiskCache(value.py_func, str(path.parent / "__pycache__"), name, stamp)
    return mod


def _store(path: Path, text: str) -> None:
    """Write the text for people to read (and tracebacks); mark the entry used for eviction."""
    try:
        same = path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        same = False
    if same:
        try:
            os.utime(path)
        except OSError:
            pass
        return
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"{path} is a directory")
    _write_atomic(path, text)
    wrote(path.parent)


def wrote(folder: Path) -> None:
    """Count one more file written to the cache ``folder`` (or to its C objects beside it): every
    ``_EVICT_EVERY`` files, a pass evicting the least recently used past ``$SYMGRAD_CACHE_SIZE``.

    >>> import tempfile, pathlib
    >>> wrote(pathlib.Path(tempfile.mkdtemp()))
    """
    _STATE.written += 1
    if _STATE.written % _EVICT_EVERY == 1:
        evict(folder, size_limit())


@contextlib.contextmanager
def _registered(mod: ModuleType) -> Iterator[None]:
    """Numba finds a function's module through sys.modules while it compiles or loads
    from its cache; the entry is there only then, so that sys.modules does not grow."""
    sys.modules[mod.__name__] = mod
    try:
        yield
    finally:
        sys.modules.pop(mod.__name__, None)


class _Locator(_CacheLocator):
    """Numba's files for one generated module: in the checked folder, stamped by the text's hash."""

    def __init__(self, folder: str, stamp: bytes, lineno: int) -> None:
        self._folder, self._stamp, self._lineno = folder, stamp, lineno

    def ensure_cache_path(self) -> None:
        if not os.path.isdir(self._folder):
            raise FileNotFoundError(f"the cache folder {self._folder} is gone")

    def get_cache_path(self) -> str:
        return self._folder

    def get_source_stamp(self) -> bytes:
        return self._stamp

    def get_disambiguator(self) -> str:
        return str(self._lineno)


class _Impl(CompileResultCacheImpl):
    def __init__(self, py_func: Any, folder: str, name: str, stamp: bytes) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._locator = _Locator(folder, stamp, self._lineno)
        self._filename_base = self.get_filename_base(f"{name}.{py_func.__qualname__}", sys.abiflags)


class _DiskCache(FunctionCache):
    """Numba's function cache kept in symgrad's folder; unreadable entries are recompiled and
    rewritten, and a failing disk turns caching off instead of failing the compile."""

    def __init__(self, py_func: Any, folder: str, name: str, stamp: bytes) -> None:
        self._name, self._py_func = repr(py_func), py_func
        self._impl = _Impl(py_func, folder, name, stamp)
        self._cache_path = folder
        self._cache_file = IndexDataCacheFile(folder, self._impl.filename_base, stamp)
        self.enable()

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception:  # a truncated or foreign entry: compile, and the save replaces it
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            try:
                super().save_overload(sig, data)
            except OSError:
                raise
            except Exception:  # an unreadable index: start it afresh
                self.flush()
                super().save_overload(sig, data)
        except OSError as e:
            self.disable()
            with _LOCK:
                if _STATE.folder is not None:
                    _unusable(e)


def indexed(name: str) -> bool:
    """Whether module ``name`` has any kernel in the disk cache (an index file under its name):
    where not, nothing is loaded to find out.

    >>> indexed("k_never_compiled")
    False
    """
    folder = cache_dir()
    if folder is None or name in _LOADED:
        return folder is not None
    prefix = f"{name}."
    try:
        with os.scandir(folder / "__pycache__") as entries:
            return any(e.name.startswith(prefix) and e.name.endswith(".nbi") for e in entries)
    except OSError:
        return False


def on_disk(module: ModuleType, name: str) -> bool:
    """Whether kernel ``name`` of ``module`` (from ``load``) has machine code in the disk cache:
    compiling it is then a quick load.

    >>> mod = load("doc_on_disk", "import numba\\n\\n@numba.njit\\ndef f(x):\\n    return x\\n")
    >>> on_disk(mod, "f") in (True, False)
    True
    """
    cache = getattr(getattr(module, name), "_cache", None)
    return isinstance(cache, _DiskCache) and os.path.exists(cache._cache_file._index_path)


def typed(module: ModuleType, name: str, signature: tuple) -> Any:
    """Kernel ``name`` of ``module``, compiled (or loaded from disk) for ``signature`` only.

    The dispatcher is then frozen: other argument types raise TypeError instead of
    compiling a new specialisation; callers catch that and convert their arguments.

    >>> mod = load("doc_typed", "import numba\\n\\n@numba.njit\\ndef f(x):\\n    return x + 1.0\\n")
    >>> typed(mod, "f", (numba.float64,))(1.0)
    2.0
    """
    dispatcher = getattr(module, name)
    with _COMPILING.get(module.__name__, _LOCK):
        if not getattr(dispatcher, "_symgrad_frozen", False):
            with _registered(module), phase(f"Numba compiling the {name!r} kernel (once: cached on disk)"):
                dispatcher.compile(signature)
            dispatcher.disable_compile()
            dispatcher._symgrad_frozen = True
    return dispatcher


def evict(folder: Path, limit: int) -> int:
    """Delete the least recently used programs in ``folder`` (and the C objects beside a Numba cache
    folder) until they hold at most ``limit`` bytes.

    One process evicts at a time (a lock file); the others skip the pass. A program being
    loaded elsewhere while its files go is recompiled there. Returns the bytes freed.

    >>> import tempfile, pathlib
    >>> evict(pathlib.Path(tempfile.mkdtemp()), 1)
    0
    """
    try:
        import fcntl

        with open(folder / ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return 0  # another process is evicting
            return _evict(folder, limit)
    except (OSError, ImportError):
        return 0


def _evict(folder: Path, limit: int) -> int:
    entries: dict[str, list] = {}  # program name -> [last used, bytes, files]
    objects: Any = ()
    if folder.name.startswith("numba-"):  # (c_backend's objects and build folders beside it)
        objects = folder.parent.glob("c/*.so")
        _drop_stale_builds(folder.parent / "c")
    for path in (*folder.glob("*.py"), *folder.glob("__pycache__/*"), *objects):
        try:
            st = path.lstat()
        except OSError:
            continue
        entry = entries.setdefault(path.name.split(".", 1)[0], [0.0, 0, []])
        entry[0] = max(entry[0], st.st_mtime)
        entry[1] += st.st_size
        entry[2].append(path)
    total = sum(e[1] for e in entries.values())
    freed = 0
    for _, size, files in sorted(entries.values(), key=lambda e: e[0]):
        if total - freed <= limit:
            break
        for path in sorted(files, key=lambda p: p.suffix != ".nbi"):  # the index first
            try:
                path.unlink()
            except OSError:
                pass
        freed += size
    return freed


def _drop_stale_builds(folder: Path) -> None:
    """Remove C build folders (``build-*``) untouched for ``STALE_BUILD`` seconds: their process was killed
    mid-build (SIGTERM runs no exit hook) and nobody else would remove them."""
    now = time.time()
    for path in folder.glob("build-*"):
        with contextlib.suppress(OSError):
            if now - path.lstat().st_mtime > STALE_BUILD:
                shutil.rmtree(path, ignore_errors=True)
