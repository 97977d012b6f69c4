"""GradBench evaluations (github.com/gradbench/gradbench) as JAX-style code, run under JAX and symgrad.

The problems live in symgrad.gradbench (the GradBench tool); each is written once against a
namespace ``J`` (``J.np``: jax.numpy or symgrad.numpy;
``J.lax``, ``J.grad``, ``J.jvp``, ``J.vmap``, ``J.jit`` from jax or symgrad), from the problem
definitions in GradBench's evals (READMEs, C++ references, input generators; sizes are GradBench's).
``benchmarks/run.py gradbench`` times each under both and checks that they agree; with
``$GRADBENCH`` a GradBench checkout, GradBench's hand-written C++ (``tools/manual``) too, on the same input.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from symgrad.gradbench.ba import ba_reprojection, ba_residuals
from symgrad.gradbench.ba import prepare as ba_expand
from symgrad.gradbench.gmm import gmm_objective
from symgrad.gradbench.kmeans import kmeans_cost, kmeans_cost_matmul, kmeans_dir
from symgrad.gradbench.llsq import llsq
from symgrad.gradbench.lse import lse
from symgrad.gradbench.lstm import lstm_objective
from symgrad.gradbench.namespaces import namespace
from symgrad.gradbench.ode import ode

__all__ = ["namespace"]  # run.py reaches it as gradbench.namespace

# ---- k-means: the direction gradient / Hessian diagonal (GradBench "kmeans", function "dir") ------


def kmeans_input(n, k, d, seed=31337):
    rng = np.random.RandomState(seed)
    points = rng.rand(n, d)
    return {"points": points, "centroids": points[-k:].copy()}  # each centroid some point's nearest: H invertible


# ---- llsq: linear least squares, 1/2 sum_i (sign(t_i) - sum_j x_j t_i^j)^2 -------------------------


# ---- lse: log-sum-exp with the max shift ------------------------------------------------------------


# ---- GMM: log posterior of a Gaussian mixture with a Wishart prior (ADBench, GradBench's fixes) -----


def gmm_input(d, k, n, m=0, gamma=1.0, seed=31337):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    alpha = rng.normal(size=k)
    mu = rng.uniform(size=(k, d))
    q = rng.normal(size=(k, d))
    ltri = rng.normal(size=(k, d * (d - 1) // 2))
    return {"d": d, "k": k, "n": n, "alpha": alpha, "mu": mu, "q": q, "l": ltri, "x": x, "m": m, "gamma": gamma}


# ---- ODE: s steps of RK4 on y0' = x0, yi' = xi y(i-1), y(0) = 0, to t = 2 ---------------------------


# ---- LSTM (ADBench): diagonal weights, l layers, c characters of b bits -----------------------------


def lstm_input(layers, chars, bits=14, seed=31337):
    """GradBench draws state and parameters uniform in [0, 1); its sequence is a text's characters
    as bits: random bits here (the cost does not depend on them)."""
    rng = np.random.RandomState(seed)
    state = rng.random_sample((2 * layers, bits))
    main_params = rng.random_sample((2 * layers, 4 * bits))
    extra_params = rng.random_sample((3, bits))
    sequence = rng.randint(0, 2, size=(chars, bits)).astype(float)
    return {"main_params": main_params, "extra_params": extra_params, "state": state, "sequence": sequence}


# ---- bundle adjustment: the sparse Jacobian (GradBench "ba", ADBench's objective) ------------------


def ba_input(n, m, p, seed=31337):
    """GradBench's BA input: one camera, point, weight and feature, which the tools repeat
    (symgrad.gradbench.ba.prepare: observation i sees camera i mod n and point i mod m)."""
    rng = np.random.RandomState(seed)
    cam = np.concatenate([rng.uniform(-0.2, 0.2, 3), rng.uniform(-1, 1, 3), [400.0], rng.uniform(-5, 5, 2),
                          rng.uniform(-1e-3, 1e-3, 2)])
    X, w, feat = rng.uniform(-1, 1, 3) + [0.0, 0.0, 5.0], rng.uniform(0.5, 1.5), rng.uniform(-50, 50, 2)
    return {"n": n, "m": m, "p": p, "cam": cam, "x": X, "w": w, "feat": feat}


def _ba(n, m, p):
    """symgrad: sg.jacobian(sparse=True) of the objective on the flat unknowns (CSR); JAX: the 2 x 15
    blocks by vmap(jacrev) of one observation's error, as JAX users write a sparse BA Jacobian (its
    assembly into a sparse matrix not timed), and the weight errors' diagonal. Compared entry by entry."""
    raw = ba_input(n, m, p)
    cams, X, w, feats, obs = ba_expand(raw)
    z = np.concatenate([cams.ravel(), X.ravel(), w])
    cols = np.concatenate([11 * obs[:, :1] + np.arange(11), 11 * n + 3 * obs[:, 1:] + np.arange(3),
                           11 * n + 3 * m + np.arange(p)[:, None]], axis=1)  # (p, 15): a block's columns

    def make(J):
        if J.name == "symgrad":
            import symgrad as sg

            return sg.jacobian(lambda z: ba_residuals(J, z, obs, feats, n, m), sparse=True), (z,)
        import jax

        def blocks(z):
            cams, X, w = z[:11 * n].reshape(n, 11), z[11 * n:11 * n + 3 * m].reshape(m, 3), z[11 * n + 3 * m:]
            one = jax.jacrev(lambda c, x, wi, f: ba_reprojection(J, c, x, wi, f), argnums=(0, 1, 2))
            dc, dx, dw = J.vmap(one)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
            return J.np.concatenate([dc, dx, dw[:, :, None]], axis=2), -2.0 * w
        return J.jit(blocks), (z,)

    def canon(result):
        """The Jacobian's entries in the order (observation, residual, block column), then the weights'."""
        import scipy.sparse

        if isinstance(result, tuple):
            return np.concatenate([np.asarray(result[0]).ravel(), np.asarray(result[1])])
        M = scipy.sparse.csr_matrix(result)
        rows = np.concatenate([np.repeat(np.arange(2 * p), 15), 2 * p + np.arange(p)])
        at = np.concatenate([np.repeat(cols, 2, axis=0).ravel(), 11 * n + 3 * m + np.arange(p)])
        return np.asarray(M[rows, at]).ravel()

    make.canon = canon
    make.gradbench = ("ba", "jacobian", raw)
    return make


