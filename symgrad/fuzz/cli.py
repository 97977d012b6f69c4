"""A differential fuzzer: random NumPy programs, run on every backend and checked against each other.

The command line, ``python -m symgrad.fuzz`` (see ``__main__.py``): ``main``. The line above, which
the package's docstring begins with too, is its ``--help`` description.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os

from symgrad.fuzz.runner import _added, _job


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m symgrad.fuzz --minutes 2``; exit status 1 where anything disagreed.

    >>> main(["--programs", "1", "--no-minimise", "--quiet"]) in (0, 1)  # doctest: +ELLIPSIS
    1 programs, ... disagreements
    True
    """
    ap = argparse.ArgumentParser(prog="python -m symgrad.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (1 if neither is given)")
    ap.add_argument("--programs", type=int, default=None, help="stop after this many programs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="python,vm",
                    help="comma-separated, of python,vm,c,numba (the compiled kernels only where named)")
    ap.add_argument("--numba-every", type=int, default=10,
                    help="numba (where in --backends) on every K-th program (0: never)")
    ap.add_argument("--extras-every", type=int, default=4, help="jvp/hvp/hessian/jacobian/vmap every K-th program")
    ap.add_argument("--element-every", type=int, default=1, help="the element trace on every K-th program")
    ap.add_argument("--minimise-seconds", type=float, default=60.0, help="time to minimise each disagreement")
    ap.add_argument("--no-minimise", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="only the summary line")
    ap.add_argument("--jobs", type=int, default=1, help="processes, each with its own seed (programs split)")
    a = ap.parse_args(argv)
    minutes = a.minutes if a.minutes is not None or a.programs is not None else 1.0
    jobs = max(1, a.jobs)
    share = None if a.programs is None else -(-a.programs // jobs)
    settings = [dict(programs=share, seed=a.seed + k, backends=a.backends, numba_every=a.numba_every,
                     extras_every=a.extras_every, minutes=minutes, element_every=a.element_every,
                     minimise_seconds=0.0 if a.no_minimise else a.minimise_seconds,
                     tag=f"[seed {a.seed + k}] " if jobs > 1 else "", quiet=a.quiet,
                     parent=os.getpid() if jobs > 1 else None) for k in range(jobs)]
    if jobs == 1:
        found, stats = _job(settings[0])
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_job, settings))
        found = [d for f, _ in results for d in f]
        stats = _added([st for _, st in results])
    if not a.quiet:
        print(f"\nstatuses: { {k: v for k, v in stats.items() if k not in ('reasons', 'seconds', 'kinds')} }")
        for reason, count in sorted(stats["reasons"].items(), key=lambda kv: -kv[1]):
            print(f"  {count} x {reason}")
        for d in found:
            print(f"[{d.probe}] {d.quantity} {d.kind}: {d.detail}")
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(stats["kinds"].items()))
    print(f"{stats['programs']} programs, {len(found)} disagreements" + (f" ({kinds})" if kinds else ""))
    return 1 if found else 0
