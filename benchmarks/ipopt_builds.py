"""What makes an IPOPT iteration slow: the cart-pole collocation (examples/collocation.py) on each
IPOPT build installed (`sg.ipopt.builds()`), under MUMPS orderings and BLAS thread counts, one
process a run; IPOPT's own CPU time (`print_timing_statistics`, callbacks excluded) per solve.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/ipopt_builds.py [--n 2000]
        [--orders auto,0] [--threads 1,2] [--preload /path/libblas.so.3] [--repeat 2]

(--preload puts another BLAS under every build through LD_PRELOAD: its dgemm_ and friends are found
before the build's own.) The table in docs/performance.md ("Which IPOPT build") came from here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATISTICS = ("OverallAlgorithm", "LinearSystemBackSolve", "Function Evaluations")


def solve(n: int, path: str, options: dict) -> dict:
    """One solve, after a first one that compiles: iterations, wall time an iteration, IPOPT's CPU times."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    import collocation as cp
    from scipy.optimize import NonlinearConstraint

    import symgrad as sg

    cp.N = n
    problem = sg.optimize.Problem(cp.effort, [NonlinearConstraint(cp.defects, 0.0, 0.0)], cp.guess())
    problem.ready()
    sg.optimize._ipopt(problem, cp.guess(), *cp.bounds(), {"tol": 1e-8}, path)
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "ipopt.txt")
        start = time.perf_counter()
        result = sg.optimize._ipopt(problem, cp.guess(), *cp.bounds(), {
            "tol": 1e-8, "print_timing_statistics": "yes", "output_file": log, "file_print_level": 5,
            **options}, path)
        took = time.perf_counter() - start
        lines = Path(log).read_text().splitlines()
    cpu = {line.split(".")[0].strip(): float(line.split(":")[1].split()[0]) for line in lines
           if line.strip().startswith(STATISTICS) and ":" in line}
    return {"iterations": result.nit, "optimum": result.fun, "ms": 1e3 * took / max(result.nit, 1), **cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--orders", default="auto,0", help="mumps_pivot_order values (auto: IPOPT's default)")
    parser.add_argument("--threads", default="1", help="OPENBLAS_NUM_THREADS values")
    parser.add_argument("--preload", default="", help="a BLAS library put under every build")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # (a child process: build path and options, JSON)
    args = parser.parse_args()
    if args.one:
        path, options = json.loads(args.one)
        print(json.dumps(solve(args.n, path, options)))
        return
    from symgrad.solvers import ipopt

    print("| build | mumps_pivot_order | BLAS threads | iterations | ms an iteration | IPOPT CPU s "
          "| back solves s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for _ in range(args.repeat):
        for build, path in ipopt.builds().items():
            for order in args.orders.split(","):
                for threads in args.threads.split(","):
                    options = {} if order == "auto" else {"mumps_pivot_order": int(order)}
                    env = {**os.environ, "OPENBLAS_NUM_THREADS": threads,
                           **({"LD_PRELOAD": args.preload} if args.preload else {})}
                    out = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--one",
                                          json.dumps([path, options])], env=env, capture_output=True, text=True)
                    if out.returncode:
                        print(f"| {build} | {order} | {threads} | failed: {out.stderr.strip()[-200:]} |||")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"| {build} {ipopt.version(path) or ''} | {order} | {threads} | "
                          f"{r['iterations']} | {r['ms']:.1f} | {r['OverallAlgorithm']:.2f} | "
                          f"{r['LinearSystemBackSolve']:.2f} |")


if __name__ == "__main__":
    main()
