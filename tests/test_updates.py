"""x.at[idx].set / add / multiply / min / max / get (JAX's functional updates) on traced arrays, rolled
and element by element, and on symgrad.numpy's arrays: NumPy's in-place semantics on a copy (np.add.at
for repeated positions), derivatives against finite differences."""

import re
import warnings

import numpy as np
import pytest
import symgrad.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg

KINDS = ("set", "add", "multiply", "min", "max")


def _reference(x, idx, v, kind):
    out = x.copy()
    if kind == "set":
        out[idx] = v
    else:
        {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[kind].at(out, idx, v)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.sampled_from(KINDS), st.integers(0, 2**31 - 1),
       st.sampled_from(["ints", "slice", "one"]))
def test_updates_match_numpy_on_the_interpreter(ndim, kind, seed, how):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(2, 5, size=ndim))
    x = rng.normal(size=shape)
    if how == "ints":
        low = -shape[0] if ndim == 1 else 0
        idx = (rng.integers(low, shape[0], size=4),)
    elif how == "slice":
        idx = (slice(1, None, 2),)
    else:
        idx = (int(rng.integers(0, shape[0])),)
    idx = idx[0]
    v = rng.normal(size=np.shape(x[idx])[-1:]) if rng.random() < 0.5 and np.ndim(x[idx]) else float(rng.normal())
    want = _reference(x, idx, v, kind)
    got = getattr(jnp.asarray(x).at[idx], kind)(v)
    np.testing.assert_array_equal(got, want)
    f = sg.jit(lambda x, v: getattr(x.at[idx], kind)(v), backend="python")
    # (repeated positions add in another order than np.add.at: the terms' rounding, not the result's)
    np.testing.assert_allclose(f(x, v), want, rtol=1e-15, atol=1e-15 * (np.max(np.abs(x)) + 4 * np.max(np.abs(v))))


@pytest.mark.parametrize("n", [6, 100])  # element by element, rolled
@pytest.mark.parametrize("backend", ["python", "vm"])
def test_gradients_through_updates(n, backend):
    rng = np.random.default_rng(n)
    x, v = rng.normal(size=n), rng.normal(size=3)
    idx = np.array([1, 3, 1])

    def f(x, v):
        return np.sum(np.sin(x.at[idx].add(v)) * x.at[2:4].set(v[:2] * 2.0) + x.at[0].multiply(v[0]) ** 2
                      + x.at[idx].max(v))

    def ref(x, v):
        return np.sum(np.sin(_reference(x, idx, v, "add")) * _reference(x, slice(2, 4), v[:2] * 2.0, "set")
                      + _reference(x, 0, v[0], "multiply") ** 2 + _reference(x, idx, v, "max"))

    assert sg.jit(f, backend=backend)(x, v) == pytest.approx(ref(x, v), rel=1e-13)
    gx, gv = sg.grad(f, argnums=(0, 1), backend=backend)(x, v)
    eps = 1e-6
    np.testing.assert_allclose(gx, [(ref(x + eps * e, v) - ref(x - eps * e, v)) / (2 * eps) for e in np.eye(n)],
                               atol=1e-7)
    np.testing.assert_allclose(gv, [(ref(x, v + eps * e) - ref(x, v - eps * e)) / (2 * eps) for e in np.eye(3)],
                               atol=1e-7)


def test_a_traced_index_updates_one_entry_or_none():
    x = np.arange(5.0)

    def f(x, i):
        return x.at[i].set(x[0] * 10.0 + 1.0)

    for i in (0.0, 3.0, -1.0, 7.0):  # (out of range: dropped, as JAX's default)
        want = x.copy()
        if -5 <= i < 5:
            want[int(i)] = 1.0
        np.testing.assert_array_equal(sg.jit(f, backend="python")(x, i), want)
    M = np.ones((3, 2))
    np.testing.assert_array_equal(sg.jit(lambda M, i: M.at[i].add(np.array([1.0, 2.0])), backend="python")(M, 1.0),
                                  [[1, 1], [2, 3], [1, 1]])
    loop = sg.grad(lambda x: np.sum(sg.fori_loop(0, 5, lambda i, y: y.at[i].set(y[i] * y[i]), x)))
    np.testing.assert_allclose(loop(x + 1.0), 2 * (x + 1.0))


