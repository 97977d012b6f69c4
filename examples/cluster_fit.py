"""Logistic regression on a data set larger than the workers' memory: 10^8 rows on disk, L-BFGS on a cluster.

    python examples/cluster_fit.py                    # 10^8 rows (3.6 GB of zarr), 2 workers of 1 GiB each
    python examples/cluster_fit.py --rows 1e5         # a quick run
    python examples/cluster_fit.py --scheduler tcp://host:8786   # a real cluster's scheduler instead

The loss is written for one example, as for data in memory; ``vg.sum(w, X, y)`` with X and y Dask arrays
read from a zarr store runs one task per chunk on the workers (each reads its chunk, runs the compiled
kernel, returns a value and a gradient) and adds the chunks' results in a fixed tree, so each L-BFGS
step is one pass over the data (an epoch) with the same bits whatever the workers. The data is made by
the workers too, chunk by chunk: it never passes through this process, and never fits in the memory the
workers are given.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster
from scipy.optimize import minimize
from symgrad.progress import phase  # (a status line on a terminal while the workers write the data)

import symgrad as sg

D = 8  # features, and an intercept


def loss(w, x, y):  # one example: the negative log-likelihood of its label
    z = np.dot(w[:-1], x) + w[-1]
    return np.logaddexp(0.0, z) - y * z


def make_data(path: str, n: int, chunk: int, w_true: np.ndarray) -> tuple:
    """X (n, D) and labels y drawn from the model at w_true, written to zarr by the workers, chunk by chunk."""
    rng = da.random.default_rng(42)
    X = rng.standard_normal((n, D), chunks=(chunk, D), dtype=np.float32)
    z = X @ w_true[:-1].astype(np.float32) + np.float32(w_true[-1])
    y = (rng.random(n, chunks=chunk, dtype=np.float32) < 1 / (1 + np.exp(-z))).astype(np.float32)
    dask.compute(X.to_zarr(os.path.join(path, "X"), compute=False),
                 y.to_zarr(os.path.join(path, "y"), compute=False))
    return da.from_zarr(os.path.join(path, "X")), da.from_zarr(os.path.join(path, "y"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e8)
    parser.add_argument("--chunk", type=float, default=1e6, help="rows per chunk (one task each)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory", default="1GiB", help="each worker's memory budget")
    parser.add_argument("--scheduler", help="a running cluster's scheduler address (else a LocalCluster)")
    parser.add_argument("--dir", help="where the zarr store goes (default: a temporary directory, removed)")
    args = parser.parse_args()
    n, chunk = int(args.rows), int(min(args.chunk, args.rows))
    path = args.dir or tempfile.mkdtemp(prefix="symgrad-distributed-")
    w_true = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -0.5, 0.25, -1.0, 0.3])

    if args.scheduler:
        client = Client(args.scheduler)
    else:
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                               memory_limit=args.memory, dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    try:
        start = time.perf_counter()
        with phase(f"making the data: {n:,} rows written to zarr by the workers"):
            X, y = make_data(path, n, chunk, w_true)
        stored = (X.nbytes + y.nbytes) / 2**30
        workers = client.scheduler_info()["workers"].values()
        budget = sum(w["memory_limit"] for w in workers) / 2**30
        print(f"data: {n:,} rows x {D} features in {X.numblocks[0]} chunks, {stored:.2f} GiB of zarr made by the "
              f"workers in {time.perf_counter() - start:.1f} s")
        print(f"workers: {len(workers)}, memory budget {budget:.2f} GiB in all: the data is "
              f"{'larger' if stored > budget else 'smaller'} than the budget")

        vg = sg.value_and_grad(loss)
        epochs, t0 = [0], time.perf_counter()

        def objective(w: np.ndarray) -> tuple:
            tic = time.perf_counter()
            value, grad = vg.sum(w, X, y)  # one pass over the data, on the workers
            epochs[0] += 1
            print(f"epoch {epochs[0]:3d}: mean loss {value / n:.6f}, |grad| {np.linalg.norm(grad) / n:.2e}, "
                  f"{time.perf_counter() - tic:.2f} s ({n / (time.perf_counter() - tic):,.0f} rows/s)", flush=True)
            return value / n, grad / n

        fit = minimize(objective, np.zeros(D + 1), jac=True, method="L-BFGS-B", options={"gtol": 1e-7})
        print(f"L-BFGS: {fit.nit} iterations, {epochs[0]} epochs in {time.perf_counter() - t0:.1f} s "
              f"({fit.message})")
        print("fitted w:", np.array2string(fit.x, precision=3))
        print("true w:  ", np.array2string(w_true, precision=3))
        print(f"max |w - w_true| = {np.max(np.abs(fit.x - w_true)):.4f}")
    finally:
        client.close()
        if not args.scheduler:
            cluster.close()
        if not args.dir:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
