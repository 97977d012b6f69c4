"""Progress for long phases: one status line on stderr, on a terminal, after a few seconds, never otherwise.

Tracing, differentiating and lowering 10**5-10**6 node graphs, Numba compiles of big kernels, sparse
patterns and their colouring, IPOPT's iterations and passes over Dask arrays can each take seconds to
minutes. Each such phase opens ``phase(desc)`` (walks over nodes: ``progress(total, desc)``, which
counts steps). The open phases share one line on stderr (``symgrad 5 s: tracing > gradient: 40,960/
120,000 nodes (9,000 nodes/s)``), drawn once the run of work has lasted ``DELAY_S``, redrawn at most
every ``EVERY_S`` (a ticker thread redraws the elapsed time of phases that report nothing themselves,
a compile), overwritten in place with ``\\r`` and cleared when the last phase ends: quick work stays
silent. ``SYMGRAD_PROGRESS=0`` turns it off, ``=1`` on even when stderr is not a terminal (then each
redraw is a line of its own, and nothing is cleared). Only the main thread's phases show (background
compiles and Dask's threads are not what the user waits for).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DELAY_S = 2.0  # the line appears only once the run of work has lasted this long
EVERY_S = 1.0  # the least time between two redraws (a rate limit)
TICK_S = 1.0  # the ticker thread's period
MIN_TOTAL = 20_000  # smaller walks finish well within DELAY_S: no phase at all
CHUNK = 4096  # steps per update (a per-node update would cost more than the step)
GAP_S = 3.0  # phases starting within this of the previous one's end continue its run of work
clock = time.monotonic  # (tests set a fake one)


def _noop(*_: object) -> None:
    pass


def enabled() -> bool:
    """Whether progress is shown: ``SYMGRAD_PROGRESS`` if set, else whether stderr is a terminal.

    >>> isinstance(enabled(), bool)
    True
    """
    flag = os.environ.get("SYMGRAD_PROGRESS")
    if flag is not None:
        return flag not in ("", "0", "false", "no")
    return _tty(sys.stderr)


def _tty(stream: object) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


class _Phase:
    """One open phase: its description, the latest detail it reported, when it began."""

    def __init__(self, desc: str, start: float) -> None:
        self.desc, self.detail, self.start = desc, "", start

    def label(self) -> str:
        return f"{self.desc}: {self.detail}" if self.detail else self.desc


class _Line:
    """The status line every open phase shares (a stack, outermost first), and the thread that redraws it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.phases: list[_Phase] = []
        self.run_start, self.last_end = 0.0, -1e9  # (the run of work: monotonic seconds)
        self.drawn_at, self.width = -1e9, 0  # (last redraw; characters on the terminal's line)
        self.wake = threading.Event()

    def open(self, desc: str) -> _Phase:
        with self.lock:
            now = clock()
            if not self.phases and now - self.last_end > GAP_S:
                self.run_start = now
            phase = _Phase(desc, now)
            self.phases.append(phase)
            if len(self.phases) == 1:
                try:
                    threading.Thread(target=self._tick, name="symgrad-progress", daemon=True).start()
                except RuntimeError:  # (at the interpreter's exit: no redraws but the phase's own notes)
                    pass
            return phase

    def close(self, phase: _Phase) -> None:
        with self.lock:
            self.phases.remove(phase)
            self.last_end = clock()
            if not self.phases:
                self.wake.set()
                self._clear()

    def draw(self, force: bool = False) -> None:
        """Write the line if the run has lasted DELAY_S and the last redraw is EVERY_S old (or ``force``)."""
        with self.lock:
            now = clock()
            if not self.phases or now - self.run_start < DELAY_S or not force and now - self.drawn_at < EVERY_S:
                return
            self.drawn_at = now
            text = f"symgrad {now - self.run_start:.0f} s: {' > '.join(p.label() for p in self.phases)}"
            stream = sys.stderr  # (looked up each time: pytest's capture replaces it)
            if _tty(stream):
                text = text[:shutil.get_terminal_size().columns - 1]
                stream.write("\r" + text.ljust(self.width))
                self.width = len(text)
            else:
                stream.write(text + "\n")
            stream.flush()

    def _clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
        self.width, self.drawn_at = 0, -1e9

    def _tick(self) -> None:
        """Redraw while phases are open (a compile reports nothing while it runs)."""
        self.wake.clear()
        while not self.wake.wait(TICK_S):
            with self.lock:
                if not self.phases:
                    return
                self.draw()


_line = _Line()


@contextmanager
def phase(desc: str) -> Iterator[Callable[[str], None]]:
    """A phase of work that may last long (a compile, IPOPT's solve, a pass over Dask arrays): shown on
    the status line once the run of work has lasted ``DELAY_S``. The context gives ``note(detail)``,
    which updates the detail shown after ``desc`` (rate-limited: call it as often as you like).

    >>> with phase("demo") as note:
    ...     note("step 1 of 3")
    """
    if not enabled() or threading.current_thread() is not threading.main_thread():
        yield _noop
        return
    current = _line.open(desc)

    def note(detail: str) -> None:
        current.detail = detail
        _line.draw()

    try:
        yield note
    finally:
        _line.close(current)


@contextmanager
def progress(total: int, desc: str) -> Iterator[Callable[[int], None]]:
    """A phase walking ``total`` steps; the context gives ``update(n)``, which walks call at the start of
    each CHUNK of steps with that chunk's size.

    >>> with progress(10, "demo") as update:
    ...     update(10)
    """
    if total < MIN_TOTAL:
        yield _noop
        return
    with phase(desc) as note:
        if note is _noop:
            yield _noop
            return
        done, start = [0], clock()

        def update(n: int) -> None:
            done[0] += n
            rate = done[0] / max(clock() - start, 1e-9)
            note(f"{min(done[0], total):,}/{total:,} nodes ({rate:,.0f} nodes/s)")

        yield update
