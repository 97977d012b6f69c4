"""Process pools: batches and sums work in fork, forkserver and spawn children of a parent that used them; a
child forked while a thread compiles can compile."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import symgrad as sg

SCRIPT = """
import multiprocessing as mp, sys
import numpy as np
import symgrad as sg
x, y, t = sg.symbols("x y t")
vg = sg.value_and_grad(x * y * t + sg.sin(x), [x, y], params=[t], backend=sys.argv[2])
X = np.arange(10000.0).reshape(5000, 2) / 5000
T = X[:, :1].copy()

def work(k):
    return float(vg.batch(X, [0.5])[0].sum() + vg.sum([0.5, 0.25], T)[0]) + k

parent = work(0)  # the parent's thread pool is started

if __name__ == "__main__":
    with mp.get_context(sys.argv[1]).Pool(2) as pool:
        got = pool.map(work, range(3))
    assert got == [parent + k for k in range(3)], (got, parent)
    print("ok")
"""


@pytest.mark.parametrize("method, backend", [("fork", "numba"), ("fork", "vm"), ("forkserver", "vm"),
                                             ("spawn", "vm")])
def test_pools_of_every_start_method_run_batches(tmp_path, method, backend):
    script = tmp_path / "pool.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), method, backend], capture_output=True, text=True,
                          timeout=120)  # a child waiting on the parent's threads would hang here
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_fork_while_another_thread_compiles_leaves_the_child_able_to_compile(monkeypatch):
    """A process forked while one of its threads compiles a function: the child compiles and computes its own
    (Python 3.11's functools.cached_property kept its lock, held by that thread, in the child for good)."""
    from symgrad.trace import record

    inside, forked, compile_ = threading.Event(), threading.Event(), record.compiled.compile

    def compile_slowly(*args, **kwargs):
        inside.set()
        forked.wait(60)
        return compile_(*args, **kwargs)

    monkeypatch.setattr(record.compiled, "compile", compile_slowly)
    salt = 1.0 + np.random.default_rng().random()
    f = sg.jit(sg.grad(lambda v: np.sum(np.sin(v * salt) ** 2)))
    thread = threading.Thread(target=f, args=(np.linspace(0.0, 1.0, 50),))
    thread.start()
    assert inside.wait(60)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            forked.set()  # (the child's own compile goes straight on)
            g = sg.jit(sg.grad(lambda v: np.sum(np.cos(v) * v ** 3)))
            v = np.linspace(0.0, 1.0, 50)
            code = 0 if np.allclose(g(v), 3 * v ** 2 * np.cos(v) - v ** 3 * np.sin(v), rtol=1e-13) else 1
        finally:
            os._exit(code)
    forked.set()
    for _ in range(1200):  # (a child hung for good is killed after ~2 minutes: the test fails, not the suite)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    thread.join()
    assert os.waitstatus_to_exitcode(status) == 0
