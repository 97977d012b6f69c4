"""A rolled program as an exported C file (``sg.export_c``, CasADi's calling convention): its loop kernel
as c_loops.py writes it (products as loop nests: no BLAS outside the process), its inputs and outputs
copied between ``arg`` / ``res`` and the workspace by a few loops each (runs of consecutive entries), and a
rolled sparse matrix's nonzeros gathered from the outputs: the file's size does not depend on the
arrays' sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from symgrad.compile.c_loops import loop_c
from symgrad.compile.c_source import Layout, casadi, check_name, flat, header, literal, nonzeros

if TYPE_CHECKING:
    from symgrad.compile.loop_program import LoopProgram


def _runs(keys: np.ndarray) -> list[tuple[int, int]]:
    """The [start, end) of each run of equal ``keys``."""
    cuts = np.flatnonzero(np.diff(keys)) + 1
    edges = [0, *cuts.tolist(), len(keys)]
    return list(zip(edges[:-1], edges[1:]))


def _moves(entries: Sequence, base: int, sparsity: Sequence[tuple], name: str, reading: bool) -> list[str]:
    """Loops copying CasADi's arguments into ``w`` from ``base`` (``reading``) or ``w`` into its results:
    ``entries[k]`` is where element k is, (argument, position) or (reading) a captured constant. A run
    of one argument in order is one loop, a matrix's run in C order (its positions column-major) two
    loops, any other order a loop over a static table of positions; constants one fill or a table.
    The lines are as many as the runs: flat in the arrays' sizes."""
    if not len(entries):
        return []
    arg = np.array([-1 if isinstance(e, float) else e[0] for e in entries], dtype=np.int64)
    pos = np.array([0 if isinstance(e, float) else e[1] for e in entries], dtype=np.int64)
    lines, side = [], "arg" if reading else "res"
    for start, end in _runs(arg):
        a, m, k = int(arg[start]), end - start, f"k{start}"
        each = f"for (long long {k} = 0; {k} < {m}; ++{k}) "
        if a < 0:
            values = [literal(float(e)) for e in entries[start:end]]
            if len(set(values)) == 1:
                lines.append(f"{each}w[{base + start} + {k}] = {values[0]};")
            else:
                lines += [f"static const double {name}_c{start}[] = {{{', '.join(values)}}};",
                          f"{each}w[{base + start} + {k}] = {name}_c{start}[{k}];"]
            continue
        p, first = pos[start:end], int(pos[start])
        rows, cols = sparsity[a][0], sparsity[a][1]
        here, there = f"w[{base + start} + {k}]", f"{side}[{a}][{first} + {k}]"
        if np.array_equal(p, first + np.arange(m)):
            loop = [each + (f"{here} = {there};" if reading else f"{there} = {here};")]
        elif first == 0 and rows * cols == m and np.array_equal(p, np.arange(m).reshape(cols, rows).T.ravel()):
            i, j = f"i{start}", f"j{start}"
            here, there = f"w[{base + start} + {i} * {cols} + {j}]", f"{side}[{a}][{j} * {rows} + {i}]"
            loop = [f"for (long long {i} = 0; {i} < {rows}; ++{i}) for (long long {j} = 0; {j} < {cols}; ++{j}) "
                    + (f"{here} = {there};" if reading else f"{there} = {here};")]
        else:
            table = f"{name}_{'i' if reading else 'o'}{start}"
            lines.append(f"static const long long {table}[] = {{{', '.join(map(str, p.tolist()))}}};")
            there = f"{side}[{a}][{table}[{k}]]"
            loop = [each + (f"{here} = {there};" if reading else f"{there} = {here};")]
        lines += loop if reading else [f"if (res[{a}]) {{", *("    " + line for line in loop), "}"]
    return lines


