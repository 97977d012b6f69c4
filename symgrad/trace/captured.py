"""Captured values: what a traced function reads besides its arguments, checked before each call."""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import types
import warnings
import weakref
from typing import Any

import numpy as np

# ---- captured values: what fn reads besides its arguments, checked before each call ----
# NumPy arrays have no version counter, and a value fn reads from a global, a closure cell or an
# attribute can reach the formulas through NumPy code the tracer never sees (d.mean() is a number by
# the time it meets a traced value), so no captured value can simply be read afresh at each call.
# A trace records instead, after fn ran, the bindings fn's code can read (the names its code objects
# use, followed through the helpers, objects and containers they lead to) and the contents of the
# arrays among them or met by the tracer; each call checks them first, and a change traces again.

_LIBRARIES = frozenset({"numpy", "scipy", "symgrad", "numba", "llvmlite", "sympy", "jax", "torch", "pandas",
                        *sys.stdlib_module_names})  # (no user state to follow in these)
_IMMUTABLE = (int, float, complex, str, bytes, np.generic, type(None))  # rebound to an equal value: unchanged
_VALUES = (*_IMMUTABLE, np.ndarray, list, dict, tuple)  # watched wherever they come from
FOLLOWED_MAX = 256  # functions and objects followed per trace (past that: a warning, nothing silent)
ITEMS_MAX = 4096  # container items followed per trace
BYTES_MAX = 1 << 16  # arrays up to this size are compared through tobytes (0.2 us), larger ones as integers
_MISSING = object()

WRAPPERS: list[type] = []  # symgrad's callables whose fn is the user's function (Function, Batched register)


def _item(holder: Any, key: Any) -> Any:  # a global, a module's or a dict's entry
    return holder.get(key, _MISSING)


def _cell(holder: Any, key: Any) -> Any:  # a closure cell (key: its name, unused)
    try:
        return holder.cell_contents
    except ValueError:  # not yet bound
        return _MISSING


def _attribute(holder: Any, key: str) -> Any:
    return getattr(holder, key, _MISSING)


def _rebound(read: Any, holder: Any, key: Any, seen: Any) -> Any:
    """A check: whether ``read(holder, key)`` is no longer ``seen`` (an equal number or string counts
    as the same, and is what the next check compares by identity)."""
    def changed() -> bool:
        nonlocal seen
        now = read(holder, key)
        if now is seen:
            return False
        if type(now) is type(seen) and isinstance(now, _IMMUTABLE) and now == seen:
            seen = now
            return False
        return True
    return changed


def _resized(container: Any) -> Any:
    """A check: whether a list's or dict's entries were replaced, added or removed (by identity)."""
    keys = list(container) if isinstance(container, dict) else None
    values = list(container.values()) if keys is not None else list(container)

    def changed() -> bool:
        if len(container) != len(values):
            return True
        now = container.values() if keys is not None else container
        return not all(map(operator.is_, now, values)) or keys is not None and list(container) != keys
    return changed


