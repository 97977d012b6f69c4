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


# ---- bundle adjustment: the sparse Jacobian (GradBench "ba", ADBench's objective) ------------------


def ba_reprojection(J, cam, X, w, feat):
    """One observation's weighted reprojection error: ``cam`` = rotation (Rodrigues), centre, focal
    length, principal point, radial distortion (11 numbers); ``X`` a point; ``w`` its weight."""
    rot, centre, focal, x0, rad = cam[0:3], cam[3:6], cam[6], cam[7:9], cam[9:11]
    p = X - centre
    sqtheta = J.np.sum(rot ** 2)
    theta = J.np.sqrt(sqtheta)
    k = rot / theta
    cos, sin = J.np.cos(theta), J.np.sin(theta)
    turned = p * cos + J.np.cross(k, p) * sin + k * (J.np.dot(k, p) * (1.0 - cos))
    turned = J.np.where(sqtheta != 0.0, turned, p + J.np.cross(rot, p))
    proj = turned[0:2] / turned[2]
    rsq = J.np.sum(proj ** 2)
    distorted = proj * (1.0 + rad[0] * rsq + rad[1] * rsq * rsq)
    return w * (distorted * focal + x0 - feat)


def ba_residuals(J, z, obs, feats, n, m):
    """GradBench's BA objective on the flat unknowns z = (cameras, points, weights): the reprojection
    errors (2 per observation), then the weight errors 1 - w^2."""
    cams, X, w = z[:11 * n].reshape(n, 11), z[11 * n:11 * n + 3 * m].reshape(m, 3), z[11 * n + 3 * m:]
    errors = J.vmap(lambda c, x, wi, f: ba_reprojection(J, c, x, wi, f))(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    return J.np.concatenate([errors.reshape(-1), 1.0 - w ** 2])


def ba_input(n, m, p, seed=31337):
    """GradBench's BA input: one camera, point, weight and feature repeated; observation i sees
    camera i mod n and point i mod m."""
    rng = np.random.RandomState(seed)
    cam = np.concatenate([rng.uniform(-0.2, 0.2, 3), rng.uniform(-1, 1, 3), [400.0], rng.uniform(-5, 5, 2),
                          rng.uniform(-1e-3, 1e-3, 2)])
    X, w, feat = rng.uniform(-1, 1, 3) + [0.0, 0.0, 5.0], rng.uniform(0.5, 1.5), rng.uniform(-50, 50, 2)
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
    z = np.concatenate([np.tile(cam, n), np.tile(X, m), np.full(p, w)])
    return z, obs, np.tile(feat, (p, 1))


def _ba(n, m, p):
    """symgrad: sg.jacobian(sparse=True) of the objective on the flat unknowns (CSR); JAX: the 2 x 15
    blocks by vmap(jacrev) of one observation's error, as JAX users write a sparse BA Jacobian (its
    assembly into a sparse matrix not timed), and the weight errors' diagonal. Compared entry by entry."""
    z, obs, feats = ba_input(n, m, p)
    cols = np.concatenate([11 * obs[:, :1] + np.arange(11), 11 * n + 3 * obs[:, 1:] + np.arange(3),
                           11 * n + 3 * m + np.arange(p)[:, None]], axis=1)  # (p, 15): a block's columns

    def make(J):
        if J.name == "symgrad":
            import symgrad as sg

            return sg.jacobian(lambda z: ba_residuals(J, z, obs, feats, n, m), sparse=True), (z,)
        import jax

        def blocks(z):
            cams, X, w = z[:11 * n].reshape(n, 11), z[11 * n:11 * n + 3 * m].reshape(m, 3), z[11 * n + 3 * m:]
            one = jax.jacrev(lambda c, x, wi, f: ba_reprojection(J, c, x, wi, f), argnums=(0, 1, 2))
            dc, dx, dw = J.vmap(one)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
            return J.np.concatenate([dc, dx, dw[:, :, None]], axis=2), -2.0 * w
        return J.jit(blocks), (z,)

    def canon(result):
        """The Jacobian's entries in the order (observation, residual, block column), then the weights'."""
        import scipy.sparse

        if isinstance(result, tuple):
            return np.concatenate([np.asarray(result[0]).ravel(), np.asarray(result[1])])
        M = scipy.sparse.csr_matrix(result)
        rows = np.concatenate([np.repeat(np.arange(2 * p), 15), 2 * p + np.arange(p)])
        at = np.concatenate([np.repeat(cols, 2, axis=0).ravel(), 11 * n + 3 * m + np.arange(p)])
        return np.asarray(M[rows, at]).ravel()

    make.canon = canon
    return make


def namespace(which: str) -> SimpleNamespace:
    """``J`` for ``"jax"`` or ``"symgrad"``."""
    if which == "jax":
        import jax
        import jax.numpy as jnp

        return SimpleNamespace(np=jnp, lax=jax.lax, grad=jax.grad, jvp=jax.jvp, vmap=jax.vmap, jit=jax.jit,
                               value_and_grad=jax.value_and_grad, name="jax")
    import symgrad as sg
    import symgrad.numpy as snp

    return SimpleNamespace(np=snp, lax=sg.lax, grad=sg.grad, jvp=sg.jvp, vmap=sg.vmap, jit=sg.jit,
                           value_and_grad=sg.value_and_grad, name="symgrad")


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
    ("ba n=49 m=7776 p=31843 (ADBench ba1's sizes)", "sparse Jacobian", _ba(49, 7776, 31843)),
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
