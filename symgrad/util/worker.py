"""A background thread that a process's exit does not wait for."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class DaemonWorker:
    """Runs submitted calls one at a time, in order, on a daemon thread: unlike a
    ``ThreadPoolExecutor``'s worker, nobody joins it at exit, so a script ends at its last line
    even while a long call (a Numba compile whose result nobody will use) is under way.

    >>> DaemonWorker("example").submit(sum, [1, 2]).result()
    3
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn: Callable, *args: Any) -> Future:
        """Queue ``fn(*args)``; its Future holds the result or the exception."""
        future: Future = Future()
        self._calls.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._calls.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # (the caller's .result() raises it)
                future.set_exception(error)
