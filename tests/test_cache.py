"""The disk cache: a second process loads kernels instead of compiling; bad entries are rebuilt;
nothing planted in a cache directory runs; an unusable disk never stops a compile."""

import errno
import importlib.util
import itertools
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numba
import pytest

import symgrad as sg
from symgrad.compile import cache, numba_backend

SCRIPT = """
import json, sys
import symgrad as sg
from symgrad.compile import backends
x, y = sg.symbols("x y")
vg = sg.value_and_grad(x * y + sg.sin(x) + {salt}, [x, y], backend=sys.argv[1])
value, g = vg([2.0, 3.0])
kernel = vg._kernels("point") if vg.backend == "numba" else backends.vm_variant("point")
stats = kernel.stats
print(json.dumps(dict(value=value, grad=list(g), hits=sum(stats.cache_hits.values()),
                      misses=sum(stats.cache_misses.values()))))
"""
NUMBA = f"numba-{numba.__version__}"
CANARY_CODE = "open({path!r}, 'w').write('ran')"


def run(cache_dir: Path, backend: str, salt: float = 0.0, wait: bool = True, **env):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache_dir), **env)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(salt=salt), backend], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc if not wait else result(proc)


def result(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return dict(json.loads(out.splitlines()[-1]), stderr=err)


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
    assert again["hits"] == 1  # machine code is stamped by the text symgrad generated, not by the file
    (index,) = tmp_path.glob("*/__pycache__/k*point*.nbi")
    index.write_bytes(index.read_bytes()[:20])  # a truncated Numba index
    assert run(tmp_path, "numba", salt=1.0)["misses"] == 1
    assert run(tmp_path, "numba", salt=1.0)["hits"] == 1  # and the rebuilt entry is used
    # Numba's own cache setting never moves symgrad's files out of the checked folder.
    modules = f"**/k{numba_backend.GENERATOR_VERSION}_*"
    assert not list(Path(os.environ.get("NUMBA_CACHE_DIR", tmp_path / "none")).glob(modules))


def test_two_processes_compiling_at_once_both_succeed(tmp_path):
    procs = [run(tmp_path, "numba", salt=2.0, wait=False) for _ in range(2)]
    values = [result(p)["value"] for p in procs]
    assert values[0] == values[1] == pytest.approx(8.909297426825682, rel=1e-15)
    assert len(list(tmp_path.glob("*/*.tmp"))) == 0  # no temporary files left behind


# ---- attacks: planted files never run --------------------------------------------------------

class _Planted:
    """Unpickling this writes the canary file (what a planted Numba index would do)."""

    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self):
        return exec, (CANARY_CODE.format(path=str(self.canary)),)


def _layout(tmp_path: Path, salt: float) -> list[str]:
    """The files a trusted cache holds for the script's program (learned from a clean run)."""
    clean = tmp_path / "clean"
    run(clean, "numba", salt=salt)
    return [str(p.relative_to(clean)) for p in clean.glob(f"{NUMBA}/**/*") if p.is_file()]


def _plant(root: Path, names: list[str], canary: Path) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".nbi"):  # Numba reads a version pickle, then the index pickle
            path.write_bytes(pickle.dumps(numba.__version__) + pickle.dumps(_Planted(canary)))
        elif name.endswith(".py"):
            path.write_text(CANARY_CODE.format(path=str(canary)) + "\n")


@pytest.mark.parametrize("kind", ["planted", "corrupt"])
def test_a_planted_or_corrupt_pyc_never_runs(tmp_path, kind):
    """A .pyc carrying the generated module's mtime and size: the module is never imported."""
    run(tmp_path, "numba", salt=3.0)
    (module,) = tmp_path.glob("*/k*.py")
    canary = tmp_path / "canary"
    code = compile(CANARY_CODE.format(path=str(canary)), str(module), "exec")
    st = module.stat()
    pyc = importlib.util.cache_from_source(str(module))
    Path(pyc).parent.mkdir(exist_ok=True)
    from importlib._bootstrap_external import _code_to_timestamp_pyc
    data = _code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
    Path(pyc).write_bytes(data if kind == "planted" else data[:16] + b"\0garbage")
    again = run(tmp_path, "numba", salt=3.0)
    assert not canary.exists()
    assert again["value"] == pytest.approx(9.909297426825682, rel=1e-15) and again["hits"] == 1


