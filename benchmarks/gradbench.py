"""GradBench evaluations (github.com/gradbench/gradbench) as JAX-style code, run under JAX and symgrad.

Each problem is written once against a namespace ``J`` (``J.np``: jax.numpy or symgrad.numpy;
``J.lax``, ``J.grad``, ``J.jvp``, ``J.vmap``, ``J.jit`` from jax or symgrad), from the problem
definitions in GradBench's evals (READMEs, C++ references, input generators; sizes are GradBench's).
``benchmarks/run.py gradbench`` times each under both and checks that they agree.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np

# ---- k-means: the direction gradient / Hessian diagonal (GradBench "kmeans", function "dir") ------


def kmeans_cost(J, points, centroids):
    """Sum over the points of the squared distance to the nearest centroid."""
    diff = points[:, None, :] - centroids[None, :, :]  # (n, k, d)
    return J.np.sum(J.np.min(J.np.sum(diff * diff, axis=2), axis=1))


def kmeans_cost_matmul(J, points, centroids):
    """The same cost with |p - c|^2 expanded as |p|^2 + |c|^2 - 2 p.c (one matrix product)."""
    sq = J.np.sum(points * points, axis=1)[:, None] + J.np.sum(centroids * centroids, axis=1)[None, :]
    return J.np.sum(J.np.min(sq - 2.0 * (points @ centroids.T), axis=1))


def kmeans_dir(J, cost, points, centroids):
    """Gradient divided by the Hessian's diagonal, the latter as H @ ones (the Hessian is diagonal)."""
    gradient = J.grad(lambda c: cost(J, points, c))
    g, h = J.jvp(gradient, (centroids,), (J.np.ones(centroids.shape),))
    return g / h


def kmeans_input(n, k, d, seed=31337):
    rng = np.random.RandomState(seed)
    points = rng.rand(n, d)
    return points, points[-k:].copy()  # every centroid is some point's nearest: H is invertible


# ---- llsq: linear least squares, 1/2 sum_i (sign(t_i) - sum_j x_j t_i^j)^2 -------------------------


def llsq(J, x, n):
    m = x.shape[0]

    def squared_residual(i):
        t = -1.0 + 2.0 * i / (n - 1)
        powers = J.np.cumprod(J.np.concatenate([J.np.ones(1), J.np.full(m - 1, t)]))  # t^0 .. t^(m-1)
        return (J.np.sign(t) - J.np.sum(x * powers)) ** 2

    return J.np.sum(J.vmap(squared_residual)(np.arange(n))) / 2.0


# ---- lse: log-sum-exp with the max shift ------------------------------------------------------------


def lse(J, x):
    top = J.np.max(x)
    return J.np.log(J.np.sum(J.np.exp(x - top))) + top


# ---- GMM: log posterior of a Gaussian mixture with a Wishart prior (ADBench, GradBench's fixes) -----


def log_multigamma(a, p):
    return p * (p - 1) / 4 * math.log(math.pi) + sum(math.lgamma(a + (1 - j) / 2) for j in range(1, p + 1))


def logsumexp_rows(J, v):
    top = J.np.max(v, axis=-1, keepdims=True)
    return J.np.log(J.np.sum(J.np.exp(v - top), axis=-1)) + top[..., 0]


def gmm_objective(J, alpha, mu, q, ltri, x, m, gamma):
    n, d = x.shape
    k = alpha.shape[0]
    # Q_k: exp(q_k) on the diagonal, l_k filling the strictly lower triangle column by column.
    cols, rows = np.triu_indices(d, 1)
    lower = J.np.zeros((k, d, d)).at[:, rows, cols].set(ltri)
    centred = x[:, None, :] - mu[None, :, :]  # (n, k, d)
    qdiag = J.np.exp(q)
    qx = qdiag[None, :, :] * centred + J.np.einsum("kij,nkj->nki", lower, centred)
    sum_q = J.np.sum(q, axis=1)
    beta = alpha[None, :] + sum_q[None, :] - 0.5 * J.np.sum(qx * qx, axis=2)  # (n, k)
    likelihood = -n * d * 0.5 * math.log(2 * math.pi) + J.np.sum(logsumexp_rows(J, beta)) \
        - n * logsumexp_rows(J, alpha)
    dof = d + m + 1
    frobenius = J.np.sum(qdiag * qdiag, axis=1) + J.np.sum(ltri * ltri, axis=1)
    prior = k * (dof * d * (math.log(gamma) - 0.5 * math.log(2)) - log_multigamma(0.5 * dof, d)) \
        - J.np.sum(0.5 * gamma * gamma * frobenius - m * sum_q)
    return likelihood + prior


