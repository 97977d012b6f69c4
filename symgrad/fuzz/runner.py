"""Running the fuzzer: programs generated, checked and their disagreements minimised (``run``), one process's
share of a soak (``_job``) and the counts of several added (``_added``)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable

import numpy as np

from symgrad.compile import pieces
from symgrad.fuzz.generator import generate
from symgrad.fuzz.minimiser import minimise
from symgrad.fuzz.oracle import EXTRAS, _Checker, _error
from symgrad.fuzz.program import Disagreement


def run(programs: int | None = None, seed: int = 0, backends: tuple[str, ...] | str = ("python", "vm"),
        numba_every: int = 0, extras_every: int = 4, minutes: float | None = None, minimise_seconds: float = 60.0,
        log: Callable[[str], None] | None = None, stats: dict | None = None,
        element_every: int = 1) -> list[Disagreement]:
    """Generate and check programs; the disagreements found, minimised (``minimise_seconds=0``: as found).

    ``backends`` besides "python" run on every program, except "numba" (compiles 0.5 s and more):
    every ``numba_every``-th program (0: never, unless "numba" is the only other backend). Every
    ``extras_every``-th program also checks one of ``EXTRAS`` (jvp, hvp, hessian, jacobian, vmap).
    The element trace (the slowest probe) runs on every ``element_every``-th program. ``stats`` (a
    dict) receives the counts: programs, disagreements, and the statuses (ok, fallback: traced element
    by element, unsupported: the tracer refused, invalid) with ``reasons`` for the last two.

    >>> stats = {}
    >>> found = run(programs=2, seed=1, minimise_seconds=0, stats=stats)
    >>> stats["programs"], len(found) == stats["disagreements"]
    (2, True)
    """
    if isinstance(backends, str):
        backends = tuple(b.strip() for b in backends.split(",") if b.strip())
    say = log or (lambda s: None)
    stats = {} if stats is None else stats
    counts: Counter = Counter()
    reasons: Counter = Counter()
    found: list[Disagreement] = []
    seen: set = set()
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    n = 0
    while (programs is None or n < programs) and (minutes is None or time.monotonic() - start < 60 * minutes):
        program = generate(rng)
        use = [b for b in backends if b != "numba"]
        if "numba" in backends and (numba_every and n % numba_every == 0 or set(backends) <= {"python", "numba"}):
            use.append("numba")
        extras = (EXTRAS[(n // extras_every) % len(EXTRAS)],) if extras_every and n % extras_every == 0 else ()
        # Every other program on numba or C splits its kernel into pieces of a few lines (pieces.py; the C
        # pieces in files of their own), so that the split kernels run the same programs as whole ones.
        split = ("numba" in use or "c" in use) and (n // max(numba_every, 1)) % 2 == 1
        with pieces.sized(0, 1 + n % 40) if split else contextlib.nullcontext():
            checker = _Checker(program, tuple(use), extras, element=bool(element_every) and n % element_every == 0)
            try:
                results, status = checker.run(), checker.status
            except Exception as e:  # a bug of the fuzzer itself: say so, go on
                say(f"program {n}: the fuzzer failed: {_error(e)}\n{traceback.format_exc()}\n"
                    f"{program.snippet('python')}")
                results, status = [], "crash"
            counts[status] += 1
            if status in ("unsupported", "fallback"):
                reasons[f"{status}: {checker.note[:120]}"] += 1
            n += 1
            for d in _one_per_key(results):
                if d.kind == "error" and (d.key, _gist(d.detail)) in seen:
                    counts["repeated errors"] += 1  # the same exception again: not minimised again
                    continue
                seen.add((d.key, _gist(d.detail)))
                if minimise_seconds > 0:
                    d = minimise(d, tuple(use), minimise_seconds)
                sig = (d.key, d.program.source)
                if sig in seen:
                    continue
                seen.add(sig)
                found.append(d)
                say(f"\nDISAGREEMENT #{len(found)} (program {n - 1}, {time.monotonic() - start:.0f} s)\n{d}")
        if n % 25 == 0:
            say(f"{n} programs, {len(found)} disagreements ({dict(counts)}), {time.monotonic() - start:.0f} s")
    stats.update(programs=n, disagreements=len(found), seconds=time.monotonic() - start, **counts)
    stats["reasons"] = dict(reasons)
    stats["kinds"] = dict(Counter(d.kind for d in found))
    return found


def _gist(message: str) -> str:
    """An exception's message without the expressions and numbers in it (the same error, other programs)."""
    message = re.sub(r"expression .*? is unknown", "expression ... is unknown", message)
    return re.sub(r"\d+", "N", message)[:120]


def _one_per_key(found: list[Disagreement]) -> list[Disagreement]:
    """One disagreement per probe and kind (a wrong value usually makes every gradient wrong too)."""
    seen: dict = {}
    for d in found:
        seen.setdefault((d.probe, d.kind), d)
    return list(seen.values())


def _job(settings: dict) -> tuple[list[Disagreement], dict]:
    """One process's share of a soak: ``run`` with these settings; its disagreements and counts."""
    settings = dict(settings)
    if settings.get("parent") is not None:  # (a worker process)
        _exit_with_parent(settings["parent"])
    settings.pop("parent", None)
    tag, quiet = settings.pop("tag"), settings.pop("quiet")
    stats: dict = {}
    log = None if quiet else (lambda s: print("\n".join(tag + line for line in s.split("\n")), flush=True))
    return run(**settings, log=log, stats=stats), stats


def _exit_with_parent(parent: int) -> None:
    """End this process when ``parent``, the one that started it, has ended (a soak killed by its pid,
    not Ctrl-C, left its workers running on)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _added(parts: list[dict]) -> dict:
    """The counts of several ``run`` stats added (reasons and kinds too)."""
    total: dict = {"reasons": Counter(), "kinds": Counter()}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                total[key].update(value)
            else:
                total[key] = total.get(key, 0) + value
    return {k: dict(v) if isinstance(v, Counter) else v for k, v in total.items()}
