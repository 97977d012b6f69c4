"""The backends of straight-line Programs and of LoopPrograms: each turns one into ``Kernels``
(kernels.py, the interface), registered by name. Programs: numba (generated code), vm (one
pre-compiled interpreter), python (the reference interpreter). LoopPrograms: numba (the generated
loops, loop_source.py) and python (the interpreter); their vm, the loop VM, registers in loop_vm.py.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np
from numba import types
from numba.core.registry import CPUDispatcher as Dispatcher

from symgrad.compile import cache, numba_backend, vm
from symgrad.compile.kernels import SIGNATURES, Kernels, over_rows, register
from symgrad.compile.loop_program import LoopProgram
from symgrad.compile.program import Program
from symgrad.expr.interp import run
from symgrad.expr.node import Expr
from symgrad.expr.traverse import topo_order


def module_name(program: Program) -> str:
    """The name of the generated Numba module for ``program`` (it changes with the generator).

    >>> import symgrad as sg
    >>> from symgrad.compile.lower import lower
    >>> module_name(lower(sg.Var("x") * 2.0, [sg.Var("x")])).startswith(f"k{numba_backend.GENERATOR_VERSION}_")
    True
    """
    return f"k{numba_backend.GENERATOR_VERSION}_{program.key}"


@register("program", "numba")
def numba_kernels(program: Program, roots: list[Expr] | None = None) -> Kernels:
    """Straight-line Numba kernels for ``program`` (the VM's past ``$SYMGRAD_MAX_PROGRAMS``)."""
    name = module_name(program)
    if not cache.has_room(name):
        cache.warn_once("programs", f"{cache.max_programs()} programs are compiled with Numba in this process "
                        "(its machine code is never freed; $SYMGRAD_MAX_PROGRAMS): new ones run on the VM")
        return vm_kernels(program)
    text = numba_backend.source(program)
    module = cache.load(name, text)
    return Kernels("numba", functools.lru_cache(None)(
        lambda variant: cache.typed(module, variant, SIGNATURES[variant])), text)


@functools.lru_cache(None)
def _vm_kernel(name: str) -> Any:
    """The VM's compiled function ``name`` (point, rows), compiled once per machine (then from the disk cache)."""
    text = vm.source()
    module = cache.load(f"vm_{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}", text)
    code, dims, whole = types.int32[:, ::1], types.int64[::1], types.int64
    vec, mat = types.float64[::1], types.float64[:, ::1]
    signature = (vec, vec, vec) if name == "point" else (mat, mat, vec, mat, whole, whole, types.boolean)
    return cache.typed(module, name, (code, vec, dims, *signature))


def vm_variant(variant: str) -> Any:
    """The VM's kernel ``variant``: its own ``point``, or a call of its ``rows`` (kernels.over_rows)."""
    return _vm_kernel("point") if variant == "point" else over_rows(_vm_kernel("rows"), variant)


@register("program", "vm")
def vm_kernels(program: Program, roots: list[Expr] | None = None) -> Kernels:
    """The VM's kernels bound to ``program``'s arrays: nothing is compiled per program."""
    dims = np.array([program.n_slots, len(program.inputs), len(program.params), program.n_out,
                     int(program.returns_value)], dtype=np.int64)
    bind = lambda name: functools.partial(vm_variant(name), program.code, program.consts, dims)
    return Kernels("vm", functools.lru_cache(None)(bind), program.__str__)


@register("program", "python", needs_roots=True)
def python_kernels(program: Program, roots: list[Expr] | None) -> Kernels:
    """The reference interpreter behind the same kernel interface (for checking)."""
    order = topo_order(roots)

    def evaluate(x_cols: list, p_cols: list) -> list:
        values = dict(zip(program.inputs, x_cols)) | dict(zip(program.params, p_cols))
        got = run(order, values, set(roots))
        return [got[r] for r in roots]

    def point(x, p, out):
        if len(x) != len(program.inputs) or len(p) != len(program.params) or len(out) != program.n_out:
            raise ValueError("symgrad: wrong shape")
        vals = evaluate(list(x), list(p))
        out[:] = vals[program.returns_value:]
        return float(vals[0]) if program.returns_value else 0.0

    def rows(vals: list, n: int) -> np.ndarray:  # one column per output, constants broadcast
        return np.array([np.broadcast_to(v, n) for v in vals]).T.reshape(n, len(vals))

    def batch(X, P, V, OUT, lo, hi):
        Ps = P[lo:hi] if len(P) > 1 else P
        vals = evaluate(list(X[lo:hi].T), list(np.broadcast_to(Ps, (hi - lo, P.shape[1])).T))
        got = rows(vals, hi - lo)
        if program.returns_value:
            V[lo:hi] = got[:, 0]
        OUT[lo:hi] = got[:, program.returns_value:]

    def total(x, P, acc, lo, hi):
        acc[1 - program.returns_value:] = rows(evaluate(list(x), list(P[lo:hi].T)), hi - lo).sum(axis=0)

    return Kernels("python", dict(point=point, batch=batch, total=total).__getitem__, program.__str__)


@register("loops", "numba")
def loop_numba_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """Numba loop kernels for ``program`` (the loop VM's past ``$SYMGRAD_MAX_PROGRAMS``)."""
    name = _loop_module_name(program)
    if not cache.has_room(name):
        cache.warn_once("loop programs", f"{cache.max_programs()} programs are compiled with Numba in this "
                        "process (its machine code is never freed; $SYMGRAD_MAX_PROGRAMS): new rolled ones run "
                        "on the loop VM")
        return program.kernels("vm")
    module = cache.load(name, program.source)

    def kernel(variant: str) -> Any:
        if not hasattr(module, "PIECES"):
            if variant == "point" and not isinstance(module.point, Dispatcher):  # its workspace from Python
                cache.typed(module, "kernel", _KERNEL)
                return module.point
            return cache.typed(module, variant, SIGNATURES[variant])
        for piece in _compiled_functions(module):  # a split kernel: plain Python calling its pieces
            cache.typed(module, piece, _PIECE)
        return getattr(module, variant)

    return Kernels("numba", functools.lru_cache(None)(kernel), program.source)


_PIECE = (*(types.float64[::1],) * 5, types.int64[::1])
_KERNEL = (types.float64[::1],) * 4


def numba_on_disk(program: LoopProgram) -> bool:
    """Whether Numba's machine code for ``program`` is in the disk cache (ready in a moment)."""
    name = _loop_module_name(program)
    if not cache.has_room(name) or not cache.indexed(name):  # (not loaded to find it is not there)
        return False
    module = cache.load(name, program.source)
    return all(cache.on_disk(module, f) for f in _compiled_functions(module))


def _compiled_functions(module: Any) -> list[str]:
    if hasattr(module, "PIECES"):
        return [f"piece{k}" for k in range(module.PIECES)]
    return ["point"] if isinstance(module.point, Dispatcher) else ["kernel"]


def _loop_module_name(program: LoopProgram) -> str:
    return f"loops_{program.key}"


@register("loops", "python")
def loop_python_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """The reference interpreter (NumPy, vectorised over each index) behind the kernel interface."""
    order = topo_order(list(program.roots))

    def values(x: np.ndarray, p: np.ndarray) -> list:
        given = {}
        for layout, vector in ((program.inputs, x), (program.params, p)):
            for v, start, size in layout.blocks():
                if v.op.name == "array":
                    given[v.payload[0]] = vector[start:start + size].reshape(v.shape)
                else:
                    given[v.payload] = vector[start]
        got = run(order, given, set(program.roots))
        return [np.ravel(got[r]) for r in program.roots]

    def point(x, p, out):
        if len(x) != len(program.inputs) or len(p) != len(program.params) or len(out) != program.n_out:
            raise ValueError("symgrad: wrong shape")
        got = values(x, p)
        if program.n_out:
            out[:] = np.concatenate(got[program.returns_value:])
        return float(got[0][0]) if program.returns_value else 0.0

    def batch(X, P, V, OUT, lo, hi):
        for r in range(lo, hi):
            v = point(X[r], P[r if len(P) > 1 else 0], OUT[r])
            if len(V):
                V[r] = v

    def total(x, P, acc, lo, hi):
        acc[:], part = 0.0, np.empty(program.n_out)
        for r in range(lo, hi):
            acc[0] += point(x, P[r], part)
            acc[1:] += part

    return Kernels("python", dict(point=point, batch=batch, total=total).__getitem__, program.__str__)
