"""``sg.export_c``: a compiled function as a standalone C file and header, in CasADi's calling convention.

What can be exported: symbolic formulas (``sg.compile`` / ``sg.value_and_grad`` of expressions, dense or
sparse: straight-line Programs) and traced Python functions (``sg.jit`` / ``sg.grad`` /
``sg.value_and_grad`` / ``sg.jacobian`` / ``sg.hessian`` / ``sg.hvp``): straight-line code where their
arrays are traced element by element (under 64 elements), C loops where they are traced onto rolled
arrays (compile/c_export_loops.py: files flat in the arrays' sizes). docs/export.md has the calling convention.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compile import c_export_loops
from symgrad.compile.c_source import Layout, check_name, dense, export_source
from symgrad.compile.function import Compiled
from symgrad.compile.loop_program import LoopProgram
from symgrad.trace.function import Function
from symgrad.trace.record import Trace
from symgrad.util import pytree

_ELEMENT = re.compile(r"(.*)\[(\d+)(?:, (\d+))?\]")


def export_c(fun: Any, *example_args: Any, name: str = "f", directory: str | Path = ".") -> tuple[Path, Path]:
    """Write ``fun`` as the C function ``name`` to ``directory``: the paths of ``name.c`` and ``name.h``.

    ``fun`` is a compiled formula (``sg.compile``, ``sg.value_and_grad`` of expressions) or a traced
    function (``sg.jit(f)``, ``sg.grad(f)``, ... of a Python function), traced at ``example_args`` (their
    shapes are fixed, as tracing fixes them). The file needs only ``<math.h>``; its entry point is CasADi's,
    ``int name(const double** arg, double** res, long long* iw, double* w, int mem)``, with
    ``name_work``, ``name_n_in``, ``name_sparsity_out``, ..., and ``int name_flat(in, out)`` beside it.

    >>> import symgrad as sg, tempfile
    >>> x, y = sg.symbols("x y")
    >>> c, h = export_c(sg.value_and_grad(x * y + sg.sin(x), [x, y]), name="f", directory=tempfile.mkdtemp())
    >>> c.name, h.name
    ('f.c', 'f.h')
    """
    check_name(name)
    if isinstance(fun, Compiled):
        if example_args:
            raise TypeError("export_c: a compiled formula takes no example arguments (its variables are its "
                            "inputs)")
        program, layout = fun.program, formula_layout(fun)
    elif isinstance(fun, Function):
        rolled = _rolled_sparse(fun, example_args)
        if rolled is not None:
            program, layout, layers = rolled
            return _write(c_export_loops.export_source(program, layout, name, layers), name, directory)
        trace = fun.trace(*example_args)
        program, layout = trace.compiled.program, trace_layout(trace)
    else:
        raise TypeError("export_c: expected a compiled formula (sg.compile, sg.value_and_grad of expressions) or "
                        f"a traced function (sg.jit, sg.grad, ...), got {type(fun).__name__}")
    write = c_export_loops.export_source if isinstance(program, LoopProgram) else export_source
    return _write(write(program, layout, name), name, directory)


def _write(files: tuple[str, str], name: str, directory: str | Path) -> tuple[Path, Path]:
    text, head = files
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.c").write_text(text, encoding="utf-8")
    (folder / f"{name}.h").write_text(head, encoding="utf-8")
    return folder / f"{name}.c", folder / f"{name}.h"


def _rolled_sparse(fun: Function, args: tuple) -> tuple | None:
    """A sparse Jacobian or Hessian of large arrays as symgrad computes it in-process, rolled (trace/sparse.py:
    one kernel of band formulas, its values assembled into the nonzeros): (the kernel's LoopProgram, the
    layout, the assembly's layers as (nonzero in column order, output) pairs); None where it is computed
    otherwise (small arrays, coloured products: the element trace is exported)."""
    key = fun.signature_key(args, {}) if fun.sparse else None
    sparse = fun._rolled_sparse(key, args, {}) if key is not None else None
    if sparse is None or sparse.direct is None or sparse.direct.compiled is None:
        return None
    inputs = trace_layout(sparse.trace)
    positions, ccs = _sparse((sparse.pattern.indices, sparse.pattern.indptr, sparse.pattern.shape))
    order, starts = (np.asarray(a, dtype=np.int64) for a in sparse.direct.assembly.arranged())
    counts, dest = np.diff(starts), np.asarray(positions, dtype=np.int64)
    layers = []
    for j in range(int(counts.max(initial=0))):  # (each nonzero's j-th source, in the outputs' order: a
        have = np.flatnonzero(counts > j)            # band's nonzeros one strided run)
        sources = order[starts[have] + j]
        by_source = np.argsort(sources, kind="stable")
        layers.append((dest[have][by_source], sources[by_source]))
    layout = Layout(inputs.inputs, (), inputs.arg_names, inputs.arg_sparsity, ("out0",), (ccs,))
    return sparse.direct.compiled.program, layout, layers


def _arguments(names: tuple[str, ...], first: int) -> tuple[list, list[str], list[tuple]]:
    """Variables grouped into CasADi arguments: a run of ``x[0]``, ``x[1]``, ... one column argument ``x``,
    a run of ``A[i, j]`` one matrix ``A`` (column-major), any other variable one scalar argument. Returns
    each variable's (argument, position), the arguments' names and sparsities."""
    where: list = []
    arg_names: list[str] = []
    sparsity: list[tuple] = []
    k = 0
    while k < len(names):
        m = _ELEMENT.fullmatch(names[k])
        base = m[1] if m else names[k]
        run = [names[k]]
        while m and k + len(run) < len(names) and (n := _ELEMENT.fullmatch(names[k + len(run)])) and n[1] == base \
                and (n[3] is None) == (m[3] is None):
            run.append(names[k + len(run)])
        cells = [(int(c[2]), int(c[3] or 0)) for c in map(_ELEMENT.fullmatch, run)] if m else [(0, 0)]
        rows, cols = max(i for i, _ in cells) + 1, max(j for _, j in cells) + 1
        if len(set(cells)) != len(cells) or rows * cols != len(cells):  # (not a whole array: a column in order)
            cells, rows, cols = [(i, 0) for i in range(len(run))], len(run), 1
        where += [(first + len(arg_names), j * rows + i) for i, j in cells]
        arg_names.append(base)
        sparsity.append(dense(rows, cols))
        k += len(run)
    return where, arg_names, sparsity


def _cells(shape: tuple) -> tuple[tuple[int, int], list[int]]:
    """A NumPy array's shape as a CasADi matrix: (rows, columns), and where each element in C order goes
    (column-major): a scalar 1 x 1, a vector a column, a matrix itself, more axes a column in C order."""
    if len(shape) != 2:
        n = math.prod(shape)
        return (n, 1), list(range(n))
    rows, cols = shape
    return (rows, cols), [j * rows + i for i in range(rows) for j in range(cols)]


def _sparse(pattern: tuple) -> tuple[list[int], tuple[int, ...]]:
    """A CSR pattern's entries' positions in CasADi's compressed columns, and that sparsity."""
    indices, indptr, shape = pattern
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    order = np.lexsort((rows, indices))  # entries in column order
    colind = np.searchsorted(indices[order], np.arange(shape[1] + 1))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return [int(k) for k in position], (int(shape[0]), int(shape[1]), *map(int, colind), *map(int, rows[order]))


def trace_layout(trace: Trace) -> Layout:
    """The CasADi layout of a traced function: one argument per array leaf of its arguments (those
    differentiated, then the others, in order), then ``v`` (hvp's vector, jvp's tangents, vjp's
    cotangents, raveled in order) if it takes one; one result per leaf of its result, or the sparse matrix."""
    if trace.guards:
        raise NotImplementedError("export_c: the function decides a Python if / while by the values of its "
                                  "arguments, so its formulas hold only on that branch; write it with np.where")
    names = dict(zip(trace.slots, trace.arguments))
    where: list = []
    arg_names: list[str] = []
    arg_sparsity: list[tuple] = []
    for key in (*trace.wrt_keys, *trace.data_keys):
        slot = trace.slots[key]
        for shape, path in zip(slot.shapes, pytree.paths(slot.treedef)):
            (rows, cols), cells = _cells(shape)
            where += [(len(arg_names), k) for k in cells]
            arg_names.append(names[key] + path)
            arg_sparsity.append(dense(rows, cols))
    if trace.constant_values is not None:
        where += [float(v) for v in trace.constant_values]
    if trace.extra:
        where += [(len(arg_names), k) for k in range(len(trace.extra))]
        arg_names.append("v")
        arg_sparsity.append(dense(len(trace.extra), 1))
    compiled = trace.compiled
    if compiled.pattern is not None:
        positions, sparsity = _sparse(compiled.pattern)
        outputs, res_names, res_sparsity = [(0, k) for k in positions], ["out0"], [sparsity]
    else:
        outputs, res_names, res_sparsity = [], [], []
        for shape, _ in trace.blocks:
            (rows, cols), cells = _cells(shape)
            outputs += [(len(res_names), k) for k in cells]
            res_names.append(f"out{len(res_names)}")
            res_sparsity.append(dense(rows, cols))
    return Layout(tuple(where), tuple(outputs), tuple(arg_names), tuple(arg_sparsity), tuple(res_names),
                  tuple(res_sparsity))


def formula_layout(fun: Compiled) -> Layout:
    """The CasADi layout of a compiled formula: its variables grouped into arguments (``_arguments``), its
    results: the value (1 x 1) then the gradient (a column) of a value-and-gradient; a scalar; an array (a
    column, or a matrix column-major); a sparse matrix (its own sparsity, entries in column order)."""
    program = fun.program
    where, arg_names, arg_sparsity = _arguments(program.inputs, 0)
    more, p_names, p_sparsity = _arguments(program.params, len(arg_names))
    if program.returns_value and fun.shape == ():
        outputs, res_names, res_sparsity = [(0, 0)], ["f"], [dense(1, 1)]
    elif program.returns_value:
        outputs = [(0, 0), *((1, d) for d in range(program.n_out))]
        res_names, res_sparsity = ["f", "grad"], [dense(1, 1), dense(program.n_out, 1)]
    elif fun.pattern is not None:
        positions, sparsity = _sparse(fun.pattern)
        outputs, res_names, res_sparsity = [(0, k) for k in positions], ["f"], [sparsity]
    else:
        (rows, cols), cells = _cells(fun.shape)
        outputs, res_names, res_sparsity = [(0, k) for k in cells], ["f"], [dense(rows, cols)]
    return Layout(tuple(where + more), tuple(outputs), tuple(arg_names + p_names),
                  tuple(arg_sparsity + p_sparsity), tuple(res_names), tuple(res_sparsity))
