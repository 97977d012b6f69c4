"""IPOPT's C interface (``IpStdCInterface.h``) through ctypes: the solver behind
``sg.minimize(..., method="ipopt")``.

The library comes from a wheel: the ``ipopt`` extra installs CasADi, whose wheel carries IPOPT 3.14
with MUMPS 5.8, METIS and OpenBLAS (the fastest build a package registry offers: 4-5x faster an
iteration than cyipopt's wheels or Debian's package, whose linear algebra is most of an iteration).
Any IPOPT build works (``builds()`` lists those found). The callbacks write each Jacobian and
Hessian with one NumPy copy into the arrays IPOPT passes (cyipopt's copy one Python index at a time:
1.8 ms an iteration for 44,008 values, more than symgrad takes to compute them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.machinery
import importlib.util
import os
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from symgrad.util.progress import phase

_D, _I, _P = ctypes.c_double, ctypes.c_int, ctypes.POINTER(ctypes.c_double)
_IP = ctypes.POINTER(ctypes.c_int)
_B = ctypes.c_uint8  # IPOPT's Bool is int before 3.14 and C's bool since: the low byte reads both
_F = ctypes.CFUNCTYPE(_I, _I, _P, _B, _P, ctypes.c_void_p)
_GRAD = _F
_G = ctypes.CFUNCTYPE(_I, _I, _P, _B, _I, _P, ctypes.c_void_p)
_JAC = ctypes.CFUNCTYPE(_I, _I, _P, _B, _I, _I, _IP, _IP, _P, ctypes.c_void_p)
_H = ctypes.CFUNCTYPE(_I, _I, _P, _B, _D, _I, _P, _B, _I, _IP, _IP, _P, ctypes.c_void_p)
_STEP = ctypes.CFUNCTYPE(_I, _I, _I, _D, _D, _D, _D, _D, _D, _D, _D, _I, ctypes.c_void_p)

_SOLVING = threading.RLock()  # one solve at a time: MUMPS, IPOPT's linear solver, is not thread-safe (segfaults)

MESSAGES = {
    0: "Optimal Solution Found.", 1: "Solved To Acceptable Level.",
    2: "Converged to a point of local infeasibility.", 3: "Search Direction is becoming Too Small.",
    4: "Iterates diverging; problem might be unbounded.",
    5: "Stopping optimization at current point as requested by user.",
    6: "Feasible point for square problem found.",
    -1: "Maximum Number of Iterations Exceeded.", -2: "Restoration Failed!", -3: "Error in step computation!",
    -4: "Maximum CPU time exceeded.", -5: "Maximum wallclock time exceeded.",
    -10: "Problem has too few degrees of freedom.", -11: "Problem has inconsistent bounds or constraint sides.",
    -12: "Invalid option encountered.", -13: "Invalid number in NLP function or derivative detected.",
    -100: "Unrecoverable exception.", -101: "Unknown exception caught in IPOPT.", -102: "Not enough memory.",
    -199: "INTERNAL ERROR: Unknown SolverReturn value.",
}


def library(path: str | None = None) -> ctypes.CDLL:
    """IPOPT's shared library: ``path`` (a file, or a name in ``builds()``), else
    ``$SYMGRAD_IPOPT_LIBRARY``, else the first of ``builds()`` (CasADi's wheel's, cyipopt's, the system's).

    >>> lib = library()
    >>> bool(lib.IpoptSolve)
    True
    """
    found = builds()
    source = "library=" if path else "$SYMGRAD_IPOPT_LIBRARY" if os.environ.get("SYMGRAD_IPOPT_LIBRARY") else None
    path = path or os.environ.get("SYMGRAD_IPOPT_LIBRARY") or next(iter(found.values()), None)
    if path is None:
        raise ImportError("sg.minimize(method='ipopt') needs IPOPT's library: pip install 'symgrad[ipopt]' "
                          "(CasADi's wheel carries it), or pass library='/path/libipopt.so' "
                          "(or set SYMGRAD_IPOPT_LIBRARY)")
    try:
        return _loaded(found.get(path, path))  # (a build by its name in builds(): "casadi", "cyipopt", "system")
    except OSError as e:
        raise OSError(f"IPOPT's library from {source or 'sg.ipopt.builds()'} ({path!r}) cannot be loaded: {e}; "
                      f"the builds found: {found or 'none'}") from None


@cache
def _loaded(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.CreateIpoptProblem.restype = ctypes.c_void_p
    lib.CreateIpoptProblem.argtypes = [_I, _P, _P, _I, _P, _P, _I, _I, _I, _F, _G, _GRAD, _JAC, _H]
    lib.FreeIpoptProblem.argtypes = [ctypes.c_void_p]
    for kind, ctype in (("Str", ctypes.c_char_p), ("Num", _D), ("Int", _I)):
        getattr(lib, f"AddIpopt{kind}Option").argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctype]
        getattr(lib, f"AddIpopt{kind}Option").restype = _B
    lib.SetIntermediateCallback.argtypes = [ctypes.c_void_p, _STEP]
    lib.IpoptSolve.argtypes = [ctypes.c_void_p, _P, _P, _P, _P, _P, _P, ctypes.c_void_p]
    lib.IpoptSolve.restype = _I
    return lib


def builds() -> dict[str, str]:
    """The IPOPT libraries installed, fastest first: where each came from and its path. CasADi's
    wheel (the ``ipopt`` extra), cyipopt's (its extension's dependencies are the library), the one
    ``ctypes.util.find_library`` finds (Debian's ``coinor-libipopt-dev``, conda's ``ipopt``).

    >>> "casadi" in builds()
    True
    """
    return dict(_found())


@cache
def _found() -> tuple[tuple[str, str], ...]:
    # (once a process: find_library runs ldconfig, 2.5 ms, and every solve asks)
    found = {"casadi": _casadis(), "cyipopt": _cyipopts(), "system": ctypes.util.find_library("ipopt")}
    return tuple((name, path) for name, path in found.items() if path)


def version(path: str | None = None) -> str | None:
    """The version of the IPOPT ``library()`` loads (``path``: another build's); None where the
    library does not export ``GetIpoptVersion`` (IPOPT before 3.14; cyipopt's wheel's 3.14.11).

    >>> version().startswith("3.")
    True
    """
    lib = library(path)
    if not hasattr(lib, "GetIpoptVersion"):
        return None
    parts = [_I() for _ in range(3)]
    lib.GetIpoptVersion(*map(ctypes.byref, parts))
    return ".".join(str(p.value) for p in parts)

def _casadis() -> str | None:
    spec = importlib.util.find_spec("casadi")  # (not imported: only its folder is wanted)
    folders = spec.submodule_search_locations if spec is not None else None
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    names = [str(p) for folder in folders or () for p in Path(folder).glob("libipopt*")
             if suffix in p.name and "sipopt" not in p.name]
    return min(names, default=None)


def _cyipopts() -> str | None:
    """cyipopt's extension module, whose symbols resolve through the IPOPT it links: cyipopt's
    wheels put it at the top level (``ipopt_wrapper``) beside a bundled libipopt that needs its
    sibling libraries (loading the extension finds them), a source build inside ``cyipopt``."""
    for name in ("ipopt_wrapper", "cyipopt.ipopt_wrapper"):
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            continue
        origin = spec.origin if spec is not None else None
        if origin and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            return origin
    return None


def solve(problem: Any, x0: np.ndarray, lb: np.ndarray, ub: np.ndarray, options: dict,
          path: str | None = None) -> dict:
    """Run IPOPT on ``problem`` (cyipopt's problem protocol: objective, gradient, constraints,
    jacobian(structure), hessian(structure), intermediate; ``lower`` / ``upper``: the constraints'
    sides, ``m`` their count) from ``x0`` within the bounds ``lb <= x <= ub``; ``options`` are
    IPOPT's by name. Returns cyipopt's info dict (x, g, obj_val, mult_g, mult_x_L, mult_x_U, status,
    status_msg). An exception in a callback stops IPOPT and is raised here.

    >>> import numpy as np, symgrad as sg
    >>> p = sg.optimize.Problem(lambda x: np.sum((x - 1.0) ** 2), [], np.zeros(3))
    >>> info = solve(p, np.zeros(3), np.full(3, -np.inf), np.full(3, 0.5), {"print_level": 0, "sb": "yes"})
    >>> info["status"], np.round(info["x"], 6)
    (0, array([0.5, 0.5, 0.5]))
    """
    lib, n, m = library(path), x0.size, problem.m
    j_rows, j_cols = (np.ascontiguousarray(a, dtype=np.int32) for a in problem.jacobianstructure())
    h_rows, h_cols = (np.ascontiguousarray(a, dtype=np.int32) for a in problem.hessianstructure())
    raised: list[BaseException] = []

    def guarded(body: Any) -> Any:
        def callback(*args: Any) -> int:
            try:
                return int(body(*args) is not False)
            except BaseException as error:  # (a Python exception cannot cross IPOPT's frames)
                raised.append(error)
                return 0
        return callback

    def vector(p: Any, size: int) -> np.ndarray:
        return np.ctypeslib.as_array(p, (size,)) if size else np.zeros(0)  # (no constraints: IPOPT may pass NULL)

    def structure(rows_p: Any, cols_p: Any, values_p: Any, rows: np.ndarray, cols: np.ndarray, value: Any) -> None:
        if values_p:
            vector(values_p, rows.size)[:] = value()
        else:
            vector(rows_p, rows.size)[:], vector(cols_p, cols.size)[:] = rows, cols

    def x_of(p: Any) -> np.ndarray:
        return vector(p, n).copy()

    def f(n_, x, new, out, _):
        out[0] = problem.objective(x_of(x))

    def grad(n_, x, new, out, _):
        vector(out, n)[:] = problem.gradient(x_of(x))

    def g(n_, x, new, m_, out, _):
        vector(out, m)[:] = problem.constraints(x_of(x))

    def jac(n_, x, new, m_, nele, rows, cols, values, _):
        structure(rows, cols, values, j_rows, j_cols, lambda: problem.jacobian(x_of(x)))

    def hess(n_, x, new, sigma, m_, lam, new_lam, nele, rows, cols, values, _):
        structure(rows, cols, values, h_rows, h_cols,
                  lambda: problem.hessian(x_of(x), vector(lam, m).copy(), sigma))

    def step(alg_mod, iteration, objective, infeasibility, *rest):
        note(f"iteration {iteration}, objective {objective:.6e}, infeasibility {infeasibility:.1e}")
        return problem.intermediate(alg_mod, iteration, objective, infeasibility, *rest[:-1])

    callbacks = (_F(guarded(f)), _G(guarded(g)), _GRAD(guarded(grad)), _JAC(guarded(jac)), _H(guarded(hess)))
    bounds = [np.ascontiguousarray(a, dtype=float) for a in (lb, ub, problem.lower, problem.upper)]
    pointers = [a.ctypes.data_as(_P) for a in bounds]
    handle = lib.CreateIpoptProblem(n, pointers[0], pointers[1], m, pointers[2], pointers[3], j_rows.size,
                                    h_rows.size, 0, *callbacks)
    if not handle:
        raise ValueError("IPOPT refused the problem (CreateIpoptProblem): lower bounds above upper ones?")
    try:
        intermediate = _STEP(guarded(step))
        lib.SetIntermediateCallback(handle, intermediate)
        for name, value in options.items():
            _option(lib, handle, name, value)
        x, out = np.array(x0, dtype=float), {k: np.zeros(size) for k, size in
                                             (("g", m), ("mult_g", m), ("mult_x_L", n), ("mult_x_U", n))}
        objective = _D(0.0)
        with _SOLVING, phase("IPOPT") as note:
            status = lib.IpoptSolve(handle, x.ctypes.data_as(_P), out["g"].ctypes.data_as(_P),
                                    ctypes.byref(objective),
                                    *(out[k].ctypes.data_as(_P) for k in ("mult_g", "mult_x_L", "mult_x_U")), None)
    finally:
        lib.FreeIpoptProblem(handle)
    if raised:
        raise raised[0]
    return {"x": x, **out, "obj_val": objective.value, "status": status,
            "status_msg": MESSAGES.get(status, f"IPOPT status {status}")}


def _option(lib: ctypes.CDLL, handle: int, name: str, value: Any) -> None:
    kind = "Str" if isinstance(value, str) else "Int" if isinstance(value, (int, np.integer)) else "Num"
    given = value.encode() if kind == "Str" else value
    key = name.encode()
    if not getattr(lib, f"AddIpopt{kind}Option")(handle, key, given) and not (
            kind == "Int" and lib.AddIpoptNumOption(handle, key, float(value))) and not (  # ({"tol": 1})
            kind == "Num" and float(value).is_integer() and lib.AddIpoptIntOption(handle, key, int(value))):
        raise ValueError(f"IPOPT refused the option {name}={value!r} (an unknown name, or a value of the wrong "
                         f"type or range: see IPOPT's options reference)")
