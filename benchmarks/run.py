"""symgrad against hand-written Numba, SymPy, JAX and CasADi: prints a table, writes docs/performance.md.

    python benchmarks/run.py            # JAX and CasADi too where installed: pip install -e ".[bench]"
    python benchmarks/run.py p1 p4      # some steps only: prints, leaves docs/performance.md alone
    python benchmarks/run.py gradbench cold_start --write   # ... and keeps them there, in a table of their own
    GRADBENCH=DIR python benchmarks/run.py   # DIR a GradBench checkout: its hand C++ in the gradbench step

Times are the best of several repeats (per call) or one cold run (time to first result:
build the formula, differentiate, compile, first call). symgrad compiles into a fresh
cache directory, so nothing comes from an earlier run's disk cache, except where a row
says so.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numba
import numpy as np
import scipy.sparse
import sympy

os.environ["SYMGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="symgrad-bench-")
import symgrad as sg  # noqa: E402  (after the cache directory is chosen)
import baselines as hand  # noqa: E402

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "casadi")}
if HAVE["jax"]:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
if HAVE["casadi"]:
    import casadi as ca

ROWS: list[tuple[str, str, str, str, str]] = []  # problem, tool, metric, value, ratio


def settled(fn, backend: str | None = None) -> float:
    """Seconds until tiered compilation has its final kernels in, or ``backend``'s (a symgrad function
    first runs on the loop VM or its C kernels while Numba compiles it): 0 where nothing is pending."""
    start = time.perf_counter()
    if isinstance(fn, sg.Function) and fn._last is None:  # a rolled sparse Jacobian / Hessian: its kernels
        for sparse in fn._sparse_rolled.values():
            if sparse is not None:
                sparse.ready(backend)
        return time.perf_counter() - start
    target = getattr(fn, "compiled", fn) if isinstance(fn, sg.Function) else fn
    if isinstance(target, sg.Compiled):
        target.ready(backend)
    return time.perf_counter() - start


def per_call(fn, *args) -> float:
    """Seconds per call of the final kernels: best of 5 repeats of ~0.1 s."""
    settled(fn)
    timer = timeit.Timer(lambda: fn(*args))
    number, _ = timer.autorange()
    return min(timer.repeat(5, max(1, number // 2))) / max(1, number // 2)


def first(make, *args) -> tuple[float, object]:
    """Seconds from nothing to the first result of ``make(*args)``: it builds, compiles and calls once."""
    start = time.perf_counter()
    fn = make(*args)
    return time.perf_counter() - start, fn


def first_and_per_call(name: str, tool: str, base: float | None, v, make, *args):
    """Rows for the time to the first result of ``make(*args)`` and for calling what it returns
    at ``v`` (``tool`` may name it: ``{fn.backend}``; ``base`` None: this is the baseline).
    Returns the seconds per call and the function."""
    t, fn = first(make, *args)
    t_final = t + settled(fn)
    seconds = per_call(fn, v)
    tool = tool.format(fn=fn)
    row(name, tool, "first result", t, None, "s")
    if t_final > t + 0.01:
        row(name, tool, "Numba kernels in (background)", t_final, None, "s")
    row(name, tool, "per call", seconds, base or seconds)
    return seconds, fn


def contenders(name: str, base: float, v, n: int, jax_f, casadi_f) -> None:
    """JAX and CasADi on the same problem, where installed."""
    if HAVE["jax"]:
        first_and_per_call(name, "JAX jit(value_and_grad)", base, v, jax_first, jax_f, v)
    if HAVE["casadi"]:
        first_and_per_call(name, "CasADi SX Function", base, v, casadi_first, casadi_f, n, v)


def row(problem: str, tool: str, metric: str, seconds: float | None, base: float | None, unit: str = "us") -> None:
    if seconds is None:
        ROWS.append((problem, tool, metric, "-", ""))
        return
    value = f"{seconds * 1e6:.2f} us" if unit == "us" else f"{seconds:.3f} s" if unit == "s" else \
        f"{seconds:,.1f} {unit}"
    ratio = f"{seconds / base:.2f}x" if base else ""
    ROWS.append((problem, tool, metric, value, ratio))


# ---- P1: x*y + sin(x), single-point value and gradient ----------------------------------------

def p1() -> None:
    x, y = sg.symbols("x y")
    f = x * y + sg.sin(x)
    v = np.array([2.0, 3.0])
    hand.p1(v)
    base = per_call(hand.p1, v)
    row("P1 x*y+sin(x)", "hand-written @njit", "per call", base, base)
    for backend in ("numba", "vm"):
        vg = sg.value_and_grad(f, [x, y], backend=backend)
        row("P1 x*y+sin(x)", f"symgrad {backend}", "per call", per_call(vg, v), base)
    g = np.empty(2)
    vg = sg.value_and_grad(f, [x, y])
    row("P1 x*y+sin(x)", "symgrad numba, out=", "per call", per_call(lambda: vg(v, out=g)), base)
    for kind, arg in (("list", [2.0, 3.0]), ("float32 array", v.astype(np.float32))):
        row("P1 x*y+sin(x)", f"symgrad numba, {kind} argument", "per call", per_call(vg, arg), base)
    sx, sy = sympy.symbols("x y")
    sf = sx * sy + sympy.sin(sx)
    lam = sympy.lambdify([sx, sy], [sf, sympy.diff(sf, sx), sympy.diff(sf, sy)])
    row("P1 x*y+sin(x)", "SymPy lambdify", "per call", per_call(lam, *v), base)
    if HAVE["jax"]:
        jf = jax_first(lambda w: w[0] * w[1] + jnp.sin(w[0]), v)
        row("P1 x*y+sin(x)", "JAX jit(value_and_grad)", "per call", per_call(jf, v), base)
    if HAVE["casadi"]:
        w = ca.SX.sym("w", 2)
        cf = w[0] * w[1] + ca.sin(w[0])
        F = ca.Function("f", [w], [cf, ca.gradient(cf, w)])
        row("P1 x*y+sin(x)", "CasADi SX Function", "per call", per_call(F, v), base)


# ---- P2: extended (chained) Rosenbrock ----------------------------------------------------------

def rosen_sg(n: int, backend: str = "auto"):
    xs = sg.vector("x", n)
    with sg.paused_gc():
        f = sum(100.0 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1.0 - xs[i]) ** 2 for i in range(n - 1))
    vg = sg.value_and_grad(f, xs, backend=backend)
    vg(np.full(n, 0.5))
    return vg


def p2() -> None:
    for n in (2, 100, 1000, 10000):
        name = f"P2 Rosenbrock n={n}"
        v = np.linspace(-1.0, 1.5, n)
        base, _ = first_and_per_call(name, "hand-written @njit", None, v, hand.fresh, hand.rosen, v)
        _, vg = first_and_per_call(name, "symgrad auto ({fn.backend}, {fn.n_ops} ops)", base, v, rosen_sg, n)
        if vg.backend == "vm" and n <= 100:
            first_and_per_call(name, "symgrad numba", base, v, rosen_sg, n, "numba")
        if n <= 100:
            first_and_per_call(name, "SymPy diff + lambdify", base, v, rosen_sympy, n)
        contenders(name, base, v, n, jax_rosen, casadi_rosen)


def rosen_sympy(n: int):
    s = sympy.symbols(f"x0:{n}")
    f = sum(100 * (s[i + 1] - s[i] ** 2) ** 2 + (1 - s[i]) ** 2 for i in range(n - 1))
    lam = sympy.lambdify(s, [f, *[sympy.diff(f, v) for v in s]])
    lam(*np.full(n, 0.5))
    return lambda v: lam(*v)


def jax_rosen(w):
    return jnp.sum(100.0 * (w[1:] - w[:-1] ** 2) ** 2 + (1.0 - w[:-1]) ** 2)


def jax_first(f, v):
    """jit(value_and_grad(f)), compiled by a first call; calls wait for the result."""
    jf = jax.jit(jax.value_and_grad(f))
    jax.block_until_ready(jf(v))
    return lambda w: jax.block_until_ready(jf(w))


def casadi_rosen(w, n):
    return ca.sum1(100 * (w[1:] - w[: n - 1] ** 2) ** 2 + (1 - w[: n - 1]) ** 2)


def casadi_first(build, n, v):
    w = ca.SX.sym("w", n)
    f = build(w, n)
    F = ca.Function("f", [w], [f, ca.gradient(f, w)])
    F(v)
    return F


# ---- P3: deep recurrence ----------------------------------------------------------------------

def recurrence(a, b, depth, sin, cos):
    for _ in range(depth):
        a, b = sin(a) * b + a, cos(b) * a - b
    return a + b


def p3_build(depth: int, backend: str):
    a, b = sg.symbols("a b")
    f = recurrence(a, b, depth, sg.sin, sg.cos)
    vg = sg.value_and_grad(f, [a, b], backend=backend)
    vg([0.3, 0.4])
    return vg, f


def p3() -> None:
    for depth in (10, 30, 100):
        name = f"P3 recurrence D={depth}"

        for backend in ("auto", "vm"):
            t, (vg, f) = first(p3_build, depth, backend)
            row(name, f"symgrad {backend} ({vg.backend}, {vg.n_ops} ops)", "first result", t, None, "s")
        nf, ng = sg.count_nodes(f), sg.count_nodes(sg.grad(f, list(sg.free_variables(f))))
        ROWS.append((name, "symgrad", "nodes: f / gradient (sharing f's)", f"{nf} / {ng}", f"{ng / nf:.2f}x"))
        if depth <= 10:
            sympy_p3(name, depth)


SYMPY_P3 = """
import sys, time, sympy
sys.path.insert(0, {here!r})
from run import recurrence
start = time.perf_counter()
a, b = sympy.symbols("a b")
f = recurrence(a, b, {depth}, sympy.sin, sympy.cos)
grads = [sympy.diff(f, s) for s in (a, b)]
print("diff", time.perf_counter() - start, flush=True)
print("ops", sum(sympy.count_ops(g) for g in grads), flush=True)
lam = sympy.lambdify([a, b], [f, *grads])
lam(0.3, 0.4)
print("first", time.perf_counter() - start, flush=True)
"""


def sympy_p3(name: str, depth: int, budget: float = 120.0) -> None:
    """SymPy's diff + lambdify in a subprocess with a time budget (its trees grow as 12**(D/2))."""
    script = SYMPY_P3.format(here=str(Path(__file__).parent), depth=depth)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=budget).stdout
    except subprocess.TimeoutExpired as stopped:
        out = (stopped.stdout or b"").decode() if isinstance(stopped.stdout, bytes) else stopped.stdout or ""
    got = dict(line.split() for line in out.splitlines() if line.strip())
    row(name, "SymPy diff", "time", float(got["diff"]) if "diff" in got else None, None, "s")
    ops = got.get("ops", f"not done in {budget:.0f} s")
    ROWS.append((name, "SymPy", "gradient operations (count_ops)", ops, ""))
    if "first" in got:
        row(name, "SymPy diff + lambdify", "first result", float(got["first"]), None, "s")
    else:
        ROWS.append((name, "SymPy diff + lambdify", "first result", f"> {budget:.0f} s (stopped)", ""))


