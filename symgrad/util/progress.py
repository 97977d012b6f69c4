"""Progress bars for long graph walks: shown on a terminal, after a few seconds, never otherwise.

Building gradients of and lowering 10**5-10**6 node graphs takes seconds to minutes; the
walks report their progress here in chunks, and tqdm draws a bar on stderr once a walk
has run for ``DELAY_S`` (so quick ones stay silent). ``SYMGRAD_PROGRESS=0`` turns bars off,
``=1`` on even when stderr is not a terminal.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DELAY_S = 2.0  # a bar appears only once its walk has run this long
MIN_TOTAL = 20_000  # smaller walks finish well within DELAY_S: no bar object at all
CHUNK = 4096  # steps per update (a per-node update would cost more than the step)
GAP_S = 3.0  # walks starting within this of the previous one's end continue its run of work
_run = [0.0, -1e9]  # (start of the current run of walks, end of the last walk): monotonic seconds


def _noop(n: int) -> None:
    pass


def enabled() -> bool:
    """Whether bars are drawn: ``SYMGRAD_PROGRESS`` if set, else whether stderr is a terminal.

    >>> isinstance(enabled(), bool)
    True
    """
    flag = os.environ.get("SYMGRAD_PROGRESS")
    if flag is not None:
        return flag not in ("", "0", "false", "no")
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


@contextmanager
def progress(total: int, desc: str) -> Iterator[Callable[[int], None]]:
    """A bar for a walk of ``total`` steps; the context gives ``update(n)``, which walks call at the
    start of each CHUNK of steps with that chunk's size.

    >>> with progress(10, "demo") as update:
    ...     update(10)
    """
    now = time.monotonic()
    if now - _run[1] > GAP_S:
        _run[0] = now
    try:
        if total < MIN_TOTAL or not enabled():
            yield _noop
            return
        from tqdm import tqdm  # imported only when a bar may be drawn

        # A compile is several walks: once the run has lasted DELAY_S, each next walk shows at once.
        delay = max(0.0, DELAY_S - (now - _run[0]))
        with tqdm(total=total, desc=desc, unit=" nodes", unit_scale=True, delay=delay, leave=False,
                  file=sys.stderr, dynamic_ncols=True) as bar:
            yield bar.update
    finally:
        _run[1] = time.monotonic()
