"""Function-level API: trace a Python function with symbolic arguments, differentiate, compile.

``sg.jit``, ``sg.grad``, ``sg.value_and_grad``, ``sg.jacobian``, ``sg.hessian`` and
``sg.hvp`` return a ``Function``; ``sg.jvp`` and ``sg.vjp`` apply at once. The first
call with given argument shapes calls ``fn`` once on symbolic arguments (an expression for
each float, a ``SymArray`` of variables for each array, leaf by
leaf through tuples, lists and dicts: JAX's pytrees), differentiates what ``fn`` returns
and compiles the result; later calls with those shapes go straight to the compiled kernel.

Conventions follow JAX: ``argnums`` (an int or a tuple, negative counts from the end) picks
the differentiated arguments and derivatives come in their structure; ``has_aux=True``
returns a second output undifferentiated. The other arguments are data: traced as
parameters, so new values need no recompile. Arguments named in ``static_argnums`` /
``static_argnames`` are passed to ``fn`` as they are and a new value traces again.

Transforms compose as in JAX. Called with symbolic arguments (inside another transform's
trace), a ``Function`` traces ``fn`` on fresh variables, differentiates, and puts the
caller's expressions in place of those variables: ``sg.grad(sg.grad(f))`` is the second
derivative, and a closure over the outer function's variables is differentiated correctly.

Given expressions instead of a function, the same names are the symbolic operations:
``sg.grad(f, wrt)`` is the gradient formula, ``sg.hessian(f, wrt, sparse=True)`` the sparse
Hessian's formulas.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import operator
import os
import sys
import threading
import types
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from symgrad import distributed, guards, pytree
from symgrad.compile import function as compiled
from symgrad.expr import diff as symbolic
from symgrad.expr import ndarrays, ops, rolled
from symgrad.expr.build import Var
from symgrad.expr.functions import SymArray, wrap
from symgrad.expr.node import Expr, TracingError, paused_gc
from symgrad.expr.printing import format as format_exprs
from symgrad.expr.sparsity import SparseExprs, sparse_hessian, sparse_jacobian
from symgrad.expr.traverse import as_expr_list, count_nodes, object_array, substitute, topo_order

MAX_TRACES = 32  # argument signatures remembered per function (oldest dropped first)
MAX_BRANCHES = 8  # traces kept per signature, one per way Python control flow on traced values went
# Where an array argument has at least this many elements, array arguments trace as rolled arrays
# (sg.array), under the transforms that take them; smaller problems element by element
# (straight-line code is the faster at that size).
ROLLED_MIN = 64
# A rolled trace of at least NESTS_MIN scalar nodes whose elements number at most UNROLLED_MAX is
# traced element by element instead: a Python loop over short arrays (an RNN's time steps over a
# hidden state of 8) makes thousands of loop nests of a few iterations each, too many for Numba to
# compile quickly and slow on the loop VM (the rnn example: 18 ms a call rolled, 0.5 ms unrolled).
NESTS_MIN, UNROLLED_MAX = 500, 10**5
_F64, _OBJECT = np.dtype(np.float64), np.dtype(object)
_SYMBOLIC = object()  # a signature marker: the argument holds expressions (we are inside another trace)
_OTHER = object()  # a signature marker: bools, strings or other objects, static where not differentiated
_DASK = object()  # a signature marker: a Dask array (rows in chunks: never traced, handed to symgrad.distributed)
_fresh = itertools.count(1)  # distinct variable names for each trace inside another trace


class _Tracing(threading.local):
    """How many traces this thread is inside (a Function called there returns expressions), and the
    functions called in the outermost one (whose captured values it must watch too)."""

    depth = 0
    called: list = []


_tracing = _Tracing()

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
RETRACES_NOTE = 8  # retraces (changed captured values, new branches) before one warning says why
_MISSING = object()


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


class _Captures:
    """The checks of one trace, built by following fn's bindings (a worklist, no recursion)."""

    def __init__(self) -> None:
        from symgrad.batched import Batched  # (batched.py builds on this module)

        self.wrappers = (Function, Batched)  # symgrad's callables: the user's function is their fn
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


@dataclass
class _Slot:
    """One traced argument: its tree structure, each leaf's shape and dtype, and its symbolic leaves."""

    treedef: Any
    shapes: list[tuple]
    dtypes: list[Any]  # a float dtype to return derivatives in (float32 ...), or None for float64
    syms: list[Any]  # an Expr or a SymArray of variables per leaf
    integer: list[Expr]  # the rolled leaves of an integer dtype (they may index other arrays)

    def variables(self) -> list[Expr]:
        return [v for s in self.syms for v in as_expr_list(s)]


def _leaf_info(leaf: Any, who: str, name: str) -> tuple[tuple, Any]:
    """(shape, dtype to return derivatives in) of a leaf, or a TypeError naming it."""
    if isinstance(leaf, Expr):
        return leaf.shape, None
    if isinstance(leaf, np.ndarray) and leaf.dtype == object:
        if not _is_symbolic(leaf):  # (an object array of numbers: traced as their float64 values, as NumPy would)
            try:
                leaf.astype(float)
            except (TypeError, ValueError):
                raise TypeError(f"{who}: argument {name!r} is an object array holding neither numbers nor "
                                "symgrad expressions") from None
        return leaf.shape, None
    arr = np.asarray(leaf) if isinstance(leaf, np.ndarray | np.generic | int | float) else None
    if isinstance(leaf, int) and arr.dtype.kind == "O":  # beyond int64
        try:
            arr = np.asarray(float(leaf))
        except OverflowError:
            raise ValueError(f"{who}: argument {name!r} = {str(leaf)[:30]}... is too large for a float64") \
                from None
    if arr is None or arr.dtype.kind not in "biuf":
        kind = "complex" if arr is not None and arr.dtype.kind == "c" or isinstance(leaf, complex) else None
        if kind:
            raise TypeError(f"{who}: argument {name!r} is complex; complex inputs are not supported "
                            "(split it into real and imaginary parts)")
        raise TypeError(f"{who}: argument {name!r} is {type(leaf).__name__}; numbers, arrays of numbers and "
                        "tuples / lists / dicts of them are traced, anything else must be static "
                        "(static_argnums / static_argnames)")
    low = arr.dtype.kind == "f" and arr.dtype != _F64
    return arr.shape, (arr.dtype if low else None)


def _symbolic_leaf(name: str, shape: tuple, indexed: bool = False) -> Any:
    """A variable for a scalar leaf, an array of variables named ``name[i, j]`` for an array, or
    (``indexed``) one rolled array ``sg.array(name, shape)``."""
    if shape == ():
        return Var(name)
    if indexed:
        return rolled.array(name, shape)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = Var(f"{name}[{', '.join(map(str, index))}]")
    return out.view(SymArray)


def _tangent_of(v: Expr) -> Expr:
    """The tangent input of the variable or array ``v`` (hvp's and jvp's direction): ``Δx``."""
    return Var(f"Δ{v.payload}") if v.op.name == "var" else rolled.array(f"Δ{v.payload[0]}", v.shape)


def _is_symbolic(leaf: Any) -> bool:
    return isinstance(leaf, Expr) or isinstance(leaf, np.ndarray) and leaf.dtype == object and \
        any(isinstance(v, Expr) for v in leaf.flat)


def _is_rolled(leaf: Any) -> bool:
    return isinstance(leaf, Expr) and leaf.op.array_valued


def _signature(value: Any, data: bool = False) -> Any:
    """What keys a trace for one argument: its shape, or its tree of leaf shapes and dtypes; ``_OTHER``
    where it holds a Python bool, string or another object (unless ``data``: traced, as numbers)."""
    kind = type(value)
    if kind is np.ndarray and (value.dtype is _F64 or value.dtype == _F64):  # (unpickled: equal, not it)
        return value.shape
    if kind is float or kind is int:
        return ()
    if kind in _PLAIN:
        return () if data else _OTHER
    leaves, treedef = pytree.flatten(value)
    sig = []
    for leaf in leaves:
        if _is_symbolic(leaf):
            return _SYMBOLIC
        if distributed.is_dask(leaf):  # (its key must not find a trace made for NumPy arrays of its shape)
            return _DASK
        if not data and (type(leaf) in _PLAIN or not _is_number(leaf)):
            return _OTHER
        sig.append((np.shape(leaf), getattr(leaf, "dtype", None)))
    return treedef, tuple(sig)


_PLAIN = (bool, str)  # Python values a function uses as flags or names


def _is_number(leaf: Any) -> bool:
    return isinstance(leaf, int | float | complex | np.ndarray | np.generic) or hasattr(leaf, "__array__")


def _auto_static(value: Any, ints: bool) -> bool:
    """Whether an argument is a Python bool or string (or an int, with ``ints``), or a pytree of only
    those or of objects that are no numbers (``self`` of a method, a callable): specialised on its
    value where not differentiated (a flag, a name, a size), as ``static_argnums`` would make it."""
    leaves = pytree.tree_leaves(value)
    return bool(leaves) and all(type(leaf) in _PLAIN or ints and type(leaf) is int or not _is_number(leaf)
                                for leaf in leaves)


def _traced(make: Callable[[], Trace]) -> Trace:
    """``make()``; a TracingError that NumPy's own code turned into a ValueError (converting expressions
    to floats: ``np.asarray(x, dtype=float)``) raised as itself; an error inside SciPy's code as a
    TracingError naming the function and its traced namesake (``_foreign``)."""
    try:
        return make()
    except Exception as e:
        cause = e.__cause__ or e.__context__
        if isinstance(e, ValueError) and isinstance(cause, TracingError):
            raise cause from None
        foreign = _foreign(e)
        if foreign is None:
            raise
        raise foreign from e


TRACED_PORTS = {"scipy": "symgrad.scipy"}  # libraries that compute on numbers -> their traced namesakes


