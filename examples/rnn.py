"""A 120-step tanh recurrence over a batch of 16 sequences, trained for 1000 Adam iterations.

Written as JAX users write it: the time loop is ``sg.scan`` (``jax.lax.scan``) over a step that
works on the whole batch at once (``h`` is 16 x 8). The step is traced once, the loop compiles to
one loop around the step's loops, and memory stays flat however long training runs (no tape
grows per step)."""

import gc
import time
import tracemalloc

import numpy as np

import symgrad as sg
from symgrad.expr.node import table_size

STEPS, BATCH, HIDDEN = 120, 16, 8
WARMUP = 20  # steps that warm the state up (h starts at 0): not scored
SHAPES = [(HIDDEN, HIDDEN), (HIDDEN,), (HIDDEN,), (HIDDEN,)]  # W, u, b, v


def unpack(theta):
    """The flat weight vector as the arrays of SHAPES (views: symbolic while traced)."""
    cuts = np.cumsum([int(np.prod(shape)) for shape in SHAPES])[:-1]
    return [part.reshape(shape) for part, shape in zip(np.split(theta, cuts), SHAPES)]


def loss(theta, xs, ys):
    """Mean squared error of h_t . v against ys after the warm-up steps, with h_{t+1} = tanh(h_t W^T
    + x_t u + b), for every sequence of the batch at once (xs, ys: steps x batch)."""
    W, u, b, v = unpack(theta)

    def step(h, xy):
        x, y = xy
        h = np.tanh(h @ W.T + x[:, None] * u + b)
        return h, np.mean((h @ v - y) ** 2)

    _, errors = sg.scan(step, np.zeros((BATCH, HIDDEN)), (xs, ys))
    return np.mean(errors[WARMUP:])


t = np.linspace(0, 4 * np.pi, STEPS)[:, None] + np.linspace(0, np.pi, BATCH)  # a phase per sequence
xs, ys = np.sin(t), 0.8 * np.sin(t - 0.7)  # learn a phase shift and a gain
rng = np.random.default_rng(0)
theta = rng.normal(scale=0.3, size=sum(int(np.prod(s)) for s in SHAPES))

start = time.perf_counter()
vg = sg.value_and_grad(loss)
first, _ = vg(theta, xs, ys)
print(f"{STEPS}-step recurrence over {BATCH} sequences, {theta.size} weights: first result in "
      f"{time.perf_counter() - start:.2f} s ({vg.compiled.n_ops} ops, {vg.compiled.backend})")
vg.compiled.ready()  # tiered: the loop VM answers at once, Numba's loops take over when compiled
print(f"final kernels ({vg.compiled.backend}) in {time.perf_counter() - start:.2f} s")

m, s, lr = np.zeros_like(theta), np.zeros_like(theta), 0.01
tracemalloc.start()
start = time.perf_counter()
for it in range(1, 1001):
    value, g = vg(theta, xs, ys)
    m = 0.9 * m + 0.1 * g
    s = 0.999 * s + 0.001 * g * g
    theta = theta - lr * (m / (1 - 0.9 ** it)) / (np.sqrt(s / (1 - 0.999 ** it)) + 1e-8)
    if it in (10, 1000):
        gc.collect()  # also empties CPython's free lists (up to 2000 spare tuples): what remains is live
        memory = tracemalloc.get_traced_memory()[0]
        print(f"iteration {it:>4}: loss {value:.5f}, Python memory in use {memory / 1e3:.0f} kB, "
              f"live expression nodes {table_size()}")
        if it == 10:
            memory_10, nodes_10 = memory, table_size()
took = time.perf_counter() - start
print(f"1000 iterations in {took:.2f} s ({took:.3f} ms per value-and-gradient + update); loss {first:.4f} -> "
      f"{value:.5f}")
assert value < first / 10
assert table_size() == nodes_10 and memory < memory_10 + 100_000, "memory grew during training"
