"""A 64-32-10 tanh network on scikit-learn's bundled 8x8 digits, trained with symgrad gradients.

The loss of one sample (softmax cross-entropy) is an ordinary NumPy function; symgrad
traces it once, differentiates it with respect to the 2410 weights and compiles it, and
``.sum`` adds loss and gradient over the 1437 training images inside the kernel.
SciPy's L-BFGS does the training. Needs scikit-learn (pip install "symgrad[examples]").
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


def logits(theta, image):
    W1, b1, W2, b2 = unpack(theta)
    return W2 @ np.tanh(W1 @ image + b1) + b2


def loss(theta, image, onehot):
    z = logits(theta, image)
    return np.log(np.sum(np.exp(z))) - np.sum(onehot * z) + L2 * np.sum(theta ** 2)


digits = load_digits()
X = digits.data / 16.0
Y = np.eye(10)[digits.target]
order = np.random.default_rng(0).permutation(len(X))
train, test = order[:1437], order[1437:]
theta0 = np.random.default_rng(1).normal(scale=0.1, size=N_WEIGHTS)

start = time.perf_counter()
vg = sg.value_and_grad(loss)
value, grad = vg.sum(theta0, X[train], Y[train])
print(f"traced, differentiated and compiled in {time.perf_counter() - start:.1f} s: {N_WEIGHTS} weights, "
      f"{vg.compiled.n_ops} ops per sample ({vg.compiled.backend})")

# Check one sample's gradient in 5 coordinates against central finite differences.
loss_one = sg.jit(loss)
f_one = lambda th: loss_one(th, X[0], Y[0])
g_one = vg(theta0, X[0], Y[0])[1]
for i in (0, 700, 2047, 2100, 2409):
    e = np.zeros(N_WEIGHTS)
    e[i] = 1e-6
    fd = (f_one(theta0 + e) - f_one(theta0 - e)) / 2e-6
    print(f"  d loss / d theta[{i}] = {g_one[i]: .10f}   finite difference {fd: .10f}")
    assert abs(fd - g_one[i]) <= 1e-6 * max(1.0, abs(fd))

start = time.perf_counter()
res = scipy.optimize.minimize(lambda th: vg.sum(th, X[train], Y[train]), theta0, jac=True,
                              method="L-BFGS-B", options=dict(maxiter=150))
took = time.perf_counter() - start
predict = sg.jit(logits)
accuracy = np.mean([np.argmax(predict(res.x, X[i])) == digits.target[i] for i in test])
print(f"trained: {res.nit} L-BFGS iterations in {took:.1f} s ({took / res.nfev * 1e3:.0f} ms per pass over "
      f"{len(train)} images), training loss {res.fun / len(train):.4f}")
print(f"test accuracy: {accuracy:.1%} on {len(test)} held-out images")
assert accuracy >= 0.90