def _foreign(e: BaseException) -> TracingError | None:
    """A TracingError for ``e`` raised inside a library of ``TRACED_PORTS`` (SciPy's functions compute on
    numbers; given traced arrays they fail deep inside): which function, where, and what to call instead."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__", "").split(".")[0] not in TRACED_PORTS:
        tb = tb.tb_next
    if tb is None:
        return None
    module, name = tb.tb_frame.f_globals["__name__"], tb.tb_frame.f_code.co_name
    public = ".".join(part for part in module.split(".") if not part.startswith("_"))
    ours = TRACED_PORTS[module.split(".")[0]] + public[public.index("."):] if "." in public else ""
    try:
        has = name in getattr(__import__(ours, fromlist=["_"]), "__all__", ())
    except ImportError:
        has = False
    advice = (f"use {ours}.{name}, its traced form" if has else
              "compute it with NumPy's functions, or give it a derivative with sg.custom_jvp / sg.custom_vjp")
    return TracingError(f"{public}.{name} computes on numbers, not traced arrays ({type(e).__name__}: "
                        f"{str(e)[:120]} at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}): "
                        f"{advice}")


def _int_use(e: Exception) -> bool:
    """Whether tracing may have failed because a traced value was used as a Python integer (a size,
    a range, np.arange(n), np.zeros(n)): then Python ints are traced again as their values."""
    return isinstance(e, TracingError | TypeError)


def _holds_int(values: Any) -> bool:
    return any(type(leaf) is int for leaf in pytree.tree_leaves(values))


def _out_leaves(tree: Any, who: str, indexed: bool = True) -> tuple[list[tuple[list[Expr], tuple]], Any]:
    """What ``fn`` returned: ([(expressions, shape) per leaf], tree structure). Traced element by
    element (not ``indexed``), a rolled array it returns (a scan's ys) comes as its elements."""
    leaves, treedef = pytree.flatten(tree)
    out = []
    for leaf in leaves:
        if not indexed and ndarrays.is_array(leaf):
            leaf = ndarrays.elements(leaf)
        arr = None if isinstance(leaf, Expr) else object_array(leaf)
        if arr is not None and any(ndarrays.is_array(v) for v in arr.ravel()):  # np.array([x, 2 * x]) of arrays
            raise TracingError(f"{who}: the function returned an array of traced arrays (np.array of arrays "
                               "traced rolled): its shape is not NumPy's; use np.stack")
        if arr is not None and not all(isinstance(v, Expr | float | int | np.number) for v in arr.ravel()):
            raise TypeError(f"{who}: the function returned {type(leaf).__name__}; return expressions, numbers, "
                            "arrays of them, or tuples / lists / dicts of those")
        out.append((as_expr_list(leaf), leaf.shape if arr is None else arr.shape))
    return out, treedef


def _pieces(flat: np.ndarray, blocks: list[tuple[tuple, Any]]) -> list:
    """``flat`` cut into blocks of the given (shape, dtype): floats (or expressions) for scalars."""
    out, lo = [], 0
    for shape, dtype in blocks:
        if shape and flat.dtype == object and lo < len(flat) and _is_rolled(flat[lo]):  # a rolled array: one Expr
            out.append(flat[lo])
            lo += 1
            continue
        n = 1
        for d in shape:
            n *= d
        piece = flat[lo:lo + n]
        lo += n
        if shape == ():
            v = piece[0]
            out.append(v if isinstance(v, Expr) else float(v) if dtype is None else dtype.type(v))
        else:
            piece = piece.reshape(shape)
            out.append(wrap(piece) if piece.dtype == object else piece if dtype is None else piece.astype(dtype))
    return out


def _scalar_at(k: int, kind: type, flat: np.ndarray) -> Any:
    if kind is np.int64:
        _exact(flat[k:k + 1])
    return kind(flat[k])


def _block_at(where: slice, shape: tuple, dtype: Any, flat: np.ndarray) -> np.ndarray:
    piece = flat[where] if len(shape) == 1 else flat[where].reshape(shape)
    if dtype is not None and dtype.kind == "i":
        _exact(piece)
    return piece if dtype is None else piece.astype(dtype)


def _exact_input(parts: list, who: str) -> None:
    """An integer argument beyond 2**53 would be rounded on its way into the float64 kernel: refused."""
    for values in parts:
        if values.dtype.kind in "iuO" and values.size and np.max(np.abs(values)) >= 2**53:
            raise OverflowError(f"{who}: an integer argument holds {np.max(np.abs(values))}, beyond 2**53 where "
                                "symgrad's float64 arithmetic is no longer exact")


def _exact(values: np.ndarray) -> None:
    """Integers computed in float64 are exact below 2**53: an integer result beyond is refused."""
    if values.size and not np.max(np.abs(values)) < 2.0 ** 53:
        big = values.flat[np.argmax(np.abs(values))]
        raise OverflowError(f"an integer result {big:.17g} is not exact in symgrad's float64 arithmetic (beyond "
                            "2**53, or an integer // 0): compute it with NumPy, outside the traced function")


def _refuse_fragments(outputs: list[Expr], who: str) -> None:
    """Raise TracingError where rolled arrays cost more than elements (see NESTS_MIN)."""
    nodes = elements = 0
    for node in topo_order(outputs):
        if node.free or node.args and not node.op.array_valued:
            nodes += 1
            elements += math.prod(i.payload[1] for i in node.free)
    if nodes >= NESTS_MIN and elements <= UNROLLED_MAX:
        raise TracingError(f"{who}: {nodes} rolled nodes for {elements} elements (many short loops: a Python "
                           "loop over small arrays) trace faster element by element")


def _blocks(shapes: list[tuple], dtypes: list[Any]) -> list[tuple[tuple, Any]]:
    return list(zip(shapes, dtypes))


class Trace:
    """One traced signature of a ``Function``: its symbolic inputs, formulas and kernel."""

    def __init__(self, owner: Function, args: tuple, kwargs: dict, fresh: bool = False,
                 indexed: bool = False) -> None:
        self.owner, self.indexed = owner, indexed
        who = owner._who
        # Inside another trace fn may close over its variables: names no closure can share.
        tag = f"#{next(_fresh)}" if fresh else ""
        names = owner._names(len(args))
        self.arguments: dict[str, Any] = {}
        self.slots: dict[Any, _Slot] = {}
        self._syms: list = []  # every traced leaf, symbolic, and the value it stands for in this call
        self._values: list = []
        self.floats: list[np.dtype] = []  # the float dtypes of the array arguments (results follow them)
        self.ints: set[Expr] = set()  # the symbols of integer arguments (jit's integer results follow them)
        self.statics: list = []  # static arguments' values (a callable or an object may capture values too)
        sym_args = [self._argument(names[i], i, a, tag, len(args)) for i, a in enumerate(args)]
        sym_kwargs = {k: self._argument(k, k, v, tag, len(args)) for k, v in kwargs.items()}
        self.wrt_keys = owner._wrt_keys(len(args), self.slots)
        self.data_keys = [k for k in self.slots if k not in self.wrt_keys]
        wrt = [self.slots[k] for k in self.wrt_keys]
        self.inputs = [v for s in wrt for v in s.variables()]
        self.params = [v for k in self.data_keys for v in self.slots[k].variables()]
        # The differentiated arguments as one tree: an int argnums is that argument, a tuple a tuple of them.
        self.wrt_shapes = [sh for s in wrt for sh in s.shapes]
        self.wrt_dtypes = [dt for s in wrt for dt in s.dtypes]
        single = isinstance(owner.argnums_spec, int) and owner.rule.wrt == "argnums"
        self.wrt_tree = wrt[0].treedef if single and wrt else (tuple, tuple(s.treedef for s in wrt))
        integer = [sym for slot in self.slots.values() for sym in slot.integer]  # may index other arrays
        outermost = not _tracing.depth
        if outermost:
            _tracing.called = []
        _tracing.called.append(owner.fn)
        _tracing.depth += 1
        try:
            with paused_gc(), ndarrays.capturing() as constants, ndarrays.observing() as met, \
                    ndarrays.integers(integer), guards.deciding(
                        None if fresh else guards.bindings(self._syms, self._values),
                        guards.mapping(self._syms, self._values) if fresh else None) as shadow:
                result = owner.fn(*sym_args, **sym_kwargs)
                self.floats_met = ndarrays.floats_met()
        finally:
            _tracing.depth -= 1
        self.guards = shadow.guards if shadow is not None else []  # conditions decided by this call's values
        self._guard_fn: Any = None
        # What fn read besides its arguments, checked before each call (a nested trace: by the outer one).
        self.watched = _Captures().build(_tracing.called, self.statics, met) if outermost and not fresh else ()
        if constants and fresh:  # (its formulas would read arrays no caller passes)
            raise TracingError(f"{who}: NumPy arrays of constants inside a transform applied to rolled arrays "
                               "outside a trace; pass them as arguments")
        self.constants = list(constants)  # NumPy arrays fn combined with rolled ones: parameters after the data
        self._constant_values = np.concatenate([v.ravel() for v in constants.values()]) if constants else None
        with paused_gc():
            if owner.has_aux:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise TypeError(f"{who}: with has_aux=True the function must return a pair (output, aux), "
                                    f"got {type(result).__name__}")
                result, aux = result
            self.exprs = result
            self.outputs, self.out_tree = _out_leaves(result, who, indexed)
            if indexed and not fresh and not integer:  # (element traces cannot gather through integer arguments)
                _refuse_fragments([e for exprs, _ in self.outputs for e in exprs], who)
            self.aux, self.aux_tree = _out_leaves(aux, f"{who} (aux)") if owner.has_aux else ([], None)
            self.extra = self._extra_variables(tag)
            derived = self._derive(sparse=owner.sparse and not fresh)
            self.flat, self.derivatives, self.blocks, self._structure = derived
        self._plain = [k for k in (*self.wrt_keys, *self.data_keys) if self.slots[k].treedef is pytree.LEAF]
        self._single = len(self.wrt_keys) == 1 and self.wrt_keys[0] in self._plain

    fallback: str | None = None  # why a rolled trace failed, where this one went element by element

    def stale(self) -> bool:
        """Whether a value fn captured (a global, a closure cell, an attribute, an array's contents)
        changed since this trace: the formulas hold the old one."""
        for changed in self.watched:
            if changed():
                return True
        return False

    def _argument(self, name: str, key: Any, value: Any, tag: str, n_args: int) -> Any:
        owner = self.owner
        if owner._static_at(key, value, n_args):
            self.statics.append(value)
            return value
        leaves, treedef = pytree.flatten(value)
        paths = pytree.paths(treedef)
        shapes, dtypes, syms, integer = [], [], [], []
        for leaf, path in zip(leaves, paths):
            try:
                shape, dtype = _leaf_info(leaf, owner._who, name + path)
            except TypeError as e:
                if name != "self" or type(e) is not TypeError:
                    raise
                raise TypeError(f"{e}; of a method, self is argument 0: argnums=1 differentiates the first "
                                "argument after it") from None
            shapes.append(shape)
            dtypes.append(dtype)
            syms.append(_symbolic_leaf(f"{name}{tag}{path}", shape, self.indexed))
            if ndarrays.holds_integers(leaf):
                if isinstance(syms[-1], Expr):
                    integer.append(syms[-1])
                self.ints.update(as_expr_list(syms[-1]))
            if isinstance(leaf, np.ndarray | np.floating) and leaf.dtype.kind == "f":  # (Python floats: weak)
                self.floats.append(leaf.dtype)
        self.slots[key] = _Slot(treedef, shapes, dtypes, syms, integer)
        self._syms += syms
        self._values += leaves
        sym = pytree.unflatten(treedef, syms)
        self.arguments[name] = sym
        return sym

    def _extra_variables(self, tag: str) -> list[Expr]:
        """The vector a transform takes besides fn's arguments: v (hvp), tangents (jvp), cotangents (vjp)."""
        like = self.owner.rule.extra_like
        if like == "wrt":
            return [_tangent_of(v) for v in self.inputs]
        if like == "output":  # a cotangent per output element (per rolled output, an array)
            names = (f"ct{tag}[{i}]" for i in itertools.count())
            return [rolled.array(next(names), shape) if _is_rolled(e) else Var(next(names))
                    for exprs, shape in self.outputs for e in exprs]
        return []

    def _derive(self, sparse: bool) -> tuple[Any, Any, list, Any]:
        """(flat expressions to compile, the derivative part of them, result blocks, blocks -> result)."""
        rule = self.owner.rule
        c = _Outputs(outs=[e for exprs, _ in self.outputs for e in exprs],
                     shapes=[shape for _, shape in self.outputs],
                     aux=[e for exprs, _ in self.aux for e in exprs],
                     aux_blocks=[(shape, None) for _, shape in self.aux],
                     wrt_blocks=_blocks(self.wrt_shapes, self.wrt_dtypes),
                     W=functools.partial(pytree.unflatten, self.wrt_tree),
                     Out=functools.partial(pytree.unflatten, self.out_tree), sparse=sparse)
        if rule.scalar_out and not c.outs:
            raise TypeError(f"{self.owner._who}: the function returned nothing (None: a missing return?); "
                            "it must return one scalar")
        if rule.scalar_out and (len(c.outs) != 1 or c.shapes[0] != ()):
            raise TypeError(f"{self.owner._who}: the function must return one scalar, got shape "
                            f"{', '.join(str(s) for s in c.shapes)}; use sg.jacobian for vector outputs")
        if sparse and self.owner.has_aux:
            raise ValueError(f"{self.owner._who}: has_aux=True is not supported with sparse=True")
        return rule.derive(self, c)

    def _matrix(self, M: np.ndarray, row_shapes: list[tuple], rows_tree: Any, aux: list,
                aux_blocks: list) -> tuple:
        """Blocks of a derivative matrix: rows cut by ``row_shapes``, columns by the wrt leaves."""
        row_cuts = np.cumsum([0, *(int(np.prod(s)) for s in row_shapes)])
        col_cuts = np.cumsum([0, *(int(np.prod(s)) for s in self.wrt_shapes)])
        flat, blocks = [], []
        for a, ra in enumerate(row_shapes):
            for b, (sb, db) in enumerate(zip(self.wrt_shapes, self.wrt_dtypes)):
                flat.extend(M[row_cuts[a]:row_cuts[a + 1], col_cuts[b]:col_cuts[b + 1]].ravel())
                blocks.append((ra + sb, db))
        n_in = len(self.wrt_shapes)
        W = functools.partial(pytree.unflatten, self.wrt_tree)
        nest = lambda p: rows_tree([W(p[a * n_in:(a + 1) * n_in]) for a in range(len(row_shapes))])
        flat = as_expr_list(flat) if flat else []
        return [*flat, *aux], flat, blocks + aux_blocks, self._with_aux(nest, len(blocks))

    def _rolled_matrix(self, rows: list, row_shapes: list, tree: Any, c: _Outputs) -> tuple:
        """Jacobian / Hessian blocks of rolled arrays: ``rows[a][b]``, block (row a, input b): one rolled
        array, or a list of scalars (an output built of scalars, a scalar input)."""
        flat = [e for row in rows for b in range(len(self.inputs)) for e in (
            row[b] if isinstance(row[b], list) else [row[b]])]
        blocks = [(ra + sb, db) for ra in row_shapes for sb, db in zip(self.wrt_shapes, self.wrt_dtypes)]
        n_in = len(self.wrt_shapes)
        nest = lambda p: tree([c.W(p[a * n_in:(a + 1) * n_in]) for a in range(len(row_shapes))])  # noqa: E731
        return [*flat, *c.aux], flat, blocks + c.aux_blocks, self._with_aux(nest, len(blocks))

    def _with_aux(self, structure: Any, n: int) -> Any:
        """JAX's has_aux results: (result, aux), the aux leaves after the first ``n`` blocks."""
        if not self.owner.has_aux:
            return structure
        return lambda p: (structure(p[:n]), self._aux(p[n:]))

    def _aux(self, pieces: list) -> Any:
        return pytree.unflatten(self.aux_tree, pieces)

    def assemble(self, flat: Any) -> Any:
        """The result in its structure, from the flat outputs (floats, or expressions)."""
        if self._structure is None:  # a sparse matrix, as compiled
            return flat
        if flat.dtype is _OBJECT:
            return self._structure(_pieces(flat, self.blocks))
        return self._structure([cut(flat) for cut in self._cuts])

    @functools.cached_property
    def _cuts(self) -> list:
        """For each block, what takes it out of numeric flat outputs (computed once: each call uses them)."""
        cuts, lo = [], 0
        for shape, dtype in self.blocks:
            n = math.prod(shape)
            if shape == ():
                cuts.append(functools.partial(_scalar_at, lo, float if dtype is None else dtype.type))
            else:
                cuts.append(functools.partial(_block_at, slice(lo, lo + n), shape, dtype))
            lo += n
        return cuts

    def explain(self) -> str:
        """One line: the arguments' shapes, the path the trace took (and why), its size, the program."""
        shapes = ", ".join(f"{name}: {self._shapes(k)}" for name, k in zip(self.arguments, self.slots))
        if self.indexed:
            path = "rolled (whole arrays: loops)"
        elif self.fallback is not None:
            path = f"element by element, because {self.fallback}"
        else:
            path = "element by element (arrays under ROLLED_MIN elements)" if any(
                sh for s in self.slots.values() for sh in s.shapes) else "scalars"
        flat = self.flat.exprs if isinstance(self.flat, SparseExprs) else self.flat
        line = f"  {shapes or 'no arguments'} -> {path}, {count_nodes(list(flat))} nodes"
        if "compiled" in self.__dict__:
            c = self.compiled
            kind = "loops" if isinstance(c.program, compiled.LoopProgram) else "a flat program"
            line += f", {kind} on {c.backend}"
        return line

    def _shapes(self, key: Any) -> str:
        shapes = self.slots[key].shapes
        return str(shapes[0]) if self.slots[key].treedef is pytree.LEAF else f"a pytree of {len(shapes)} leaves"

    @functools.cached_property
    def compiled(self) -> compiled.Compiled:
        """The compiled kernel of the flat outputs (built on first use: nested traces never compile)."""
        return compiled.compile(self.flat if isinstance(self.flat, SparseExprs) else object_array(
            list(self.flat)).reshape(-1), self.inputs, [*self.params, *self.constants, *self.extra],
            self.owner.backend)

    def formulas(self) -> str:
        """The traced outputs and their derivatives, every shared subexpression named once."""
        labels: dict[str, Expr] = {}
        for i, (exprs, shape) in enumerate(self.outputs):
            name = f"f{i}" if len(self.outputs) > 1 else "f"
            for index, e in zip(np.ndindex(*shape), exprs):
                labels[f"{name}[{', '.join(map(str, index))}]" if shape else name] = e
        d = self.derivatives
        if d is not None:
            exprs = d.exprs if isinstance(d, SparseExprs) else as_expr_list(d)
            labels.update(zip(self._derivative_labels(len(exprs)), exprs))
        return format_exprs(labels)

    def _derivative_labels(self, n: int) -> list[str]:
        inputs = [str(v) for v in self.inputs]
        label = self.owner.rule.label
        if "{v}" not in label:  # one per output
            return [label.format(i=i) for i in range(n)]
        if "{i}" not in label and "{u}" not in label:  # one per input
            return [label.format(v=v) for v in inputs]
        d = self.derivatives
        if isinstance(d, SparseExprs):
            rows = np.repeat(np.arange(len(d.indptr) - 1), np.diff(d.indptr))
            pairs = zip(rows, d.indices)
        else:
            pairs = (divmod(k, len(inputs)) for k in range(n))
        return [label.format(i=i, u=inputs[i], v=inputs[j]) for i, j in pairs]

    @property
    def source(self) -> str:
        """The generated code of the compiled kernel (or the VM's instruction listing)."""
        return self.compiled.source

    def __call__(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """Run the compiled kernel at fn's arguments (and the transform's vector, ``extra``).

        A trace that decided Python ``if`` / ``while`` conditions by its call's values runs only
        where they come out the same; elsewhere the Function traces the other branch.
        """
        got = self._conditions_at(args, kwargs) if self.guards else None
        if got is not None and not self.holds(got):
            cond, want = next((c, w) for v, (c, w) in zip(got, self.guards) if (v != 0.0) != w)
            raise ValueError(f"{self.owner._who}: this trace took the branch where {cond} is {want}, which it "
                             "is not at these arguments; call the function itself (it traces that branch)")
        return self.run(args, kwargs, extra)

    def run(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """``__call__`` where the caller checked the guards."""
        return self.assemble(self.compiled(*self._vectors(args, kwargs, extra)))

    def run_many(self, args: tuple, kwargs: dict, extras: list) -> list:
        """``run`` at each of ``extras`` (tangents, vectors or cotangents) for the same arguments: one
        batched kernel call, its rows in parallel (a sparse Jacobian's products, a colour each)."""
        vectors = [self._vectors(args, kwargs, extra) for extra in extras]
        if not vectors:
            return []
        x = vectors[0][0]
        got = self.compiled.batch(np.broadcast_to(x, (len(vectors), x.size)), np.stack([p for _, p in vectors]))
        return [self.assemble(row) for row in (zip(*got) if isinstance(got, tuple) else got)]

    def _vectors(self, args: tuple, kwargs: dict, extra: Any) -> tuple[np.ndarray, np.ndarray]:
        """The compiled function's inputs and parameters for these arguments."""
        if self._single:
            key = self.wrt_keys[0]
            x = np.ravel(kwargs[key] if isinstance(key, str) else args[key])
            if self.ints:
                _exact_input([x], self.owner._who)
        else:
            x = self._pack(self.wrt_keys, args, kwargs)
        p = self._pack(self.data_keys, args, kwargs)
        if self.extra or self.constants:
            tail = [] if self._constant_values is None else [self._constant_values]
            vector = [np.ravel(leaf) for leaf in self._extra_values(extra)] if self.extra else []
            p = np.concatenate([p, *tail, *vector])
        return x, p

    def guarded(self, args: tuple, kwargs: dict) -> bool:
        """Whether the conditions decided while tracing come out the same at these arguments."""
        return bool(self.holds(self._conditions_at(args, kwargs)))

    def _conditions_at(self, args: tuple, kwargs: dict) -> np.ndarray:
        return self.conditions(self._pack(self.wrt_keys, args, kwargs), self._params(args, kwargs))

    def conditions(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The guards' conditions at inputs ``x`` and parameters ``p`` (rows of them: one row each)."""
        if self._guard_fn is None:
            conditions = object_array([c for c, _ in self.guards])
            self._guard_fn = compiled.compile(conditions, self.inputs, [*self.params, *self.constants], "vm")
        if np.ndim(p) == 2:
            return self._guard_fn.batch(np.broadcast_to(x, (len(p), len(x))), p).reshape(len(p), -1)
        return np.ravel(self._guard_fn(x, p))

    def holds(self, got: np.ndarray) -> np.ndarray:
        """Which rows of ``conditions`` decide every guard as this trace did."""
        return np.all((got != 0.0) == np.array([want for _, want in self.guards]), axis=-1)

    def _params(self, args: tuple, kwargs: dict) -> np.ndarray:
        p = self._pack(self.data_keys, args, kwargs)
        return p if self._constant_values is None else np.concatenate([p, self._constant_values])

    def _pack(self, keys: list, args: tuple, kwargs: dict) -> np.ndarray:
        if not keys:
            return compiled._EMPTY
        parts = []
        for k in keys:
            value = kwargs[k] if isinstance(k, str) else args[k]
            if k in self._plain:
                parts.append(np.ravel(value))
            else:
                parts.extend(np.ravel(leaf) for leaf in pytree.flatten(value)[0])
        if self.ints:
            _exact_input(parts, self.owner._who)
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else compiled._EMPTY

    def _extra_values(self, extra: Any) -> list:
        """The leaves of v / tangents / cotangent, checked against the structure they must have."""
        what = self.owner.rule.extra
        if self.owner.rule.extra_like == "output":
            tree, shapes = self.out_tree, [s for _, s in self.outputs]
        else:
            tree, shapes = self.wrt_tree, self.wrt_shapes
        leaves, treedef = pytree.flatten(extra)
        if treedef != tree and not (len(shapes) == 1 and treedef is pytree.LEAF):
            raise ValueError(f"{self.owner._who}: {what} must have the structure of "
                             f"{'the output' if what == 'cotangent' else 'the differentiated arguments'}")
        got = [np.shape(leaf) for leaf in leaves]
        if got != shapes:
            raise ValueError(f"{self.owner._who}: {what} has shapes {got}, expected {shapes}")
        return leaves

    def symbolic(self, args: tuple, kwargs: dict, extra: Any) -> Any:
        """The result for symbolic arguments: this trace's formulas with the arguments put in."""
        mapping: dict[Expr, Any] = {}
        for key, slot in self.slots.items():
            value = kwargs[key] if isinstance(key, str) else args[key]
            for sym, leaf in zip(slot.syms, pytree.flatten(value)[0]):
                if _is_rolled(sym):
                    mapping[sym] = _rolled_operand(leaf)
                    continue
                mapping.update(zip(as_expr_list(sym), object_array(leaf).ravel().tolist()))
        if self.extra:
            leaves = self._extra_values(extra)
            if any(map(_is_rolled, self.extra)):  # one rolled array (or variable) per leaf
                mapping.update((e, _rolled_operand(leaf) if _is_rolled(e) else leaf)
                               for e, leaf in zip(self.extra, leaves))
            else:
                values = [v for leaf in leaves for v in object_array(leaf).ravel().tolist()]
                mapping.update(zip(self.extra, values))
        flat = substitute(list(self.flat), mapping) if self.flat else []
        return self._structure(_pieces(object_array(list(flat)).reshape(-1), self.blocks))


@dataclass
class _Outputs:
    """What fn returned, flattened, and how the differentiated arguments and outputs rebuild."""

    outs: list[Expr]
    shapes: list[tuple]
    aux: list[Expr]
    aux_blocks: list
    wrt_blocks: list
    W: Any  # flat pieces -> the differentiated arguments' structure
    Out: Any  # flat pieces -> the output's structure
    sparse: bool


def _rolled_operand(leaf: Any) -> Any:
    """What stands for a rolled array: a rolled value as it is, a concrete array (beside rolled ones:
    a vjp's primal under vmap, a jvp's tangent inside grad) as a constant of the trace outside."""
    return leaf if _is_rolled(leaf) else ndarrays.operand(np.asarray(leaf, dtype=float))


def _result_dtype(t: Trace) -> Any:
    """The dtype of fn's results: NumPy's promotion of the float arrays it was given (float32 arrays
    alone: float32, as JAX's); None for float64."""
    dtype = np.result_type(*t.floats) if t.floats else None
    return None if dtype is None or dtype == _F64 else dtype


def _output_dtype(t: Trace, exprs: list) -> Any:
    """NumPy's dtype of one of jit's results where it is not a float: bool for comparisons, int64 for
    integer arithmetic on integer arguments (computed in float64: exact below 2**53, checked) in a
    function where no float met a traced value (``n * 1.0`` is ``n`` in the graph, a float in NumPy)."""
    bodies = [e.args[0] if e.op.name == "tensor" else e for e in exprs if isinstance(e, Expr)]
    if not bodies or len(bodies) < len(exprs):
        return None
    if all(b.op.name in ops.COMPARISONS for b in bodies):
        return np.dtype(bool)
    if t.ints and not t.floats_met and all(ndarrays.integer_valued(b, t.ints) for b in bodies):
        return np.dtype(np.int64)
    return None


def _jit(t: Trace, c: _Outputs) -> tuple:
    blocks = [(shape, _output_dtype(t, exprs) or _result_dtype(t)) for exprs, shape in t.outputs]
    return c.outs, None, blocks, c.Out


def _grad(t: Trace, c: _Outputs) -> tuple:
    g = symbolic.grad(c.outs[0], t.inputs)
    return [*g, *c.aux], g, c.wrt_blocks + c.aux_blocks, t._with_aux(c.W, len(c.wrt_blocks))


def _value_and_grad(t: Trace, c: _Outputs) -> tuple:
    g = symbolic.grad(c.outs[0], t.inputs)
    n = 1 + len(c.wrt_blocks)
    value_aux = lambda p: ((p[0], t._aux(p[n:])) if t.owner.has_aux else p[0], c.W(p[1:n]))  # noqa: E731
    return [c.outs[0], *g, *c.aux], g, [((), _result_dtype(t)), *c.wrt_blocks, *c.aux_blocks], value_aux


def _hvp(t: Trace, c: _Outputs) -> tuple:
    hv = symbolic.jvp(symbolic.grad(c.outs[0], t.inputs), t.inputs, t.extra)
    return hv, hv, c.wrt_blocks, c.W


def _jvp(t: Trace, c: _Outputs) -> tuple:
    tangents = symbolic.jvp(c.outs, t.inputs, t.extra) if c.outs else []
    blocks, n = [(s, None) for s in c.shapes], len(c.shapes)
    return [*c.outs, *tangents, *c.aux], tangents, blocks * 2 + c.aux_blocks, t._with_aux(
        lambda p: (c.Out(p[:n]), c.Out(p[n:2 * n])), 2 * n)


def _vjp(t: Trace, c: _Outputs) -> tuple:
    total = sum((np.sum(ct * e) if _is_rolled(e) else ct * e for ct, e in zip(t.extra, c.outs)), 0.0)
    g = symbolic.grad(total, t.inputs) if t.inputs else []
    n = len(c.shapes)
    return [*c.outs, *g, *c.aux], g, [(s, None) for s in c.shapes] + c.wrt_blocks + c.aux_blocks, \
        t._with_aux(lambda p: (c.Out(p[:n]), c.W(p[n:])), n + len(c.wrt_blocks))


def _jacobian(t: Trace, c: _Outputs) -> tuple:
    if t.indexed:  # one row per output block: an array built of scalars has one per scalar, stacked
        rows = []
        for exprs, shape in t.outputs:
            per = [(symbolic.jacobian if o.op.array_valued else symbolic.grad)(o, t.inputs) for o in exprs]
            rows.append([per[0][b] if len(per) == 1 else _stacked([p[b] for p in per], shape + sb)
                         for b, sb in enumerate(t.wrt_shapes)])
        return t._rolled_matrix(rows, c.shapes, c.Out, c)
    if c.sparse:
        J = sparse_jacobian(c.outs, t.inputs)
        return J, J, None, None
    J = symbolic.jacobian(c.outs, t.inputs) if c.outs and t.inputs else np.empty(
        (len(c.outs), len(t.inputs)), dtype=object)
    return t._matrix(J, c.shapes, c.Out, c.aux, c.aux_blocks)


def _stacked(entries: list, shape: tuple) -> Any:
    """The rows of one Jacobian block (one per scalar of the output) as the block: rolled arrays
    stacked into one of ``shape``; scalars (of a scalar input) as they are, in order."""
    if all(_is_rolled(e) for e in entries):
        return np.reshape(np.stack(entries), shape)
    return list(entries)


def _hessian(t: Trace, c: _Outputs) -> tuple:
    if t.indexed:
        return t._rolled_matrix(symbolic.hessian(c.outs[0], t.inputs), t.wrt_shapes, c.W, c)
    if c.sparse:
        H = sparse_hessian(c.outs[0], t.inputs)
        return H, H, None, None
    H = symbolic.hessian(c.outs[0], t.inputs) if t.inputs else np.empty((0, 0), dtype=object)
    return t._matrix(H, t.wrt_shapes, c.W, c.aux, c.aux_blocks)


@dataclass(frozen=True)
class Transform:
    """One function transform as data: what it differentiates and how its result is made.

    >>> TRANSFORMS["hvp"].extra, TRANSFORMS["jacobian"].scalar_out
    ('v', False)
    """

    derive: Any  # (Trace, _Outputs) -> (flat expressions, derivatives, result blocks, blocks -> result)
    wrt: str = "argnums"  # the differentiated arguments: "argnums", every traced one ("all"), "positional"
    scalar_out: bool = False  # fn must return one scalar
    extra: str | None = None  # the name of the vector it takes besides fn's arguments
    extra_like: str | None = None  # shaped like "wrt" (tangents) or like the "output" (cotangents)
    rolled: bool = True  # large array arguments trace as rolled arrays
    sparse: bool = False  # takes sparse=True
    summable: bool = False  # has Function.sum over data rows
    label: str = ""  # how formulas() names the derivatives ({v}: an input, {i}: an output, {u}: a row's input)


TRANSFORMS: dict[str, Transform] = {
    "jit": Transform(_jit, wrt="all"),
    "grad": Transform(_grad, scalar_out=True, summable=True, label="df/d{v}"),
    "value_and_grad": Transform(_value_and_grad, scalar_out=True, summable=True, label="df/d{v}"),
    "hvp": Transform(_hvp, scalar_out=True, extra="v", extra_like="wrt", label="(H·Δ)[{v}]"),
    "jvp": Transform(_jvp, wrt="positional", extra="tangents", extra_like="wrt", label="Δf[{i}]"),
    "vjp": Transform(_vjp, wrt="positional", extra="cotangent", extra_like="output", label="df/d{v}"),
    "jacobian": Transform(_jacobian, sparse=True, label="df[{i}]/d{v}"),
    "hessian": Transform(_hessian, scalar_out=True, sparse=True, label="d2f/d{u}d{v}"),
}


class Function:
    """A Python function traced, differentiated and compiled per argument shapes.

    Made by ``sg.jit``, ``sg.grad``, ``sg.value_and_grad``, ``sg.jacobian``, ``sg.hessian``
    and ``sg.hvp``. After a call, ``.exprs`` is what ``fn`` returned on symbolic arguments,
    ``.formulas()`` prints it with its derivatives, ``.source`` is the generated code;
    ``.trace(*args)`` gives the ``Trace`` for other argument shapes. Called with
    symbolic arguments (inside another transform), it returns expressions.

    >>> import math, numpy as np, symgrad as sg
    >>> def f(x):
    ...     return np.sum(x[1:] * x[:-1]) + np.sin(x[0])
    >>> df = sg.grad(f)
    >>> df(np.array([0.0, 2.0, 3.0]))
    array([3., 3., 2.])
    >>> print(df.formulas())
    f = x[1]*x[2] + x[0]*x[1] + sin(x[0])
    df/dx[0] = x[1] + cos(x[0])
    df/dx[1] = x[0] + x[2]
    df/dx[2] = x[1]
    >>> sg.grad(sg.grad(np.sin))(0.5) == -math.sin(0.5)  # transforms compose
    True
    """

    def __init__(self, fn: Any, transform: str, argnums: Any = 0, static_argnums: Any = (),
                 static_argnames: Any = (), sparse: bool = False, backend: str = "auto",
                 has_aux: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"sg.{transform}: expected a function, got {type(fn).__name__}")
        if backend not in compiled.BACKENDS:
            raise ValueError(f"backend must be one of {compiled.BACKENDS}, got {backend!r}")
        self.fn, self.transform, self.sparse, self.backend = fn, transform, bool(sparse), backend
        self.rule = TRANSFORMS[transform]
        self.has_aux = bool(has_aux)
        self.argnums_spec = int(argnums) if isinstance(argnums, np.integer) else argnums
        self.argnums = _int_tuple(argnums, "argnums")
        if self.rule.extra == "v" and len(self.argnums) != 1:
            raise ValueError(f"sg.{transform}: differentiate with respect to one argument (an int argnums)")
        if sparse and not self.rule.sparse:
            raise ValueError(f"sparse=True is for sg.jacobian and sg.hessian, not sg.{transform}")
        self.static_argnums = frozenset(_int_tuple(static_argnums, "static_argnums"))
        both = sorted(set(self.argnums) & self.static_argnums) if self.rule.wrt == "argnums" else []
        if both:
            raise ValueError(f"sg.{transform}: argument {both[0]} is in argnums and static_argnums: a static "
                             "argument is not traced, so it cannot be differentiated")
        names = (static_argnames,) if isinstance(static_argnames, str) else static_argnames
        self.static_argnames = frozenset(names)
        self._traces: OrderedDict = OrderedDict()
        self._sparse_rolled: OrderedDict = OrderedDict()  # signature -> RolledSparse, or None
        self._last_sparse: Any = None  # the RolledSparse of the latest call
        self._last: Trace | None = None
        self._fallback = True  # element by element where the rolled trace fails (False: raise)
        self._sums: dict = {}  # Function.sum's vmapped sums, by call arity and argnums
        self._changes = 0  # traces made again (a captured value changed, a branch not traced yet)
        self._ints_static = False  # Python ints not differentiated: static (once one was used as a size)
        self._noted = False  # whether the element-by-element warning was given
        functools.update_wrapper(self, fn, updated=())  # not fn.__dict__: a Function inside keeps its own
        self.__name__ = getattr(fn, "__name__", None) or _describe(fn)
        self._who = f"sg.{transform}({self.__name__})"

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """On a method: bound to the instance, which comes first (static, as an object that is not numbers).

        >>> import numpy as np, symgrad as sg
        >>> class Model:
        ...     scale = 2.0
        ...     @sg.jit
        ...     def predict(self, x):
        ...         return self.scale * x
        >>> Model().predict(np.array([1.0, 2.0]))
        array([2., 4.])
        """
        return self if instance is None else types.MethodType(self, instance)

    def _names(self, n: int) -> list[str]:
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "arg")
        return names[:n] + [f"{star}{i}" for i in range(len(names[:n]), n)]

    def _wrt_keys(self, n_args: int, slots: dict) -> list:
        """The differentiated arguments' keys: argnums (negative ones from the end), all for jit / jvp / vjp."""
        if self.rule.wrt == "all":
            return list(slots)
        if self.rule.wrt == "positional":
            return [i for i in range(n_args) if i in slots]
        keys = []
        for n in self.argnums:
            k = n + n_args if n < 0 else n
            if not 0 <= k < n_args or k not in slots:
                raise TypeError(f"{self._who}: argnums {n} is not a traced positional argument "
                                f"(called with {n_args} positional arguments)")
            keys.append(k)
        return keys

    def _key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The trace cache key (shapes, tree structures, static values); None for symbolic arguments."""
        if not (kwargs or self.static_argnums or self._ints_static):
            key = tuple(map(_signature, args))
            if _OTHER not in key:
                return None if _SYMBOLIC in key else key
        n = len(args)
        sigs = [self._static_key(i, a, n) or _signature(a, True) for i, a in enumerate(args)]
        for k in sorted(kwargs):
            v = kwargs[k]
            sigs.append((k, self._static_key(k, v, n) or _signature(v, True)))
            if sigs[-1][1] is _SYMBOLIC:
                return None
        key = tuple(sigs)
        return None if _SYMBOLIC in key else key

    def _static_key(self, key: Any, value: Any, n_args: int) -> tuple | None:
        """What keys the trace for a static argument (None: traced). Named static: its value, as JAX
        (hash and ==); static without asking: ints, bools and strings by value, any other object by
        identity (two equal objects may hold different attributes, which the trace reads)."""
        if key in self.static_argnums or key in self.static_argnames:
            return _static(value, key, self)
        if not self._static_at(key, value, n_args):
            return None
        leaves, treedef = pytree.flatten(value)  # (the trace keeps the objects alive: an id stays theirs)
        return ("static", treedef, tuple(leaf if type(leaf) in (int, *_PLAIN) else ("object", id(leaf))
                                         for leaf in leaves))

    def _static_at(self, key: Any, value: Any, n_args: int) -> bool:
        """Whether the argument at ``key`` (a position or a name) is static: named so, or not
        differentiated and a Python bool, string or other object (see _auto_static), or an int once one
        was used as a size (ints are traced first, as JAX traces them: an index needs no new trace)."""
        if key in self.static_argnums or key in self.static_argnames:
            return True
        if isinstance(key, int) and (self.rule.wrt == "positional" or self.rule.wrt == "argnums" and (
                key in self.argnums or key - n_args in self.argnums)):
            return False
        return _auto_static(value, self._ints_static)

    def trace(self, *args: Any, **kwargs: Any) -> Trace:
        """The ``Trace`` for these arguments' shapes (traced and compiled on first use)."""
        args, kwargs, _ = self._split_extra(args, kwargs)
        return self._trace(self._key(args, kwargs), args, kwargs)

    def _trace(self, key: tuple | None, args: tuple, kwargs: dict) -> Trace:
        if key is None:
            raise TypeError(f"{self._who}.trace: the arguments are symbolic; call the function instead")
        t = self._cached(key, args, kwargs)
        if t is None:
            try:
                t = self._new_trace(args, kwargs)
            except (TracingError, TypeError) as e:  # an int used as a size: traced again, ints as their values
                if self._ints_static or not _int_use(e) or not _holds_int((args, kwargs)):
                    raise
                self._ints_static = True
                return self._trace(self._key(args, kwargs), args, kwargs)
            branches = self._traces.setdefault(key, [])
            if branches:
                self._retraced("Python if / while on traced values took another way (sg.cond, sg.where or "
                               "sg.while_loop(..., max_steps=) trace every way at once)")
            branches.insert(0, t)
            del branches[MAX_BRANCHES:]
            if len(self._traces) > MAX_TRACES:
                self._traces.popitem(last=False)
        self._last = t
        return t

    def _cached(self, key: tuple, args: tuple, kwargs: dict) -> Trace | None:
        """The trace of this signature whose Python branches hold at these arguments, if it is current."""
        branches = self._traces.get(key, ())
        for t in branches:
            if t.watched and t.stale():
                del self._traces[key]
                self._retraced("values it reads from globals, closures or attributes changed (pass values "
                               "that change as arguments, data, to trace once)")
                return None
            if not t.guards or t.guarded(args, kwargs):
                return t
        return None

    def _rolled_sparse(self, key: tuple, args: tuple, kwargs: dict) -> Any:
        """A sparse Jacobian or Hessian of arrays of ``ROLLED_MIN`` elements or more, rolled
        (sparse_rolled.RolledSparse), made once per signature; None where the function has no rolled
        form (the element path's, as before)."""
        if not isinstance(self.argnums_spec, int) or _tracing.depth or not self._large(args, kwargs):
            return None
        if key not in self._sparse_rolled:
            from symgrad.sparse_rolled import RolledSparse

            try:
                with compiled.building():  # (its kernels' background compiles wait for the pattern)
                    self._sparse_rolled[key] = RolledSparse(self, args, kwargs)
            except (TracingError, NotImplementedError, TypeError):
                self._sparse_rolled[key] = None
            if len(self._sparse_rolled) > MAX_TRACES:
                self._sparse_rolled.popitem(last=False)
        return self._sparse_rolled[key]

    def _retraced(self, why: str) -> None:
        """One warning when tracing again keeps happening."""
        self._changes += 1
        if self._changes == RETRACES_NOTE:
            warnings.warn(f"{self._who}: traced again {RETRACES_NOTE} times: {why}", stacklevel=_user_level())

    def _new_trace(self, args: tuple, kwargs: dict) -> Trace:
        """Array arguments as rolled arrays where the transform takes them; where fn does something
        that has no rolled form, element by element (object arrays of variables), as before."""
        if self.rule.rolled and not self.sparse and (not self._fallback or self._large(args, kwargs)):
            try:
                return _traced(lambda: Trace(self, args, kwargs, indexed=True))
            except (TracingError, NotImplementedError, TypeError) as e:
                if not self._fallback or _int_use(e) and not self._ints_static and _holds_int((args, kwargs)):
                    raise
                why = f"{str(e).splitlines()[0].removeprefix(f'{self._who}: ')} ({_where(e)})"  # (named once)
                t = _traced(lambda: Trace(self, args, kwargs))
                t.fallback = why
                self._note(why, args, kwargs)
                return t
        return _traced(lambda: Trace(self, args, kwargs))

    def _note(self, why: str, args: tuple, kwargs: dict) -> None:
        """One warning (per function) where a trace goes element by element for want of a rolled form."""
        if self._noted:
            return
        self._noted = True
        n = sum(np.size(leaf) for leaf in pytree.flatten((args, kwargs))[0] if not isinstance(leaf, str))
        warnings.warn(f"{self._who}: {why}: tracing its {n} array elements one by one instead (slow at large "
                      "sizes; .explain() says which path each trace took)", stacklevel=_user_level())

    def explain(self) -> str:
        """How each traced signature runs: rolled (loops over whole arrays) or element by element,
        and why (the construct without a rolled form, and the line), its size, the compiled program.

        >>> import numpy as np, symgrad as sg
        >>> f = sg.grad(lambda x: np.sum(x ** 2), backend="vm")
        >>> _ = f(np.ones(100))
        >>> print(f.explain())
        sg.grad(<lambda>)
          x: (100,) -> rolled (whole arrays: loops), 6 nodes, loops on vm
        """
        sparse = [f"  {s.explain()}" for s in self._sparse_rolled.values() if s is not None]
        if not self._traces and not sparse:
            return f"{self._who}: not traced yet (call it first)"
        return "\n".join([self._who, *(t.explain() for ts in self._traces.values() for t in ts), *sparse])

    def _large(self, args: tuple, kwargs: dict) -> bool:
        """Whether a traced argument holds an array of ``ROLLED_MIN`` elements or more (then all of
        them trace as rolled arrays: a small one meets a large one in ``X @ w``), or integers
        (labels, an index: only rolled arrays gather through traced integers)."""
        traced = [a for k, a in (*enumerate(args), *kwargs.items())
                  if k not in self.static_argnums and k not in self.static_argnames]
        leaves = pytree.flatten(traced)[0]
        return any(np.size(leaf) >= ROLLED_MIN or ndarrays.holds_integers(leaf) for leaf in leaves)

    def _split_extra(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, Any]:
        """fn's arguments and the vector an hvp takes besides (last, or v=)."""
        if self.rule.extra != "v":
            return args, kwargs, None
        if "v" in kwargs:
            return args, {k: v for k, v in kwargs.items() if k != "v"}, kwargs["v"]
        if not args:
            raise TypeError("sg.hvp: call it as hv(*args, v) with the vector v last")
        return args[:-1], kwargs, args[-1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.rule.extra == "v":
            return self.call(*self._split_extra(args, kwargs))
        key = self._key(args, kwargs)
        sparse = self._rolled_sparse(key, args, kwargs) if self.sparse and key is not None else None
        if sparse is not None:
            self._last_sparse = sparse
            return sparse(args, kwargs)
        t = None if key is None or _tracing.depth else self._cached(key, args, kwargs)
        if t is None:
            if key is not None and distributed.holds_dask(args, kwargs):
                return distributed.lazy_map(self, *args, **kwargs)
            return self.call(args, kwargs)
        self._last = t
        return t.run(args, kwargs)

    def call(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """Call with fn's arguments and the transform's vector (hvp's v, jvp's tangents, a vjp's cotangent)."""
        key = self._key(args, kwargs)
        if key is None or _tracing.depth or extra is not None and _has_symbolic(extra):
            if self.rule.derive is _jit:  # inside another trace jit is the function itself
                if _tracing.depth:
                    _tracing.called.append(self.fn)  # (the outer trace watches what it captures)
                return self.fn(*args, **kwargs)
            rolled_args = any(map(_is_rolled, pytree.flatten((args, kwargs, extra))[0]))  # (vmap of a vjp)
            try:
                return Trace(self, args, kwargs, fresh=True, indexed=rolled_args).symbolic(args, kwargs, extra)
            except (TracingError, TypeError):
                if self._ints_static or not _holds_int((args, kwargs)):
                    raise
                self._ints_static = True  # (an int used as a size: traced again, ints as their values)
                return self.call(args, kwargs, extra)
        return self._trace(key, args, kwargs).run(args, kwargs, extra)

    def call_many(self, args: tuple, kwargs: dict, extras: list) -> list:
        """``call(args, kwargs, extra)`` for each of ``extras`` (a jvp's tangents, a vjp's cotangents,
        an hvp's vectors) at the same arguments: one batched kernel call where the arguments are
        numbers (a compressed sparse Jacobian's products), else a call each.

        >>> import numpy as np, symgrad as sg
        >>> from symgrad.trace import Function
        >>> jvp = Function(np.sin, "jvp")
        >>> np.vstack([t for _, t in jvp.call_many((np.zeros(2),), {}, [(np.ones(2),), (np.array([0.0, 2.0]),)])])
        array([[1., 1.],
               [0., 2.]])
        """
        key = self._key(args, kwargs)
        if key is None or _tracing.depth or any(_has_symbolic(e) for e in extras) or self.rule.derive is _jit:
            return [self.call(args, kwargs, extra) for extra in extras]
        return self._trace(key, args, kwargs).run_many(args, kwargs, extras)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """The sum over data rows: every traced argument not differentiated (not in ``argnums``)
        carries a leading axis of N rows, one sample each, and ``fn`` is written for one row.

        It is ``sg.value_and_grad(lambda w, *data: np.sum(sg.vmap(fn, in_axes)(w, *data)))``: the
        rows are one more index of the rolled expressions (matrix products over the batch where
        fn multiplies a row by a matrix). Where fn has no rolled form, fn is traced for one row
        and the compiled kernel adds up values and gradients over the rows in parallel.

        >>> import numpy as np, symgrad as sg
        >>> vg = sg.value_and_grad(lambda w, t, y: (w[0] * t + w[1] - y) ** 2, backend="vm")
        >>> vg.sum(np.array([2.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 4.0]))
        (1.0, array([-2., -2.]))
        """
        if not self.rule.summable:
            raise TypeError(f"sum: for sg.grad and sg.value_and_grad, not sg.{self.transform}")
        argnums = {n + len(args) if n < 0 else n for n in self.argnums}
        data = [i for i in range(len(args)) if i not in argnums and i not in self.static_argnums]
        data += [k for k in kwargs if k not in self.static_argnames]
        pick = lambda key: kwargs[key] if isinstance(key, str) else args[key]
        counts = {key: np.shape(pick(key))[:1] for key in data}
        if not data or any(c != counts[data[0]] for c in counts.values()) or counts[data[0]] == ():
            unknown = any(np.isnan(c).any() for c in counts.values())  # (a Dask array filtered by a mask)
            raise ValueError("sum: the data arguments (those not in argnums) need a leading axis of the same "
                             f"number of rows, got shapes {[np.shape(pick(k)) for k in data]}"
                             + (" (unknown row counts: call .compute_chunk_sizes() on them)" if unknown else ""))
        if distributed.holds_dask(args, kwargs):  # rows in chunks: one task each, on Dask's workers
            return distributed.lazy_sum(self, *args, **kwargs).compute()
        if not self.has_aux:
            try:
                return self._summed(len(args), argnums)(*args, **kwargs)
            except (TracingError, NotImplementedError, TypeError):
                pass  # no rolled form: one row traced, the kernel loops over the rows
        n = counts[data[0]][0]
        left, parts = np.arange(n), []
        while len(left):  # rows by the way Python if / while on their values went: one trace each
            row = lambda key, value, first=left[0]: np.asarray(value)[first] if key in counts else value
            t = self.trace(*(row(i, a) for i, a in enumerate(args)), **{k: row(k, v) for k, v in kwargs.items()})
            rows = [np.reshape(pick(key), (n, -1))[left] for key in t.data_keys]
            if t._constant_values is not None:  # the NumPy constants fn captured: the same in every row
                rows.append(np.broadcast_to(t._constant_values, (len(left), t._constant_values.size)))
            P, x = np.hstack(rows).astype(float, copy=False), t._pack(t.wrt_keys, args, kwargs)
            same = t.holds(t.conditions(x, P)) if t.guards else np.ones(len(left), bool)
            if not same[0]:
                raise RuntimeError(f"{self._who}.sum: a row's traced branch does not hold at that row")
            parts.append(t.compiled.sum(x, P[same]))
            left = left[~same]
        return t.assemble(sum(parts[1:], parts[0]))

    def _summed(self, n_args: int, argnums: set) -> Function:
        """The same transform of ``np.sum(vmap(fn)(...))`` over the data rows, traced rolled only."""
        key = (n_args, tuple(sorted(argnums)))
        if self._sums.get(key) is None:
            from symgrad.batched import Batched  # (batched.py builds on this module)

            in_axes = tuple(None if i in argnums or i in self.static_argnums else 0 for i in range(n_args))
            static = self.static_argnames

            def total(*a: Any, **k: Any) -> Any:
                fixed = {name: v for name, v in k.items() if name in static}
                row = functools.partial(self.fn, **fixed) if fixed else self.fn
                mapped = {name: v for name, v in k.items() if name not in static}
                return np.sum(Batched(row, in_axes)(*a, **mapped))

            f = Function(total, self.transform, self.argnums_spec, tuple(self.static_argnums), tuple(static),
                         backend=self.backend)
            f._fallback = False
            self._sums[key] = f
        return self._sums[key]

    def _latest(self) -> Trace:
        if self._last is None:
            raise RuntimeError(f"{self.__name__} has not been traced yet: call it once, or use "
                               ".trace(*args) to trace it for given argument shapes")
        return self._last

    @property
    def exprs(self) -> Any:
        """What the function returned on symbolic arguments (latest trace)."""
        return self._latest().exprs

    @property
    def derivatives(self) -> Any:
        """The derivative expressions compiled (latest trace): gradient, Jacobian, Hessian, H·Δ."""
        return self._latest().derivatives

    @property
    def source(self) -> str:
        """The generated code of the compiled kernel (latest trace)."""
        return self._latest().source

    @property
    def compiled(self) -> compiled.Compiled:
        """The ``Compiled`` behind the latest trace."""
        return self._latest().compiled

    def formulas(self) -> str:
        """The traced function and its derivatives as formulas (latest trace); of a sparse Jacobian or
        Hessian of large arrays, its entries by band (``bands``)."""
        if self._last_sparse is not None:
            return format_exprs(self.bands())
        return self._latest().formulas()

    def bands(self) -> dict[str, Expr]:
        """The latest sparse Jacobian or Hessian of large arrays (``sparse=True``) as one formula per
        band: entry ``(i, i + c)`` over the row index ``i`` for each offset ``c`` (and ``(i, a(i))`` for
        another address ``a``), with the conditions on ``i`` under which it is there. For
        ``sg.format`` or ``sg.latex``.

        >>> import numpy as np, symgrad as sg
        >>> h = sg.hessian(lambda x: np.sum(x[1:] * x[:-1] ** 2), sparse=True)
        >>> _ = h(np.ones(100))
        >>> print(sg.format(h.bands()))
        t1 = j <= 98
        H[j, j - 1] = where(j - 1 >= 0, 2*x[j - 1], 0)
        H[j, j] = where(t1, 2*x[j + 1], 0)
        H[j, j + 1] = where(t1, 2*x[j], 0)
        """
        if self._last_sparse is None:
            raise RuntimeError(f"{self._who}.bands: call it first, sparse=True on arrays of {ROLLED_MIN} elements "
                               "or more (a rolled sparse Jacobian or Hessian)")
        return self._last_sparse.bands()

    def __reduce__(self) -> tuple:  # pickles by reference to fn; traces again where it lands
        return (Function, (self.fn, self.transform, self.argnums_spec, tuple(self.static_argnums),
                           tuple(self.static_argnames), self.sparse, self.backend, self.has_aux))

    def __repr__(self) -> str:
        return f"<{self._who}, {len(self._traces)} traced signature(s)>"


_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (np, os))
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _where(e: BaseException) -> str:
    """The line of the user's code an exception came from: its last frame outside symgrad, NumPy
    and the standard library (``file.py:12``)."""
    found, tb = None, e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith((_OWN_DIR, *_LIBRARY_DIRS)) and not name.startswith("<frozen"):
            found = f"{os.path.basename(name)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found or "inside symgrad"


def _user_level() -> int:
    """The stacklevel of a warning given by the caller: the first frame outside symgrad."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
        frame, level = frame.f_back, level + 1
    return level


def _describe(fn: Any) -> str:
    """A name for a callable without ``__name__`` (functools.partial, a callable object)."""
    inner = getattr(fn, "func", None)
    if inner is not None:
        return f"partial({getattr(inner, '__name__', type(inner).__name__)})"
    return type(fn).__name__


def _has_symbolic(tree: Any) -> bool:
    return any(_is_symbolic(leaf) for leaf in pytree.flatten(tree)[0])


def _int_tuple(spec: Any, what: str) -> tuple[int, ...]:
    """``spec`` (an int or a sequence of ints) as a tuple, each named once."""
    items = (spec,) if isinstance(spec, int | np.integer) else spec
    if isinstance(items, str | bytes) or not isinstance(items, tuple | list | range) or not all(
            isinstance(i, int | np.integer) and not isinstance(i, bool) for i in items):
        raise TypeError(f"{what} must be an int or a tuple of ints (argument positions), got {spec!r}")
    items = tuple(int(i) for i in items)
    if len(set(items)) < len(items):
        raise ValueError(f"{what} {spec!r} names an argument twice")
    return items


def _static(value: Any, where: Any, owner: Function) -> Any:
    key = ("static", value)
    try:
        hash(key)
    except TypeError:
        leaves, treedef = pytree.flatten(value)  # a list of sizes: its structure and values
        key = ("static", treedef, tuple(leaves))
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"{owner.__name__}: static argument {where!r} must be hashable (it keys the trace "
                            f"cache), got {type(value).__name__}") from None
    return key


# ---- the public names: a Python function is traced, expressions are differentiated as they are ----

def _is_function(f: Any) -> bool:
    return callable(f) and not isinstance(f, Expr | SymArray)


def _argnums(positional: Any, keyword: Any) -> Any:
    return keyword if keyword is not None else 0 if positional is None else positional


_OPTIONS = ("static_argnums", "static_argnames", "backend", "has_aux")


def _options(name: str, options: dict, accepted: tuple = _OPTIONS) -> dict:
    """The keyword options of a transform, or a TypeError naming the unknown ones and listing the rest."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(f"sg.{name}() got unexpected keyword argument(s) {', '.join(unknown)}; "
                        f"accepted: {', '.join(('argnums', *accepted))}")
    return options


def jit(fn: Any = None, *, static_argnums: Any = (), static_argnames: Any = (), backend: str = "auto") -> Any:
    """Compile a Python function of floats and arrays (a decorator, with or without options).

    >>> import numpy as np, symgrad as sg
    >>> @sg.jit
    ... def f(x, y):
    ...     return np.tanh(x) * y
    >>> f(np.array([0.0, 1.0]), 2.0)
    array([0.        , 1.52318831])
    """
    make = lambda f: Function(f, "jit", (), static_argnums, static_argnames, False, backend)
    return make if fn is None else make(fn)


class Printed(str):
    """Text that shows as itself at the prompt (make_jaxpr's formulas)."""

    def __repr__(self) -> str:
        return str(self)


def make_jaxpr(fn: Callable, static_argnums: Any = ()) -> Callable[..., Printed]:
    """``jax.make_jaxpr``: a function of example arguments giving what ``fn`` traces to on them:
    symgrad's formulas (a flat let-form, every shared subexpression named once), not compiled.

    >>> import numpy as np, symgrad as sg
    >>> sg.make_jaxpr(lambda x, y: np.sin(x) * y + np.sin(x))(1.0, 2.0)
    t1 = sin(x)
    f = y*t1 + t1
    """
    f = Function(fn, "jit", (), static_argnums)
    return lambda *args, **kwargs: Printed(f.trace(*args, **kwargs).formulas())


def grad(f: Any, wrt: Any = None, *, argnums: Any = None, **options: Any) -> Any:
    """The gradient: of a Python function (a compiled function, JAX-style ``argnums``), or of an expression.

    Options: ``has_aux``, ``static_argnums``, ``static_argnames``, ``backend``.

    >>> import symgrad as sg
    >>> sg.grad(lambda x, y: x * y + sg.sin(x), argnums=(0, 1))(2.0, 3.0)
    (2.5838531634528574, 2.0)
    >>> sg.grad(lambda p: p["a"] * p["b"])({"a": 2.0, "b": 3.0})
    {'a': 3.0, 'b': 2.0}
    >>> x, y = sg.symbols("x y")
    >>> sg.grad(x * y + sg.sin(x), [x, y])
    [y + cos(x), x]
    """
    if _is_function(f):
        return Function(f, "grad", _argnums(wrt, argnums), **_options("grad", options))
    return symbolic.grad(f, wrt)


def value_and_grad(f: Any, wrt: Any = None, params: Any = (), backend: str = "auto", *, argnums: Any = None,
                   **options: Any) -> Any:
    """A compiled function returning ``(value, gradient)``: of a Python function, or of an expression.

    For an expression, ``wrt`` are the variables (the vector ``x``) and ``params`` further
    variables passed as ``p``: see ``symgrad.compile.function.value_and_grad``. With
    ``has_aux=True`` the result is ``((value, aux), gradient)``, as in JAX.

    >>> import numpy as np, symgrad as sg
    >>> vg = sg.value_and_grad(lambda x: np.sum(x ** 2))
    >>> vg(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))
    """
    if _is_function(f):
        options = _options("value_and_grad", options)
        return Function(f, "value_and_grad", _argnums(wrt, argnums), backend=backend, **options)
    _options("value_and_grad", options, ())
    return compiled.value_and_grad(f, wrt, params, backend)


def jacobian(f: Any, wrt: Any = None, *, sparse: bool = False, argnums: Any = None, **options: Any) -> Any:
    """The Jacobian of a Python function (compiled) or of expressions; ``sparse=True``: CSR, nonzeros only.

    For a function, each output leaf gets a block per differentiated argument, shaped
    ``output.shape + argument.shape`` (JAX's ``jacrev``).

    >>> import numpy as np, symgrad as sg
    >>> sg.jacobian(lambda x: x[1:] - x[:-1] ** 2)(np.array([1.0, 2.0, 3.0]))
    array([[-2.,  1.,  0.],
           [ 0., -4.,  1.]])
    """
    if _is_function(f):
        return Function(f, "jacobian", _argnums(wrt, argnums), sparse=sparse, **_options("jacobian", options))
    _options("jacobian", options, ())
    return sparse_jacobian(f, wrt) if sparse else symbolic.jacobian(f, wrt)


def jacfwd(fun: Callable, argnums: Any = 0, **options: Any) -> Function:
    """JAX's ``jacfwd``: the ``jacobian`` of a Python function, a block ``output.shape +
    argument.shape`` per output leaf and differentiated argument. Derivatives are formulas here:
    forward and reverse mode give the same ones, and the same numbers.

    >>> import numpy as np, symgrad as sg
    >>> sg.jacfwd(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    return jacobian(fun, argnums=argnums, **options)


def jacrev(fun: Callable, argnums: Any = 0, **options: Any) -> Function:
    """JAX's ``jacrev``: the ``jacobian`` of a Python function (as ``jacfwd``).

    >>> import numpy as np, symgrad as sg
    >>> sg.jacrev(lambda x, y: x * y, argnums=(0, 1))(np.array([1.0, 2.0]), 3.0)
    (array([[3., 0.],
           [0., 3.]]), array([1., 2.]))
    """
    return jacobian(fun, argnums=argnums, **options)


def hessian(f: Any, wrt: Any = None, *, sparse: bool = False, argnums: Any = None, **options: Any) -> Any:
    """The Hessian of a Python function (compiled) or of an expression; ``sparse=True``: CSR, nonzeros only.

    With ``sparse=True`` only the structurally nonzero entries are differentiated and
    compiled; no n-by-n array is ever made.

    >>> import numpy as np, symgrad as sg
    >>> h = sg.hessian(lambda x: np.sum(x[:-1] * x[1:] ** 2), sparse=True)
    >>> h(np.array([1.0, 2.0, 3.0])).toarray()
    array([[0., 4., 0.],
           [4., 2., 6.],
           [0., 6., 4.]])
    """
    if _is_function(f):
        return Function(f, "hessian", _argnums(wrt, argnums), sparse=sparse, **_options("hessian", options))
    _options("hessian", options, ())
    return sparse_hessian(f, wrt) if sparse else symbolic.hessian(f, wrt)


def hvp(f: Any, wrt: Any = None, params: Any = (), backend: str = "auto", *, argnums: Any = None,
        **options: Any) -> Any:
    """Hessian-vector products ``H(x) @ v`` without forming ``H`` (forward over reverse mode).

    For a Python function: ``hvp(fn)(*args, v)``, ``v`` shaped like the differentiated
    argument. For an expression: a compiled ``hv(x, p)`` where ``p`` holds the values of
    ``params`` followed by ``v``.

    >>> import numpy as np, symgrad as sg
    >>> hv = sg.hvp(lambda x: np.sum(x ** 3))
    >>> hv(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    >>> x, y = sg.symbols("x y")
    >>> sg.hvp(x * x * y, [x, y])([1.0, 2.0], [1.0, 0.0])
    array([4., 2.])
    """
    if _is_function(f):
        options = _options("hvp", options, ("static_argnums", "static_argnames"))
        return Function(f, "hvp", _argnums(wrt, argnums), backend=backend, **options)
    _options("hvp", options, ())
    inputs = as_expr_list(wrt)
    tangents = [_tangent_of(v) for v in inputs]
    hv = symbolic.jvp(symbolic.grad(f, inputs), inputs, tangents)
    return compiled.compile(object_array(hv), inputs, [*as_expr_list(params), *tangents], backend)


@functools.lru_cache(maxsize=64)
def _applied(fn: Any, transform: str, has_aux: bool, backend: str) -> Function:
    """The Function behind sg.jvp / sg.vjp of ``fn``, so repeated calls reuse its traces (bounded)."""
    return Function(fn, transform, (), backend=backend, has_aux=has_aux)


def _applied_to(fn: Any, transform: str, has_aux: bool, backend: str) -> Function:
    if not callable(fn):
        raise TypeError(f"sg.{transform}: expected a function, got {type(fn).__name__}")
    try:
        return _applied(fn, transform, bool(has_aux), backend)
    except TypeError:  # an unhashable callable: no reuse
        return Function(fn, transform, (), backend=backend, has_aux=has_aux)


def jvp(fn: Any, primals: Any, tangents: Any, *, has_aux: bool = False, backend: str = "auto") -> Any:
    """Forward mode, as ``jax.jvp``: ``(fn(*primals), directional derivative along tangents)``.

    ``primals`` and ``tangents`` are tuples of the same structure; outputs come in fn's
    structure. With ``has_aux=True``: ``(out, tangent_out, aux)``.

    >>> import numpy as np, symgrad as sg
    >>> sg.jvp(lambda x, y: x * np.sin(y), (2.0, 0.0), (1.0, 1.0))
    (0.0, 2.0)
    >>> x, y = sg.symbols("x y")
    >>> sg.jvp(x * y, [x, y], [1, 0])  # of expressions: wrt variables and their tangents
    y
    """
    if not _is_function(fn):  # expressions: the symbolic forward mode
        return symbolic.jvp(fn, primals, tangents)
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise TypeError("sg.jvp: primals and tangents must be tuples (one entry per argument of fn)")
    if len(primals) != len(tangents):
        raise ValueError(f"sg.jvp: {len(primals)} primals but {len(tangents)} tangents")
    out = _applied_to(fn, "jvp", has_aux, backend).call(tuple(primals), {}, tuple(tangents))
    return (*out[0], out[1]) if has_aux else out


def vjp(fn: Any, *primals: Any, has_aux: bool = False, backend: str = "auto") -> Any:
    """Reverse mode, as ``jax.vjp``: ``(fn(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` gives a tuple
    with one cotangent per primal, ``cotangent`` being shaped like fn's output.
    With ``has_aux=True``: ``(out, vjp_fn, aux)``.

    >>> import numpy as np, symgrad as sg
    >>> out, back = sg.vjp(lambda x: x ** 2, np.array([1.0, 3.0]))
    >>> out, back(np.array([1.0, 10.0]))
    (array([1., 9.]), (array([ 2., 60.]),))
    """
    F = _applied_to(fn, "vjp", has_aux, backend)
    result = F.call(primals, {}, _zeros_like_output(F, primals))
    (out, _), aux = result if has_aux else (result, None)

    def vjp_fn(cotangent: Any) -> tuple:
        back = F.call(primals, {}, cotangent)
        return (back[0] if has_aux else back)[1]

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def linearize(fn: Any, *primals: Any, has_aux: bool = False, backend: str = "auto") -> Any:
    """As ``jax.linearize``: ``(fn(*primals), jvp_fn)``, ``jvp_fn(*tangents)`` the directional
    derivative at ``primals`` (one tangent per primal, shaped like it). With ``has_aux=True``:
    ``(out, jvp_fn, aux)``. The tangent map is the compiled forward mode at the fixed point.

    >>> import numpy as np, symgrad as sg
    >>> y, f_jvp = sg.linearize(np.sin, 0.0)
    >>> y, f_jvp(2.0)
    (0.0, 2.0)
    """
    F = _applied_to(fn, "jvp", has_aux, backend)
    zeros = tuple(pytree.tree_map(lambda v: np.zeros(np.shape(v)) if np.ndim(v) else 0.0, p) for p in primals)
    first = F.call(primals, {}, zeros)

    def jvp_fn(*tangents: Any) -> Any:
        if len(tangents) != len(primals):
            raise TypeError(f"sg.linearize: the tangent map takes {len(primals)} tangent(s), one per primal, "
                            f"got {len(tangents)}")
        out = F.call(primals, {}, tangents)
        return (out[0] if has_aux else out)[1]

    if has_aux:
        (out, _), aux = first
        return out, jvp_fn, aux
    return first[0], jvp_fn


def _zeros_like_output(F: Function, primals: tuple) -> Any:
    """A zero cotangent in the structure of fn's output (to evaluate the output itself)."""
    if F._key(primals, {}) is None or _tracing.depth:  # inside a trace: the output's structure, fresh
        t = Trace(F, primals, {}, fresh=True)
    else:
        t = F._trace(F._key(primals, {}), primals, {})
    return pytree.unflatten(t.out_tree, [np.zeros(s) if s else 0.0 for _, s in t.outputs])
