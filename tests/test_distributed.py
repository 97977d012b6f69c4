"""Dask arrays as data (symgrad.distributed): ``vg.sum``, ``sg.vmap`` and ``Compiled.batch`` / ``.sum`` on a
2-process LocalCluster, against the in-memory calls on the same data; bit for bit where the chunks are the same."""

import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

import symgrad as sg  # noqa: E402
from symgrad.distributed import lazy_sum, tree_sum  # noqa: E402

# The workers cannot import this test module: its functions travel by value, as a script's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def logistic(w, x, y):
    z = np.dot(w[:-1], x) + w[-1]
    return np.logaddexp(0.0, z) - y * z


def branchy(w, x, y):  # a Python if on a row's value: no rolled form, one trace per branch
    z = w[0] * x[0] + w[1] * x[1]
    if y > 0.5:
        return (z - 1.0) ** 2
    return np.log1p(z * z)


def picky(w, x, y):
    if y > 2.5:
        raise ValueError("a label above 2.5")
    return (w[0] * x[0] - y) ** 2


def slowly(block):  # data that takes a while to load, so a worker can be killed mid-run
    time.sleep(0.15)
    return block


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.CRITICAL)
    with cluster, distributed.Client(cluster) as c:
        yield c


def data(n=20_000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 0.5).astype(float)
    w = rng.standard_normal(d + 1) * 0.3
    return w, X, y


