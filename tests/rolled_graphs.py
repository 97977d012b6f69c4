"""Hypothesis strategies and oracles for rolled expressions: random bodies over loads at random
addresses, and the unrolled scalar graph's values and gradients to compare with."""

import numpy as np
from graphs import VARS, dags
from hypothesis import strategies as st

import symgrad as sg
from symgrad.expr.rolled import array, index, reduce, subscript, tensor, unroll


def elements(name: str, values: np.ndarray) -> dict:
    """The unrolled graph's variables x[0], x[1, 2], ... with the array's values."""
    return {f"{name}[{', '.join(map(str, k))}]": float(values[k]) for k in np.ndindex(values.shape)}


@st.composite
def rolled_sums(draw):
    """sum over i of a random body whose variables are loads at random affine / periodic offsets."""
    n = draw(st.integers(1, 7))
    x = array("x", n + 2)
    i = index("i", n)
    offset, stride = draw(st.integers(0, 2)), draw(st.sampled_from([1, -1]))
    sites = [subscript(x, i + offset) if stride > 0 else subscript(x, (n - 1 - i) + offset),
             subscript(x, (i + draw(st.integers(0, 5))) % (n + 2)), sg.Var("a")]
    body = sg.substitute(draw(dags(max_ops=6)), dict(zip(VARS, sites)))
    kind = draw(st.sampled_from(["sum", "max", "min"]))
    return reduce(kind, body, i) + sg.sin(sg.Var("a")), x


def spread(values: list, n: int) -> np.ndarray:
    """The first n drawn values, pulled apart (distinct: max / min without ties)."""
    return np.array(values[:n]) + 0.123 * np.arange(n)


def tied(f, point) -> bool:
    """Whether a max / min in f has equal elements at the point (a kink: conventions differ)."""
    for node in sg.expr.traverse.topo_order([f]):
        if node.op.name in ("max", "min"):
            values = sg.evaluate(tensor(node.args[0] * 1.0 + 0.0 * node.args[1], node.args[1]), point)
            if len(np.unique(values)) < len(values):
                return True
    return False


def unrolled_grad(f, arrays: dict, scalars: dict):
    """Gradient of unroll(f) at the point, shaped like each array (the oracle)."""
    variables, point = [], dict(scalars)
    for name, value in arrays.items():
        point.update(elements(name, value))
    for name, value in arrays.items():
        variables += [sg.Var(f"{name}[{', '.join(map(str, k))}]") for k in np.ndindex(value.shape)]
    variables += [sg.Var(name) for name in scalars]
    flat = np.array(sg.evaluate(sg.grad(unroll(f), variables), point), dtype=float)
    out, k = {}, 0
    for name, value in arrays.items():
        out[name] = flat[k:k + value.size].reshape(value.shape)
        k += value.size
    return out, flat[k:]


@st.composite
def nested_sums(draw):
    """sum over i of a random body using A[i, j]-sums over j, x[i] and a tensor of the inner sums:
    two levels of indices, so substitution and scoping are exercised."""
    m, k = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    A, x = array("A", (m, k)), array("x", k + m)
    i, j = index("i", m), index("j", k)
    inner = reduce("sum", sg.substitute(draw(dags(max_ops=4, n_vars=2)),
                                        {VARS[0]: subscript(A, (i, j)), VARS[1]: subscript(x, j + m)}), j)
    h = tensor(inner, i)
    outer = sg.substitute(draw(dags(max_ops=4, n_vars=3)),
                          {VARS[0]: subscript(h, i), VARS[1]: subscript(x, i), VARS[2]: inner})
    return reduce(draw(st.sampled_from(["sum", "max"])), outer, i), A, x