# ---- P4: many points through .batch ------------------------------------------------------------

def p4() -> None:
    x, y, z = sg.symbols("x y z")
    f = sg.exp(-x**2 - y**2) * sg.cos(z) + x * y * z
    X = np.random.default_rng(0).uniform(-1, 1, size=(1_000_000, 3))
    name = "P4 batch 1e6 points"
    out = np.empty(len(X))
    hand.p4(X, out)
    base = per_call(hand.p4, X, out)
    row(name, f"hand-written @njit prange ({numba.get_num_threads()} threads)", "per 1e6 points", base, base)
    for backend in ("numba", "vm"):
        fn = sg.compile(f, [x, y, z], backend=backend)
        fn.batch(X)
        row(name, f"symgrad {backend} .batch", "per 1e6 points", per_call(fn.batch, X), base)
    a, b, c = X.T.copy()
    row(name, "NumPy vectorized", "per 1e6 points",
        per_call(lambda: np.exp(-a * a - b * b) * np.cos(c) + a * b * c), base)
    if HAVE["jax"]:
        jf = jax.jit(lambda a, b, c: jnp.exp(-a * a - b * b) * jnp.cos(c) + a * b * c)
        jax.block_until_ready(jf(a, b, c))
        row(name, "JAX jit", "per 1e6 points", per_call(lambda: jax.block_until_ready(jf(a, b, c))), base)


# ---- P5: a long sum, gradient ------------------------------------------------------------------

def p5_sg(n: int, backend: str = "auto"):
    xs = sg.vector("x", n)
    with sg.paused_gc():
        f = sum(sg.sin(xs[i] * xs[i + 1]) * sg.exp(-xs[i] ** 2) + sg.log(1.0 + xs[i] ** 2) for i in range(n - 1))
    vg = sg.value_and_grad(f, xs, backend=backend)
    vg(np.full(n, 0.5))
    return vg


def jax_p5(w):
    a, b = w[:-1], w[1:]
    return jnp.sum(jnp.sin(a * b) * jnp.exp(-a * a) + jnp.log(1.0 + a * a))


def casadi_p5(w, n):
    a, b = w[: n - 1], w[1:]
    return ca.sum1(ca.sin(a * b) * ca.exp(-a * a) + ca.log(1 + a * a))


def p5() -> None:
    for n in (1000, 20000):
        name = f"P5 long sum n={n}"
        v = np.linspace(-1.0, 1.0, n)
        base, _ = first_and_per_call(name, "hand-written @njit", None, v, hand.fresh, hand.p5, v)
        first_and_per_call(name, "symgrad auto ({fn.backend}, {fn.n_ops} ops)", base, v, p5_sg, n)
        contenders(name, base, v, n, jax_p5, casadi_p5)


