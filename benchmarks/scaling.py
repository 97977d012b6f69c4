"""vg.sum over rows in Dask chunks: one process against a 2-worker LocalCluster on the same machine.

    python benchmarks/scaling.py              # 10^7 rows; prints a table (docs/scaling.md quotes it)
    python benchmarks/scaling.py --rows 1e6   # smaller
    python benchmarks/run.py distributed      # the same rows in run.py's table

Measures (best of 3 after a first call, which traces and compiles on each worker): rows per second in
one process (``vg.sum`` on NumPy arrays) and on the cluster (``vg.sum`` on a Dask array the workers
made and hold: no data travels), their ratio, the wall time per chunk with chunks of 100 rows (what
Dask's scheduling costs a chunk), whether the cluster's result has the same bits as this process's sum
over the same chunks (Dask's synchronous scheduler), and whether a worker killed mid-run changes it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="symgrad-bench-"))
import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402

import symgrad as sg  # noqa: E402
from symgrad.distributed import lazy_sum  # noqa: E402

D = 8  # features


def logistic(w, x, y):
    z = np.dot(w[:-1], x) + w[-1]
    return np.logaddexp(0.0, z) - y * z


def best(fn, w: np.ndarray, repeats: int = 3) -> float:
    """Seconds of the fastest of ``repeats`` calls ``fn(w)``, after a first (which traces and compiles where
    it runs); each at another ``w``, as an optimizer's steps (equal arguments would make equal Dask keys,
    whose results the scheduler may still hold)."""
    fn(w)
    times = []
    for k in range(repeats):
        v = w * (1.0 + 1e-9 * (k + 1))
        start = time.perf_counter()
        fn(v)
        times.append(time.perf_counter() - start)
    return min(times)


def same(a, b) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1])


def made_on_workers(client, n: int, rows: int) -> tuple:
    rng = da.random.default_rng(0)
    X = rng.standard_normal((n, D), chunks=(rows, D))
    y = (rng.random(n, chunks=rows) < 0.5).astype(float)
    return client.persist(X), client.persist(y)


def measure(row, n: int = 10**7, chunk_rows: int = 10**6, tiny_chunks: int = 400) -> dict:
    """Rows for run.py's table (``row(problem, tool, metric, seconds, base, unit)``); returns the numbers."""
    vg = sg.value_and_grad(logistic, backend="numba")  # (compiled at once: no loop-VM phase on either side)
    w = np.linspace(-0.5, 0.5, D + 1)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.CRITICAL)
    with cluster, distributed.Client(cluster) as client:
        X, y = made_on_workers(client, n, chunk_rows)
        Xn, yn = dask.compute(X, y)
        one = best(lambda v: vg.sum(v, Xn, yn), w)
        on_cluster = best(lambda v: vg.sum(v, X, y), w)
        Xc, yc = da.from_array(Xn, chunks=X.chunks), da.from_array(yn, chunks=y.chunks)
        with dask.config.set(scheduler="threads"):  # no cluster: the chunks on this process's threads
            threads = best(lambda v: vg.sum(v, Xc, yc), w)
        got = vg.sum(w, X, y)
        here = dask.compute(lazy_sum(vg, w, Xc, yc), scheduler="sync")[0]
        identical = same(got, here)
        whole = vg.sum(w, Xn, yn)
        close = abs(got[0] - whole[0]) <= 1e-12 * abs(whole[0]) and np.allclose(got[1], whole[1], rtol=1e-10)

        # Scheduling: chunks of 100 rows, whose work is microseconds.
        Xt, yt = made_on_workers(client, 100 * tiny_chunks, 100)
        tiny = best(lambda v: vg.sum(v, Xt, yt), w) / tiny_chunks
        piece = best(lambda v: vg.sum(v, Xn[:100], yn[:100]), w)
        single = best(lambda v: vg.sum(v, Xt[:100], yt[:100]), w)  # one chunk: the fixed cost of a computation

        # A worker killed while the sum runs: Dask makes its chunks again (the data too), the same bits.
        future = client.compute(lazy_sum(vg, w, X, y))
        pids = client.run(os.getpid)
        time.sleep(min(0.5, on_cluster / 3))
        in_flight = not future.done()
        victim = next(iter(pids))
        os.kill(pids[victim], signal.SIGKILL)
        after = future.result()
        unchanged = same(after, got)
        client.wait_for_workers(2, timeout=60)

    problem = f"vg.sum, logistic loss, {n:.0e} rows x {D}, chunks of {chunk_rows:.0e}"
    row(problem, "one process (NumPy arrays)", "time", one, None, "s")
    row(problem, "2-worker LocalCluster (Dask array on the workers)", "time", on_cluster, one, "s")
    row(problem, "one process, Dask's threads (the same chunks)", "time", threads, one, "s")
    row(problem, "one process", "rows per second", n / one, None, "rows/s")
    row(problem, "2-worker LocalCluster", "rows per second", n / on_cluster, None, "rows/s")
    row(f"Dask scheduling, {tiny_chunks} chunks of 100 rows", "2-worker LocalCluster", "wall time per chunk", tiny,
        None)
    row("Dask scheduling", "work of one 100-row chunk in one process", "time", piece, None)
    row("Dask scheduling", "a computation of one chunk (fixed cost)", "time", single, None, "s")
    NOTES.append(f"bit-identical to this process over the same chunks: {identical}; close to the whole "
                     f"in-memory sum: {close}; a worker killed mid-run (in flight: {in_flight}): unchanged: "
                     f"{unchanged}")
    return dict(one=one, cluster=on_cluster, threads=threads, ratio=on_cluster / one, per_chunk=tiny, piece=piece,
                single=single, identical=identical, close=close, in_flight=in_flight, unchanged=unchanged)


NOTES: list[str] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--chunk", type=float, default=1e6)
    args = parser.parse_args()
    rows: list = []

    def row(problem, tool, metric, seconds, base, unit="us"):
        if seconds is None:
            return
        value = f"{seconds * 1e3:.3f} ms" if unit == "us" else f"{seconds:.3f} s" if unit == "s" else \
            f"{seconds:,.0f} {unit}"
        rows.append((problem, tool, metric, value, f"{seconds / base:.2f}x" if base else ""))

    got = measure(row, int(args.rows), int(args.chunk))
    print("| problem | tool | metric | value | ratio |\n|---|---|---|---|---|")
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    print("\n" + "\n".join(NOTES))
    print(f"\nratio cluster / one process: {got['ratio']:.2f} (target <= 1.25); per chunk "
          f"{got['per_chunk'] * 1e3:.2f} ms (target <= 5)", file=sys.stderr)


if __name__ == "__main__":
    main()
