"""Functions with derivative rules of their own: ``sg.custom_jvp`` and ``sg.custom_vjp``, as JAX's.

Called on numbers, such a function is the function. Called on traced values, each scalar of its
result becomes a node (expr/custom.py) whose value is the function's graph and whose partial
derivatives come from the rule, traced once on placeholders: the tangent out of a JVP rule (or the
cotangents out of a VJP's ``bwd``) is linear in the tangents in (the cotangent), and its
coefficients are the partials. The rule itself is differentiated for derivatives of higher order.

On rolled arrays an elementwise function (checked: its result at an index must be its call on the
elements there) is the tensor of one scalar node; any other raises TracingError, and the trace goes
element by element (each element one scalar node), a slower path that gives the same numbers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.expr import custom, ndarrays, rolled
from symgrad.expr.build import const
from symgrad.expr.diff import grad
from symgrad.expr.functions import SymArray
from symgrad.expr.node import Expr, TracingError
from symgrad.expr.tracing import context
from symgrad.expr.traverse import object_array, rewrite, substitute, topo_order
from symgrad.trace import guards
from symgrad.util import pytree


class _Units:
    """The traced scalars among a flat list of pytree leaves (an expression, or the elements of an
    object array): where they are, and the leaves rebuilt with other scalars in their places."""

    def __init__(self, leaves: list, who: str) -> None:
        self.leaves, self.where, self.units = leaves, [], []
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, Expr) and leaf.op.array_valued:
                raise TracingError(f"{who} of a whole rolled array has no rolled form yet")
            if isinstance(leaf, Expr) and leaf.op.name != "const":
                self.where.append((k, None))
                self.units.append(leaf)
            elif isinstance(leaf, np.ndarray) and leaf.dtype == object:
                for j, e in enumerate(leaf.ravel()):
                    if isinstance(e, Expr) and e.op.name != "const":
                        self.where.append((k, j))
                        self.units.append(e)

    def rebuild(self, values: list, zeros: bool = False) -> list:
        """The leaves with ``values`` in the traced scalars' places (``zeros``: 0.0 elsewhere, a
        tangent's or cotangent's leaves)."""
        out = [_zeros(leaf) if zeros else leaf for leaf in self.leaves]
        out = [object_array(leaf.ravel()).reshape(leaf.shape).copy().view(SymArray) if isinstance(
            leaf, np.ndarray) else leaf for leaf in out]  # (a copy: the caller's array keeps its values;
        # a SymArray: np.clip, np.where ... of it are symgrad's, as on the arrays a trace passes)
        for (k, j), v in zip(self.where, values):
            if j is None:
                out[k] = v
            else:
                out[k].flat[j] = v
        return out

    def pick(self, leaves: list, who: str) -> list:
        """The entries of ``leaves`` (a tangent's or a cotangent's, shaped as these) at the traced
        scalars' places."""
        picked = []
        for k, j in self.where:
            leaf, like = leaves[k], self.leaves[k]
            if np.ndim(leaf) and np.shape(leaf) != np.shape(like):
                raise ValueError(f"{who}: expected shape {np.shape(like)}, got {np.shape(leaf)}")
            e = leaf if j is None or not np.ndim(leaf) else np.asarray(leaf, dtype=object).ravel()[j]
            picked.append(e if isinstance(e, Expr) else const(float(e)))
        return picked


def _zeros(leaf: Any) -> Any:
    return np.zeros(np.shape(leaf)) if np.ndim(leaf) else 0.0