def gmm_input(d, k, n, seed=31337):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    alpha = rng.normal(size=k)
    mu = rng.uniform(size=(k, d))
    q = rng.normal(size=(k, d))
    ltri = rng.normal(size=(k, d * (d - 1) // 2))
    return alpha, mu, q, ltri, x


# ---- ODE: s steps of RK4 on y0' = x0, yi' = xi y(i-1), y(0) = 0, to t = 2 ---------------------------


def ode(J, x, s):
    h = 2.0 / s

    def rate(y):
        return x * J.np.concatenate([J.np.ones(1), y[:-1]])

    def rk4_step(y, _):
        k1 = rate(y)
        k2 = rate(y + h / 2 * k1)
        k3 = rate(y + h / 2 * k2)
        k4 = rate(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    y, _ = J.lax.scan(rk4_step, J.np.zeros(x.shape), None, length=s)
    return y


# ---- LSTM (ADBench): diagonal weights, l layers, c characters of b bits -----------------------------


def lstm_objective(J, main_params, extra_params, state, sequence):
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


def lstm_input(layers, chars, bits=14, seed=31337):
    """GradBench draws state and parameters uniform in [0, 1); its sequence is a text's characters
    as bits: random bits here (the cost does not depend on them)."""
    rng = np.random.RandomState(seed)
    state = rng.random_sample((2 * layers, bits))
    main_params = rng.random_sample((2 * layers, 4 * bits))
    extra_params = rng.random_sample((3, bits))
    sequence = rng.randint(0, 2, size=(chars, bits)).astype(float)
    return main_params, extra_params, state, sequence


def namespace(which: str) -> SimpleNamespace:
    """``J`` for ``"jax"`` or ``"symgrad"``."""
    if which == "jax":
        import jax
        import jax.numpy as jnp

        return SimpleNamespace(np=jnp, lax=jax.lax, grad=jax.grad, jvp=jax.jvp, vmap=jax.vmap, jit=jax.jit,
                               value_and_grad=jax.value_and_grad)
    import symgrad as sg
    import symgrad.numpy as snp

    return SimpleNamespace(np=snp, lax=sg.lax, grad=sg.grad, jvp=sg.jvp, vmap=sg.vmap, jit=sg.jit,
                           value_and_grad=sg.value_and_grad)


# ---- the cases and their timing ---------------------------------------------------------------------


def _kmeans(cost, n, k, d):
    points, centroids = kmeans_input(n, k, d)
    return lambda J: (J.jit(lambda p, c: kmeans_dir(J, cost, p, c)), (points, centroids))


def _llsq(n, m=128):
    x = np.random.RandomState(31337).rand(m)
    return lambda J: (J.jit(J.grad(lambda x: llsq(J, x, n))), (x,))


def _lse(n):
    x = np.random.RandomState(31337).rand(n)
    return lambda J: (J.jit(J.grad(lambda x: lse(J, x))), (x,))


def _gmm(d, k, n, m=0, gamma=1.0):
    args = gmm_input(d, k, n)
    return lambda J: (J.jit(J.grad(lambda *a: gmm_objective(J, *a, m, gamma), argnums=(0, 1, 2, 3))), args)


def _ode(n, s, gradient):
    x = np.random.RandomState(31337).rand(n)
    if gradient:
        return lambda J: (J.jit(J.grad(lambda x: ode(J, x, s)[-1])), (x,))
    return lambda J: (J.jit(lambda x: ode(J, x, s)), (x,))


def _lstm(layers, chars, gradient):
    args = lstm_input(layers, chars)
    if gradient:
        return lambda J: (J.jit(J.grad(lambda *a: lstm_objective(J, *a), argnums=(0, 1))), args)
    return lambda J: (J.jit(lambda *a: lstm_objective(J, *a)), args)


# (problem, what is computed, make): make(J) gives (function, arguments), built from nothing.
CASES = [
    ("kmeans dir k=100 n=10^4 d=16, |p-c|^2 by differences", "grad / Hessian diagonal",
     _kmeans(kmeans_cost, 10_000, 100, 16)),
    ("kmeans dir k=100 n=10^4 d=16, |p|^2+|c|^2-2p.c (matmul)", "grad / Hessian diagonal",
     _kmeans(kmeans_cost_matmul, 10_000, 100, 16)),
    ("llsq n=1024 m=128 (vmap over i)", "gradient", _llsq(1024)),
    ("llsq n=16392 m=128 (vmap over i)", "gradient", _llsq(16392)),
    ("lse n=1.28*10^6", "gradient", _lse(1_280_000)),
    ("gmm d=10 k=25 n=1000", "gradient", _gmm(10, 25, 1000)),
    ("ode n=10^4 s=10", "primal", _ode(10_000, 10, False)),
    ("ode n=10^4 s=10", "gradient of y[-1]", _ode(10_000, 10, True)),
    ("ode n=10^4 s=100", "primal", _ode(10_000, 100, False)),
    ("ode n=10^4 s=100", "gradient of y[-1]", _ode(10_000, 100, True)),
    ("lstm l=4 c=4096 b=14 (lax.scan)", "objective", _lstm(4, 4096, False)),
    ("lstm l=4 c=4096 b=14 (lax.scan)", "gradient", _lstm(4, 4096, True)),
]


def leaves(result) -> list[np.ndarray]:
    if isinstance(result, tuple | list):
        return [a for r in result for a in leaves(r)]
    return [np.asarray(result, dtype=float)]


def agree(got, want, rtol: float = 1e-8) -> tuple[float, float]:
    """The largest relative difference of an output, 2-norm-wise (asserted <= rtol), and entrywise
    relative to the output's largest entry (no assertion: lse's gradient entry at the max adds
    1 - sum(softmax), a rounding error of the sum of all n terms)."""
    norm = largest = 0.0
    for a, b in zip(leaves(got), leaves(want), strict=True):
        assert a.shape == b.shape, (a.shape, b.shape)
        norm = max(norm, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)))
        largest = max(largest, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)))
    assert norm <= rtol, f"symgrad and JAX disagree: relative difference {norm:.3g} (2-norm)"
    return norm, largest


def timed(per_call, fn, *args) -> float:
    """Seconds per call: run.py's per_call (best of 5 repeats of ~0.1 s), or the best of 3 single
    calls where one takes over a second, or one call where it takes over a minute."""
    start = time.perf_counter()
    fn(*args)
    once = time.perf_counter() - start
    if once > 60.0:
        return once
    if once > 1.0:
        for _ in range(2):
            start = time.perf_counter()
            fn(*args)
            once = min(once, time.perf_counter() - start)
        return once
    return per_call(fn, *args)
