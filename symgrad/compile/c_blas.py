"""The C loops' matrix products through BLAS, called as Numba calls it: the same routines (SciPy's
``cython_blas``, which Numba's ``np.dot`` calls) with the same arguments (numba/np/linalg.py ``dot_3_mm``,
``dot_3_vm``: which of gemm, gemv or dot, which operand is transposed, the leading dimensions), so a
product in the C tier gives the bits of the loop VM's and the Numba loops' (results never depend on the
tier that ran), at BLAS's speed. The routines' addresses are handed to each shared object once loaded
(``sg_set_blas``): those of the OpenBLAS a SciPy wheel bundles, which ``cython_blas`` calls, loaded without
importing ``scipy.linalg``. Exported C (``sg.export_c``) has no BLAS to call: its products stay loop nests.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import threading
from pathlib import Path

# (C99 has no conversion from void* to a function pointer; every compiler symgrad builds with does it)
SOURCE = """typedef void (*sg_gemm_t)(char*, char*, int*, int*, int*, double*, double*, int*, double*, int*,
                          double*, double*, int*);
typedef void (*sg_gemv_t)(char*, int*, int*, double*, double*, int*, double*, int*, double*, double*, int*);
typedef double (*sg_ddot_t)(int*, double*, int*, double*, int*);
static sg_gemm_t sg_dgemm;
static sg_gemv_t sg_dgemv;
static sg_ddot_t sg_ddot;
void sg_set_blas(void* gemm, void* gemv, void* dot) {
    sg_dgemm = (sg_gemm_t)gemm;
    sg_dgemv = (sg_gemv_t)gemv;
    sg_ddot = (sg_ddot_t)dot;
}
/* y = A v, A (s0, s1) stored row-major (f = 0) or column-major (f = 1), transposed if trans (Numba's
   call_xxgemv) */
static void sg_gemv(int trans, int f, int s0, int s1, const double* a, const double* v, double* y) {
    char t = trans ? 't' : 'n';
    int m = f ? s0 : s1, n = f ? s1 : s0, inc = 1;
    double one = 1.0, zero = 0.0;
    sg_dgemv(&t, &m, &n, &one, (double*)a, &m, (double*)v, &inc, &zero, y, &inc);
}
static void sg_zero(double* out, long long n) {
    for (long long i = 0; i < n; ++i) out[i] = 0.0;
}
/* np.dot(X, Y, out): X (m, k), Y (k, n), out (m, n) row-major; tx, ty: X, Y read transposed (.T) */
void sg_mm(const double* X, int tx, const double* Y, int ty, double* out, int m, int k, int n) {
    if (m == 0 || k == 0 || n == 0) {
        sg_zero(out, (long long)m * n);
    } else if (m == 1 && n == 1) {
        int inc = 1;
        out[0] = sg_ddot(&k, (double*)X, &inc, (double*)Y, &inc);
    } else if (n == 1) {
        sg_gemv(!tx, tx, m, k, X, Y, out);
    } else if (m == 1) {
        sg_gemv(ty, ty, k, n, Y, X, out);
    } else {
        char ta = ty ? 't' : 'n', tb = tx ? 't' : 'n';
        int lda = ty ? k : n, ldb = tx ? m : k;
        double one = 1.0, zero = 0.0;
        sg_dgemm(&ta, &tb, &n, &m, &k, &one, (double*)Y, &lda, (double*)X, &ldb, &zero, out, &n);
    }
}
/* np.dot(X, v, out): X (m, k), v (k,), out (m,) */
void sg_mv(const double* X, int tx, const double* v, double* out, int m, int k) {
    if (m == 0 || k == 0) sg_zero(out, m);
    else sg_gemv(!tx, tx, m, k, X, v, out);
}
"""
PROTOTYPES = """void sg_mm(const double* X, int tx, const double* Y, int ty, double* out, int m, int k, int n);
void sg_mv(const double* X, int tx, const double* v, double* out, int m, int k);
"""
_INT_MAX = 2 ** 31 - 1


def call(a: str, ta: bool, b: str, tb: bool | None, c: str, sizes: tuple[int, int, int]) -> str:
    """The C line of ``np.dot(A, B, C)``: A (``sizes`` m x k) at ``a``, read transposed if ``ta``; B at ``b`` a
    matrix (k x n) read transposed if ``tb``, or a vector (``tb`` None); C at ``c``.

    >>> call("a", False, "b", True, "c", (3, 4, 5))
    'sg_mm(a, 0, b, 1, c, 3, 4, 5);'
    >>> call("a", True, "v", None, "c", (3, 4, 1))
    'sg_mv(a, 1, v, c, 3, 4);'
    """
    if max(sizes) > _INT_MAX:  # (BLAS's sizes are C ints; Numba raises OverflowError)
        raise NotImplementedError("the C backend cannot hand BLAS a product this large")
    m, k, n = sizes
    if tb is None:
        return f"sg_mv({a}, {int(ta)}, {b}, {c}, {m}, {k});"
    return f"sg_mm({a}, {int(ta)}, {b}, {int(tb)}, {c}, {m}, {k}, {n});"


def prefetch() -> None:
    """Find the addresses on a thread of their own: loading SciPy's BLAS takes 0.2 s (OpenBLAS starting up),
    which a first result otherwise waits for after the compiler's run instead of during it.

    >>> prefetch()
    """
    if addresses.cache_info().currsize == 0:
        threading.Thread(target=addresses, name="symgrad-blas", daemon=True).start()


@functools.cache
def addresses() -> tuple[int, int, int]:
    """The addresses of SciPy's dgemm, dgemv and ddot (``scipy.linalg.cython_blas``, Numba's BLAS): those of
    the OpenBLAS a SciPy wheel bundles, loaded as it is (2 ms, where importing ``scipy.linalg`` takes 0.15 s:
    a fresh process's first result waited for it), which ``cython_blas``'s functions call; else theirs.

    >>> all(addresses())
    True
    """
    bundled = _bundled()
    if bundled is not None:
        return tuple(ctypes.cast(getattr(bundled, f"scipy_{f}_"), ctypes.c_void_p).value  # type: ignore
                     for f in ("dgemm", "dgemv", "ddot"))
    from scipy.linalg import cython_blas

    api = ctypes.pythonapi  # (functions of their own: the shared ones' argument types are left as they are)
    name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
    capsules = [cython_blas.__pyx_capi__[f] for f in ("dgemm", "dgemv", "ddot")]
    return tuple(pointer(c, name(c)) for c in capsules)  # type: ignore[return-value]


def _bundled() -> ctypes.CDLL | None:
    """The OpenBLAS a SciPy wheel bundles (``scipy.libs/libscipy_openblas*``), with SciPy's names for its
    routines (``scipy_dgemm_``), found without importing SciPy; None where there is not exactly one."""
    spec = importlib.util.find_spec("scipy")
    folders = [Path(f).parent / "scipy.libs" for f in (spec.submodule_search_locations or [])] if spec else []
    found = [p for folder in folders for p in folder.glob("libscipy_openblas*.so*")]
    if len(found) != 1:
        return None
    try:
        lib = ctypes.CDLL(str(found[0]))
    except OSError:
        return None
    return lib if all(hasattr(lib, f"scipy_{f}_") for f in ("dgemm", "dgemv", "ddot")) else None