def springs_sg(n: int, backend: str = "auto"):
    """The spring chain assembled from scalars in a Python loop (as CasADi SX or SymPy models are)."""
    q = sg.vector("q", n)
    with sg.paused_gc():
        f = sum((sg.sqrt((q[2 * i + 2] - q[2 * i]) ** 2 + (q[2 * i + 3] - q[2 * i + 1]) ** 2) - 1.0) ** 2
                for i in range(n // 2 - 1))
    vg = sg.value_and_grad(f, q, backend=backend)
    vg(np.full(n, 0.5))
    return vg


def scalar_built() -> None:
    """Models built from scalars: their alike terms rolled into loops (symgrad.expr.reroll)."""
    n = 20000
    name = f"spring chain n={n}, built from scalars"
    v = np.random.default_rng(0).normal(size=n)
    base, _ = first_and_per_call(name, "hand-written @njit loop", None, v, hand.fresh, hand.springs, v)
    first_and_per_call(name, "symgrad auto ({fn.backend}, {fn.n_ops} ops)", base, v, springs_sg, n)
    if HAVE["casadi"]:
        x = ca.SX.sym("x", n)
        f = sum((ca.sqrt((x[2 * i + 2] - x[2 * i]) ** 2 + (x[2 * i + 3] - x[2 * i + 1]) ** 2) - 1.0) ** 2
                for i in range(n // 2 - 1))
        cf = ca.Function("f", [x], [f, ca.gradient(f, x)])
        row(name, "CasADi SX Function (value, gradient)", "per call", per_call(cf, v), base)


# ---- the disk cache: a second process ------------------------------------------------------------

CACHE_SCRIPT = """
import time
import numba
import numpy as np
import scipy.sparse
import symgrad as sg
start = time.perf_counter()
numba.njit(lambda: 0.0)()  # Numba's own start-up (target registries, BLAS check): paid once per process
warm = time.perf_counter()
xs = sg.vector("x", 100)
f = sum(100.0 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1.0 - xs[i]) ** 2 for i in range(99))
sg.value_and_grad(f, xs, backend="numba")(np.full(100, 0.5))
print(warm - start, time.perf_counter() - warm)
"""


# ---- issue 4: traced Python functions, sparse Hessians ---------------------------------------

def traced() -> None:
    """The cost of calling through a traced Python function instead of the Compiled directly."""
    v = np.array([2.0, 3.0])
    base = per_call(hand.p1, v)
    vg = sg.value_and_grad(lambda w: w[0] * w[1] + np.sin(w[0]))
    vg(v)
    row("P1 x*y+sin(x)", "symgrad traced sg.value_and_grad(fn)", "per call", per_call(vg, v), base)
    for n in (100, 1000):
        w = np.linspace(-1.0, 1.5, n)
        base = per_call(hand.rosen, w)
        fn = sg.value_and_grad(rosen_np)
        row(f"P2 Rosenbrock n={n}", f"symgrad traced ({fn.__name__})", "first result", first(fn, w)[0], None, "s")
        row(f"P2 Rosenbrock n={n}", "symgrad traced", "per call", per_call(fn, w), base)


def rosen_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosen_hess_np(x):
    """Rosenbrock's tridiagonal Hessian written by hand with NumPy and scipy.sparse."""
    diag = np.zeros_like(x)
    diag[:-1] = 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    diag[1:] += 200
    off = -400 * x[:-1]
    return scipy.sparse.diags([off, diag, off], [-1, 0, 1], format="csr")


def sparse_hessian() -> None:
    for n in (1000, 10000, 10**5, 10**6):
        name = f"sparse Hessian, Rosenbrock n={n}"
        w = np.linspace(-1.0, 1.5, n)
        base = per_call(rosen_hess_np, w)
        row(name, "hand-written NumPy + scipy.sparse.diags", "per call", base, base)
        t, h = first(lambda: sg.hessian(rosen_np, sparse=True))
        t, H = first(h, w)
        row(name, f"symgrad hessian(fn, sparse=True) ({H.nnz} nonzeros)", "first result", t, None, "s")
        row(name, "symgrad", "per call", per_call(h, w), base)
        assert abs(H - rosen_hess_np(w)).max() <= 1e-12 * abs(rosen_hess_np(w)).max()
        if HAVE["casadi"]:
            x = ca.SX.sym("x", n)
            f = ca.sum1(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
            start = time.perf_counter()
            F = ca.Function("h", [x], [ca.hessian(f, x)[0]])
            F(w)
            row(name, "CasADi SX hessian (sparse)", "first result", time.perf_counter() - start, None, "s")
            row(name, "CasADi SX hessian (sparse)", "per call", per_call(F, w), base)
        if HAVE["jax"] and n <= 1000:
            start = time.perf_counter()
            jh = jax_first_hessian(w)
            row(name, "JAX jit(hessian) (dense n x n)", "first result", time.perf_counter() - start, None, "s")
            row(name, "JAX jit(hessian) (dense n x n)", "per call", per_call(jh, w), base)


def collocation() -> None:
    """The cart-pole swing-up by direct collocation (examples/collocation.py), N = 2000: 10,005
    variables, solved by IPOPT through symgrad (sg.minimize) and through CasADi's nlpsol on the same
    equations; setup (derivatives built, compiled), IPOPT's iterations and time per iteration. symgrad
    runs on each IPOPT build installed (`sg.ipopt.builds()`: CasADi's wheel's, the default; cyipopt's
    wheel's; the system's): IPOPT's linear algebra is most of an iteration, and the builds differ
    there by 4-5x."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    import collocation as cp
    from scipy.optimize import NonlinearConstraint

    from symgrad.compile.tiers import compiles_done
    from symgrad.solvers import ipopt

    builds = ipopt.builds()
    if not builds:
        return
    name = f"cart-pole swing-up, collocation N={cp.N} ({5 * (cp.N + 1)} variables), IPOPT"
    rolled_ready("rosenbrock", 10, "vm")  # (compiled once per machine, as CasADi is installed: the loop VM, and
    assembly_ready()  # the sparse results' assembly)
    compiles_done()  # (the earlier steps' background compiles done: a quiet process)
    start = time.perf_counter()
    problem = sg.optimize.Problem(cp.effort, [NonlinearConstraint(cp.defects, 0.0, 0.0)], cp.guess())
    setup = time.perf_counter() - start
    spent = [0.0]
    for method in ("objective", "gradient", "constraints", "jacobian", "hessian"):
        setattr(problem, method, _timed(getattr(problem, method), spent))

    def solve(path):
        spent[0], start = 0.0, time.perf_counter()
        result = sg.optimize._ipopt(problem, cp.guess(), *cp.bounds(), {"tol": 1e-8}, path)
        assert result.success
        return result, (time.perf_counter() - start) / max(result.nit, 1), spent[0] / max(result.nit, 1)

    default = next(iter(builds))
    first = solve(builds[default])  # (on the loop VM while Numba compiles)
    problem.ready()
    bases = _casadi_collocation(cp, name) if HAVE["casadi"] else {}  # (a quiet process: no compile beside it)
    for build, path in builds.items():
        result, per_iteration, derivatives = solve(path)
        assert not bases or abs(bases["optimum"] - result.fun) < 1e-6 * abs(result.fun)
        tool = (f"symgrad sg.minimize(method='ipopt'), {build}'s IPOPT {ipopt.version(path) or ''}"
                f"{' (default)' if build == default else ''} ({result.nit} iterations, effort {result.fun:.6f})")
        if build == default:
            row(name, tool, "setup (traced, patterns, first derivatives)", setup, bases.get("setup"), "s")
            row(name, tool, "per IPOPT iteration, first solve", first[1], bases.get("iteration"))
        row(name, tool, "per IPOPT iteration", per_iteration, bases.get("iteration"))
        row(name, tool, "functions and derivatives, per iteration", derivatives, bases.get("derivatives"))


def _casadi_collocation(cp, name) -> dict:
    """CasADi's nlpsol on the collocation: its rows, and their times as the bases of symgrad's."""
    start = time.perf_counter()
    z = ca.SX.sym("z", 5 * (cp.N + 1))
    nlp = {"x": z, "f": _casadi_effort(cp, z), "g": cp.defects(z, ca, lambda parts: ca.vertcat(*parts))}
    options = {"ipopt": {"tol": 1e-8, "print_level": 0, "sb": "yes"}, "print_time": False}
    solver = ca.nlpsol("S", "ipopt", nlp, options)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    out = solver(x0=cp.guess(), lbx=cp.bounds()[0], ubx=cp.bounds()[1], lbg=0.0, ubg=0.0)
    took, stats = time.perf_counter() - start, solver.stats()
    assert stats["success"]
    iterations = max(stats["iter_count"], 1)
    bases = {"setup": setup, "iteration": took / iterations, "optimum": float(out["f"]), "derivatives": sum(
        stats.get(f"t_wall_nlp_{k}", 0.0) for k in ("f", "g", "grad_f", "jac_g", "hess_l")) / iterations}
    tool = f"CasADi SX nlpsol('ipopt') ({stats['iter_count']} iterations, effort {float(out['f']):.6f})"
    row(name, tool, "setup (traced, patterns, first derivatives)", setup, setup, "s")
    row(name, tool, "per IPOPT iteration", bases["iteration"], bases["iteration"])
    row(name, tool, "functions and derivatives, per iteration", bases["derivatives"], bases["derivatives"])
    return bases


def _timed(method, spent):
    def timed(*args):
        start = time.perf_counter()
        try:
            return method(*args)
        finally:
            spent[0] += time.perf_counter() - start
    return timed


def _casadi_effort(cp, z):
    u = cp.unpack(z)[4]
    return cp.T / cp.N * (ca.sumsqr(u) - (u[0] ** 2 + u[-1] ** 2) / 2)


def jax_first_hessian(v):
    jh = jax.jit(jax.hessian(jax_rosen))
    jax.block_until_ready(jh(v))
    return lambda w: jax.block_until_ready(jh(w))


def disk_cache() -> None:
    name = "disk cache (Rosenbrock n=100, numba)"
    env = dict(os.environ, SYMGRAD_CACHE_DIR=tempfile.mkdtemp(prefix="symgrad-bench-"))
    runs = [subprocess.run([sys.executable, "-c", CACHE_SCRIPT], capture_output=True, text=True, check=True,
                           env=env).stdout.split() for _ in range(2)]
    (start1, compiled), (start2, loaded) = ([float(t) for t in r] for r in runs)
    row(name, "Numba start-up in a process (any @njit)", "once", (start1 + start2) / 2, None, "s")
    row(name, "first process: build, compile", "first result", compiled, None, "s")
    row(name, "second process: build, load from disk", "first result", loaded, None, "s")
    ROWS[-1] = ROWS[-1][:4] + (f"{compiled / loaded:.1f}x faster",)


BOUNDED_SCRIPT = """
import json, os, sys, time
from pathlib import Path
import symgrad as sg
from symgrad.compile import cache

def rss():  # resident set size now, MB
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

x, y = sg.symbols("x y")
marks, start = {}, time.perf_counter()
marks[0] = rss()
for k in range(int(sys.argv[1])):
    f = sg.value_and_grad(x * y + sg.sin(x) * (k + 0.5), [x, y])  # distinct formulas, "auto" backend
    f([1.0, 2.0])
    if k + 1 == cache.max_programs() or k + 1 == int(sys.argv[1]):
        marks[k + 1] = rss()
folder = cache.cache_dir()
disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
print(json.dumps(dict(marks=marks, seconds=time.perf_counter() - start, disk=disk, cap=cache.max_programs())))
"""


def bounded() -> None:
    """Memory and disk after 10**4 distinct formulas in one process (Numba never frees machine code)."""
    import json

    n, name = 10_000, "10**4 distinct formulas in one process"
    env = dict(os.environ, SYMGRAD_CACHE_DIR=tempfile.mkdtemp(prefix="symgrad-bench-"), SYMGRAD_CACHE_SIZE="2M")
    out = json.loads(subprocess.run([sys.executable, "-c", BOUNDED_SCRIPT, str(n)], capture_output=True,
                                    text=True, check=True, env=env).stdout)
    marks, cap = {int(k): v for k, v in out["marks"].items()}, out["cap"]
    per_program = (marks[cap] - marks[0]) / cap
    row(name, f"Numba machine code per program (first {cap})", "RSS growth", per_program, None, "MB")
    row(name, "unbounded (every program on Numba), extrapolated", "RSS", marks[0] + n * per_program, None, "MB")
    row(name, f"symgrad: {cap} on Numba, the rest on the VM", "RSS", marks[n], None, "MB")
    ROWS[-1] = ROWS[-1][:4] + (f"{(marks[0] + n * per_program) / marks[n]:.0f}x less",)
    row(name, f"the {n - cap} programs on the VM", "RSS growth", marks[n] - marks[cap], None, "MB")
    row(name, "disk cache with SYMGRAD_CACHE_SIZE=2M", "size", out["disk"] / 2**20, None, "MB")
    row(name, "all of it", "total", out["seconds"], None, "s")


def import_time() -> None:
    script = "import time; t = time.perf_counter(); import symgrad; print(time.perf_counter() - t)"
    best = min(float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(3))
    row("import symgrad (SymPy loaded on first use)", "symgrad", "import", best, None, "s")


def rolled_problem(name: str, n: int):
    """The rolled formula of a problem (with sg.array / sg.index / sg.sum) and its array."""
    if name == "mlp":
        return mlp_loss(n)
    x = sg.array("x", n)
    if name == "rosenbrock":
        i = sg.index("i", n - 1)
        return sg.sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2, i), [x]
    if name == "p5":
        i = sg.index("i", n - 1)
        return sg.sum(sg.sin(x[i] * x[i + 1]) * sg.exp(-x[i] ** 2) + sg.log(1 + x[i] ** 2), i), [x]
    if name == "p5 periodic":
        i = sg.index("i", n)
        y = x[(i + 1) % n]
        return sg.sum(sg.sin(x[i] * y) * sg.exp(-x[i] ** 2) + sg.log(1 + x[i] ** 2), i), [x]
    i = sg.index("i", n // 2 - 1)  # the spring chain: points (x, y) interleaved
    dx, dy = x[2 * i + 2] - x[2 * i], x[2 * i + 3] - x[2 * i + 1]
    return sg.sum((sg.sqrt(dx * dx + dy * dy) - 1.0) ** 2, i), [x]


MLP = (256, 64, 32, 10)  # samples, inputs, hidden, classes


def mlp_loss(samples: int):
    """Softmax cross-entropy of a 64-32-10 tanh MLP over the samples (stable: max-shifted)."""
    _, D, H, K = MLP
    X, T = sg.array("X", (samples, D)), sg.array("T", (samples, K))
    W1, b1, W2, b2 = sg.array("W1", (D, H)), sg.array("b1", H), sg.array("W2", (H, K)), sg.array("b2", K)
    s, d, h, k = sg.index("s", samples), sg.index("d", D), sg.index("h", H), sg.index("k", K)
    a = sg.tensor(sg.tanh(sg.sum(X[s, d] * W1[d, h], d) + b1[h]), s, h)
    z = sg.tensor(sg.sum(a[s, h] * W2[h, k], h) + b2[k], s, k)
    m = sg.tensor(sg.max(z[s, k], k), s)
    lse = m[s] + sg.log(sg.sum(sg.exp(z[s, k] - m[s]), k))
    return sg.sum(lse - sg.sum(T[s, k] * z[s, k], k), s) / samples, [W1, b1, W2, b2, X, T]


def rolled_ready(name: str, n: int, backend: str = "auto"):
    """From nothing to a compiled value-and-gradient that has run once."""
    f, arrays = rolled_problem(name, n)
    wrt, data = (arrays[:4], arrays[4:]) if name == "mlp" else (arrays, [])
    vg = sg.value_and_grad(f, wrt, params=data, backend=backend)
    size = sum(v.size for v in wrt)
    vg(np.full(size, 0.5), np.zeros(sum(v.size for v in data)))
    return vg


def rolled() -> None:
    """Indexed expressions (sg.array / sg.index / sg.sum) compiled to loops: value and gradient
    against hand-written @njit loops and NumPy; ready time (build, differentiate, compile, first
    call) at any n; the loop VM compiles nothing per program (warmed here: once per machine)."""
    rolled_ready("rosenbrock", 10, "vm")
    for name, label, hand_fn, sizes in (("rosenbrock", "P2 Rosenbrock", hand.rosen, (10**4, 10**6)),
                                        ("p5", "P5", hand.p5, (20000, 10**6)),
                                        ("p5 periodic", "P5 periodic", hand.p5_periodic, (20000, 10**6)),
                                        ("springs", "spring chain", hand.springs, (20000, 10**6))):
        for n in sizes:
            v = np.linspace(-1.0, 1.0, n)
            hand_fn(v)
            base = per_call(hand_fn, v)
            problem = f"{label} n={n}, indexed"
            row(problem, "hand-written @njit loop", "per call", base, base)
            seconds, vg = first_and_per_call(problem, "symgrad sg.sum, {fn.backend} loops", base, v, rolled_ready,
                                             name, n)
            g = np.empty(n)
            row(problem, "symgrad, out= (no allocation)", "per call", per_call(vg, v, np.empty(0), g), base)
            assert np.allclose(vg(v)[1], hand_fn(v)[1])
            seconds, on_vm = first_and_per_call(problem, "symgrad sg.sum, loop VM", base, v, rolled_ready, name, n,
                                                "vm")
            assert np.allclose(on_vm(v)[1], hand_fn(v)[1])
    mlp_rows()


def mlp_rows() -> None:
    S, D, H, K = MLP
    rng = np.random.default_rng(0)
    X, W1, b1 = rng.normal(size=(S, D)), rng.normal(size=(D, H)) / 8, rng.normal(size=H)
    W2, b2, T = rng.normal(size=(H, K)) / 6, rng.normal(size=K), np.eye(K)[rng.integers(0, K, S)]
    weights, data = np.concatenate([w.ravel() for w in (W1, b1, W2, b2)]), np.concatenate([X.ravel(), T.ravel()])
    problem = f"MLP {D}-{H}-{K}, {S} samples, indexed"
    base = per_call(hand.mlp, X, T, W1, b1, W2, b2)
    row(problem, "NumPy by hand (BLAS)", "per call", base, base)
    t, vg = first(rolled_ready, "mlp", S)
    t_final = t + settled(vg)
    tool = f"symgrad sg.tensor/sg.sum, {vg.backend} loops"
    row(problem, tool, "first result", t, None, "s")
    row(problem, tool, "Numba kernels in (background)", t_final, None, "s")
    row(problem, tool, "per call", per_call(vg, weights, data), base)
    want = hand.mlp(X, T, W1, b1, W2, b2)
    for fn in (vg, rolled_ready("mlp", S, "vm")):
        got = fn(weights, data)
        assert np.isclose(got[0], want[0]) and np.allclose(got[1], np.concatenate([w.ravel() for w in want[1]]))
    t, on_vm = first(rolled_ready, "mlp", S, "vm")
    row(problem, "symgrad sg.tensor/sg.sum, loop VM", "first result", t, None, "s")
    row(problem, "symgrad sg.tensor/sg.sum, loop VM", "per call", per_call(on_vm, weights, data), base)
    if HAVE["jax"]:
        def loss(w, X, T):
            a = jnp.tanh(X @ w[0] + w[1])
            z = a @ w[2] + w[3]
            return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.sum(T * z, axis=1))
        f = jax.jit(jax.value_and_grad(loss))
        args = ((W1, b1, W2, b2), X, T)
        jax.block_until_ready(f(*args))
        seconds = per_call(lambda: jax.block_until_ready(f(*args)))
        row(problem, "JAX jit(value_and_grad)", "per call", seconds, base)


def mlp_numpy(W1, b1, W2, b2, X, T):
    """The MLP of mlp_loss, as whole-batch NumPy code (how JAX users write it)."""
    a = np.tanh(X @ W1 + b1)
    z = a @ W2 + b2
    m = np.max(z, axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(z - m), axis=1))
    return np.mean(lse - np.sum(T * z, axis=1))


def logistic(w, X, y):
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z)


def numpy_code() -> None:
    """NumPy array code traced onto indexed expressions (issue 12): sg.value_and_grad(fn) of plain
    NumPy functions, against hand-written loops, NumPy by hand and JAX."""
    rosen_np_code = lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)  # noqa: E731
    for n in (10**4, 10**6):
        v = np.linspace(-1.0, 1.0, n)
        base = per_call(hand.rosen, v)
        problem = f"P2 Rosenbrock n={n}, traced NumPy code"
        row(problem, "hand-written @njit loop", "per call", base, base)
        first_and_per_call(problem, "symgrad value_and_grad(fn)", base, v,
                           lambda x: _called(sg.value_and_grad(rosen_np_code), x), v)
    S, D, H, K = MLP
    rng = np.random.default_rng(0)
    X, W1, b1 = rng.normal(size=(S, D)), rng.normal(size=(D, H)) / 8, rng.normal(size=H)
    W2, b2, T = rng.normal(size=(H, K)) / 6, rng.normal(size=K), np.eye(K)[rng.integers(0, K, S)]
    args = (W1, b1, W2, b2, X, T)
    problem = f"MLP {D}-{H}-{K}, {S} samples, traced NumPy code"
    base = per_call(hand.mlp, X, T, W1, b1, W2, b2)
    row(problem, "NumPy by hand (BLAS)", "per call", base, base)
    t, vg = first(lambda: _called(sg.value_and_grad(mlp_numpy, argnums=(0, 1, 2, 3)), *args))
    row(problem, "symgrad value_and_grad(fn)", "first result", t, None, "s")
    row(problem, "symgrad value_and_grad(fn)", "Numba kernels in (background)", t + settled(vg), None, "s")
    row(problem, "symgrad value_and_grad(fn)", "per call", per_call(vg, *args), base)
    got, want = vg(*args), hand.mlp(X, T, W1, b1, W2, b2)
    assert np.isclose(got[0], want[0]) and all(np.allclose(g, w) for g, w in zip(got[1], want[1]))
    if HAVE["jax"]:
        f = jax.jit(jax.value_and_grad(mlp_numpy_jax, argnums=(0, 1, 2, 3)))
        jax.block_until_ready(f(*args))
        seconds = per_call(lambda: jax.block_until_ready(f(*args)))
        row(problem, "JAX jit(value_and_grad)", "per call", seconds, base)
    flat = np.concatenate([w.ravel() for w in (W1, b1, W2, b2)])  # (how ravel_pytree code looks)
    problem = f"MLP {D}-{H}-{K}, {S} samples, one flat parameter vector sliced, traced NumPy code"
    row(problem, "NumPy by hand (BLAS)", "per call", base, base)
    t, vg = first(lambda: _called(sg.value_and_grad(mlp_flat), flat, X, T))
    row(problem, "symgrad value_and_grad(fn)", "first result", t, None, "s")
    row(problem, "symgrad value_and_grad(fn)", "Numba kernels in (background)", t + settled(vg), None, "s")
    row(problem, "symgrad value_and_grad(fn)", "per call", per_call(vg, flat, X, T), base)
    assert np.allclose(vg(flat, X, T)[1], np.concatenate([w.ravel() for w in want[1]]))
    N, d = 20000, 5
    X, y = rng.normal(size=(N, d)), (rng.random(N) > 0.5) * 1.0
    w = rng.normal(size=d) * 0.3
    problem = f"logistic regression N={N}, d={d}, traced NumPy code"
    t, vg = first(lambda: _called(sg.value_and_grad(logistic), w, X, y))
    row(problem, "symgrad value_and_grad(fn)", "first result", t, None, "s")
    seconds = per_call(vg, w, X, y)
    row(problem, "symgrad value_and_grad(fn)", "per call", seconds, seconds)
    if HAVE["jax"]:
        f = jax.jit(jax.value_and_grad(lambda w, X, y: jnp.mean(jnp.logaddexp(0.0, X @ w) - y * (X @ w))))
        t, _ = first(lambda: jax.block_until_ready(f(w, X, y)))
        row(problem, "JAX jit(value_and_grad)", "first result", t, None, "s")
        row(problem, "JAX jit(value_and_grad)", "per call", per_call(lambda: jax.block_until_ready(f(w, X, y))),
            seconds)
    t, _ = first(lambda: _called(sg.hessian(logistic), w, X, y))
    row(problem, "symgrad hessian(fn)", "first result", t, None, "s")
    if HAVE["jax"]:
        h = jax.jit(jax.hessian(lambda w, X, y: jnp.mean(jnp.logaddexp(0.0, X @ w) - y * (X @ w))))
        t, _ = first(lambda: jax.block_until_ready(h(w, X, y)))
        row(problem, "JAX jit(hessian)", "first result", t, None, "s")
    problem = f"per-example gradients, logistic loss N={N}, d={d} (sg.vmap)"
    hand_rows = lambda w, X, y: (1 / (1 + np.exp(-(X @ w))) - y)[:, None] * X  # noqa: E731
    base = per_call(hand_rows, w, X, y)
    row(problem, "NumPy by hand", "per call", base, base)
    one = lambda w, x, y: np.logaddexp(0.0, x @ w) - y * (x @ w)  # noqa: E731
    t, pe = first(lambda: _called(sg.vmap(sg.grad(one), in_axes=(None, 0, 0)), w, X, y))
    assert np.allclose(pe(w, X, y), hand_rows(w, X, y))
    row(problem, "symgrad vmap(grad(fn))", "first result", t, None, "s")
    row(problem, "symgrad vmap(grad(fn))", "per call", per_call(pe, w, X, y), base)
    if HAVE["jax"]:
        f = jax.jit(jax.vmap(jax.grad(lambda w, x, y: jnp.logaddexp(0.0, x @ w) - y * (x @ w)), (None, 0, 0)))
        jax.block_until_ready(f(w, X, y))
        row(problem, "JAX jit(vmap(grad))", "per call", per_call(lambda: jax.block_until_ready(f(w, X, y))), base)
    v = np.linspace(-1.0, 1.0, 10**6)
    problem = "running sums n=10^6, sum(cumsum(x)**2), traced NumPy code"
    base = per_call(hand.running, v)
    row(problem, "hand-written @njit loop", "per call", base, base)
    _, vg = first_and_per_call(problem, "symgrad value_and_grad(fn)", base, v,
                               lambda x: _called(sg.value_and_grad(lambda x: np.sum(np.cumsum(x) ** 2)), x), v)
    assert np.allclose(vg(v)[1], hand.running(v)[1])
    if HAVE["jax"]:
        f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(jnp.cumsum(x) ** 2)))
        jax.block_until_ready(f(v))
        row(problem, "JAX jit(value_and_grad)", "per call", per_call(lambda: jax.block_until_ready(f(v))), base)
    big = rng.normal(size=10**6)
    t, _ = first(lambda: _called(sg.value_and_grad(lambda a, data: np.sum(a * data) ** 2 + a ** 2), 0.5, big))
    row("a 10^6-element data argument, traced NumPy code", "symgrad value_and_grad(fn)", "first result", t, None,
        "s")


def mlp_flat(theta, X, T):
    """mlp_numpy of one flat parameter vector, sliced and reshaped into its weights."""
    _, D, H, K = MLP
    sizes = np.cumsum([D * H, H, H * K])
    W1, b1, W2, b2 = np.split(theta, sizes)
    return mlp_numpy(W1.reshape(D, H), b1, W2.reshape(H, K), b2, X, T)


def mlp_numpy_jax(W1, b1, W2, b2, X, T):
    a = jnp.tanh(X @ W1 + b1)
    z = a @ W2 + b2
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.sum(T * z, axis=1))


def _called(fn, *args):
    """``fn`` after one call (a traced function compiles on its first call)."""
    fn(*args)
    return fn


RNN = (120, 16, 8)  # steps, sequences, hidden units (examples/rnn.py)


def rnn_numpy(theta, xs, ys, xp=np, scan=sg.scan):
    """examples/rnn.py's loss written with sg.scan (every step scored); ``xp``, ``scan``: jax.numpy
    and jax.lax.scan make it JAX's."""
    W, u, b, v = hand.rnn_weights(theta, RNN[2])

    def step(state, xy):
        x, y = xy
        state = xp.tanh(state @ W.T + x[:, None] * u + b)
        return state, xp.mean((state @ v - y) ** 2)

    return xp.mean(scan(step, xp.zeros(RNN[1:]), (xs, ys))[1])


def rnn_python_loop(theta, xs, ys):
    """The same loss with a Python loop over the steps (how it was written before sg.scan)."""
    W, u, b, v = hand.rnn_weights(theta, RNN[2])
    state, total = np.zeros(RNN[1:]), 0.0
    for t in range(xs.shape[0]):
        state = np.tanh(state @ W.T + xs[t][:, None] * u + b)
        total = total + np.mean((state @ v - ys[t]) ** 2)
    return total / xs.shape[0]


def recurrences() -> None:
    """A recurrence over time written with sg.scan (examples/rnn.py's batch of tanh RNNs): against
    backpropagation through time by hand (Numba loops, NumPy) and JAX's lax.scan."""
    steps, batch, hidden = RNN
    t = np.linspace(0, 4 * np.pi, steps)[:, None] + np.linspace(0, np.pi, batch)
    xs, ys = np.sin(t), 0.8 * np.sin(t - 0.7)
    theta = np.random.default_rng(0).normal(scale=0.3, size=hidden * hidden + 3 * hidden)
    problem = f"RNN {steps} steps x {batch} sequences, hidden {hidden}: loss + gradient"
    base = per_call(hand.rnn, theta, xs, ys, hidden)
    row(problem, "hand-written @njit BPTT", "per call", base, base)
    row(problem, "NumPy by hand (BPTT)", "per call", per_call(hand.rnn_numpy, theta, xs, ys, hidden), base)
    for tool, fn in (("symgrad value_and_grad(fn), sg.scan", rnn_numpy),
                     ("symgrad value_and_grad(fn), Python loop over steps", rnn_python_loop)):
        t, vg = first(lambda fn=fn: _called(sg.value_and_grad(fn), theta, xs, ys))
        row(problem, tool, "first result", t, None, "s")
        row(problem, tool, "Numba kernels in (background)", t + settled(vg), None, "s")
        row(problem, tool, "per call", per_call(vg, theta, xs, ys), base)
        got, want = vg(theta, xs, ys), hand.rnn(theta, xs, ys, hidden)
        assert np.isclose(got[0], want[0]) and np.allclose(got[1], want[1])
    if HAVE["jax"]:
        f = jax.jit(jax.value_and_grad(lambda theta, xs, ys: rnn_numpy(theta, xs, ys, jnp, jax.lax.scan)))
        t, _ = first(lambda: jax.block_until_ready(f(theta, xs, ys)))
        row(problem, "JAX jit(value_and_grad), lax.scan", "first result", t, None, "s")
        row(problem, "JAX jit(value_and_grad), lax.scan", "per call",
            per_call(lambda: jax.block_until_ready(f(theta, xs, ys))), base)


def gradbench() -> None:
    """GradBench's evaluations (benchmarks/gradbench.py: one JAX-style source, run under jax.numpy and
    symgrad.numpy): first result (build, trace, compile, first call; symgrad's compiles start from
    the fresh cache directory) and per call, symgrad against jax.jit, results checked to agree; and
    against GradBench's hand-written C++ (its tools/manual, from $GRADBENCH) as the limit."""
    import warnings

    import gradbench as gb

    from symgrad.compile import c_backend, loop_vm

    if not loop_vm.at_hand() and not c_backend.available():  # (the loop VM's kernels, compiled once per
        vm_warmup()  # machine: else no tiered start; with a C compiler, as a new user meets it: an empty cache)
    numba.njit(lambda: 0.0)()  # process start-up (Numba's, JAX's) is not charged to the first problem
    symgrad_ns, jax_ns = gb.namespace("symgrad"), gb.namespace("jax") if HAVE["jax"] else None
    if jax_ns is not None:
        jax.block_until_ready(jax.jit(jax.grad(lambda x: jnp.sum(x * x)))(np.ones(3)))
    manual = gb.checkout()
    if manual is None:
        ROWS.append(("gradbench", gb.MANUAL, "first result, per call", gb.MANUAL_MISSING, ""))
    for problem, what, make in gb.CASES:
        name = f"gradbench {problem}: {what}"
        base = base_first = want = limit = seconds = None
        if jax_ns is not None:
            gc.collect()  # (a first result without the collection that the rows before left due: 0.2-0.9 s)
            start = time.perf_counter()
            jf, args = make(jax_ns)
            want = jax.block_until_ready(jf(*args))
            base_first = time.perf_counter() - start
            call = lambda jf=jf, args=args: jax.block_until_ready(jf(*args))  # noqa: E731
            base = gb.timed(per_call, call)
            row(name, "JAX jax.jit", "first result", base_first, base_first, "s")
            row(name, "JAX jax.jit", "per call", base, base)
        if manual is not None:
            limit = hand_cpp(name, manual, make.gradbench, base_first, base)
        gc.collect()
        start = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                f, args = make(symgrad_ns)
                got = f(*args)
        except Exception as error:  # noqa: BLE001 (recorded in the table, the next problem goes on)
            ROWS.append((name, "symgrad sg.jit", "error", f"{type(error).__name__}: {error}"[:300], ""))
            continue
        t = time.perf_counter() - start
        t_c = t + settled(f, "c")
        t_final = t_c + settled(f)
        row(name, "symgrad sg.jit", "first result", t, base_first, "s")
        if t_c > t + 0.01:
            row(name, "symgrad sg.jit", "C kernels in (background)", t_c, base_first, "s")
        if t_final > t_c + 0.01:
            row(name, "symgrad sg.jit", "Numba compiled, the faster kept (background)", t_final, base_first, "s")
        for w in caught:
            ROWS.append((name, "symgrad sg.jit", "warning", str(w.message)[:300].replace("\n", " "), ""))
        path = f.explain().splitlines()[-1].split("->")[-1].strip().replace("rolled (whole arrays: loops), ", "")
        if t_final > 600:
            ROWS.append((name, "symgrad sg.jit", "per call", "not timed: first result over 10 min", ""))
        else:
            seconds = gb.timed(per_call, f, *args)
            row(name, f"symgrad sg.jit ({path})", "per call", seconds, base)
        if want is not None:
            canon = getattr(make, "canon", lambda result: result)  # (results of other forms: compared alike)
            norm, largest = gb.agree(canon(got), canon(want))
            ROWS.append((name, "symgrad vs JAX", "relative difference: 2-norm (asserted <= 1e-8); max entry",
                         f"{norm:.1e}; {largest:.1e}", ""))
        if limit is not None:
            output, limit_first, limit_call = limit
            ratios = f"{t / limit_first:.2f}x" + (f"; {seconds / limit_call:.2f}x" if seconds else "")
            ROWS.append((name, "symgrad sg.jit / hand C++", "first result; per call", "", ratios))
            if make.gradbench[0] != "ba":  # ba's C++ output: the first observation's 30 entries and one weight's
                norm, largest = gb.agree(gb.manual_leaves(output, got), got, 1e-6)
                ROWS.append((name, "symgrad vs hand C++", "relative difference: 2-norm (asserted <= 1e-6); "
                             "max entry", f"{norm:.1e}; {largest:.1e}", ""))
        print(f"gradbench: {name} done", file=sys.stderr, flush=True)


def hand_cpp(name: str, manual, gradbench, base_first: float | None, base: float | None):
    """Rows for GradBench's hand-written C++ on the case's input (``gradbench``: eval, function, input;
    ``manual``: gradbench.checkout()); its (output, first result, per call), or None after an error."""
    import gradbench as gb

    eval_name, function, raw = gradbench
    try:
        output, first_result, call = gb.run_manual(gb.manual_binary(*manual, eval_name), function, raw)
    except (OSError, subprocess.CalledProcessError) as error:
        message = f"{type(error).__name__}: {getattr(error, 'stderr', None) or error}"
        ROWS.append((name, gb.MANUAL, "error", message[:300].replace("\n", " "), ""))
        return None
    row(name, gb.MANUAL, "first result (prepare + first evaluate)", first_result, base_first)
    row(name, gb.MANUAL, "per call", call, base)
    return output, first_result, call


COLD_SCRIPT = """
import sys, time
start = time.perf_counter()
sys.path.insert(0, {here!r})
tool, case = sys.argv[1], int(sys.argv[2])
import numpy as np
if case < 0:  # the sparse Hessian of the chained Rosenbrock, n = 10**5
    w = np.linspace(-1.0, 1.5, 10**5)
    if tool == "symgrad":
        import symgrad as sg
        begun = time.perf_counter()
        sg.hessian(lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2), sparse=True)(w)
    else:
        import casadi as ca
        begun = time.perf_counter()
        x = ca.SX.sym("x", w.size)
        f = ca.sum1(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
        ca.Function("h", [x], [ca.hessian(f, x)[0]])(w)
else:
    import gradbench as gb
    J = gb.namespace(tool)  # (imports jax or symgrad)
    begun = time.perf_counter()
    f, args = gb.CASES[case][2](J)
    result = f(*args)
    if tool == "jax":
        import jax
        jax.block_until_ready(result)
print(time.perf_counter() - begun, time.perf_counter() - start)
"""


def cold_start() -> None:
    """First results as a new user meets them: each case in a fresh process with an empty symgrad cache
    (the once-per-machine work included), from its imports and from its first line of symgrad / JAX /
    CasADi code; GradBench's cases against jax.jit, the sparse Hessian at n = 10**5 against CasADi."""
    import gradbench as gb

    script = COLD_SCRIPT.format(here=str(Path(__file__).parent))
    cases = [(f"gradbench {problem}: {what}", k, "jax") for k, (problem, what, _) in enumerate(gb.CASES)]
    cases.append(("sparse Hessian, Rosenbrock n=100000", -1, "casadi"))
    for name, k, peer in cases:
        times = {}
        for tool in (peer, "symgrad"):
            if tool != "symgrad" and not HAVE[tool]:
                continue
            env = dict(os.environ, SYMGRAD_CACHE_DIR=tempfile.mkdtemp(prefix="symgrad-cold-"))
            out = subprocess.run([sys.executable, "-c", script, tool, str(k)], capture_output=True, text=True,
                                 env=env, timeout=900)
            if out.returncode:
                error = out.stderr[-300:].replace("\n", " ")
                ROWS.append((name, f"{tool}, fresh process, empty cache", "error", error, ""))
                continue
            times[tool] = [float(t) for t in out.stdout.split()[-2:]]
            base = times.get(peer, [None, None])
            row(name, f"{tool}, fresh process, empty cache", "first result", times[tool][0], base[0], "s")
            row(name, f"{tool}, fresh process, empty cache", "first result with imports", times[tool][1], base[1],
                "s")
        print(f"cold_start: {name} done", file=sys.stderr, flush=True)


def threshold() -> None:
    """Around the auto threshold: Numba's compile against the VM's slower calls."""
    for n in (5, 15, 40):
        v = np.linspace(-1.0, 1.0, n)
        for backend in ("numba", "vm"):
            t, vg = first(rosen_sg, n, backend)
            name = f"threshold: Rosenbrock n={n} ({len(vg.program)} instructions)"
            row(name, f"symgrad {backend}", "first result", t, None, "s")
            row(name, f"symgrad {backend}", "per call", per_call(vg, v), None)


def assembly_ready() -> None:
    """The sparse results' assembly compiled (once per machine, then loaded from disk)."""
    from symgrad.compile.sparse_loops import Assembly

    Assembly(np.zeros(1, np.int64), np.zeros(1, np.int64), 1)(np.zeros(1))


def vm_warmup() -> None:
    start = time.perf_counter()
    vg = sg.value_and_grad(sg.Var("x") * 2.0, [sg.Var("x")], backend="vm")
    vg([1.0]), vg.batch(np.ones((2, 1))), vg.sum([1.0], np.ones((2, 0)))
    row("VM kernels", "compile once per machine (then from disk)", "first use", time.perf_counter() - start,
        None, "s")
    start = time.perf_counter()
    rolled_ready("rosenbrock", 10, "vm")
    row("loop VM kernel", "compile once per machine (then from disk)", "first use", time.perf_counter() - start,
        None, "s")
    start = time.perf_counter()
    assembly_ready()
    row("sparse results' assembly", "compile once per machine (then from disk)", "first use",
        time.perf_counter() - start, None, "s")


def distributed() -> None:
    """Dask: vg.sum in one process against a 2-worker LocalCluster (benchmarks/scaling.py; extra: distributed)."""
    if importlib.util.find_spec("distributed") is None:
        row("vg.sum over Dask chunks", "2-worker LocalCluster", "time", None, None)
        return
    import scaling

    scaling.measure(row)
    ROWS.append(("vg.sum over Dask chunks", "2-worker LocalCluster", "checks", "; ".join(scaling.NOTES), ""))


def write(path: Path, section: str = "table") -> str:
    """The rows as a table in ``path`` between ``<!-- section -->`` and ``<!-- /section -->`` (added at
    the end the first time), with the machine they were measured on."""
    head = ("| problem | tool | metric | value | ratio |\n|---|---|---|---|---|\n")
    table = head + "\n".join("| " + " | ".join(r) + " |" for r in ROWS)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}, numba {numba.__version__}, NumPy {np.__version__}, SymPy "
               f"{sympy.__version__}" + (f", JAX {jax.__version__}" if HAVE["jax"] else "")
               + (f", CasADi {ca.__version__}" if HAVE["casadi"] else ""))
    text = path.read_text() if path.exists() else ""
    start, end = f"<!-- {section} -->", f"<!-- /{section} -->"
    body = f"{start}\nMeasured on {machine}.\n\n{table}\n{end}"
    if start in text:
        text = text[: text.index(start)] + body + text[text.index(end) + len(end):]
    else:
        text += "\n" + body + "\n"
    path.write_text(text)
    return table


if __name__ == "__main__":
    # Step names: run only these and print their rows; with --write also keep them in docs/performance.md,
    # in a table of their own (named by the steps). No names: every step, the main table.
    only = [a for a in sys.argv[1:] if a != "--write"]
    for step in (vm_warmup, p1, p2, p3, p4, p5, scalar_built, threshold, disk_cache, traced, sparse_hessian,
                 collocation, bounded, import_time, rolled, numpy_code, recurrences, gradbench, cold_start,
                 distributed):
        if not only or step.__name__ in only:
            step()
            print(f"{step.__name__} done", file=sys.stderr)
    performance = Path(__file__).parent.parent / "docs" / "performance.md"
    if not only:
        print(write(performance))
    elif "--write" in sys.argv:
        print(write(performance, "table: " + " ".join(only)))
    else:
        print("\n".join("| " + " | ".join(r) + " |" for r in ROWS))
