"""Tiered compilation's machinery: the background threads building each tier (one a backend), the gate
that holds Numba's compiles back while a foreground build runs, dropping the queued compiles (at exit,
after each test), and the C tier's translation and build (where the compiler works).
``Compiled._upgrade`` (function.py) swaps each tier's kernels in.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from symgrad.compile import c_backend
from symgrad.compile.kernels import Kernels
from symgrad.util.worker import DaemonWorker

if TYPE_CHECKING:
    from symgrad.compile.loop_program import LoopProgram

# Where a C compiler is found, the tiers of a loop program include its C kernels: ready in a fraction of
# a second (gcc), where Numba takes seconds to minutes; Numba's replace them where timed faster.
C_TIER = True
# Numba's kernels as the last tier ($SYMGRAD_NUMBA_TIER=0: none, the loops stay on the VM's or the C compiler's
# kernels; for a machine short of cores, or a test suite, where each background compile costs seconds)
NUMBA_TIER = os.environ.get("SYMGRAD_NUMBA_TIER", "1") != "0"
C_FAILED: list[str] = []  # the C compiler's first failure in this process: the C tier is left out after it
FOREGROUND_WAIT = 2.0  # seconds a background compile waits for the foreground builds to end, at most
GENERATION = [0]  # bumped to drop the background compiles queued so far
CHANGED = threading.Condition()  # guards the builds' count, the workers and a Compiled's swap
_BUILDS = [0]  # foreground builds under way
_WORKERS: dict[str, DaemonWorker] = {}


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Mark a foreground build (a trace, a sparse pattern, an optimisation problem's derivatives):
    the background compiles of tiered compilation wait until none is under way (FOREGROUND_WAIT at
    most), as sharing the GIL with them made building four kernels take twice as long.

    >>> with building():
    ...     pass
    """
    with CHANGED:
        _BUILDS[0] += 1
    try:
        yield
    finally:
        with CHANGED:
            _BUILDS[0] -= 1
            CHANGED.notify_all()


def after_builds() -> None:
    """Wait until no foreground build is under way (FOREGROUND_WAIT at most).

    >>> after_builds()
    """
    with CHANGED:
        CHANGED.wait_for(lambda: _BUILDS[0] == 0, FOREGROUND_WAIT)


def worker(backend: str) -> DaemonWorker:
    """The background thread of tiered compilation for ``backend`` (Numba compiles one function at a
    time; the C compiler's thread mostly waits on its subprocess); a daemon: a script's exit does not
    wait for the compile under way (minutes for a big kernel).

    >>> worker("numba").submit(lambda: 1).result()
    1
    """
    with CHANGED:
        if backend not in _WORKERS:
            _WORKERS[backend] = DaemonWorker(f"symgrad-compile-{backend}")
        return _WORKERS[backend]


def drop_background_compiles() -> None:
    """Skip the background compiles that have not started (the one under way finishes): at the
    interpreter's exit, whose results nobody will use, and at the end of each test. What they would
    have upgraded goes on running on the kernels it has.

    >>> drop_background_compiles()
    """
    GENERATION[0] += 1


def compiles_done() -> None:
    """Let the background compiles finish (before a fork: a child would inherit their locks held).

    >>> compiles_done()
    """
    for each in list(_WORKERS.values()):
        each.submit(lambda: None).result()


def c_kernels(program: LoopProgram) -> Kernels | None:
    """The C kernels of ``program``, translated (not yet built: ``c_built``), or None (warned) where the
    translator cannot write its loops. Called on the caller's thread, never a worker's: translating
    parses Python, and CPython 3.11's AST constructor counts its depth per interpreter, so a parse on a
    worker beside one on the caller's thread (a traceback being formatted, say) made either fail with
    "SystemError: AST constructor recursion depth mismatch"."""
    try:
        return program.kernels("c")
    except NotImplementedError as e:  # (a bug: the loop generator grew a form the C loops do not know)
        warnings.warn(f"symgrad: the C loops cannot write this program ({e}); it has no C tier", stacklevel=2)
        return None


def c_built(kernels: Kernels) -> Kernels:
    """``kernels`` built by the C compiler and loaded (no parsing: any thread); a failure warned of once
    (the C tier is then left out of the process)."""
    try:
        kernels.kernel("point")
        return kernels
    except c_backend.CompilerError as e:
        if not C_FAILED and not c_backend.exiting():
            C_FAILED.append(str(e))
            instead = "Numba" if NUMBA_TIER else "the loop VM"
            warnings.warn(f"symgrad: {e}; compiled code comes from {instead} instead (in this process)",
                          stacklevel=2)
        raise


def _probe_compiler() -> None:
    with contextlib.suppress(c_backend.CompilerError, OSError, subprocess.SubprocessError):  # (warned when used)
        c_backend.flags()


# The C compiler's probe (its version, the flags it takes: 0.1 s, once per machine) runs from symgrad's
# import, in the background: a new user's first result would wait for it.
if C_TIER:
    threading.Thread(target=_probe_compiler, name="symgrad-probe", daemon=True).start()
# (at exit the compile threads, daemons, are abandoned where they are; the queued compiles must not start)
getattr(threading, "_register_atexit", lambda fn: None)(drop_background_compiles)
# A forked child inherits the workers without their threads: it would wait on them forever.
os.register_at_fork(before=compiles_done, after_in_child=_WORKERS.clear)
