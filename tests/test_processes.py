"""Process pools: batches and sums work in fork, forkserver and spawn children of a parent that used them."""

import subprocess
import sys

import pytest

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