def test_symgrad_numpy_arrays_have_at_and_everything_else_is_numpy():
    z = jnp.zeros(4)
    assert isinstance(z, np.ndarray) and isinstance(z.at[1].set(2.0), jnp.Array)
    np.testing.assert_array_equal(z.at[np.array([0, 0, 3])].add(1.0), [2.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(z, np.zeros(4))  # unchanged
    assert jnp.sin is np.sin and jnp.linalg is np.linalg and jnp.ndarray is np.ndarray
    assert sg.grad(lambda w: jnp.sum(jnp.ones(100).at[jnp.arange(0, 100, 2)].multiply(w) ** 2))(2.0) == 200.0
    assert z.at[2].get() == 0.0


def test_jnp_array_of_traced_scalars_and_numbers_takes_ufuncs():
    """jnp.array([x, 1.0]) then jnp.exp: NumPy's object loop would call .exp() on the 1.0."""
    f = lambda x: jnp.sum(jnp.exp(jnp.array([x, 1.0])) * jnp.array([2.0, 3.0]))  # noqa: E731
    assert sg.grad(f)(0.5) == pytest.approx(2.0 * np.exp(0.5), rel=1e-15)
    assert sg.jit(f)(0.5) == pytest.approx(2.0 * np.exp(0.5) + 3.0 * np.e, rel=1e-15)


def test_jnp_array_of_traced_arrays_stacks_them_rolled():
    """jnp.array([a, b]) of rolled arrays: NumPy's conversion reads every element (an element trace,
    4096 elements at most beside it); stacked instead, nested lists too, with numbers' arrays."""
    x = np.random.default_rng(3).normal(size=100)
    fs = [lambda x: jnp.sum(jnp.array([jnp.sin(x), x]) ** 2 * jnp.arange(200.0).reshape(2, 100)),
          lambda x: jnp.sum(jnp.asarray([[x, 2 * x], (np.ones(100), x ** 3)]).transpose(2, 0, 1)[3] ** 2)]
    plain = [lambda x: np.sum(np.stack([np.sin(x), x]) ** 2 * np.arange(200.0).reshape(2, 100)),
             lambda x: np.sum(np.stack([np.stack([x, 2 * x]), np.stack([np.ones(100), x ** 3])])[:, :, 3] ** 2)]
    for f, ref in zip(fs, plain):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = sg.value_and_grad(f, backend="vm")
            value, grad = g(x)
        assert g._last.indexed
        assert value == pytest.approx(ref(x), rel=1e-13)
        fd = [(ref(x + 1e-6 * e) - ref(x - 1e-6 * e)) / 2e-6 for e in np.eye(100)[:6]]
        np.testing.assert_allclose(grad[:6], fd, rtol=1e-6, atol=1e-6)


def test_jnp_full_of_a_traced_scalar_is_one_rolled_array():
    """GradBench's least squares: jnp.full(m, t) of a vmapped row's scalar, updated, cumprod: NumPy's
    np.full made m copies (an element chain per row, its gradient a guarded sum per entry: 83 ms)."""
    def llsq(x, n):
        m = x.shape[0]

        def f(i):
            ti = -1.0 + (i * 2.0) / (n - 1.0)
            muls = jnp.cumprod(jnp.full(m, ti).at[0].set(1))
            return (jnp.sign(ti) + jnp.sum(-x * muls)) ** 2
        return jnp.sum(sg.vmap(f)(jnp.arange(n))) / 2.0

    x, n = np.random.default_rng(1).random(64), 24
    t = np.linspace(-1, 1, n)
    T = t[:, None] ** np.arange(64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = sg.value_and_grad(llsq, backend="vm")
        value, grad = g(x, n)
    assert g._last.indexed and value == pytest.approx(np.sum((np.sign(t) - T @ x) ** 2) / 2, rel=1e-12)
    assert int(re.search(r"(\d+) nodes", g.explain()).group(1)) < 100  # (copies: 64 products, 64 guarded sums)
    for full in (lambda w: jnp.full(100, fill_value=w), lambda w: jnp.full(shape=(4, 25), fill_value=w)):
        h = sg.grad(lambda w, full=full: jnp.sum(full(w) * np.arange(100.0).reshape(full(1.0).shape)))
        assert h(2.0) == 4950.0 and int(re.search(r"(\d+) nodes", h.explain()).group(1)) < 20
    np.testing.assert_allclose(grad, -((np.sign(t) - T @ x) @ T), rtol=1e-12)


def test_updates_chain_through_symgrad_numpy_values():
    """.set(jnp.ones(2)) on a traced array returned a plain object array, without .at (GradBench's ht)."""
    f = lambda x: jnp.sum(jnp.zeros(4).at[0].set(x[0]).at[1:3].set(jnp.ones(2)).at[3].set(x[1] ** 2))  # noqa: E731
    np.testing.assert_array_equal(sg.grad(f)(np.array([3.0, 3.0])), [1.0, 6.0])
    assert sg.jit(f)(np.array([3.0, 3.0])) == 14.0


def _gmm(alpha, mu, icf, x, gamma, m):
    """GradBench's GMM objective as its JAX tool writes it, after the renames (jax.numpy -> symgrad.numpy,
    jax.scipy.special -> symgrad.scipy.special): a lower-triangular matrix filled by .at[:, rows, cols] on
    jnp.zeros(..., dtype=l.dtype), jnp.repeat(..., total_repeat_length=), multigammaln of an int m."""
    from symgrad.ports.scipy.special import logsumexp, multigammaln

    k, d = mu.shape
    n = x.shape[0]
    q, low = icf[:, :d], icf[:, d:]
    Qdiags, sum_qs = jnp.exp(q), jnp.sum(q, axis=1)
    cols = jnp.repeat(jnp.arange(d - 1), jnp.arange(d - 1, 0, -1), total_repeat_length=d * (d - 1) // 2)
    rows = jnp.concatenate([jnp.arange(c + 1, d) for c in range(d - 1)])
    Ls = jnp.zeros((k, d, d), dtype=low.dtype).at[:, rows, cols].set(low)
    xcentered = x[:, None, :] - mu[None, ...]
    Lxcentered = Qdiags * xcentered + jnp.einsum("ijk,mik->mij", Ls, xcentered)
    inner = alpha + sum_qs - 0.5 * jnp.sum(Lxcentered ** 2, axis=2)
    nn = d + m + 1
    squares = jnp.sum(Qdiags ** 2, axis=1) + jnp.sum(low ** 2, axis=1)
    prior = -jnp.sum(0.5 * gamma * gamma * squares - m * sum_qs) \
        + k * (nn * d * jnp.log(gamma / np.sqrt(2)) - multigammaln(0.5 * nn, d))
    return -n * d * 0.5 * np.log(2 * np.pi) + jnp.sum(logsumexp(inner, axis=1)) - n * logsumexp(alpha, axis=0) \
        + prior


def _gmm_by_hand(alpha, mu, icf, x, gamma, m):
    import scipy.special

    k, d = mu.shape
    q, low = icf[:, :d], icf[:, d:]
    Ls = np.zeros((k, d, d))
    cols = np.repeat(np.arange(d - 1), np.arange(d - 1, 0, -1))
    Ls[:, np.concatenate([np.arange(c + 1, d) for c in range(d - 1)]), cols] = low
    xc = x[:, None, :] - mu[None]
    Lx = np.exp(q) * xc + np.einsum("ijk,mik->mij", Ls, xc)
    inner = alpha + q.sum(1) - 0.5 * (Lx ** 2).sum(2)
    nn = d + m + 1
    prior = -np.sum(0.5 * gamma ** 2 * (np.exp(2 * q).sum(1) + (low ** 2).sum(1)) - m * q.sum(1)) \
        + k * (nn * d * np.log(gamma / np.sqrt(2)) - scipy.special.multigammaln(0.5 * nn, d))
    return -x.size * 0.5 * np.log(2 * np.pi) + scipy.special.logsumexp(inner, axis=1).sum() \
        - len(x) * scipy.special.logsumexp(alpha) + prior


def test_gradbench_gmm_ports_by_renames_and_traces_rolled():
    rng = np.random.default_rng(0)
    k, d, n = 5, 4, 80
    alpha, mu, icf = rng.normal(size=k), rng.normal(size=(k, d)), 0.3 * rng.normal(size=(k, d + d * (d - 1) // 2))
    x = rng.normal(size=(n, d))
    vg = sg.value_and_grad(_gmm, argnums=(0, 1, 2), backend="vm")
    value, grads = vg(alpha, mu, icf, x, 1.0, 2)
    assert value == pytest.approx(_gmm_by_hand(alpha, mu, icf, x, 1.0, 2), rel=1e-12)
    assert vg._last.indexed  # (the object array of zeros .at[].set went element by element: 9048 rolled nodes)
    rng2 = np.random.default_rng(1)
    args = [alpha, mu, icf]
    for a, g in enumerate(grads):
        v = rng2.normal(size=args[a].shape)
        moved = [list(args), list(args)]
        moved[0][a], moved[1][a] = args[a] + 1e-6 * v, args[a] - 1e-6 * v
        fd = (_gmm_by_hand(*moved[0], x, 1.0, 2) - _gmm_by_hand(*moved[1], x, 1.0, 2)) / 2e-6
        assert np.sum(g * v) == pytest.approx(fd, rel=1e-6)


def test_repeat_total_repeat_length_and_zeros_of_a_traced_dtype():
    assert jnp.repeat(np.arange(3), [2, 0, 1], total_repeat_length=2).tolist() == [0, 0]
    assert jnp.repeat(np.arange(3), [1, 1, 1], total_repeat_length=5).tolist() == [0, 1, 2, 2, 2]
    assert jnp.repeat(np.eye(2), 2, axis=1, total_repeat_length=3).tolist() == [[1, 1, 0], [0, 0, 1]]
    f = sg.grad(lambda w: np.sum(jnp.zeros((160,), dtype=w.dtype).at[::2].set(w) ** 3))
    np.testing.assert_allclose(f(np.arange(80.0)), 3 * np.arange(80.0) ** 2)
    assert f._last.indexed


def test_gammaln_of_a_traced_value_is_an_op_whose_derivative_is_digamma():
    """(It was refused by name: no op.)"""
    import scipy.special as ss

    from symgrad.ports.scipy.special import gammaln

    assert gammaln(5.0) == pytest.approx(np.log(24.0), rel=1e-14)
    assert sg.grad(lambda x: gammaln(x))(3.0) == pytest.approx(ss.psi(3.0), rel=1e-14)


@pytest.mark.parametrize("kind", ["set", "add", "multiply", "min", "max"])
def test_updates_of_non_contiguous_numpy_arrays_are_not_lost(kind):
    """The final soak: x.at[i].add(x[i]) on symgrad.numpy.asarray(x.T) (NumPy values, a Fortran-ordered copy)
    updated a temporary made by reshape(-1) and returned x unchanged: a silently wrong value (the traced
    function was right). Updates copy in C order."""
    import symgrad.numpy as jnp

    x = np.random.default_rng(8).normal(size=(4, 6))
    for base in (x.T, x[:, ::2], x.T[::-1]):
        a = jnp.asarray(base)
        got = getattr(a.at[np.array([0, 2, 0])], kind)(2.5)
        want, rows = np.array(base), np.array([0, 2, 0])
        if kind == "set":
            want[rows] = 2.5
        else:
            ufunc = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[kind]
            ufunc.at(want, rows, 2.5)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(a, base)  # (functional: the input is unchanged)
