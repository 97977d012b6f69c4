"""The LoopProgram: a compiled function's plan when its expressions are rolled (the roots, the
``Layout``s of ``x`` and ``p``), its generated loops' source (loop_source.py) and key; checked
pickles. lower.py makes LoopPrograms; their backends register under the kind "loops" (backends.py:
numba, python; loop_vm.py: vm).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from symgrad.compile.kernels import Kernels, make_kernels
from symgrad.compile.layout import Layout
from symgrad.compile.loop_source import _LIBRARY_NAMES, KernelParts, module, parts
from symgrad.expr.dot import to_dot
from symgrad.expr.node import Expr, intern
from symgrad.expr.ops import OPS
from symgrad.expr.traverse import topo_order
from symgrad.util.cached import cached_property

_ZERO = intern(OPS["const"], (), 0.0)


@dataclass(frozen=True, eq=False)
class LoopProgram:
    """A compiled function's plan when its expressions are rolled: the roots themselves (a few
    nodes, whatever the arrays' sizes), read by the loop generator or the interpreter.

    ``returns_value``: the first root is returned as a float; the others (``n_out`` floats, arrays
    raveled) are written to an output array. ``inputs`` and ``params`` are the layouts of ``x``, ``p``.

    >>> import symgrad as sg
    >>> x, i = sg.array("x", 4), sg.index("i", 4)
    >>> f = sg.sum(x[i] ** 2, i)
    >>> print(LoopProgram.make([f, *sg.grad(f, [x])], [x], [], True))
    { lambda x[4] = (x[4]).
      return sum(x[i]**2, i=0..3)
      out[0:4] = tensor(2*x[j], j=0..3) }
    """

    roots: tuple[Expr, ...]
    inputs: Layout
    params: Layout
    n_out: int
    returns_value: bool

    @classmethod
    def make(cls, roots: list[Expr], inputs: list[Expr], params: list[Expr], returns_value: bool,
             order: list[Expr] | None = None) -> LoopProgram:
        """The program for ``roots`` (``order``: their topological order, when the caller has it),
        checked: every array or variable it reads is an input or a param."""
        have = set(inputs).union(params)
        order = topo_order(roots) if order is None else order
        missing = sorted(str(n) for n in order if n.op.name in ("var", "array") and n not in have)
        if missing:
            raise ValueError(f"the outputs depend on {', '.join(missing[:5])}, which are not among the inputs "
                             f"{Layout(inputs)!r} or params {Layout(params)!r}")
        for r in roots:
            if r.free:
                raise ValueError(f"compiling: the output {str(r)[:60]} varies over {sorted(map(str, r.free))}: "
                                 "reduce it (sg.sum) or make it an array (sg.tensor)")
        n_out = sum(math.prod(r.shape) for r in roots[returns_value:])
        return cls(tuple(roots), Layout(inputs), Layout(params), n_out, returns_value)

    @cached_property
    def parts(self) -> KernelParts:
        """The loop kernel's lines, from which its Numba module and its C are made."""
        outputs = list(self.roots) if self.returns_value else [_ZERO, *self.roots]
        return parts(outputs, self.inputs.exprs, self.params.exprs)

    @cached_property
    def source(self) -> str:
        """The generated Numba module: the loop kernel and its point / batch / total entries."""
        return module(self.parts)

    @property
    def split(self) -> bool:
        """Whether the kernel is long enough to be compiled in pieces (see symgrad.compile.pieces)."""
        return "\nPIECES = " in self.source

    @property
    def key(self) -> str:
        return hashlib.blake2b(self.source.encode(), digest_size=12).hexdigest()

    @cached_property
    def library(self) -> frozenset[str]:
        """The fastmath functions the compiled loops call from the C library (see _library_where_scalar):
        the loop VM calls the same, so both give the same bits."""
        return frozenset(_LIBRARY_NAMES.findall(self.source))

    @property
    def n_ops(self) -> int:
        """The number of arithmetic nodes in the rolled graph (its size, not the arrays')."""
        return sum(1 for n in topo_order(list(self.roots)) if n.op.kind != "rolled" and n.args)

    def __len__(self) -> int:
        return len(topo_order(list(self.roots)))

    def kernels(self, backend: str, roots: Any = None) -> Kernels:
        """The kernels running this program on ``backend`` ("numba" loops, the "vm" loop VM, or the
        "python" interpreter)."""
        return make_kernels("loops", self, backend)

    def to_dot(self) -> str:
        """Graphviz DOT of the rolled expressions the program computes."""
        return to_dot(list(self.roots), "program")

    def __str__(self) -> str:
        sig = f"x[{len(self.inputs)}] = {self.inputs!r}"
        if self.params.exprs:
            sig += f"; p[{len(self.params)}] = {self.params!r}"
        lines, at = [f"{{ lambda {sig}."], 0
        for k, r in enumerate(self.roots):
            if k == 0 and self.returns_value:
                lines.append(f"  return {r}")
                continue
            size = math.prod(r.shape)
            lines.append(f"  out[{at}:{at + size}] = {r}" if r.op.array_valued else f"  out[{at}] = {r}")
            at += size
        return "\n".join(lines) + " }"

    def __repr__(self) -> str:
        return f"<LoopProgram {len(self.roots)} outputs, x[{len(self.inputs)}], p[{len(self.params)}]>"

    def __reduce__(self) -> tuple:
        # The graph travels as a sg.dumps document (checked node by node where it lands), never the
        # generated source or its key: the receiver generates both again, as Program's pickles do.
        from symgrad.compile.program import OPS_ID, PICKLE_VERSION
        from symgrad.expr.serialize import dumps

        roles = (len(self.roots), len(self.inputs.exprs), len(self.params.exprs))
        graph = dumps([*self.roots, *self.inputs.exprs, *self.params.exprs])
        return LoopProgram._unpickled, (PICKLE_VERSION, OPS_ID, graph, roles, self.returns_value)

    def __setstate__(self, state: Any) -> None:
        # Only a forged pickle sets state (ours call _unpickled): one carrying "source" would run it.
        raise ValueError("this pickled symgrad loop program carries its state (generated source?) instead of its "
                         "graph: refused; pickle it again with this symgrad")

    @classmethod
    def _unpickled(cls, version: Any, ops_id: Any, graph: Any, roles: Any, returns_value: Any) -> LoopProgram:
        """A LoopProgram from a pickle: format and op table checked, the graph loaded by sg.loads (a
        FormatError for anything sg.dumps does not write), the program made again from it."""
        from symgrad.compile.program import OPS_ID, PICKLE_VERSION, _names
        from symgrad.expr.serialize import loads

        if version != PICKLE_VERSION or ops_id != OPS_ID:
            raise ValueError(f"this pickled symgrad loop program has format {version!r} and op table {ops_id!r}; "
                             f"this symgrad reads format {PICKLE_VERSION}, op table {OPS_ID}: compile it again")
        exprs = loads(graph)
        if not (isinstance(exprs, list) and isinstance(roles, tuple) and len(roles) == 3
                and all(type(n) is int and n >= 0 for n in roles) and sum(roles) == len(exprs) and roles[0]
                and type(returns_value) is bool):
            raise ValueError("this pickled symgrad loop program is malformed (its roots, inputs and params)")
        a, b = roles[0], roles[0] + roles[1]
        return cls.make(exprs[:a], _names(exprs[a:b], "inputs"), _names(exprs[b:], "params"), returns_value)