def _bits(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes as integers (NaNs and signed zeros compare as what they are)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    return flat.view(np.uint64 if a.itemsize % 8 == 0 else np.uint8)


def _rewritten(a: np.ndarray, snapshot: np.ndarray | None) -> Any:
    """A check: whether array ``a`` now differs from its values when traced (``snapshot``: a copy taken
    then, else its values now). ``a`` is held weakly: once it is gone nothing can change it."""
    ref, shape, dtype = weakref.ref(a), a.shape, a.dtype
    small = a.nbytes <= BYTES_MAX
    source = a if snapshot is None else snapshot
    before = source.tobytes() if small else _bits(source.copy() if snapshot is None else snapshot)

    def changed() -> bool:
        now = ref()
        if now is None:
            return False
        if now.shape != shape or now.dtype != dtype:
            return True
        return now.tobytes() != before if small else not np.array_equal(_bits(now), before)
    return changed


@functools.lru_cache(maxsize=1024)
def _code_names(code: types.CodeType) -> frozenset:
    """The global and attribute names a code object and the code nested in it (lambdas,
    comprehensions, inner functions) use."""
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(names)


def _library(v: Any) -> bool:
    """Whether ``v`` (a module, function, class or object) belongs to a library: no user state in it."""
    if isinstance(v, types.ModuleType):
        module = v.__name__
    elif isinstance(v, type | types.FunctionType | types.BuiltinFunctionType):
        module = getattr(v, "__module__", None) or ""
    else:
        module = type(v).__module__
    return module.partition(".")[0] in _LIBRARIES


class Captures:
    """The checks of one trace, built by following fn's bindings (a worklist, no recursion)."""

    def __init__(self) -> None:
        self.wrappers = tuple(WRAPPERS)  # symgrad's callables: the user's function is their fn
        self.checks: list = []
        self.todo: list[tuple[Any, frozenset]] = []  # (a value, the names the code reading it uses)
        self.done: dict[Any, Any] = {}  # what was followed (functions, objects, containers, bindings)
        self.names: dict[int, frozenset] = {}  # an object's id -> the attribute names followed in it
        self.used: set[str] = set()  # every name the code followed uses
        self.budget, self.items, self.incomplete = FOLLOWED_MAX, ITEMS_MAX, False

    def build(self, functions: list, statics: list, met: list) -> tuple:
        """The checks for the arrays the tracer met that still exist (first: a rolled one's copy is the
        snapshot), fn and the functions called while tracing, and static arguments (read by names any of
        that code uses)."""
        for ref, snapshot in met:
            if (a := ref()) is not None:
                self._array(a, snapshot)
        self.todo.extend((f, frozenset()) for f in functions)
        self._run()
        self.todo.extend((v, frozenset(self.used)) for v in statics)
        self._run()
        if self.incomplete:
            warnings.warn(f"tracing follows at most {FOLLOWED_MAX} functions and objects and {ITEMS_MAX} "
                          "container items the function reads; changes past those are not seen: pass such "
                          "values as arguments", stacklevel=6)
        return tuple(self.checks)

    def _run(self) -> None:
        while self.todo:
            self._inside(*self.todo.pop())

    def _first(self, key: Any, obj: Any) -> bool:
        """Whether ``key`` is met the first time (``obj`` is held meanwhile: ids are not reused)."""
        if key in self.done:
            return False
        self.done[key] = obj
        return True

    def _inside(self, v: Any, names: frozenset) -> None:
        """Watch what is inside ``v``: an array's contents, a container's entries, a function's bindings."""
        if isinstance(v, np.ndarray):
            self._array(v, None)
        elif isinstance(v, _IMMUTABLE):
            return
        elif isinstance(v, list | dict | tuple):
            self._container(v, names)
        elif isinstance(v, functools.partial):
            self.todo.extend((u, names) for u in (v.func, *v.args, *v.keywords.values()))
        elif isinstance(v, types.MethodType):
            self._code(v.__func__, v.__self__)
        elif isinstance(v, types.FunctionType):
            self._code(v, None)
        elif isinstance(v, self.wrappers):
            self.todo.append((v.fn, names))
        elif not _library(v):
            self._attributes(v, names)
            call = inspect.getattr_static(type(v), "__call__", None)
            if not isinstance(v, type | types.ModuleType) and isinstance(call, types.FunctionType):
                self._code(call, v)

    def _array(self, a: np.ndarray, snapshot: np.ndarray | None) -> None:
        if self._first(("array", id(a)), a):
            self.checks.append(_rewritten(a, snapshot))

    def _container(self, c: Any, names: frozenset) -> None:
        if not self._first(("container", id(c)), c):
            return
        if not isinstance(c, tuple):
            self.checks.append(_resized(c))
        values = list(c.values()) if isinstance(c, dict) else list(c)
        take = min(len(values), self.items)
        self.incomplete |= take < len(values)
        self.items -= take
        self.todo.extend((u, names) for u in values[:take])

    def _spend(self) -> bool:
        self.budget -= 1
        self.incomplete |= self.budget < 0
        return self.budget >= 0

    def _code(self, func: types.FunctionType, obj: Any) -> None:
        """A function's (or a method's, ``obj`` its self) globals, closure cells, defaults and attributes."""
        if not self._first(("code", id(func), id(obj)), (func, obj)):
            return
        if _library(func):  # symgrad's own wrappers (Function.sum's) close over the user's function
            if func.__module__.startswith("symgrad"):
                self.todo.extend((_cell(c, None), frozenset()) for c in func.__closure__ or ())
            return
        if not self._spend():
            return
        names = _code_names(func.__code__)
        self.used |= names
        g = func.__globals__
        for n in names:
            if n in g:
                self._binding(_item, g, n, g[n], names)
        for n, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            self._binding(_cell, cell, n, _cell(cell, n), names)
        self.todo.extend((v, names) for v in (*(func.__defaults__ or ()), *(func.__kwdefaults__ or {}).values()))
        if obj is not None:
            self._attributes(obj, names)

    def _binding(self, read: Any, holder: Any, key: Any, value: Any, names: frozenset) -> None:
        """Watch ``holder``'s entry ``key`` (now ``value``) and what is inside the value."""
        if isinstance(value, types.ModuleType):  # (a module rebound: not watched)
            if not _library(value):
                self.todo.append((value, names))
            return
        if not isinstance(value, _VALUES) and _library(value):
            return  # np.sum, math.log ...
        if self._first(("binding", id(holder), key), holder):
            self.checks.append(_rebound(read, holder, key, value))
            self.todo.append((value, names))

    def _attributes(self, obj: Any, names: frozenset) -> None:
        """The attributes of ``obj`` that ``names`` may read: values watched, methods and properties followed."""
        new = names - self.names.get(id(obj), frozenset())
        if not new or id(obj) not in self.names and not self._spend():
            return
        self.names[id(obj)] = self.names.get(id(obj), frozenset()) | new
        self.done[("object", id(obj))] = obj
        own = getattr(obj, "__dict__", None)
        plain = isinstance(obj, type | types.ModuleType)
        for n in new:
            try:
                found = inspect.getattr_static(obj, n)
            except AttributeError:
                continue
            if plain or own is not None and n in own:
                self._binding(_attribute, obj, n, found, names)
            elif isinstance(found, property):
                if found.fget is not None:
                    self.todo.append((types.MethodType(found.fget, obj), names))
            elif isinstance(found, staticmethod | classmethod):
                self.todo.append((found.__func__, names))
            elif isinstance(found, types.FunctionType):
                self._code(found, obj)  # a method
            elif isinstance(found, types.MemberDescriptorType) or not hasattr(type(found), "__get__"):
                self._binding(_attribute, obj, n, getattr(obj, n, _MISSING), names)  # a slot, a class's value