# ---- the cases and their timing ---------------------------------------------------------------------


def case(function, gradbench, *names):
    """``make``: make(J) is (function(J), the input's ``names``); make.gradbench is GradBench's
    (eval, function, input), so that its tools see the same arrays."""
    def make(J):
        return function(J), tuple(gradbench[2][name] for name in names)
    make.gradbench = gradbench
    return make


def _kmeans(cost, n, k, d):
    return case(lambda J: J.jit(lambda p, c: kmeans_dir(J, cost, p, c)), ("kmeans", "dir", kmeans_input(n, k, d)),
                "points", "centroids")


def _llsq(n, m=128):
    raw = {"x": np.random.RandomState(31337).rand(m), "n": n}
    return case(lambda J: J.jit(J.grad(lambda x: llsq(J, x, n))), ("llsq", "gradient", raw), "x")


def _lse(n):
    raw = {"x": np.random.RandomState(31337).rand(n)}
    return case(lambda J: J.jit(J.grad(lambda x: lse(J, x))), ("lse", "gradient", raw), "x")


def _gmm(d, k, n, m=0, gamma=1.0):
    return case(lambda J: J.jit(J.grad(lambda *a: gmm_objective(J, *a, m, gamma), argnums=(0, 1, 2, 3))),
                ("gmm", "jacobian", gmm_input(d, k, n, m, gamma)), "alpha", "mu", "q", "l", "x")


