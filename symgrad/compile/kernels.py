"""The backend interface, imported one way: programs (program.Program, loop_program.LoopProgram) look
their backends up here, and backends (backends.py, loop_vm.py) register here. It imports no other
module of symgrad.compile.

Every backend gives the same three kernels: ``point(x, p, out) -> value``,
``batch(X, P, V, OUT, lo, hi)`` (rows ``lo:hi``) and ``total(x, P, acc, lo, hi)`` (the sum over
rows ``lo:hi`` of ``P``), plus the source it runs. ``Compiled`` calls them and never asks which
backend made them, so a new backend (LLVM) is one ``register`` call, not a branch.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

_V, _M = types.float64[::1], types.float64[:, ::1]
_I = types.int64
SIGNATURES = dict(point=(_V, _V, _V), batch=(_M, _M, _V, _M, _I, _I), total=(_V, _M, _V, _I, _I))


@dataclass(frozen=True)
class Kernels:
    """A backend's product: ``kernel(variant)`` for variant in point / batch / total, made on first
    use; ``source``, the code it runs (or a function making it); ``backend``, the name that runs it;
    ``quick``, where making these takes long, the same made sooner and running slower (a first tier);
    ``on_disk()``, whether making them compiles nothing (found in the disk cache)."""

    backend: str
    kernel: Callable[[str], Callable]
    source: str | Callable[[], str]
    quick: Kernels | None = None
    on_disk: Callable[[], bool] = lambda: False


def over_rows(rows: Callable, variant: str) -> Callable:
    """The kernel ``variant`` (point, batch, total: SIGNATURES after the arrays a VM binds first) as a
    call of a VM's one compiled function ``rows(*arrays, X, P, V, OUT, lo, hi, summed)``: the values into
    ``V`` and outputs into ``OUT`` by row, or added up into ``V[0]`` and ``OUT[0]`` (``summed``). One
    function, because Numba compiles a callee's code again into each caller (the loop VM: 5 s each).

    >>> got = []
    >>> over_rows(lambda *a: got.append([np.shape(v) for v in a[-7:-3]] + [a[-1]]), "total")(
    ...     np.ones(3), np.ones((4, 2)), np.zeros(6), 0, 4)
    >>> got
    [[(1, 3), (4, 2), (1,), (1, 5), True]]
    """
    if variant == "batch":
        return lambda *args: rows(*args, False)
    if variant == "total":
        def total(*args: Any) -> None:
            *arrays, x, P, acc, lo, hi = args
            rows(*arrays, x[None], P, acc[:1], acc[None, 1:], lo, hi, True)
        return total

    def point(*args: Any) -> float:
        *arrays, x, p, out = args
        value = np.zeros(1)
        rows(*arrays, x[None], p[None], value, out[None], 0, 1, False)
        return float(value[0])
    return point


@dataclass(frozen=True)
class Backend:
    """How to make Kernels for a program (``needs_roots``: the expressions too, for the interpreter)."""

    name: str
    make: Callable[..., Kernels]
    needs_roots: bool = False


# The kind of program ("program": straight-line Program; "loops": LoopProgram) -> name -> backend.
REGISTRY: dict[str, dict[str, Backend]] = {"program": {}, "loops": {}}


def register(kind: str, name: str, needs_roots: bool = False) -> Callable:
    """Register ``make(program, roots) -> Kernels`` as the backend ``name`` of programs of ``kind``.

    >>> import symgrad
    >>> sorted(REGISTRY["program"]), sorted(REGISTRY["loops"])
    (['c', 'numba', 'python', 'vm'], ['c', 'numba', 'python', 'vm'])
    """
    def add(make: Callable) -> Callable:
        REGISTRY[kind][name] = Backend(name, make, needs_roots)
        return make
    return add


def make_kernels(kind: str, program: Any, backend: str, roots: Any = None) -> Kernels:
    """The Kernels of the backend ``backend`` registered for programs of ``kind``.

    >>> import symgrad as sg
    >>> make_kernels("loops", None, "llvm")
    Traceback (most recent call last):
    ...
    ValueError: backend 'llvm' does not run loops programs; use one of ['c', 'numba', 'python', 'vm']
    """
    if backend not in REGISTRY[kind]:
        raise ValueError(f"backend {backend!r} does not run {kind} programs; use one of {sorted(REGISTRY[kind])}")
    return REGISTRY[kind][backend].make(program, roots)


# Workspaces this large are allocated by Python, not inside the kernel: Numba's allocator takes
# them from the OS on every call, paying a page fault per 4 KiB page (an ODE gradient's 48 MB: 20 ms
# of a 32 ms call; its 4.8 MB with 10 steps: 1.0 ms of 1.2), where a spare one is kept per thread.
OWN_WORK = 1 << 16  # floats (512 KiB: smaller blocks come back from the heap as they are)
SPARE_MAX = 1 << 24  # floats (128 MiB): the largest spare a thread keeps
_spare = threading.local()


def take(size: int) -> np.ndarray:
    """A workspace of at least ``size`` floats for one call: the thread's spare (none is shared by
    two calls at once), or a new one.

    >>> work = take(10); len(work) >= 10
    True
    >>> give(work); take(10) is work
    True
    """
    work = getattr(_spare, "work", None)
    if work is None or len(work) < size:
        return np.empty(size)
    _spare.work = None
    return work


def give(work: np.ndarray) -> None:
    """Hand back a workspace ``take`` gave: kept as the thread's spare (the larger one, up to
    ``SPARE_MAX`` floats)."""
    spare = getattr(_spare, "work", None)
    if len(work) <= SPARE_MAX and (spare is None or len(spare) < len(work)):
        _spare.work = work


def faulted(size: int) -> Callable[[], None]:
    """Start a new workspace of ``size`` floats having its pages faulted in on a thread of its own (while
    the compiler runs: an LSTM gradient's 103 MB, a page fault per 4 KiB, made its first call 0.25 s where it
    takes 0.07 s with the pages in); the call returned, on the thread about to run the kernels, keeps it
    as that thread's spare. Where the kernel makes pages present without writing them (Linux 5.14's
    MADV_POPULATE_WRITE) the first call need not wait for the thread: they fault the rest in together (an
    ODE gradient's 56 MB took 0.03-0.12 s, as the kernel found huge pages, and gcc 0.05-0.08).

    >>> keep = faulted(10); keep(); take(10).size >= 10
    True
    """
    if _populates():
        ready = np.empty(size)
        threading.Thread(target=_populate, args=(ready,), name="symgrad-workspace", daemon=True).start()
        return lambda: give(ready)
    work: list[np.ndarray] = []
    thread = threading.Thread(target=lambda: work.append(_touched(size)), name="symgrad-workspace", daemon=True)
    thread.start()

    def keep() -> None:
        thread.join()
        if work:
            give(work[0])
    return keep


def _touched(size: int) -> np.ndarray:
    work = np.empty(size)
    work[::512] = 0.0  # (one write a page)
    return work


_POPULATE_WRITE = 23  # (madvise's advice, Linux's uapi/asm-generic/mman-common.h)


_POPULATED = 1 << 21  # bytes a call advises: between calls the process's memory map is free to change


def _populate(work: np.ndarray) -> int:
    """madvise(MADV_POPULATE_WRITE) over the whole pages of ``work``, 2 MiB a call: 0, or -1 where the kernel
    has no such advice (before Linux 5.14) or the platform no madvise. (In one call over 16 MB, which took
    0.1 s where the kernel was slow to find its huge pages, the process's memory map stayed locked, and
    starting gcc, which forks, waited for it: least squares' first result 0.09 -> 0.18 s.)"""
    page = mmap.PAGESIZE
    start = -(-work.ctypes.data // page) * page
    stop = (work.ctypes.data + work.nbytes) // page * page
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return -1
    madvise.argtypes, madvise.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    for at in range(start, stop, _POPULATED):
        if madvise(at, min(_POPULATED, stop - at), _POPULATE_WRITE) != 0:
            return -1
    return 0


@functools.cache
def _populates() -> bool:
    """Whether this machine's kernel populates pages on advice (tried on two pages of a workspace)."""
    return sys.platform.startswith("linux") and _populate(np.empty(3 * mmap.PAGESIZE // 8)) == 0
