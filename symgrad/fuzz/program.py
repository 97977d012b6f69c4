"""The fuzzer's records: a random program (``Program``) and a disagreement found on it (``Disagreement``)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable

import numpy as np

import symgrad as sg

# The guarded points among a guarded program's inputs: exact zeros (x**y, sqrt, abs, where(x > 0)) and
# ties (max, min, sort), written as the snippet writes them.
GUARDED = "{0}.flat[::8] = 0.0; {0}.flat[1::8] = {0}.flat[2::8]"


@dataclasses.dataclass(frozen=True)
class Program:
    """A random function ``f`` as source text, the shapes of its arguments and what to differentiate.

    >>> p = Program("def f(x):\\n    return np.sum(np.sin(x))\\n", ((64,),), (0,), seed=1)
    >>> float(p.function()(*p.inputs())) == float(np.sum(np.sin(p.inputs()[0])))
    True
    """

    source: str
    shapes: tuple[tuple[int, ...], ...]
    argnums: tuple[int, ...]
    seed: int = 0

    @property
    def names(self) -> list[str]:
        """The argument names, as the source's ``def`` line gives them."""
        fn = ast.parse(self.source).body[0]
        return [a.arg for a in fn.args.args]

    def function(self, source: str | None = None) -> Callable:
        """The function the source defines (executed in a namespace holding ``np`` and ``sg``)."""
        namespace: dict = {"np": np, "sg": sg}
        exec(compile(source or self.source, "<fuzz>", "exec"), namespace)
        return namespace["f"]

    def vector_function(self) -> Callable | None:
        """``f`` returning the array it sums (for Jacobians), or None when it does not end ``return np.sum(e)``."""
        tree = ast.parse(self.source)
        ret = tree.body[0].body[-1]
        call = ret.value if isinstance(ret, ast.Return) else None
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "np.sum" and len(call.args) == 1
                and not call.keywords):
            return None
        ret.value = ret.value.args[0]
        return self.function(ast.unparse(tree))

    @property
    def guarded(self) -> bool:
        """Whether the inputs hold the points guards protect (one seed in four): exact zeros and ties."""
        return self.seed % 4 == 2

    def inputs(self) -> list[np.ndarray]:
        """The arguments: standard normal arrays from ``seed``; ``guarded``: every 8th entry an exact 0
        and the next equal to the one after it (``GUARDED``)."""
        rng = np.random.default_rng(self.seed)
        arrays = [rng.normal(size=s) for s in self.shapes]
        for a in arrays if self.guarded else ():
            exec(GUARDED.format("a"), {"a": a})
        return arrays

    def special(self) -> list[np.ndarray]:
        """Per argument, where its entries are an exact 0 or a tie (False everywhere unless ``guarded``)."""
        masks = [np.zeros(s, dtype=bool) for s in self.shapes]
        for m in masks if self.guarded else ():
            for k in (0, 1, 2):
                m.flat[k::8] = True
        return masks

    def snippet(self, probe: str = "vm") -> str:
        """A script that rebuilds the inputs and prints what ``probe`` compares (see ``Disagreement``).

        >>> p = Program("def f(x):\\n    return np.sum(x)\\n", ((64,),), (0,))
        >>> print(p.snippet("vm"))  # doctest: +ELLIPSIS
        import numpy as np
        ...
        print(sg.value_and_grad(f, argnums=0, backend='vm')(x))
        <BLANKLINE>
        """
        names = self.names
        argnums = self.argnums[0] if len(self.argnums) == 1 else self.argnums
        lines = ["import numpy as np", "import symgrad as sg", "", self.source.rstrip(), "",
                 f"rng = np.random.default_rng({self.seed})"]
        lines += [f"{n} = rng.normal(size={s if len(s) > 1 else s[0]})" for n, s in zip(names, self.shapes)]
        lines += [GUARDED.format(n) for n in names] if self.guarded else []
        args = ", ".join(names)
        kind, _, backend = probe.rpartition(":")
        backend = backend if backend in ("vm", "numba", "python") else "python"
        lines.append(f"print(f({args}), sg.value_and_grad(f, argnums={argnums}, backend='python')({args}))")
        k = self.argnums[0]
        call = {"jvp": f"sg.jvp(f, ({args},), tuple(np.ones_like(a) for a in ({args},)), backend={backend!r})",
                "hvp": f"sg.hvp(f, argnums={k}, backend={backend!r})({args}, np.ones_like({names[k]}))",
                "hessian": f"sg.hessian(f, argnums={k}, backend={backend!r})({args})",
                "jacobian": f"sg.jacobian(f_vec, argnums={k}, backend={backend!r})({args})  # f without np.sum",
                "vmap": f"sg.vmap(sg.grad(f, backend={backend!r}), backend={backend!r})(np.stack([{args}] * 3))"}
        if probe == "element":
            lines += ["from symgrad.trace import limits",
                      "limits.ROLLED_MIN = limits.LONG_LOOP = 10**9  # traced element by element"]
        if probe in ("element", "vm", "numba"):
            lines.append(f"print(sg.value_and_grad(f, argnums={argnums}, backend={backend!r})({args}))")
        elif kind in call:
            if kind != "jvp" and backend != "python":
                lines.append(f"print({call[kind].replace(repr(backend), repr('python'))})")
            lines.append(f"print({call[kind]})")
        return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Disagreement:
    """Two computations of one quantity that differ (``kind`` "wrong"; "nan" where the only differences
    are nan against a number: a nan partial of an unused or untaken value times a zero adjoint,
    see docs/guide.md) or one that raises ("error").

    ``probe`` names the computation checked (``"vm"``: value_and_grad on the loop VM against the
    interpreter, ``"element"``: the element trace against the rolled one, ``"fd"``: the interpreter's
    gradient against finite differences, ``"hvp:vm"`` ...), ``quantity`` what differs (``"value"``,
    ``"d/dx"``, ...), ``detail`` by how much or the exception.

    >>> p = Program("def f(x):\\n    return 0.0\\n", ((64,),), (0,))
    >>> Disagreement("vm", "value", "wrong", "max error 1.0", p).key
    ('vm', 'value', 'wrong')
    """

    probe: str
    quantity: str
    kind: str
    detail: str
    program: Program
    original: Program | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What the minimiser keeps: the same probe, quantity and kind."""
        return self.probe, self.quantity, self.kind

    def __str__(self) -> str:
        return f"[{self.probe}] {self.quantity} {self.kind}: {self.detail}\n{self.program.snippet(self.probe)}"