def _ode(n, s, gradient):
    """(GradBench's hand-written C++ gradient is the exact solution's, prod(x) 2^n / n! / x_i: O(n) for any s.)"""
    def function(J):
        def y(x):
            return ode(J, x, s)
        return J.jit(J.grad(lambda x: y(x)[-1]) if gradient else y)
    raw = {"x": np.random.RandomState(31337).rand(n), "s": s}
    return case(function, ("ode", "gradient" if gradient else "primal", raw), "x")


def _lstm(layers, chars, gradient):
    def function(J):
        def objective(*args):
            return lstm_objective(J, *args)
        return J.jit(J.grad(objective, argnums=(0, 1)) if gradient else objective)
    return case(function, ("lstm", "jacobian" if gradient else "objective", lstm_input(layers, chars)),
                "main_params", "extra_params", "state", "sequence")


# (problem, what is computed, make): make(J) gives (function, arguments), built from nothing;
# make.gradbench: GradBench's (eval, function, input) on the same arrays, for its tools.
CASES = [
    ("kmeans dir k=100 n=10^4 d=16, |p-c|^2 by differences", "grad / Hessian diagonal",
     _kmeans(kmeans_cost, 10_000, 100, 16)),
    ("kmeans dir k=100 n=10^4 d=16, |p|^2+|c|^2-2p.c (matmul)", "grad / Hessian diagonal",
     _kmeans(kmeans_cost_matmul, 10_000, 100, 16)),
    ("llsq n=1024 m=128 (vmap over i)", "gradient", _llsq(1024)),
    ("llsq n=16392 m=128 (vmap over i)", "gradient", _llsq(16392)),
    ("lse n=1.28*10^6", "gradient", _lse(1_280_000)),
    ("gmm d=10 k=25 n=1000", "gradient", _gmm(10, 25, 1000)),
    ("ode n=10^4 s=10", "primal", _ode(10_000, 10, False)),
    ("ode n=10^4 s=10", "gradient of y[-1]", _ode(10_000, 10, True)),
    ("ode n=10^4 s=100", "primal", _ode(10_000, 100, False)),
    ("ode n=10^4 s=100", "gradient of y[-1]", _ode(10_000, 100, True)),
    ("ode n=10 s=1000 (a small state, not GradBench's size)", "gradient of y[-1]", _ode(10, 1000, True)),
    ("lstm l=4 c=4096 b=14 (lax.scan)", "objective", _lstm(4, 4096, False)),
    ("lstm l=4 c=4096 b=14 (lax.scan)", "gradient", _lstm(4, 4096, True)),
    ("ba n=49 m=7776 p=31843 (ADBench ba1's sizes)", "sparse Jacobian", _ba(49, 7776, 31843)),
]


def leaves(result) -> list[np.ndarray]:
    if isinstance(result, tuple | list):
        return [a for r in result for a in leaves(r)]
    return [np.asarray(result, dtype=float)]


def agree(got, want, rtol: float = 1e-8) -> tuple[float, float]:
    """The largest relative difference of an output, 2-norm-wise (asserted <= rtol), and entrywise
    relative to the output's largest entry (no assertion: lse's gradient entry at the max adds
    1 - sum(softmax), a rounding error of the sum of all n terms)."""
    norm = largest = 0.0
    for a, b in zip(leaves(got), leaves(want), strict=True):
        assert a.shape == b.shape, (a.shape, b.shape)
        norm = max(norm, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)))
        largest = max(largest, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)))
    assert norm <= rtol, f"results disagree: relative difference {norm:.3g} (2-norm)"
    return norm, largest


def timed(per_call, fn, *args) -> float:
    """Seconds per call: run.py's per_call (best of 5 repeats of ~0.1 s), or the best of 3 single
    calls where one takes over a second, or one call where it takes over a minute."""
    start = time.perf_counter()
    fn(*args)
    once = time.perf_counter() - start
    if once > 60.0:
        return once
    if once > 1.0:
        for _ in range(2):
            start = time.perf_counter()
            fn(*args)
            once = min(once, time.perf_counter() - start)
        return once
    return per_call(fn, *args)