def _strided(dest: np.ndarray, src: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Pairs (dest[t], src[t]) as runs in which both step by constants: (first t, length, dest step, src
    step), greedily from the first pair (a band of a banded matrix: a few runs).

    >>> _strided(np.array([0, 3, 6, 7, 9]), np.array([5, 6, 7, 0, 0]))
    [(0, 3, 3, 1), (3, 2, 2, 0)]
    """
    n = dest.size
    if n < 3:
        return [(t, 1, 0, 0) for t in range(n)]
    dd, ds = np.diff(dest), np.diff(src)
    same = np.r_[(dd[1:] == dd[:-1]) & (ds[1:] == ds[:-1]), False, False]  # pair t + 2 keeps t -> t + 1's step
    at = np.arange(n)
    ahead = np.minimum.accumulate(np.where(same, n, at)[::-1])[::-1] - at  # how many pairs after t + 1 keep it
    runs, t = [], 0
    while t < n:
        m = min(2 + int(ahead[t]), n - t) if t + 1 < n else 1
        runs.append((t, m, int(dd[t]) if m > 1 else 0, int(ds[t]) if m > 1 else 0))
        t += m
    return runs


def assembly_lines(dest_layers: list[tuple[np.ndarray, np.ndarray]], nnz: int, base: int, name: str) -> list[str]:
    """Lines writing ``res[0]`` (``nnz`` entries) from the kernel's outputs in ``w`` (from ``base``): zeros,
    then for each layer (the first source of each entry, then the second of those that have two, ...) the
    pairs (entry, output) assigned (the first layer) or added, in order: symgrad's assembly of a sparse
    matrix's nonzeros (compile/sparse_loops.Assembly), its sums in the same order. Strided runs are loops
    (a band is a few), a layer of short runs two tables."""
    lines = [f"for (long long k = 0; k < {nnz}; ++k) res[0][k] = 0.0;"]
    for j, (dest, src) in enumerate(dest_layers):
        op = "=" if j == 0 else "+="
        runs = _strided(dest, src)
        if len(runs) > 8 + dest.size // 8:
            lines += [f"static const long long {name}_d{j}[] = {{{', '.join(map(str, dest.tolist()))}}};",
                      f"static const long long {name}_s{j}[] = {{{', '.join(map(str, src.tolist()))}}};",
                      f"for (long long k = 0; k < {dest.size}; ++k) res[0][{name}_d{j}[k]] {op} "
                      f"w[{base} + {name}_s{j}[k]];"]
            continue
        for t, m, dd, ds in runs:
            d0, s0 = int(dest[t]), int(src[t])
            each = f"for (long long k = 0; k < {m}; ++k) "
            lines.append(f"{each}res[0][{d0} + {dd} * k] {op} w[{base + s0} + {ds} * k];" if m > 1 else
                         f"res[0][{d0}] {op} w[{base + s0}];")
    return ["if (res[0]) {", *("    " + line for line in lines), "}"]


def export_source(program: LoopProgram, layout: Layout, name: str,
                  assembly: list[tuple[np.ndarray, np.ndarray]] | None = None) -> tuple[str, str]:
    """The C file and header of the rolled ``program`` as the function ``name`` in CasADi's calling
    convention: its inputs copied from ``arg`` into ``w``, the loop kernel run there, its outputs copied
    to ``res`` (each a few loops: the file's size does not depend on the arrays'), ``NAME_flat`` beside it.
    ``assembly`` (a rolled sparse matrix's): its nonzeros gathered from the outputs (``assembly_lines``).

    >>> import symgrad as sg, numpy as np
    >>> from symgrad.export import trace_layout
    >>> f = sg.grad(lambda x: np.sum(np.sin(x) ** 2))
    >>> t = f.trace(np.ones(100))
    >>> c, h = export_source(t.compiled.program, trace_layout(t), "f")
    >>> print(c[c.index("int f("):c.index("long long f_n_in")].strip())
    int f(const double** arg, double** res, long long* iw, double* w, int mem) {
        (void)iw; (void)w; (void)mem;
        int status = 0;
        for (long long k0 = 0; k0 < 100; ++k0) w[0 + k0] = arg[0][0 + k0];
        const double ret = sg_kernel(w, w + 100, w + 100, w + 200, iw, &status);
        (void)ret;
        if (status) return 1;
        if (res[0]) {
            for (long long k0 = 0; k0 < 100; ++k0) res[0][0 + k0] = w[100 + k0];
        }
        return 0;
    }
    """
    check_name(name)
    parts = program.parts
    kernel = loop_c(parts)
    nx, n_p, nout = parts.nx, parts.n_p, parts.n_out
    entries_in, value = layout.inputs, program.returns_value
    entries_out = layout.outputs[value:]
    body = ["int status = 0;",
            *_moves(entries_in[:nx], 0, layout.arg_sparsity, name, True),
            *_moves(entries_in[nx:], nx, layout.arg_sparsity, name + "_p", True),
            f"const double ret = sg_kernel(w, w + {nx}, w + {nx + n_p}, w + {nx + n_p + nout}, iw, &status);",
            "(void)ret;", "if (status) return 1;"]
    if value:
        r, k = layout.outputs[0]
        body.append(f"if (res[{r}]) res[{r}][{k}] = ret;")
    body += _moves(entries_out, nx + n_p, layout.res_sparsity, name, False) if assembly is None else \
        assembly_lines(assembly, nonzeros(layout.res_sparsity[0]), nx + n_p, name)
    sz_w = nx + n_p + nout + kernel.work
    head = [f"/* {name}: generated by symgrad from loop program {program.key}. C99, libm only. */",
            f'#include "{name}.h"', "#include <stdlib.h>", kernel.text]
    lines = casadi(layout, name, body, sz_w, kernel.iwork) + flat(layout, name, sz_w, kernel.iwork)
    return "\n".join(head + lines), header(name)
