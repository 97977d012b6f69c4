"""Hand-written Numba value-and-gradient functions: the practical speed limit symgrad aims at."""

import math

import numba
import numpy as np


def fresh(fn, *args):
    """A fresh copy of ``fn`` (no cache), compiled for ``args`` by running it once."""
    copy = numba.njit(error_model="numpy")(fn.py_func)
    copy(*args)
    return copy


@numba.njit(error_model="numpy")
def p1(v):
    x, y = v[0], v[1]
    g = np.empty(2)
    g[0] = y + math.cos(x)
    g[1] = x
    return x * y + math.sin(x), g


@numba.njit(error_model="numpy")
def rosen(x):
    n = x.shape[0]
    f = 0.0
    g = np.zeros(n)
    for i in range(n - 1):
        t1 = x[i + 1] - x[i] * x[i]
        t2 = 1.0 - x[i]
        f += 100.0 * t1 * t1 + t2 * t2
        g[i] += -400.0 * x[i] * t1 - 2.0 * t2
        g[i + 1] += 200.0 * t1
    return f, g


@numba.njit(error_model="numpy")
def running(x):
    """sum(cumsum(x) ** 2) and its gradient (the running sum of 2 * cumsum(x), backwards)."""
    n = x.shape[0]
    c = np.empty(n)
    f, s = 0.0, 0.0
    for i in range(n):
        s += x[i]
        c[i] = s
        f += s * s
    g = np.empty(n)
    s = 0.0
    for i in range(n - 1, -1, -1):
        s += 2.0 * c[i]
        g[i] = s
    return f, g


@numba.njit(parallel=True, error_model="numpy")
def p4(X, out):
    for i in numba.prange(X.shape[0]):
        x, y, z = X[i, 0], X[i, 1], X[i, 2]
        out[i] = math.exp(-x * x - y * y) * math.cos(z) + x * y * z


@numba.njit(error_model="numpy")
def p5(x):
    n = x.shape[0]
    f = 0.0
    g = np.zeros(n)
    for i in range(n - 1):
        a, b = x[i], x[i + 1]
        s, c, e = math.sin(a * b), math.cos(a * b), math.exp(-a * a)
        f += s * e + math.log(1.0 + a * a)
        g[i] += c * b * e - 2.0 * a * s * e + 2.0 * a / (1.0 + a * a)
        g[i + 1] += c * a * e
    return f, g


@numba.njit(error_model="numpy")
def p5_periodic(x):
    n = x.shape[0]
    f = 0.0
    g = np.zeros(n)
    for i in range(n):
        j = (i + 1) % n
        a, b = x[i], x[j]
        s, c, e = math.sin(a * b), math.cos(a * b), math.exp(-a * a)
        f += s * e + math.log(1.0 + a * a)
        g[i] += c * b * e - 2.0 * a * s * e + 2.0 * a / (1.0 + a * a)
        g[j] += c * a * e
    return f, g


@numba.njit(error_model="numpy")
def springs(q):
    """Points (x, y) interleaved in q; springs of rest length 1 between neighbours."""
    f = 0.0
    g = np.zeros(q.shape[0])
    for i in range(q.shape[0] // 2 - 1):
        dx, dy = q[2 * i + 2] - q[2 * i], q[2 * i + 3] - q[2 * i + 1]
        length = math.sqrt(dx * dx + dy * dy)
        f += (length - 1.0) ** 2
        w = 2.0 * (length - 1.0) / length
        g[2 * i + 2] += w * dx
        g[2 * i] -= w * dx
        g[2 * i + 3] += w * dy
        g[2 * i + 1] -= w * dy
    return f, g


def mlp(X, T, W1, b1, W2, b2):
    """Softmax cross-entropy of a tanh MLP, and its gradient, in NumPy by hand (BLAS products)."""
    a = np.tanh(X @ W1 + b1)
    z = a @ W2 + b2
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    loss = np.sum(m + np.log(s) - np.sum(T * z, axis=1, keepdims=True)) / len(X)
    dz = (e / s - T) / len(X)
    dpre = (dz @ W2.T) * (1 - a * a)
    return loss, (X.T @ dpre, dpre.sum(axis=0), a.T @ dz, dz.sum(axis=0))


def rnn_weights(theta, hidden):
    """W, u, b, v of the RNN from the flat weights (views; traced or JAX arrays too)."""
    h2 = hidden * hidden
    return (theta[:h2].reshape(hidden, hidden), theta[h2:h2 + hidden], theta[h2 + hidden:h2 + 2 * hidden],
            theta[h2 + 2 * hidden:])


def rnn_numpy(theta, xs, ys, hidden):
    """The batch tanh RNN of examples/rnn.py, loss and gradient by backpropagation through time
    written in NumPy (a Python loop over the steps, whole-batch products)."""
    W, u, b, v = rnn_weights(theta, hidden)
    steps, batch = xs.shape
    hs = np.zeros((steps + 1, batch, hidden))
    for t in range(steps):
        hs[t + 1] = np.tanh(hs[t] @ W.T + xs[t][:, None] * u + b)
    r = hs[1:] @ v - ys
    scale = 2.0 / (steps * batch)
    dW, du, db = np.zeros_like(W), np.zeros_like(u), np.zeros_like(b)
    dv = np.einsum("tb,tbh->h", r, hs[1:]) * scale
    dh = np.zeros((batch, hidden))
    for t in range(steps - 1, -1, -1):
        dh = dh + scale * r[t][:, None] * v
        da = dh * (1 - hs[t + 1] ** 2)
        dW += da.T @ hs[t]
        du += xs[t] @ da
        db += da.sum(axis=0)
        dh = da @ W
    return np.mean(r ** 2), np.concatenate([dW.ravel(), du, db, dv])


@numba.njit(error_model="numpy", fastmath=False)
def rnn(theta, xs, ys, hidden):
    """The same loss and gradient as rnn_numpy, as plain loops (what one would write in C)."""
    steps, batch = xs.shape
    h2 = hidden * hidden
    hs = np.zeros((steps + 1, batch, hidden))
    for t in range(steps):
        for s in range(batch):
            for i in range(hidden):
                a = theta[h2 + i] * xs[t, s] + theta[h2 + hidden + i]
                for j in range(hidden):
                    a += theta[i * hidden + j] * hs[t, s, j]
                hs[t + 1, s, i] = np.tanh(a)
    loss = 0.0
    g = np.zeros(theta.size)
    r = np.empty((steps, batch))
    scale = 2.0 / (steps * batch)
    for t in range(steps):
        for s in range(batch):
            y = -ys[t, s]
            for i in range(hidden):
                y += theta[h2 + 2 * hidden + i] * hs[t + 1, s, i]
            r[t, s] = y
            loss += y * y
            for i in range(hidden):
                g[h2 + 2 * hidden + i] += scale * y * hs[t + 1, s, i]
    dh = np.zeros((batch, hidden))
    da = np.empty(hidden)
    for t in range(steps - 1, -1, -1):
        for s in range(batch):
            for i in range(hidden):
                d = dh[s, i] + scale * r[t, s] * theta[h2 + 2 * hidden + i]
                da[i] = d * (1.0 - hs[t + 1, s, i] ** 2)
                g[h2 + i] += xs[t, s] * da[i]
                g[h2 + hidden + i] += da[i]
                for j in range(hidden):
                    g[i * hidden + j] += da[i] * hs[t, s, j]
            for j in range(hidden):
                acc = 0.0
                for i in range(hidden):
                    acc += da[i] * theta[i * hidden + j]
                dh[s, j] = acc
    return loss / (steps * batch), g
