"""GradBench's ``lstm`` (ADBench's: diagonal weights): the objective and its gradient in the main
and extra parameters."""

from __future__ import annotations

import numpy as np

import symgrad as sg
from symgrad.gradbench.namespaces import SG
from symgrad.gradbench.protocol import Function


def lstm_objective(J, main_params, extra_params, state, sequence):
    """The mean negative log likelihood of each next character, l layers of b cells, written
    against ``J.np`` and ``J.lax.scan``."""
    layers, b = main_params.shape[0] // 2, sequence.shape[1]
    weight, bias = main_params[0::2], main_params[1::2]  # (layers, 4b) each
    in_weight, out_weight, out_bias = extra_params[0], extra_params[1], extra_params[2]

    def sigmoid(z):
        return 1.0 / (1.0 + J.np.exp(-z))

    def step(carry, pair):
        hidden, cell = carry  # (layers, b) each
        char, following = pair
        inp = char * in_weight
        hs, cs = [], []
        for i in range(layers):
            gates = J.np.concatenate([inp, hidden[i], inp, hidden[i]]) * weight[i] + bias[i]
            forget, ingate = sigmoid(gates[:b]), sigmoid(gates[b:2 * b])
            outgate, change = sigmoid(gates[2 * b:3 * b]), J.np.tanh(gates[3 * b:])
            c = cell[i] * forget + ingate * change
            inp = outgate * J.np.tanh(c)
            hs.append(inp)
            cs.append(c)
        ypred = inp * out_weight + out_bias
        ynorm = ypred - J.np.log(J.np.sum(J.np.exp(ypred)) + 2.0)  # ADBench's log(sum(exp) + 2)
        return (J.np.stack(hs), J.np.stack(cs)), J.np.sum(following * ynorm)

    _, scores = J.lax.scan(step, (state[0::2], state[1::2]), (sequence[:-1], sequence[1:]))
    return -J.np.sum(scores) / ((sequence.shape[0] - 1) * b)


def prepare(raw: dict) -> tuple[np.ndarray, ...]:
    names = ("main_params", "extra_params", "state", "sequence")
    return tuple(np.asarray(raw[name], dtype=float) for name in names)


def flat_gradient(parts) -> list[float]:
    """The gradients of main_params and extra_params, each row after row, one list."""
    return np.concatenate([np.ravel(part) for part in parts]).tolist()


def define() -> dict[str, Function]:
    """``objective`` and ``jacobian`` (the gradient in main_params and extra_params, flattened).

    >>> f = define()["objective"]
    >>> round(f.compute(np.zeros((2, 4)), np.zeros((3, 1)), np.zeros((2, 1)), np.eye(2)[::-1, :1]), 6)
    1.098612
    """
    def objective(*args):
        return lstm_objective(SG, *args)

    return {"objective": Function(prepare, sg.jit(objective), float),
            "jacobian": Function(prepare, sg.jit(sg.grad(objective, argnums=(0, 1))), flat_gradient)}
