"""The disk cache: a second process loads kernels instead of compiling; bad entries are rebuilt."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys
import symgrad as sg
from symgrad.compile import function
x, y = sg.symbols("x y")
vg = sg.value_and_grad(x * y + sg.sin(x) + {salt}, [x, y], backend=sys.argv[1])
value, g = vg([2.0, 3.0])
kernel = vg._kernels("point") if vg.backend == "numba" else function._vm_variant("point")
stats = kernel.stats
print(json.dumps(dict(value=value, grad=list(g), hits=sum(stats.cache_hits.values()),
                      misses=sum(stats.cache_misses.values()))))
"""


def run(cache: Path, backend: str, salt: float = 0.0, wait: bool = True):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(salt=salt), backend], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc if not wait else result(proc)


def result(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("backend", ["numba", "vm"])
def test_second_process_loads_from_disk(tmp_path, backend):
    first = run(tmp_path, backend)
    assert first["value"] == pytest.approx(6.909297426825682, rel=1e-15)
    assert first["misses"] == 1 and first["hits"] == 0
    second = run(tmp_path, backend)
    assert second["hits"] == 1 and second["misses"] == 0
    assert second["value"] == first["value"] and second["grad"] == first["grad"]


def test_corrupt_entries_are_rebuilt(tmp_path):
    run(tmp_path, "numba", salt=1.0)
    (module,) = tmp_path.glob("*/k*.py")
    text = module.read_text()
    module.write_text(text[:100])  # a partial write of the generated module
    again = run(tmp_path, "numba", salt=1.0)
    assert again["value"] == pytest.approx(7.909297426825682, rel=1e-15)
    assert module.read_text() == text
    assert again["hits"] == 1  # Numba stamps a source by its content: the restored module's code is valid
    for index in tmp_path.glob("*/__pycache__/k*point*.nbi"):
        index.write_bytes(index.read_bytes()[:20])  # a truncated Numba index
    assert run(tmp_path, "numba", salt=1.0)["misses"] == 1
    assert run(tmp_path, "numba", salt=1.0)["hits"] == 1  # and the rebuilt entry is used


def test_two_processes_compiling_at_once_both_succeed(tmp_path):
    procs = [run(tmp_path, "numba", salt=2.0, wait=False) for _ in range(2)]
    values = [result(p)["value"] for p in procs]
    assert values[0] == values[1] == pytest.approx(8.909297426825682, rel=1e-15)
    assert len(list(tmp_path.glob("*/*.tmp"))) == 0  # no temporary files left behind