def chunked(vg, w, X, y, rows):
    """vg.sum over NumPy pieces of ``rows`` rows, one Numba thread each, added in symgrad's tree."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        parts = [vg.sum(w, X[lo:lo + rows], y[lo:lo + rows]) for lo in range(0, len(X), rows)]
    finally:
        numba.set_num_threads(before)
    return tree_sum(parts)


def same(a, b):
    la, lb = sg.tree_leaves(a), sg.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) and np.shape(x) == np.shape(y) for x, y in zip(la, lb))


def close(a, b):
    return all(np.allclose(x, y, rtol=1e-12, atol=1e-9) for x, y in zip(sg.tree_leaves(a), sg.tree_leaves(b)))


def test_import_symgrad_leaves_dask_alone():
    here = os.path.dirname(os.path.dirname(sg.__file__))
    done = subprocess.run([sys.executable, "-c", "import sys, symgrad; assert 'dask' not in sys.modules"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": here})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fn", [logistic, branchy])
def test_sum_on_the_cluster(client, fn):
    vg = sg.value_and_grad(fn)
    w, X, y = data(4000 if fn is branchy else 20_000, d=2 if fn is branchy else 4)
    w = w[:2] if fn is branchy else w
    rows = len(X) // 7 + 1
    Xd, yd = da.from_array(X, chunks=(rows, X.shape[1])), da.from_array(y, chunks=rows)
    got = vg.sum(w, Xd, yd)
    assert isinstance(got[0], float) and isinstance(got[1], np.ndarray)
    assert same(got, chunked(vg, w, X, y, rows))  # the same chunks in one process: the same bits
    assert same(got, dask.compute(lazy_sum(vg, w, Xd, yd), scheduler="sync")[0])
    with dask.config.set(scheduler="threads"):  # this process's threads, another schedule
        assert same(got, vg.sum(w, Xd, yd))
    assert same(got, vg.sum(w, Xd, yd))  # again (the workers' traces are kept)
    assert close(got, vg.sum(w, X, y))  # the whole sum in memory: another order of additions


def loaded_here():  # runs on a worker: what symgrad.distributed keeps there
    from symgrad import distributed as d

    return {digest: sum(len(t) for f in obj._sums.values() for key, t in f._traces.items() if (1000, 4) in key)
            for digest, obj in d._loaded.items() if isinstance(obj, sg.Function) and obj.__name__ == "logistic"}


def test_the_function_reaches_a_worker_once(client):
    vg = sg.value_and_grad(logistic)
    w, X, y = data(12_000)
    Xd, yd = da.from_array(X, chunks=(1000, 4)), y
    for k in range(3):  # three steps of an optimizer: 36 tasks, one function, one trace of this shape a worker
        vg.sum(w + 0.01 * k, Xd, yd)
    kept = client.run(loaded_here)
    digest = sg.distributed.Shipped(vg).digest
    assert all(got.get(digest) == 1 for got in kept.values()), kept


def test_one_chunk_is_the_in_memory_sum(client):
    vg = sg.value_and_grad(logistic)
    w, X, y = data()
    assert same(vg.sum(w, da.from_array(X, chunks=X.shape), y), vg.sum(w, X, y))


def test_chunks_of_other_sizes_numpy_data_and_pytrees(client):
    vg = sg.value_and_grad(lambda p, x, y: (np.dot(p["w"], x) + p["b"] - y) ** 2)
    w, X, y = data(10_000)
    p = {"w": w[:-1], "b": 0.5}
    Xd = da.from_array(X, chunks=((3000, 3000, 2500, 1500), (2, 2)))  # rechunked to whole rows
    got = vg.sum(p, Xd, y)  # y in NumPy: split alike
    assert isinstance(got[1], dict) and set(got[1]) == {"w", "b"}
    assert same(got, dask.compute(lazy_sum(vg, p, da.from_array(X, chunks=((3000, 3000, 2500, 1500), 4)), y),
                                  scheduler="sync")[0])
    assert close(got, vg.sum(p, X, y))
    g = sg.grad(lambda w, x, y: (np.dot(w, x) - y) ** 2)
    assert close(g.sum(w[:-1], Xd, y), g.sum(w[:-1], X, y))


def test_vmap_is_a_lazy_dask_array(client):
    w, X, y = data(9000)
    f = sg.vmap(logistic, in_axes=(None, 0, 0))
    Z = f(w, da.from_array(X, chunks=(2000, 4)), y)
    assert isinstance(Z, da.Array) and Z.shape == (9000,) and Z.chunks == ((2000,) * 4 + (1000,),)
    pieces = np.concatenate([f(w, X[lo:lo + 2000], y[lo:lo + 2000]) for lo in range(0, 9000, 2000)])
    assert np.array_equal(Z.compute(), pieces)
    assert np.allclose(Z.compute(), f(w, X, y), rtol=1e-14, atol=0)
    two = sg.vmap(lambda w, x: (np.dot(w[:-1], x), x * w[0]), in_axes=(None, 0))
    a, b = two(w, da.from_array(X, chunks=(4000, 4)))
    assert b.shape == (9000, 4) and close((a.compute(), b.compute()), two(w, X))
    assert same(b[4000:8000].compute(), two(w, X[4000:8000])[1])


def test_compiled_batch_and_sum(client):
    a, t, u = sg.symbols("a t u")
    vg = sg.value_and_grad((a * t - u) ** 2 + sg.sin(a * u), [a], params=[t, u])
    rng = np.random.default_rng(1)
    P = rng.standard_normal((5000, 2))
    X = rng.standard_normal((5000, 1))
    Pd, Xd = da.from_array(P, chunks=(1200, 2)), da.from_array(X, chunks=(1200, 1))
    V, G = vg.batch(Xd, Pd)
    assert isinstance(V, da.Array) and G.shape == (5000, 1)
    assert same(dask.compute(V, G), vg.batch(X, P))
    assert same(dask.compute(*vg.batch(Xd, P[0])), vg.batch(X, P[0]))  # one row of params for every point
    total = vg.sum([0.3], Pd)
    assert same(total, dask.compute(lazy_sum(vg, [0.3], Pd), scheduler="sync")[0])
    assert close(total, vg.sum([0.3], P))
    f = sg.compile(a * t, [a, t])
    assert same(f.batch(da.from_array(P, chunks=(700, 2))).compute(), f.batch(P))


def test_an_error_names_its_chunk(client):
    vg = sg.value_and_grad(picky)
    w, X, y = data(40, d=1)
    y[25] = 3.0  # in the third chunk of 10 rows
    with pytest.raises(ValueError, match=r"chunk 2 \(rows 20\.\.29\).*a label above 2\.5"):
        vg.sum(w[:1], da.from_array(X, chunks=(10, 1)), da.from_array(y, chunks=10))


def test_refusals(client):
    w, X, y = data(100)
    Xd = da.from_array(X, chunks=(30, 4))
    with pytest.raises(TypeError, match="sg.vmap"):
        sg.jit(lambda x: x * 2.0)(Xd)
    with pytest.raises(TypeError, match="parameters"):
        sg.value_and_grad(logistic).sum(da.from_array(w), Xd, y)
    with pytest.raises(ValueError, match="same"):
        sg.value_and_grad(logistic).sum(w, Xd, y[:50])
    with pytest.raises(ValueError, match="first axis"):
        sg.vmap(lambda x: x * 2.0, in_axes=1)(Xd)


def test_empty_chunks_dict_data_and_widths_are_told_before_anything_runs(client):
    """An empty chunk (a mask, then compute_chunk_sizes) adds nothing; data in a dict, rows of unknown
    count, a Compiled's wrong column count and sg.jit(sg.vmap(f)) are refused at once, saying why (found
    by an independent tester: the first crashed in a task, the others failed there or advised wrongly)."""
    vg = sg.value_and_grad(logistic)
    w, X, y = data(100)
    Xd, yd = da.from_array(X, chunks=((50, 0, 50), (4,))), da.from_array(y, chunks=((50, 0, 50),))
    assert close(vg.sum(w, Xd, yd), vg.sum(w, X, y))
    with pytest.raises(ValueError, match="need a leading axis"):
        sg.value_and_grad(lambda w, b: logistic(w, b["x"], b["y"])).sum(w, {"x": Xd, "y": yd})
    mask = Xd[:, 0] > 0.0
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        vg.sum(w, Xd[mask], yd[mask])
    a, b = sg.symbols("a b")
    with pytest.raises(ValueError, match=r"expected shape \(N, 2\), got shape \(100, 1\)"):
        sg.value_and_grad(a * a * b, [a, b]).batch(da.from_array(np.ones((100, 1)), chunks=(30, 1)))
    with pytest.raises(TypeError, match="outermost"):
        sg.jit(sg.vmap(logistic, in_axes=(None, 0, 0)))(w, Xd, yd)


def test_a_worker_killed_mid_run_changes_nothing(client):
    vg = sg.value_and_grad(logistic)
    w, X, y = data(40_000)

    def chunked(run):  # (the same chunks under other names: the run's keys are not the reference's, which
        # the scheduler may still hold when the run is submitted, making it done at once)
        return (da.from_array(X, chunks=(1000, 4), name=f"X-{run}").map_blocks(slowly),  # 40 chunks of 150 ms
                da.from_array(y, chunks=1000, name=f"y-{run}"))  # over 2 workers

    want = vg.sum(w, *chunked("reference"))
    Xd, yd = chunked("killed")
    future = client.compute(lazy_sum(vg, w, Xd, yd))
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 30
    while not any(client.has_what().values()) and time.monotonic() < deadline:
        time.sleep(0.02)
    victim = next(addr for addr, keys in client.has_what().items() if keys)
    assert not future.done()
    os.kill(pids[victim], signal.SIGKILL)
    assert same(future.result(timeout=120), want)
    client.wait_for_workers(2, timeout=60)  # (its nanny started another process)
    assert pids[victim] not in client.run(os.getpid).values()


def test_the_example_fits_on_a_cluster():
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "cluster_fit.py")
    done = subprocess.run([sys.executable, example, "--rows", "1e5", "--chunk", "2e4"], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "in 5 chunks" in done.stdout and done.stdout.count("epoch ") >= 5
    assert float(done.stdout.rsplit("max |w - w_true| = ", 1)[1]) < 0.1