@pytest.mark.parametrize("attack", ["group-writable", "symlink", "numba-symlink"])
def test_a_directory_others_can_write_is_refused(tmp_path, attack):
    names = _layout(tmp_path, salt=4.0)
    shared, canary, private = tmp_path / "shared", tmp_path / "canary", tmp_path / "private"
    _plant(shared, names, canary)
    if attack == "group-writable":
        shared.chmod(0o777)
        used = shared
    elif attack == "symlink":  # the cache directory itself is a link to someone else's
        used = tmp_path / "link"
        used.symlink_to(shared)
    else:  # numba-<version> inside a private directory points elsewhere
        used = tmp_path / "mine"
        used.mkdir(mode=0o700)
        (used / NUMBA).symlink_to(shared / NUMBA)
    got = run(used, "numba", salt=4.0, XDG_CACHE_HOME=str(private))
    assert not canary.exists()
    assert got["value"] == pytest.approx(10.909297426825682, rel=1e-15)
    assert "symgrad: not using the cache directory" in got["stderr"]
    assert got["stderr"].count("symgrad:") == 1
    assert list(private.glob(f"symgrad/{NUMBA}/__pycache__/*.nbi"))  # the private fallback was used


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process state with no cache folder chosen yet and no warnings given."""
    monkeypatch.setattr(cache, "_STATE", cache._State())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SYMGRAD_CACHE_DIR", raising=False)
    return tmp_path


_FRESH = itertools.count(1)


def _compiled_value(salt: float) -> float:
    """x*y + salt at (2, 3), compiled as a program this process has not loaded yet."""
    x, y = sg.symbols("x y")
    offset = 1000.0 * next(_FRESH)
    return sg.compile(x * y + (salt + offset), [x, y], backend="numba")([2.0, 3.0]) - offset


def test_a_directory_owned_by_another_user_is_refused(fresh, monkeypatch):
    """The owner check compares the directory's real owner with the user; the user is stubbed,
    since these tests may run as root (which owns everything it creates)."""
    shared = fresh / "theirs"
    shared.mkdir(mode=0o700)
    monkeypatch.setattr(cache, "_euid", lambda: shared.stat().st_uid + 1)
    assert "owned by uid" in cache.refused(shared)
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(shared))
    with pytest.warns(RuntimeWarning, match="owned by uid .*compiling in memory"):
        assert _compiled_value(0.25) == 6.25  # the private fallback is not ours either: memory
    assert cache.cache_dir() is None


@pytest.mark.parametrize("setting", ["file", "/dev/null", "unwritable-home"])
def test_an_unusable_cache_setting_compiles_in_memory_or_falls_back(fresh, monkeypatch, setting):
    if setting == "file":
        (fresh / "a_file").write_text("x")
        monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(fresh / "a_file"))
        want = "not a directory|cannot be created"
    elif setting == "/dev/null":
        monkeypatch.setenv("SYMGRAD_CACHE_DIR", "/dev/null")
        want = "cannot be created"
    else:
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", "/proc/no-such-home")
        want = "no usable cache directory"
    with pytest.warns(RuntimeWarning, match=want):
        assert _compiled_value(1.25) == 7.25
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process
        assert _compiled_value(1.5) == 7.5
    if setting != "unwritable-home":
        assert cache.cache_dir() == fresh / "xdg" / "symgrad" / NUMBA


@pytest.mark.parametrize("failure", ["read-only", "module path is a directory", "disk full for machine code"])
def test_a_failing_disk_compiles_in_memory(fresh, monkeypatch, failure):
    value = {"read-only": 2.25, "module path is a directory": 2.5, "disk full for machine code": 2.75}[failure]
    folder = cache.cache_dir()
    if failure == "read-only":  # a read-only file system refuses even root
        def refuse(path, text):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        monkeypatch.setattr(cache, "_write_atomic", refuse)
    elif failure == "module path is a directory":
        x, y = sg.symbols("x y")
        from symgrad.compile.backends import module_name
        from symgrad.compile.lower import lower
        offset = 1000.0 * (next(_FRESH) + 1)  # the program the next _compiled_value builds
        (folder / f"{module_name(lower(x * y + (value + offset), [x, y]))}.py").mkdir()
    else:
        def full(self, name, data):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(numba.core.caching.IndexDataCacheFile, "_save_data", full)
    with pytest.warns(RuntimeWarning, match="compiling in memory"):
        assert _compiled_value(value) == 6 + value
    assert cache.cache_dir() is None
    assert _compiled_value(value + 1.0) == 7 + value  # and on from memory


def test_the_vm_and_the_command_line_work_without_a_cache(tmp_path):
    env = dict(os.environ, SYMGRAD_CACHE_DIR="/dev/null", XDG_CACHE_HOME="/dev/null")
    got = run(Path("/dev/null"), "vm", salt=5.0, XDG_CACHE_HOME="/dev/null")
    assert got["value"] == pytest.approx(11.909297426825682, rel=1e-15)
    cli = subprocess.run([sys.executable, "-m", "symgrad.cli", "x*y + 1", "--at", "x=2,y=3"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and "7" in cli.stdout and "compiling in memory" in cli.stderr


# ---- bounded: disk size and loaded programs ----------------------------------------------------

def _entry(folder: Path, name: str, size: int, used: float) -> None:
    files = [folder / f"{name}.py", folder / "__pycache__" / f"{name}.point-10.py311.nbi",
             folder / "__pycache__" / f"{name}.point-10.py311.1.nbc"]
    for path in files:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (used, used))


def test_eviction_drops_the_least_recently_used_programs(tmp_path):
    for k in range(6):
        _entry(tmp_path, f"k4_{k}", 1000, used=1000.0 + k)
    freed = cache.evict(tmp_path, limit=9500)
    assert freed == 9000
    left = sorted(p.name.split(".")[0] for p in tmp_path.glob("*.py"))
    assert left == ["k4_3", "k4_4", "k4_5"]
    assert sorted({p.name.split(".")[0] for p in tmp_path.glob("__pycache__/*")}) == left


def test_eviction_runs_in_one_process_at_a_time(tmp_path):
    import fcntl

    _entry(tmp_path, "k4_0", 1000, used=1000.0)
    with open(tmp_path / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert cache.evict(tmp_path, limit=1) == 0  # another process holds the lock: skip
    assert cache.evict(tmp_path, limit=1) == 3000


def test_the_cache_size_limit_holds_across_processes(tmp_path):
    run(tmp_path, "numba", salt=6.0)
    modules = f"{NUMBA}/**/k{numba_backend.GENERATOR_VERSION}_*"
    first = {p.name for p in tmp_path.glob(modules)}
    run(tmp_path, "numba", salt=7.0, SYMGRAD_CACHE_SIZE="1K")  # a new entry: evicts the old ones
    left = {p.name for p in tmp_path.glob(modules)}
    assert first and not first & left and left


@pytest.mark.parametrize("text, message", [("lots", "expected a size such as 500M"), ("0", "expected a size")])
def test_a_bad_size_setting_is_named(monkeypatch, text, message):
    monkeypatch.setenv("SYMGRAD_CACHE_SIZE", text)
    with pytest.raises(ValueError, match=f"SYMGRAD_CACHE_SIZE: {message}"):
        cache.size_limit()
    monkeypatch.setenv("SYMGRAD_CACHE_SIZE", "2G")
    assert cache.size_limit() == 2 * 2**30


def test_programs_past_the_cap_run_on_the_vm(monkeypatch):
    monkeypatch.setattr(cache, "_STATE", cache._State())
    x, y = sg.symbols("x y")
    monkeypatch.setenv("SYMGRAD_MAX_PROGRAMS", str(len(cache._LOADED) + 1))
    first = sg.compile(x * y + 8.5, [x, y], backend="numba")
    with pytest.warns(RuntimeWarning, match="new ones run on the VM"):
        second = sg.compile(x * y + 9.5, [x, y], backend="numba")
    again = sg.compile(x * y + 8.5, [x, y], backend="numba")  # already loaded: still Numba
    assert (first.backend, second.backend, again.backend) == ("numba", "vm", "numba")
    assert (first([2.0, 3.0]), second([2.0, 3.0])) == (14.5, 15.5)


def test_a_compile_in_the_background_never_stalls_loading_or_compiling_another_module():
    """Tiered compilation compiles one program's loops in a thread while the caller builds the next:
    loading (and typing) another module must not wait for that compile (it once waited on one lock)."""
    import threading

    slow = cache.load("t_slow_compile", "import numba\n\n@numba.njit\ndef f(x):\n    return x + 1.0\n")
    entered, release = threading.Event(), threading.Event()
    compile_ = slow.f.compile

    def stalled(signature):
        entered.set()
        release.wait(60)
        return compile_(signature)

    slow.f.compile = stalled
    background = threading.Thread(target=cache.typed, args=(slow, "f", (numba.float64,)))
    background.start()
    try:
        assert entered.wait(30)
        done = []
        other = threading.Thread(target=lambda: done.append(cache.typed(cache.load(
            "t_other_compile", "import numba\n\n@numba.njit\ndef g(x):\n    return x * 2.0\n"), "g",
            (numba.float64,))(3.0)))
        other.start()
        other.join(60)  # (a deadline for a deadlock, not a timing)
        assert done == [6.0]
    finally:
        release.set()
        background.join(60)
    assert slow.f(1.0) == 2.0
