"""symgrad's exported C beside CasADi's generated C, on the same problems, both called through CasADi's
convention by one driver: file size, compile time (the same compiler and flags) and time per call.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/export_c.py [n ...]   (default 100 1000)

(the collocation problem at N = 200 and 2000 intervals; --collocation 200,1000 for others)

Needs casadi (pip install -e ".[bench]") and a C compiler ($CC or cc). Problems: Rosenbrock's value and
gradient, and its Hessian's nonzeros (compressed columns), and the spring chain's energy and gradient. Tools:
"symgrad" exports the formulas of n scalars as straight-line code (as CasADi's SX), up to n = 1000;
"symgrad loops" exports the same function written with NumPy, traced onto rolled arrays: loops whose file
does not grow with n (the sparse Hessian's: its band kernel, its pattern's nnz integers in the file, as
CasADi's); CasADi's SX up to
``CASADI_MAX`` (its file and compile time grow with n: minutes at 10^4). The collocation problem
(examples/collocation.py): its constraints' sparse Jacobian and its Lagrangian's sparse Hessian, symgrad's
rolled band kernels (with their patterns, nnz integers, in the file, as CasADi's) beside CasADi's SX.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import symgrad as sg
from symgrad.compile.function import value_and_grad

FLAGS = ["-std=c99", "-O2"]
DRIVER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int F(const double** arg, double** res, long long* iw, double* w, int mem);
int F_work(long long* sz_arg, long long* sz_res, long long* sz_iw, long long* sz_w);
long long F_n_in(void);
long long F_n_out(void);
const long long* F_sparsity_in(long long i);
const long long* F_sparsity_out(long long i);
static long long nnz(const long long* sp) {  /* CasADi's dense shorthand (nrow, ncol, 1) too */
    return sp[2] == 1 ? sp[0] * sp[1] : sp[2 + sp[1]];
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(void) {
    long long sz_arg, sz_res, sz_iw, sz_w;
    F_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
    const double** arg = malloc(sizeof(double*) * (size_t)(sz_arg + 1));
    double** res = malloc(sizeof(double*) * (size_t)(sz_res + 1));
    long long* iw = malloc(sizeof(long long) * (size_t)(sz_iw + 1));
    double* w = malloc(sizeof(double) * (size_t)(sz_w + 1));
    for (long long i = 0; i < F_n_in(); ++i) {
        long long n = nnz(F_sparsity_in(i));
        double* x = malloc(sizeof(double) * (size_t)n);
        for (long long k = 0; k < n; ++k) x[k] = 0.5 + 0.01 * (double)(k % 97);
        arg[i] = x;
    }
    for (long long i = 0; i < F_n_out(); ++i)
        res[i] = malloc(sizeof(double) * (size_t)(nnz(F_sparsity_out(i)) + 1));
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        long long calls = 0;
        double start = now(), t;
        do { F(arg, res, iw, w, 0); ++calls; t = now() - start; } while (t < 0.05);
        if (t / (double)calls < best) best = t / (double)calls;
    }
    double check = 0.0;  /* each entry weighed by its row and column: the same for any pattern holding it */
    for (long long i = 0; i < F_n_out(); ++i) {
        const long long* sp = F_sparsity_out(i);
        for (long long c = 0, k = 0; c < sp[1]; ++c) {
            long long end = sp[2] == 1 ? (c + 1) * sp[0] : sp[2 + c + 1];
            for (; k < end; ++k) {
                long long r = sp[2] == 1 ? k - c * sp[0] : sp[2 + sp[1] + 1 + k];
                check += res[i][k] * (double)(1 + (r * 7 + c) % 11);
            }
        }
    }
    printf("%.9e %.17g\n", best, check);
    return 0;
}
"""


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def springs(x):
    """A chain of n / 2 masses in the plane joined by springs of rest length 0.1, under gravity."""
    pts = [(x[2 * i], x[2 * i + 1]) for i in range(len(x) // 2)]
    energy = sum(9.81 * y for _, y in pts)
    for (a, b), (c, d) in zip(pts, pts[1:]):
        stretch = ((a - c) ** 2 + (b - d) ** 2) ** 0.5 - 0.1
        energy = energy + 50.0 * stretch * stretch
    return energy


CASADI_MAX = 10_000
STRAIGHT_MAX = 1_000


def rosenbrock_numpy(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def springs_numpy(x):
    pts = x.reshape(-1, 2)
    d = pts[1:] - pts[:-1]
    stretch = np.sqrt(d[:, 0] ** 2 + d[:, 1] ** 2) - 0.1
    return 9.81 * np.sum(pts[:, 1]) + np.sum(50.0 * stretch * stretch)


NUMPY = {rosenbrock: rosenbrock_numpy, springs: springs_numpy}


def _loops(problem: str, f, n: int, folder: Path) -> Path:
    fun = sg.hessian(NUMPY[f], sparse=True) if problem == "hessian" else sg.value_and_grad(NUMPY[f])
    return sg.export_c(fun, np.ones(n), name="F", directory=folder)[0]


def _symgrad(problem: str, f, n: int, folder: Path) -> Path:
    x = sg.vector("x", n)
    e = f(list(x))
    # (gradient= given: the straight-line formulas, as CasADi's SX, not rerolled into loops)
    fun = value_and_grad(e, list(x), gradient=sg.grad(e, list(x)), backend="vm") if problem != "hessian" \
        else sg.compile(sg.hessian(e, list(x), sparse=True), list(x), backend="vm")
    return sg.export_c(fun, name="F", directory=folder)[0]


def _collocation(n: int):
    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    import collocation

    collocation.N = n
    return collocation


def _loops_collocation(problem: str, f, n: int, folder: Path) -> Path:
    cp = _collocation(n)
    z, lam = cp.guess(), np.ones(4 * n + 8)
    fun = sg.jacobian(cp.defects, sparse=True) if problem == "collocation jacobian" else \
        sg.hessian(lambda z, lam: cp.effort(z) + lam @ cp.defects(z), sparse=True)
    args = (z,) if problem == "collocation jacobian" else (z, lam)
    return sg.export_c(fun, *args, name="F", directory=folder)[0]


def _casadi_collocation(problem: str, f, n: int, folder: Path) -> Path:
    import casadi as ca

    cp = _collocation(n)
    z, lam = ca.SX.sym("z", 5 * (n + 1)), ca.SX.sym("lam", 4 * n + 8)
    g = cp.defects(z, ca, lambda parts: ca.vertcat(*parts))
    u = z[4 * (n + 1):]
    effort = cp.T / n * (ca.sumsqr(u) - (u[0] ** 2 + u[-1] ** 2) / 2)
    fun = ca.Function("F", [z], [ca.jacobian(g, z)]) if problem == "collocation jacobian" else \
        ca.Function("F", [z, lam], [ca.hessian(effort + ca.dot(lam, g), z)[0]])
    fun.generate("F.c", {"with_header": False})
    shutil.move("F.c", folder / "F.c")
    return folder / "F.c"


def _casadi(problem: str, f, n: int, folder: Path) -> Path:
    import casadi as ca

    x = ca.SX.sym("x", n)
    e = f([x[i] for i in range(n)])
    outs = [e, ca.gradient(e, x)] if problem != "hessian" else [ca.hessian(e, x)[0]]
    ca.Function("F", [x], outs).generate("F.c", {"with_header": False})
    path = folder / "F.c"
    shutil.move("F.c", path)
    return path


def measure(path: Path, cc: str) -> tuple[int, float, float, float]:
    """(file bytes, compile seconds, seconds per call, a checksum of the outputs)."""
    folder = path.parent
    (folder / "driver.c").write_text(DRIVER)
    start = time.perf_counter()
    subprocess.run([cc, *FLAGS, "-c", str(path), "-o", str(folder / "F.o")], check=True, capture_output=True)
    compiled = time.perf_counter() - start
    subprocess.run([cc, *FLAGS, str(folder / "driver.c"), str(folder / "F.o"), "-o", str(folder / "run"), "-lm"],
                   check=True, capture_output=True)
    run = subprocess.run([str(folder / "run")], check=True, capture_output=True, text=True)
    per_call, check = run.stdout.split()
    return path.stat().st_size, compiled, float(per_call), float(check)


def main(sizes: list[int], collocation: list[int], only: str = "") -> None:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        sys.exit("needs a C compiler ($CC or cc)")
    print(f"{'problem':<40}{'tool':<15}{'file KB':>10}{'compile s':>11}{'per call us':>13}")
    for problem, f in (("rosenbrock value+grad", rosenbrock), ("hessian", rosenbrock),
                       ("springs value+grad", springs), ("collocation jacobian", None),
                       ("collocation lagrangian hessian", None)):
        label = "rosenbrock sparse hessian" if problem == "hessian" else problem
        for n in (sizes if f is not None else collocation) if only in label else ():
            checks = []
            if f is None:  # (the collocation problem: NumPy traced, CasADi SX, N intervals)
                tools = [("symgrad loops", _loops_collocation)]
                tools += [("CasADi", _casadi_collocation)] if 5 * n <= CASADI_MAX else []
            else:
                tools = [("symgrad", _symgrad)] if n <= STRAIGHT_MAX else []
                tools += [("symgrad loops", _loops)] if problem != "hessian" or n >= 64 else []
                tools += [("CasADi", _casadi)] if n <= CASADI_MAX else []
            for tool, export in tools:
                folder = Path(tempfile.mkdtemp(prefix="export-"))
                cwd = os.getcwd()
                os.chdir(folder)
                try:
                    size, compiled, per_call, check = measure(export(problem, f, n, folder), cc)
                finally:
                    os.chdir(cwd)
                checks.append(check)
                print(f"{f'{label} n={n}':<40}{tool:<15}{size / 1024:>10.1f}{compiled:>11.2f}"
                      f"{per_call * 1e6:>13.3f}", flush=True)
            assert np.allclose(checks, checks[0], rtol=1e-9), checks


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="*", default=[100, 1000], help="sizes of Rosenbrock and the springs")
    ap.add_argument("--collocation", default="200,2000", help="the collocation problem's N, comma-separated")
    ap.add_argument("--only", default="", help="the problems whose name (as printed) holds this")
    ap.add_argument("--casadi-max", type=int, default=CASADI_MAX, help="the largest n CasADi's SX is run at")
    ap.add_argument("--flags", default=" ".join(FLAGS), help="the compiler's flags, for both tools")
    a = ap.parse_args()
    CASADI_MAX, FLAGS = a.casadi_max, a.flags.split()
    main(a.n, [int(v) for v in a.collocation.split(",")], a.only)
