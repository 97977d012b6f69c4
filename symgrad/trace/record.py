"""The ``Trace``: one traced signature of a ``Function``: its symbolic inputs, formulas, kernel and results."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.compile import function as compiled
from symgrad.expr import ndarrays, rolled, tracing
from symgrad.expr.build import Var
from symgrad.expr.functions import wrap
from symgrad.expr.node import Expr, TracingError, paused_gc
from symgrad.expr.printing import format as format_exprs
from symgrad.expr.sparsity import SparseExprs
from symgrad.expr.tracing import context
from symgrad.expr.traverse import as_expr_list, count_nodes, object_array, substitute, topo_order
from symgrad.trace import guards, limits
from symgrad.trace.captured import Captures
from symgrad.trace.signature import (
    OBJECT,
    Slot,
    fresh_names,
    is_rolled,
    leaf_info,
    symbolic_leaf,
    tangent_of,
)
from symgrad.util import pytree
from symgrad.util.cached import cached_property

if TYPE_CHECKING:
    from symgrad.trace.function import Function

def _out_leaves(tree: Any, who: str, indexed: bool = True) -> tuple[list[tuple[list[Expr], tuple]], Any]:
    """What ``fn`` returned: ([(expressions, shape) per leaf], tree structure). Traced element by
    element (not ``indexed``), a rolled array it returns (a scan's ys) comes as its elements."""
    leaves, treedef = pytree.flatten(tree)
    out = []
    for leaf in leaves:
        if not indexed and ndarrays.is_array(leaf):
            leaf = ndarrays.elements(leaf)
        arr = None if isinstance(leaf, Expr) else object_array(leaf)
        if arr is not None and any(ndarrays.is_array(v) for v in arr.ravel()):  # np.array([x, 2 * x]) of arrays
            raise TracingError(f"{who}: the function returned an array of traced arrays (np.array of arrays "
                               "traced rolled): its shape is not NumPy's; use np.stack")
        if arr is not None and not all(isinstance(v, Expr | float | int | np.number) for v in arr.ravel()):
            raise TypeError(f"{who}: the function returned {type(leaf).__name__}; return expressions, numbers, "
                            "arrays of them, or tuples / lists / dicts of those")
        out.append((as_expr_list(leaf), leaf.shape if arr is None else arr.shape))
    return out, treedef


def _pieces(flat: np.ndarray, blocks: list[tuple[tuple, Any]]) -> list:
    """``flat`` cut into blocks of the given (shape, dtype): floats (or expressions) for scalars."""
    out, lo = [], 0
    for shape, dtype in blocks:
        if shape and flat.dtype == object and lo < len(flat) and is_rolled(flat[lo]):  # a rolled array: one Expr
            out.append(flat[lo])
            lo += 1
            continue
        n = 1
        for d in shape:
            n *= d
        piece = flat[lo:lo + n]
        lo += n
        if shape == ():
            v = piece[0]
            out.append(v if isinstance(v, Expr) else float(v) if dtype is None else dtype.type(v))
        else:
            piece = piece.reshape(shape)
            out.append(wrap(piece) if piece.dtype == object else piece if dtype is None else piece.astype(dtype))
    return out


def _scalar_at(k: int, kind: type, flat: np.ndarray) -> Any:
    if kind is np.int64:
        _exact(flat[k:k + 1])
    return kind(flat[k])


def _block_at(where: slice, shape: tuple, dtype: Any, flat: np.ndarray) -> np.ndarray:
    piece = flat[where] if len(shape) == 1 else flat[where].reshape(shape)
    if dtype is not None and dtype.kind == "i":
        _exact(piece)
    return piece if dtype is None else piece.astype(dtype)


def _exact_input(parts: list, who: str) -> None:
    """An integer argument beyond 2**53 would be rounded on its way into the float64 kernel: refused."""
    for values in parts:
        if values.dtype.kind in "iuO" and values.size and np.max(np.abs(values)) >= 2**53:
            raise OverflowError(f"{who}: an integer argument holds {np.max(np.abs(values))}, beyond 2**53 where "
                                "symgrad's float64 arithmetic is no longer exact")


def _exact(values: np.ndarray) -> None:
    """Integers computed in float64 are exact below 2**53: an integer result beyond is refused."""
    if values.size and not np.max(np.abs(values)) < 2.0 ** 53:
        big = values.flat[np.argmax(np.abs(values))]
        raise OverflowError(f"an integer result {big:.17g} is not exact in symgrad's float64 arithmetic (beyond "
                            "2**53, or an integer // 0): compute it with NumPy, outside the traced function")


def _refuse_fragments(outputs: list[Expr], who: str) -> None:
    """Raise TracingError where rolled arrays cost more than elements (see limits.NESTS_MIN)."""
    nodes = elements = 0
    for node in topo_order(outputs):
        if node.free or node.args and not node.op.array_valued:
            nodes += 1
            elements += math.prod(i.payload[1] for i in node.free)
    if nodes >= limits.NESTS_MIN and elements <= limits.UNROLLED_MAX:
        raise TracingError(f"{who}: {nodes} rolled nodes for {elements} elements (many short loops: a Python "
                           "loop over small arrays) trace faster element by element")


def _blocks(shapes: list[tuple], dtypes: list[Any]) -> list[tuple[tuple, Any]]:
    return list(zip(shapes, dtypes))


class Trace:
    """One traced signature of a ``Function``: its symbolic inputs, formulas and kernel."""

    def __init__(self, owner: Function, args: tuple, kwargs: dict, fresh: bool = False,
                 indexed: bool = False) -> None:
        self.owner, self.indexed = owner, indexed
        who = owner.who
        # Inside another trace fn may close over its variables: names no closure can share.
        tag = f"#{next(fresh_names)}" if fresh else ""
        names = owner.argument_names(len(args))
        self.arguments: dict[str, Any] = {}
        self.slots: dict[Any, Slot] = {}
        self._syms: list = []  # every traced leaf, symbolic, and the value it stands for in this call
        self._values: list = []
        self.floats: list[np.dtype] = []  # the float dtypes of the array arguments (results follow them)
        self.ints: set[Expr] = set()  # the symbols of integer arguments (jit's integer results follow them)
        self.statics: list = []  # static arguments' values (a callable or an object may capture values too)
        sym_args = [self._argument(names[i], i, a, tag, len(args)) for i, a in enumerate(args)]
        sym_kwargs = {k: self._argument(k, k, v, tag, len(args)) for k, v in kwargs.items()}
        self.wrt_keys = owner.differentiated(len(args), self.slots)
        self.data_keys = [k for k in self.slots if k not in self.wrt_keys]
        wrt = [self.slots[k] for k in self.wrt_keys]
        self.inputs = [v for s in wrt for v in s.variables()]
        self.params = [v for k in self.data_keys for v in self.slots[k].variables()]
        # The differentiated arguments as one tree: an int argnums is that argument, a tuple a tuple of them.
        self.wrt_shapes = [sh for s in wrt for sh in s.shapes]
        self.wrt_dtypes = [dt for s in wrt for dt in s.dtypes]
        single = isinstance(owner.argnums_spec, int) and owner.rule.wrt == "argnums"
        self.wrt_tree = wrt[0].treedef if single and wrt else (tuple, tuple(s.treedef for s in wrt))
        integer = [sym for slot in self.slots.values() for sym in slot.integer]  # may index other arrays
        outermost = not context.depth
        if outermost:
            context.called = []
        context.called.append(owner.fn)
        context.depth += 1
        try:
            with paused_gc(), tracing.capturing() as constants, tracing.observing() as met, \
                    tracing.integers(integer), guards.deciding(
                        None if fresh else guards.bindings(self._syms, self._values),
                        guards.mapping(self._syms, self._values) if fresh else None) as shadow, \
                    tracing.rolled_trace(indexed):
                result = owner.fn(*sym_args, **sym_kwargs)
                self.floats_met = tracing.floats_met()
        finally:
            context.depth -= 1
        self.guards = shadow.guards if shadow is not None else []  # conditions decided by this call's values
        self._guard_fn: Any = None
        # What fn read besides its arguments, checked before each call (a nested trace: by the outer one).
        self.watched = Captures().build(context.called, self.statics, met) if outermost and not fresh else ()
        if constants and fresh:  # (its formulas would read arrays no caller passes)
            raise TracingError(f"{who}: NumPy arrays of constants inside a transform applied to rolled arrays "
                               "outside a trace; pass them as arguments")
        self.constants = list(constants)  # NumPy arrays fn combined with rolled ones: parameters after the data
        self.constant_values = np.concatenate([v.ravel() for v in constants.values()]) if constants else None
        with paused_gc():
            if owner.has_aux:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise TypeError(f"{who}: with has_aux=True the function must return a pair (output, aux), "
                                    f"got {type(result).__name__}")
                result, aux = result
            self.exprs = result
            self.outputs, self.out_tree = _out_leaves(result, who, indexed)
            if indexed and not fresh and not integer:  # (element traces cannot gather through integer arguments)
                _refuse_fragments([e for exprs, _ in self.outputs for e in exprs], who)
            self.aux, self.aux_tree = _out_leaves(aux, f"{who} (aux)") if owner.has_aux else ([], None)
            self.extra = self._extra_variables(tag)
            derived = self._derive(sparse=owner.sparse and not fresh)
            self.flat, self.derivatives, self.blocks, self._structure = derived
        self._plain = [k for k in (*self.wrt_keys, *self.data_keys) if self.slots[k].treedef is pytree.LEAF]
        self._single = len(self.wrt_keys) == 1 and self.wrt_keys[0] in self._plain

    fallback: str | None = None  # why a rolled trace failed, where this one went element by element
    rolled_for: str | None = None  # why arrays under ROLLED_MIN elements were traced rolled (a long loop)

    def stale(self) -> bool:
        """Whether a value fn captured (a global, a closure cell, an attribute, an array's contents)
        changed since this trace: the formulas hold the old one."""
        for changed in self.watched:
            if changed():
                return True
        return False

    def _argument(self, name: str, key: Any, value: Any, tag: str, n_args: int) -> Any:
        owner = self.owner
        if owner.is_static(key, value, n_args):
            self.statics.append(value)
            return value
        leaves, treedef = pytree.flatten(value)
        paths = pytree.paths(treedef)
        shapes, dtypes, syms, integer = [], [], [], []
        for leaf, path in zip(leaves, paths):
            try:
                shape, dtype = leaf_info(leaf, owner.who, name + path)
            except TypeError as e:
                if name != "self" or type(e) is not TypeError:
                    raise
                raise TypeError(f"{e}; of a method, self is argument 0: argnums=1 differentiates the first "
                                "argument after it") from None
            shapes.append(shape)
            dtypes.append(dtype)
            syms.append(symbolic_leaf(f"{name}{tag}{path}", shape, self.indexed))
            if ndarrays.holds_integers(leaf):
                if isinstance(syms[-1], Expr):
                    integer.append(syms[-1])
                self.ints.update(as_expr_list(syms[-1]))
            if isinstance(leaf, np.ndarray | np.floating) and leaf.dtype.kind == "f":  # (Python floats: weak)
                self.floats.append(leaf.dtype)
        self.slots[key] = Slot(treedef, shapes, dtypes, syms, integer)
        self._syms += syms
        self._values += leaves
        sym = pytree.unflatten(treedef, syms)
        self.arguments[name] = sym
        return sym

    def _extra_variables(self, tag: str) -> list[Expr]:
        """The vector a transform takes besides fn's arguments: v (hvp), tangents (jvp), cotangents (vjp)."""
        like = self.owner.rule.extra_like
        if like == "wrt":
            return [tangent_of(v) for v in self.inputs]
        if like == "output":  # a cotangent per output element (per rolled output, an array)
            names = (f"ct{tag}[{i}]" for i in itertools.count())
            return [rolled.array(next(names), shape) if is_rolled(e) else Var(next(names))
                    for exprs, shape in self.outputs for e in exprs]
        return []

    def _derive(self, sparse: bool) -> tuple[Any, Any, list, Any]:
        """(flat expressions to compile, the derivative part of them, result blocks, blocks -> result)."""
        rule = self.owner.rule
        c = Outputs(outs=[e for exprs, _ in self.outputs for e in exprs],
                     shapes=[shape for _, shape in self.outputs],
                     aux=[e for exprs, _ in self.aux for e in exprs],
                     aux_blocks=[(shape, None) for _, shape in self.aux],
                     wrt_blocks=_blocks(self.wrt_shapes, self.wrt_dtypes),
                     W=functools.partial(pytree.unflatten, self.wrt_tree),
                     Out=functools.partial(pytree.unflatten, self.out_tree), sparse=sparse)
        if rule.scalar_out and not c.outs:
            raise TypeError(f"{self.owner.who}: the function returned nothing (None: a missing return?); "
                            "it must return one scalar")
        if rule.scalar_out and (len(c.outs) != 1 or c.shapes[0] != ()):
            raise TypeError(f"{self.owner.who}: the function must return one scalar, got shape "
                            f"{', '.join(str(s) for s in c.shapes)}; use sg.jacobian for vector outputs")
        if sparse and self.owner.has_aux:
            raise ValueError(f"{self.owner.who}: has_aux=True is not supported with sparse=True")
        return rule.derive(self, c)

    def matrix(self, M: np.ndarray, row_shapes: list[tuple], rows_tree: Any, aux: list,
                aux_blocks: list) -> tuple:
        """Blocks of a derivative matrix: rows cut by ``row_shapes``, columns by the wrt leaves."""
        row_cuts = np.cumsum([0, *(int(np.prod(s)) for s in row_shapes)])
        col_cuts = np.cumsum([0, *(int(np.prod(s)) for s in self.wrt_shapes)])
        flat, blocks = [], []
        for a, ra in enumerate(row_shapes):
            for b, (sb, db) in enumerate(zip(self.wrt_shapes, self.wrt_dtypes)):
                flat.extend(M[row_cuts[a]:row_cuts[a + 1], col_cuts[b]:col_cuts[b + 1]].ravel())
                blocks.append((ra + sb, db))
        n_in = len(self.wrt_shapes)
        W = functools.partial(pytree.unflatten, self.wrt_tree)
        nest = lambda p: rows_tree([W(p[a * n_in:(a + 1) * n_in]) for a in range(len(row_shapes))])
        flat = as_expr_list(flat) if flat else []
        return [*flat, *aux], flat, blocks + aux_blocks, self.with_aux(nest, len(blocks))

    def rolled_matrix(self, rows: list, row_shapes: list, tree: Any, c: Outputs) -> tuple:
        """Jacobian / Hessian blocks of rolled arrays: ``rows[a][b]``, block (row a, input b): one rolled
        array, or a list of scalars (an output built of scalars, a scalar input)."""
        flat = [e for row in rows for b in range(len(self.inputs)) for e in (
            row[b] if isinstance(row[b], list) else [row[b]])]
        blocks = [(ra + sb, db) for ra in row_shapes for sb, db in zip(self.wrt_shapes, self.wrt_dtypes)]
        n_in = len(self.wrt_shapes)
        nest = lambda p: tree([c.W(p[a * n_in:(a + 1) * n_in]) for a in range(len(row_shapes))])  # noqa: E731
        return [*flat, *c.aux], flat, blocks + c.aux_blocks, self.with_aux(nest, len(blocks))

    def with_aux(self, structure: Any, n: int) -> Any:
        """JAX's has_aux results: (result, aux), the aux leaves after the first ``n`` blocks."""
        if not self.owner.has_aux:
            return structure
        return lambda p: (structure(p[:n]), self.aux_from(p[n:]))

    def aux_from(self, pieces: list) -> Any:
        """has_aux's second output, in fn's structure, from its flat pieces."""
        return pytree.unflatten(self.aux_tree, pieces)

    def assemble(self, flat: Any) -> Any:
        """The result in its structure, from the flat outputs (floats, or expressions)."""
        if self._structure is None:  # a sparse matrix, as compiled
            return flat
        if flat.dtype is OBJECT:
            return self._structure(_pieces(flat, self.blocks))
        return self._structure([cut(flat) for cut in self._cuts])

    @cached_property
    def _cuts(self) -> list:
        """For each block, what takes it out of numeric flat outputs (computed once: each call uses them)."""
        cuts, lo = [], 0
        for shape, dtype in self.blocks:
            n = math.prod(shape)
            if shape == ():
                cuts.append(functools.partial(_scalar_at, lo, float if dtype is None else dtype.type))
            else:
                cuts.append(functools.partial(_block_at, slice(lo, lo + n), shape, dtype))
            lo += n
        return cuts

    def explain(self) -> str:
        """One line: the arguments' shapes, the path the trace took (and why), its size, the program."""
        shapes = ", ".join(f"{name}: {self._shapes(k)}" for name, k in zip(self.arguments, self.slots))
        if self.indexed:
            path = "rolled (whole arrays: loops)" + (f", for {self.rolled_for}" if self.rolled_for else "")
        elif self.fallback is not None:
            path = f"element by element, because {self.fallback}"
        else:
            path = f"element by element (arrays under {limits.ROLLED_MIN} elements)" if any(
                sh for s in self.slots.values() for sh in s.shapes) else "scalars"
        flat = self.flat.exprs if isinstance(self.flat, SparseExprs) else self.flat
        nodes = count_nodes(list(flat))
        line = f"  {shapes or 'no arguments'} -> {path}, {nodes} node{'s' * (nodes != 1)}"
        if "compiled" in self.__dict__:
            c = self.compiled
            kind = "loops" if isinstance(c.program, compiled.LoopProgram) else "a flat program"
            line += f", {kind} on {c.backend}"
        return line

    def _shapes(self, key: Any) -> str:
        shapes = self.slots[key].shapes
        return str(shapes[0]) if self.slots[key].treedef is pytree.LEAF else f"a pytree of {len(shapes)} leaves"

    @cached_property
    def compiled(self) -> compiled.Compiled:
        """The compiled kernel of the flat outputs (built on first use: nested traces never compile)."""
        return compiled.compile(self.flat if isinstance(self.flat, SparseExprs) else object_array(
            list(self.flat)).reshape(-1), self.inputs, [*self.params, *self.constants, *self.extra],
            self.owner.backend)

    def formulas(self) -> str:
        """The traced outputs and their derivatives, as ``sg.format`` prints them (a let-form)."""
        labels: dict[str, Expr] = {}
        for i, (exprs, shape) in enumerate(self.outputs):
            name = f"f{i}" if len(self.outputs) > 1 else "f"
            for index, e in zip(np.ndindex(*shape), exprs):
                labels[f"{name}[{', '.join(map(str, index))}]" if shape else name] = e
        d = self.derivatives
        if d is not None:
            exprs = d.exprs if isinstance(d, SparseExprs) else as_expr_list(d)
            labels.update(zip(self._derivative_labels(len(exprs)), exprs))
        return format_exprs(labels)

    def _derivative_labels(self, n: int) -> list[str]:
        inputs = [str(v) for v in self.inputs]
        label = self.owner.rule.label
        if "{v}" not in label:  # one per output
            return [label.format(i=i) for i in range(n)]
        if "{i}" not in label and "{u}" not in label:  # one per input
            return [label.format(v=v) for v in inputs]
        d = self.derivatives
        if isinstance(d, SparseExprs):
            rows = np.repeat(np.arange(len(d.indptr) - 1), np.diff(d.indptr))
            pairs = zip(rows, d.indices)
        else:
            pairs = (divmod(k, len(inputs)) for k in range(n))
        return [label.format(i=i, u=inputs[i], v=inputs[j]) for i, j in pairs]

    @property
    def source(self) -> str:
        """The generated code of the compiled kernel (or the VM's instruction listing)."""
        return self.compiled.source

    def __call__(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """Run the compiled kernel at fn's arguments (and the transform's vector, ``extra``).

        A trace that decided Python ``if`` / ``while`` conditions by its call's values runs only
        where they come out the same; elsewhere the Function traces the other branch.
        """
        got = self._conditions_at(args, kwargs) if self.guards else None
        if got is not None and not self.holds(got):
            cond, want = next((c, w) for v, (c, w) in zip(got, self.guards) if (v != 0.0) != w)
            raise ValueError(f"{self.owner.who}: this trace took the branch where {cond} is {want}, which it "
                             "is not at these arguments; call the function itself (it traces that branch)")
        return self.run(args, kwargs, extra)

    def run(self, args: tuple, kwargs: dict, extra: Any = None) -> Any:
        """``__call__`` where the caller checked the guards."""
        return self.assemble(self.compiled(*self.vectors(args, kwargs, extra)))

    def run_many(self, args: tuple, kwargs: dict, extras: list) -> list:
        """``run`` at each of ``extras`` (tangents, vectors or cotangents) for the same arguments: one
        batched kernel call, its rows in parallel (a sparse Jacobian's products, a colour each)."""
        vectors = [self.vectors(args, kwargs, extra) for extra in extras]
        if not vectors:
            return []
        x = vectors[0][0]
        got = self.compiled.batch(np.broadcast_to(x, (len(vectors), x.size)), np.stack([p for _, p in vectors]))
        return [self.assemble(row) for row in (zip(*got) if isinstance(got, tuple) else got)]

    def vectors(self, args: tuple, kwargs: dict, extra: Any) -> tuple[np.ndarray, np.ndarray]:
        """The compiled function's inputs and parameters for these arguments."""
        if self._single:
            key = self.wrt_keys[0]
            x = np.ravel(kwargs[key] if isinstance(key, str) else args[key])
            if self.ints:
                _exact_input([x], self.owner.who)
        else:
            x = self.packed(self.wrt_keys, args, kwargs)
        p = self.packed(self.data_keys, args, kwargs)
        if self.extra or self.constants:
            tail = [] if self.constant_values is None else [self.constant_values]
            vector = [np.ravel(leaf) for leaf in self._extra_values(extra)] if self.extra else []
            p = np.concatenate([p, *tail, *vector])
        return x, p

    def guarded(self, args: tuple, kwargs: dict) -> bool:
        """Whether the conditions decided while tracing come out the same at these arguments."""
        return bool(self.holds(self._conditions_at(args, kwargs)))

    def _conditions_at(self, args: tuple, kwargs: dict) -> np.ndarray:
        return self.conditions(self.packed(self.wrt_keys, args, kwargs), self._params(args, kwargs))

    def conditions(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The guards' conditions at inputs ``x`` and parameters ``p`` (rows of them: one row each)."""
        if self._guard_fn is None:
            conditions = object_array([c for c, _ in self.guards])
            self._guard_fn = compiled.compile(conditions, self.inputs, [*self.params, *self.constants], "vm")
        if np.ndim(p) == 2:
            return self._guard_fn.batch(np.broadcast_to(x, (len(p), len(x))), p).reshape(len(p), -1)
        return np.ravel(self._guard_fn(x, p))

    def holds(self, got: np.ndarray) -> np.ndarray:
        """Which rows of ``conditions`` decide every guard as this trace did."""
        return np.all((got != 0.0) == np.array([want for _, want in self.guards]), axis=-1)

    def _params(self, args: tuple, kwargs: dict) -> np.ndarray:
        p = self.packed(self.data_keys, args, kwargs)
        return p if self.constant_values is None else np.concatenate([p, self.constant_values])

    def packed(self, keys: list, args: tuple, kwargs: dict) -> np.ndarray:
        """The arguments at ``keys`` (positions or names), their leaves raveled into one float vector."""
        if not keys:
            return compiled._EMPTY
        parts = []
        for k in keys:
            value = kwargs[k] if isinstance(k, str) else args[k]
            if k in self._plain:
                parts.append(np.ravel(value))
            else:
                parts.extend(np.ravel(leaf) for leaf in pytree.flatten(value)[0])
        if self.ints:
            _exact_input(parts, self.owner.who)
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else compiled._EMPTY

    def _extra_values(self, extra: Any) -> list:
        """The leaves of v / tangents / cotangent, checked against the structure they must have."""
        what = self.owner.rule.extra
        if self.owner.rule.extra_like == "output":
            tree, shapes = self.out_tree, [s for _, s in self.outputs]
        else:
            tree, shapes = self.wrt_tree, self.wrt_shapes
        leaves, treedef = pytree.flatten(extra)
        if treedef != tree and not (len(shapes) == 1 and treedef is pytree.LEAF):
            raise ValueError(f"{self.owner.who}: {what} must have the structure of "
                             f"{'the output' if what == 'cotangent' else 'the differentiated arguments'}")
        got = [np.shape(leaf) for leaf in leaves]
        if got != shapes:
            raise ValueError(f"{self.owner.who}: {what} has shapes {got}, expected {shapes}")
        return leaves

    def symbolic(self, args: tuple, kwargs: dict, extra: Any) -> Any:
        """The result for symbolic arguments: this trace's formulas with the arguments put in."""
        mapping: dict[Expr, Any] = {}
        for key, slot in self.slots.items():
            value = kwargs[key] if isinstance(key, str) else args[key]
            for sym, leaf in zip(slot.syms, pytree.flatten(value)[0]):
                if is_rolled(sym):
                    mapping[sym] = _rolled_operand(leaf)
                    continue
                mapping.update(zip(as_expr_list(sym), object_array(leaf).ravel().tolist()))
        if self.extra:
            leaves = self._extra_values(extra)
            if any(map(is_rolled, self.extra)):  # one rolled array (or variable) per leaf
                mapping.update((e, _rolled_operand(leaf) if is_rolled(e) else leaf)
                               for e, leaf in zip(self.extra, leaves))
            else:
                values = [v for leaf in leaves for v in object_array(leaf).ravel().tolist()]
                mapping.update(zip(self.extra, values))
        flat = substitute(list(self.flat), mapping) if self.flat else []
        return self._structure(_pieces(object_array(list(flat)).reshape(-1), self.blocks))


@dataclass
class Outputs:
    """What fn returned, flattened, and how the differentiated arguments and outputs rebuild."""

    outs: list[Expr]
    shapes: list[tuple]
    aux: list[Expr]
    aux_blocks: list
    wrt_blocks: list
    W: Any  # flat pieces -> the differentiated arguments' structure
    Out: Any  # flat pieces -> the output's structure
    sparse: bool


def _rolled_operand(leaf: Any) -> Any:
    """What stands for a rolled array: a rolled value as it is, a concrete array (beside rolled ones:
    a vjp's primal under vmap, a jvp's tangent inside grad) as a constant of the trace outside."""
    return leaf if is_rolled(leaf) else ndarrays.operand(np.asarray(leaf, dtype=float))