# ---- GradBench's hand-written C++ (tools/manual): the limit column ---------------------------------

MANUAL = "GradBench hand C++ (tools/manual)"
MANUAL_MISSING = ("not measured: set GRADBENCH to a GradBench checkout (git clone "
                  "https://github.com/gradbench/gradbench; make -C cpp, or nlohmann-json installed)")


def checkout() -> tuple[Path, list[Path]] | None:
    """$GRADBENCH and the include folders for tools/manual, or None where it is no GradBench checkout
    (nlohmann's json.hpp: cpp/json.hpp, which GradBench's ``make -C cpp`` downloads, or the system's)."""
    root = Path(os.environ["GRADBENCH"]) if os.environ.get("GRADBENCH") else None
    if root is None or not (root / "tools/manual").is_dir() or not (root / "cpp/gradbench/main.hpp").is_file():
        return None
    system = Path("/usr/include/nlohmann")
    if (root / "cpp/json.hpp").is_file():
        return root, [root / "cpp"]
    return (root, [root / "cpp", system]) if (system / "json.hpp").is_file() else None


def manual_binary(root: Path, includes: list[Path], eval_name: str) -> Path:
    """tools/manual/EVAL.cpp compiled as GradBench's cpp.py compiles a tool it runs (its Makefile with
    NATIVE=yes, MULTITHREADED=no: single-threaded), into a cache folder outside the checkout; again
    only when missing or older than its sources."""
    sources = [root / f"tools/manual/{eval_name}.cpp", root / f"tools/manual/{eval_name}_d.hpp",
               root / f"cpp/gradbench/evals/{eval_name}.hpp"]
    binary = Path(tempfile.gettempdir()) / "symgrad-gradbench-manual" / eval_name
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources if s.exists()):
        return binary
    binary.parent.mkdir(exist_ok=True)
    building = binary.with_suffix(f".{os.getpid()}")
    subprocess.run(["g++", "-std=c++17", "-O3", "-march=native", "-Wno-unknown-pragmas",
                    *(f"-I{folder}" for folder in includes), "-o", str(building), str(sources[0]), "-lm"],
                   check=True, capture_output=True, text=True)
    os.replace(building, binary)
    return binary


def run_manual(binary: Path, function: str, raw: dict, min_seconds: float = 1.0) -> tuple[object, float, float]:
    """GradBench's output of ``binary FILE function`` on the input ``raw``, the seconds to its first
    result (its prepare and first evaluate: not the JSON's parsing) and per call (the best of the
    evaluates in ``min_seconds``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump({**raw, "min_runs": 1, "min_seconds": min_seconds}, file, default=np.ndarray.tolist)
        file.flush()
        lines = subprocess.run([str(binary), file.name, function], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    timings = [json.loads(line) for line in lines[1:]]
    prepare = sum(t["nanoseconds"] for t in timings if t["name"] == "prepare")
    evaluate = [t["nanoseconds"] for t in timings if t["name"] == "evaluate"]
    return json.loads(lines[0]), (prepare + evaluate[0]) / 1e9, min(evaluate) / 1e9


def manual_leaves(output, like) -> list[np.ndarray]:
    """GradBench's output as the leaves of ``like`` (symgrad's result): its parts flattened in
    order (a GMM gradient's in the arguments' order alpha, mu, q, l), cut to their shapes."""
    parts = [output[name] for name in ("alpha", "mu", "q", "l")] if isinstance(output, dict) else [output]
    flat = np.concatenate([np.ravel(np.asarray(part, dtype=float)) for part in parts])
    shapes = [leaf.shape for leaf in leaves(like)]
    assert flat.size == sum(int(np.prod(shape)) for shape in shapes), (flat.size, shapes)
    ends = np.cumsum([int(np.prod(shape)) for shape in shapes])[:-1]
    return [piece.reshape(shape) for piece, shape in zip(np.split(flat, ends), shapes, strict=True)]