class _Custom:
    """What custom_jvp and custom_vjp share: the call (its value, and a node a scalar it returns)."""

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(sorted({nondiff_argnums} if isinstance(nondiff_argnums, int)
                                            else set(nondiff_argnums)))
        self.name = getattr(fun, "__name__", "custom")

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else functools.partial(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:  # (keywords as positions: the rule takes the primals as a tuple)
            bound = inspect.signature(self.fun).bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
        if self in context.rules:
            return self.fun(*args)
        for k in self.nondiff_argnums:
            if k >= len(args):
                raise TypeError(f"{self.name}: nondiff_argnums names argument {k}, but it got {len(args)}")
        diff = [i for i in range(len(args)) if i not in self.nondiff_argnums]
        leaves, tree = pytree.flatten(tuple(args[i] for i in diff))
        if any(isinstance(leaf, Expr) and leaf.op.array_valued for leaf in leaves):
            return self._elementwise(args, diff, leaves, tree)
        ins = _Units(leaves, f"{self.name}, a custom_jvp / custom_vjp function,")
        if not ins.units:
            return self.fun(*args)
        inputs = [custom.placeholder() for _ in ins.units]
        primals = list(args)
        for i, v in zip(diff, pytree.unflatten(tree, ins.rebuild(inputs))):
            primals[i] = v
        context.rules.append(self)
        try:  # (a Python if in the function or its rule: decided by the arguments' values, as guards)
            with guards.deciding(None, dict(zip(inputs, ins.units))):
                out = self.fun(*primals)
                out_leaves, out_tree = pytree.flatten(out)
                outs = _Units(out_leaves, f"{self.name}'s result")
                partials = self._partials(primals, diff, tree, ins, inputs, out_tree, outs)
        finally:
            context.rules.pop()
        if isinstance(partials, tuple):  # (g, cotangents): the rule reads g too
            self._check([*outs.units, *partials[1]], [*inputs, partials[0]])
        else:
            self._check([*outs.units, *(p for row in partials if row is not None for p in row if p is not None)],
                        inputs)
        values = substitute(outs.units, dict(zip(inputs, ins.units)))
        rules = partials if isinstance(partials, list) else [(None, partials)]  # (a cotangent rule)
        nodes = [custom.make(self.name, v, ins.units, inputs, *(row if isinstance(row, tuple) else (row,)))
                 for v, row in zip(values, rules)]
        return pytree.unflatten(out_tree, outs.rebuild(nodes))

    def _partials(self, primals: list, diff: list, tree: Any, ins: _Units, inputs: list, out_tree: Any,
                  outs: _Units) -> list:
        raise NotImplementedError

    def _elementwise(self, args: tuple, diff: list, leaves: list, tree: Any) -> Any:
        """On rolled arrays of one shape: where the function is elementwise (its result at each index
        is its value at the arguments' elements there, which is checked), the tensor of its call on
        one element, a scalar node: rolled, whatever the size. Otherwise TracingError (the trace then
        goes element by element)."""
        shapes = {leaf.shape for leaf in leaves if isinstance(leaf, Expr) and leaf.op.array_valued}
        if len(shapes) != 1 or any(np.ndim(leaf) and not isinstance(leaf, Expr) for leaf in leaves):
            raise TracingError(f"{self.name}, a custom_jvp / custom_vjp function, on rolled arrays of shapes "
                               f"{sorted(shapes)}: only elementwise calls on arrays of one shape are rolled")
        idx = ndarrays.fresh(shapes.pop())
        at = [ndarrays.element(leaf, idx) if isinstance(leaf, Expr) and leaf.op.array_valued else leaf
              for leaf in leaves]
        elements = list(args)
        for i, v in zip(diff, pytree.unflatten(tree, at)):
            elements[i] = v
        context.rules.append(self)
        try:
            whole = pytree.flatten(self.fun(*args))
        finally:
            context.rules.pop()
        one = pytree.flatten(self(*elements))
        if whole[1] != one[1] or not all(_same_at(w, e, idx) for w, e in zip(whole[0], one[0])):
            raise TracingError(f"{self.name}, a custom_jvp / custom_vjp function, is not elementwise on these "
                               "rolled arrays (its result at an index reads other elements)")
        return pytree.unflatten(one[1], [rolled.tensor(e, *idx) if isinstance(e, Expr) else w
                                        for w, e in zip(whole[0], one[0])])

    def _check(self, exprs: list, inputs: list) -> None:
        """The value and the rule read the arguments alone: a traced value read from outside would get
        no derivative through the rule."""
        v = custom.foreign(exprs, inputs)
        if v is None:
            return
        if isinstance(v.payload, str) and v.payload.startswith("custom#"):
            raise TypeError(f"{self.name}: the rule's result is not linear in the tangents (cotangents): "
                            "multiply them by derivatives, never by each other or inside a function")
        raise TracingError(f"{self.name}, a custom_jvp / custom_vjp function, reads the traced value {v} from "
                           "outside its arguments: pass it as an argument (JAX: jax.closure_convert)")

    def _nondiff(self, args: list) -> list:
        return [args[k] for k in self.nondiff_argnums]


def _same_at(whole: Any, one: Any, idx: tuple) -> bool:
    """Whether the rolled result ``whole`` at the indices ``idx`` is the elementwise call's ``one``
    (its value: the custom nodes' own), arrays read at an index inlined on both sides."""
    if not isinstance(whole, Expr) or not whole.op.array_valued:
        return not isinstance(one, Expr) and np.array_equal(whole, one)
    if not isinstance(one, Expr) or whole.shape != tuple(i.payload[1] for i in idx):
        return False
    body = rolled.substitute_indices(whole.args[0], dict(zip(whole.args[1:], idx))) \
        if whole.op.name == "tensor" else ndarrays.element(whole, idx)
    return _inlined(body) is _inlined(custom.plain([one])[0])


def _inlined(e: Expr) -> Expr:
    """``e`` with every load of a tensor replaced by the tensor's body there (one canonical form of
    elementwise code, however NumPy's calls materialised it)."""
    def body_read(node: Expr, args: tuple) -> Expr | None:
        if node.op.name == "load" and args[0].op.name == "tensor":
            t = args[0]
            return rolled.substitute_indices(t.args[0], dict(zip(t.args[1:], args[1:])))
        return None

    return rewrite([e], body_read)[e]


def _reads(exprs: list, placeholders: list) -> bool:
    wanted = set(placeholders)
    return any(n in wanted for n in topo_order(exprs))


def _coefficients(linear: Expr, wrt: list[Expr]) -> list[Expr | None]:
    """The coefficients of ``linear`` (a linear function of the placeholders ``wrt``), None where 0."""
    return [None if c.op.name == "const" and c.payload == 0.0 else c for c in grad(linear, wrt)]


class custom_jvp(_Custom):  # noqa: N801 (JAX's name)
    """A function whose forward-mode derivative is given by a rule (``jax.custom_jvp``).

    Decorate the function, then its rule with ``@f.defjvp``: the rule takes ``(primals, tangents)``
    (tuples like the arguments) and returns ``(primal_out, tangent_out)``. Reverse mode, Hessians and
    vmap use the rule as well; derivatives of higher order differentiate the rule.
    ``nondiff_argnums``: arguments never differentiated (functions, flags), passed to the rule first.

    >>> import numpy as np, symgrad as sg
    >>> @sg.custom_jvp
    ... def log1pexp(x):
    ...     return np.log(1.0 + np.exp(x))
    >>> @log1pexp.defjvp
    ... def log1pexp_jvp(primals, tangents):
    ...     x, = primals
    ...     x_dot, = tangents
    ...     return log1pexp(x), (1.0 - 1.0 / (1.0 + np.exp(x))) * x_dot
    >>> float(sg.grad(log1pexp)(100.0))  # the graph's own derivative: nan (inf / inf)
    1.0
    """

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        super().__init__(fun, nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the rule ``jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``; returns it.

        >>> import symgrad as sg
        >>> f = sg.custom_jvp(lambda x: x ** 3)
        >>> _ = f.defjvp(lambda p, t: (f(*p), 3.0 * p[0] ** 2 * t[0]))
        >>> float(sg.grad(f)(2.0))
        12.0
        """
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """Set the rule as one function per argument, ``jvp_i(tangent_i, primal_out, *primals)``, their
        results summed (None: that argument has derivative 0).

        >>> import numpy as np, symgrad as sg
        >>> f = sg.custom_jvp(lambda x, y: np.sin(x) * y)
        >>> f.defjvps(lambda t, ans, x, y: np.cos(x) * t * y, lambda t, ans, x, y: np.sin(x) * t)
        >>> float(sg.grad(f, argnums=1)(0.5, 2.0)) == float(np.sin(0.5))
        True
        """
        if len(jvps) != len(inspect.signature(self.fun).parameters):
            raise TypeError(f"{self.name}.defjvps: give one function (or None) per argument, got {len(jvps)}")

        def jvp(primals: tuple, tangents: tuple) -> tuple:
            ans = self(*primals)
            terms = [f(t, ans, *primals) for f, t in zip(jvps, tangents) if f is not None]
            total = functools.reduce(lambda a, b: pytree.tree_map(np.add, a, b), terms) if terms else \
                pytree.tree_map(lambda v: 0.0 * v, ans)
            return ans, total

        self.jvp = jvp

    def _partials(self, primals: list, diff: list, tree: Any, ins: _Units, inputs: list, out_tree: Any,
                  outs: _Units) -> list:
        if self.jvp is None:
            return [None] * len(outs.units)
        dots = [custom.placeholder() for _ in ins.units]
        tangents = pytree.unflatten(tree, ins.rebuild(dots, zeros=True))
        result = self.jvp(*self._nondiff(primals), tuple(primals[i] for i in diff), tuple(tangents))
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise TypeError(f"{self.name}'s JVP rule must return a pair (primal_out, tangent_out), got "
                            f"{type(result).__name__}")
        leaves, t_tree = pytree.flatten(result[1])
        if t_tree != out_tree:
            raise TypeError(f"{self.name}'s JVP rule: the tangent out has structure {t_tree}, the function's "
                            f"result {out_tree}")
        return [_coefficients(t, dots) for t in outs.pick(leaves, f"{self.name}'s tangent out")]


class custom_vjp(_Custom):  # noqa: N801 (JAX's name)
    """A function whose reverse-mode derivative is given by a rule (``jax.custom_vjp``).

    ``f.defvjp(fwd, bwd)``: ``fwd(*args) -> (out, residuals)`` and ``bwd(*nondiff_args, residuals,
    cotangent) -> a tuple with one cotangent per (differentiated) argument`` (None: zero). Forward
    mode, Hessians and vmap use the rule too (JAX refuses forward mode on these); derivatives of
    higher order differentiate ``bwd``. A ``bwd`` whose Python control flow reads the cotangent (a
    loop until it converges) is decided at cotangents of 1 and -1, which must agree (TypeError if not).

    >>> import numpy as np, symgrad as sg
    >>> @sg.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None
    >>> def bwd(_, g):
    ...     return (np.clip(g, -1.0, 1.0),)
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> float(sg.grad(lambda x: 3.0 * clip_gradient(x))(2.0))
    1.0
    """

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        super().__init__(fun, nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        """Set the rule: ``fwd(*args) -> (out, residuals)``, ``bwd(*nondiff_args, residuals, g) -> cotangents``.

        >>> import symgrad as sg
        >>> f = sg.custom_vjp(lambda x: x ** 2)
        >>> f.defvjp(lambda x: (x ** 2, x), lambda x, g: (2.0 * x * g,))
        >>> float(sg.grad(f)(3.0))
        6.0
        """
        self.fwd, self.bwd = fwd, bwd

    def _partials(self, primals: list, diff: list, tree: Any, ins: _Units, inputs: list, out_tree: Any,
                  outs: _Units) -> list:
        if self.fwd is None:
            return [None] * len(outs.units)
        result = self.fwd(*primals)
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise TypeError(f"{self.name}'s fwd must return a pair (out, residuals), got {type(result).__name__}")
        g = [custom.placeholder() for _ in outs.units]
        pull = functools.partial(self._pulled, primals, diff, tree, ins, result[1], pytree.unflatten(
            out_tree, outs.rebuild(g, zeros=True)), g)
        try:
            outs_ct, columns = pull(None)
        except TracingError:  # Python control flow on the cotangent (a loop until it converges)
            return self._decided(pull, g)
        if not _reads([p for column in columns for p in column if p is not None], g):
            return [[column[k] for column in columns] for k in range(len(g))]
        if len(g) != 1:
            raise TypeError(f"{self.name}'s bwd is not linear in the cotangent (it clips it ...): only a "
                            f"function of one scalar result may have such a rule, and {self.name} returned "
                            f"{len(g)} here (an elementwise one applies per element on rolled arrays, of "
                            "64 elements or more, or under sg.vmap)")
        return (g[0], tuple(outs_ct))

    def _pulled(self, primals: list, diff: list, tree: Any, ins: _Units, residuals: Any, cotangent: Any,
                g: list, at: float | None) -> tuple[list, list]:
        """bwd's cotangents of the traced inputs, and their coefficients of ``g`` (the cotangent's
        placeholders); Python control flow on g decided as if each were ``at`` (None: undecidable)."""
        with guards.deciding(None, None if at is None else dict.fromkeys(g, const(at))):
            cts = self.bwd(*self._nondiff(primals), residuals, cotangent)
        if not isinstance(cts, tuple | list) or len(cts) != len(diff):
            raise TypeError(f"{self.name}'s bwd must return a tuple of {len(diff)} cotangent(s), one per "
                            f"differentiated argument, got {type(cts).__name__}"
                            f"{f' of {len(cts)}' if isinstance(cts, tuple | list) else ''}")
        cts = [pytree.tree_map(_zeros, primals[i]) if c is None else c for i, c in zip(diff, cts)]
        leaves, ct_tree = pytree.flatten(tuple(cts))
        if ct_tree != tree:
            raise TypeError(f"{self.name}'s bwd: the cotangents have structure {ct_tree}, the arguments {tree}")
        outs_ct = ins.pick(leaves, f"{self.name}'s cotangent")
        return outs_ct, [_coefficients(c, g) for c in outs_ct]

    def _decided(self, pull: Callable, g: list) -> list:
        """The partials of a bwd whose control flow reads the cotangent (JAX's fixed point iterates on
        it until it converges): decided at cotangents of 1 and of -1 (a loop on |change| takes as many
        steps at both), which must give one rule, linear in the cotangent; otherwise TypeError."""
        (_, up), (_, down) = pull(1.0), pull(-1.0)
        linear = not _reads([p for column in up for p in column if p is not None], g)
        if not linear or any(a is not b for u, d in zip(up, down) for a, b in zip(u, d)):
            raise TypeError(f"{self.name}'s bwd decides Python control flow on the cotangent's value and is not "
                            "linear in it (it takes other branches at cotangents 1 and -1, or clips them): use "
                            "np.where on the cotangent, not Python's if")
        return [[column[k] for column in up] for k in range(len(g))]
