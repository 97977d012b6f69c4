"""A 64-32-10 tanh network on scikit-learn's bundled 8x8 digits, trained with symgrad gradients.

The loss is whole-batch NumPy code, the way JAX users write it: images @ W1.T for all 1437
training images at once. symgrad traces it once onto rolled expressions (the batch is one
index, the products BLAS calls), differentiates it with respect to the 2410 weights and
compiles it; new weights or new data need no new trace. SciPy's L-BFGS does the training.
Needs scikit-learn (pip install "symgrad[examples]").
"""

import sys
import time

import numpy as np
import scipy.optimize

import symgrad as sg

try:
    from sklearn.datasets import load_digits
except ImportError:
    print("this example needs scikit-learn: pip install scikit-learn")
    sys.exit(0)

SIZES = [(32, 64), (32,), (10, 32), (10,)]  # W1, b1, W2, b2
N_WEIGHTS = sum(int(np.prod(s)) for s in SIZES)
L2 = 1e-4


def unpack(theta):
    """The flat weight vector as the arrays of SIZES (views: symbolic while traced)."""
    cuts = np.cumsum([int(np.prod(shape)) for shape in SIZES])[:-1]
    return [part.reshape(shape) for part, shape in zip(np.split(theta, cuts), SIZES)]


def logits(theta, images):
    W1, b1, W2, b2 = unpack(theta)
    return np.tanh(images @ W1.T + b1) @ W2.T + b2


def loss(theta, images, onehot):
    """Mean softmax cross-entropy over the images, plus an L2 penalty."""
    z = logits(theta, images)
    top = np.max(z, axis=1, keepdims=True)  # log-sum-exp without overflow
    log_norm = np.log(np.sum(np.exp(z - top), axis=1)) + top[:, 0]
    return np.mean(log_norm - np.sum(onehot * z, axis=1)) + L2 * np.sum(theta ** 2)


digits = load_digits()
X = digits.data / 16.0
Y = np.eye(10)[digits.target]
order = np.random.default_rng(0).permutation(len(X))
train, test = order[:1437], order[1437:]
theta0 = np.random.default_rng(1).normal(scale=0.1, size=N_WEIGHTS)

start = time.perf_counter()
vg = sg.value_and_grad(loss)
value, grad = vg(theta0, X[train], Y[train])
first = time.perf_counter() - start
vg.compiled.ready()  # the first calls ran on the loop VM while Numba compiled the loops
print(f"first result in {first:.2f} s, compiled loops in {time.perf_counter() - start:.1f} s: {N_WEIGHTS} "
      f"weights, {len(train)} images, {sg.count_nodes(vg.derivatives)} gradient nodes ({vg.compiled.backend})")

# Check the gradient in 5 coordinates against central finite differences of the loss.
f = lambda theta: vg(theta, X[train], Y[train])[0]  # noqa: E731
for i in (0, 700, 2047, 2100, 2409):
    e = np.zeros(N_WEIGHTS)
    e[i] = 1e-6
    fd = (f(theta0 + e) - f(theta0 - e)) / 2e-6
    print(f"  d loss / d theta[{i}] = {grad[i]: .10f}   finite difference {fd: .10f}")
    assert abs(fd - grad[i]) <= 1e-6 * max(1.0, abs(fd))

start = time.perf_counter()
res = scipy.optimize.minimize(vg, theta0, args=(X[train], Y[train]), jac=True, method="L-BFGS-B",
                              options=dict(maxiter=150))
took = time.perf_counter() - start
predict = sg.jit(logits)
accuracy = np.mean(np.argmax(predict(res.x, X[test]), axis=1) == digits.target[test])
print(f"trained: {res.nit} L-BFGS iterations in {took:.1f} s ({took / res.nfev * 1e3:.1f} ms per pass over "
      f"{len(train)} images), training loss {res.fun:.4f}")
print(f"test accuracy: {accuracy:.1%} on {len(test)} held-out images")
assert accuracy >= 0.90

# The same loss written for one image and mapped over the batch: per-example gradients.
per_example = sg.vmap(sg.grad(lambda th, x, y: loss(th, x[None], y[None])), in_axes=(None, 0, 0))
G = per_example(res.x, X[train[:200]], Y[train[:200]])
print(f"per-example gradients {G.shape}: their mean equals the batch gradient to "
      f"{np.abs(G.mean(0) - vg(res.x, X[train[:200]], Y[train[:200]])[1]).max():.1e}")
