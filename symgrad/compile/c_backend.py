"""The "c" backend: a Program's C kernels (c_source.kernel_source) or a LoopProgram's (c_loops.py) built by
the system C compiler into a shared object, loaded with ctypes, giving the same point / batch / total
kernels as the Numba backend.

The compiler is ``$CC`` or ``cc`` (``-std=c99 -O2 -fno-math-errno -fno-trapping-math -shared -fPIC``, no
compile-time evaluation of libm's functions, libm, and this CPU's instructions with the loop vectoriser where
the compiler takes them: ``flags()``). Shared objects are
kept in ``c/`` beside the Numba cache, under the same checks (a directory of this user's that nobody else can
write, docs/security.md), named by the hash of the text and the compiler's command and version, so a
second process loads the object instead of compiling; without a usable cache directory they are built
in a private temporary directory. Loading a shared object runs its code: only objects symgrad built
from text it generated are ever loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compile import c_blas, c_loops, cache
from symgrad.compile.c_source import INEXACT, kernel_source
from symgrad.compile.kernels import Kernels, faulted, give, register, take
from symgrad.compile.loop_program import LoopProgram
from symgrad.compile.program import Program

# (-fno-math-errno: the files never read errno, and a sqrt that may set it is a call, not an instruction,
# which also keeps loops around it from vectorising: the collocation problem's Hessian kernel 376 -> 194 us)
# (-fno-builtin-<f>: no library function of constants worked out at compile time: c_source.INEXACT)
# (-fno-trapping-math: no program here unmasks a floating-point trap, and gcc kept every loop calling
# floor, as fastmath's exp does, from vectorising: log-sum-exp's gradient 8.6 -> 3.4 ms, an LSTM
# gradient's 52 -> 40 ms; the same bits, as LLVM's, which assumes no traps either)
FLAGS = ("-std=c99", "-O2", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC",
         *(f"-fno-builtin-{f}" for f in INEXACT))
# Where the compiler takes them: this CPU's instructions and -O3's vectoriser at -O2's compile time
# (ODE's RK4 loops 0.43 -> 0.15 ms, as Numba's; an LSTM gradient's 8000 lines 4.5 -> 6 s to build
# where -O3 takes 8-10 s). -ffp-contract=off (gcc's default under -std=c99, not clang's): no fused
# multiply-adds, the roundings of the other backends. Objects are named by the CPU too (a cache
# directory may be shared).
NATIVE = ("-march=native", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-ffp-contract=off")
# Kernels longer than this (lines of C, all files) are built at -O1: on an LSTM gradient's 8500 lines gcc
# spends 4.5 s of CPU at -O2, 2.6 s at -O1 (both files at once on two cores: 2.4 -> 1.8 s), and its calls
# run within 5%; the same bits (neither level changes a rounding: no -ffast-math, no contraction).
LONG_LINES = 4000
# A file longer than this (one function of straight-line code: an 81,000-node Hessian traced element by element)
# is built at -O0: gcc's time grows faster than its length at -O1 (18,000 lines 11 s, 44,000 35 s, 83,000
# past the 60 s limit; -Og no better) and linearly at -O0 (1.3, 3.2, 6.2 s). The same bits (no level
# changes a rounding); its calls run slower, as the loop VM's would.
HUGE_LINES = 10000
# Under "auto" kernels longer than this are built first at -Og without the vectoriser (QUICK_LEAVES_OUT),
# then in full on a background thread: the LSTM gradient's files 0.37 -> 0.21 s each against -O1's with
# it, its calls 56 -> 62 ms; an ODE gradient's 1500 lines 0.22 -> 0.12 s of gcc (its first result 0.24
# -> 0.17 s), its calls 4x slower until the full build is in, 0.2 s later; GMM's gradient's first result
# 0.38 -> 0.17 s, an ODE's 350 lines 0.09 -> 0.06 s. (Not shorter ones: a hundredth of a second of gcc
# against a second shared object loaded, which $SYMGRAD_MAX_PROGRAMS counts.)
QUICK_LINES = 200
QUICK_LEAVES_OUT = ("-ftree-vectorize", "-fvect-cost-model=dynamic")
TIMEOUT = 600  # seconds a compiler's run may take (a hung one fails, and the other tiers go on)
# ... on the caller's thread, which waits for its first result (an LSTM gradient's files take 0.2 s each): a
# hung compiler held the first call 600 s before the other tiers went on
FOREGROUND_TIMEOUT = 60
_LOCK = threading.Lock()  # guards _BUILDS and _EXITING
_BUILDS: dict[Path, threading.Lock] = {}  # a lock per object being built: one thread builds, others wait
# The compilers under way and their folders: at exit, compilers are killed and folders removed (a daemon
# thread building a tier is stopped mid-build; the folder's remover raced the compiler writing into it).
_RUNNING: dict[Path, list[subprocess.Popen]] = {}
_EXITING = threading.Event()
_BACKGROUND = threading.local()  # .on: this thread builds a later tier (``background``)
FAULTED_MIN = 1 << 20  # floats of workspace (8 MiB) past which its pages are faulted in during the build
_PROBING = threading.Lock()
_OPENED: set[Path] = set()  # the shared objects loaded (never unloaded: ctypes does not dlclose them)
# The tables each loaded object's kernels read (c_loops.table_values), by its path: a second load of an object
# (the same program compiled again) returns the same library, whose pointers must not be moved to values a
# later-collected Kernels held (they were, and a call through the first one read freed memory)
_TABLES: dict[str, list[np.ndarray]] = {}
_c, _ll, _d = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_double


class CompilerError(RuntimeError):
    """No C compiler, or it failed on symgrad's generated file (a bug: please report it)."""


def compiler() -> tuple[str, str]:
    """The C compiler's path (``$CC``, else ``cc``; ``$CC`` may carry arguments: ``ccache gcc``) and its
    version line.

    >>> path, version = compiler(); bool(path) and bool(version)
    True
    """
    return _compiler(os.environ.get("CC", "cc"))


def _command() -> list[str]:
    """The compiler's command: its path and the arguments ``$CC`` gives it."""
    return [compiler()[0], *shlex.split(os.environ.get("CC", "cc"))[1:]]


def available() -> bool:
    """Whether a C compiler is found (the "c" backend, and the C tier of tiered compilation).

    >>> available() in (True, False)
    True
    """
    try:
        compiler()
    except CompilerError as e:
        if os.environ.get("CC"):  # (asked for by name: worth a word; no compiler at all is a quiet fallback)
            cache.warn_once(f"CC={os.environ['CC']}", f"{e}; the C tier is left out")
        return False
    return True


@functools.cache
def _compiler(setting: str) -> tuple[str, str]:
    words = shlex.split(setting) or [""]
    path = shutil.which(words[0])
    if path is None:
        raise CompilerError(f"backend='c' needs a C compiler: none found as {setting!r} ($CC, else cc); install "
                            "one (gcc, clang) or use backend='numba'")
    return path, _probe((path, *words[1:]))[0]


def flags() -> tuple[str, ...]:
    """The compiler's flags: FLAGS, and the most of NATIVE it takes without a word (clang has no
    -fvect-cost-model; a cross compiler no -march=native).

    >>> flags()[:2]
    ('-std=c99', '-O2')
    """
    return _probe(tuple(_command()))[1]


def _unlocked_in_child() -> None:
    global _PROBING, _LOCK, _BUILDS, _RUNNING
    _PROBING, _LOCK, _BUILDS, _RUNNING = threading.Lock(), threading.Lock(), {}, {}  # (the parent's compilers)


# A child forked while the import's probe (or a build) ran would inherit its lock held, and wait forever.
os.register_at_fork(after_in_child=_unlocked_in_child)


def _probe(command: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The compiler's version line and flags, found by running it (0.02-0.07 s a run) once per machine, not
    once a process: kept beside the shared objects, named by the compiler's path, size and time of change
    (a file whose flags are not symgrad's is ignored). symgrad's import starts this in the background
    (tiers.py); a first build waits for that one instead of probing again."""
    with _PROBING:
        return _probed(command)


@functools.cache
def _probed(command: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    stat = os.stat(command[0])
    key = hashlib.sha256(repr((command, stat.st_size, stat.st_mtime_ns, FLAGS, NATIVE)).encode()).hexdigest()
    file = _folder() / f"probe-{key[:32]}.txt"
    with contextlib.suppress(OSError, ValueError):
        version, *options = file.read_text(encoding="utf-8").splitlines()
        if tuple(options[:len(FLAGS)]) == FLAGS and set(options) <= {*FLAGS, *NATIVE}:
            return version, tuple(options)
    run = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False, timeout=TIMEOUT)
    said = (run.stdout or run.stderr).splitlines()
    version, options = said[0] if said else command[0], _flags(command)
    with contextlib.suppress(OSError):
        file.parent.mkdir(parents=True, exist_ok=True)
        temporary = file.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text("\n".join((version, *options)), encoding="utf-8")
        os.replace(temporary, file)
    return version, options


def _flags(command: tuple[str, ...]) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("double sg_probe(const double* a, int n) { double s = 0; for (int i = 0; i < n; ++i) "
                          "s += a[i] * a[i]; return s; }\n")
        probe = [*FLAGS, "-o", str(Path(tmp) / "probe.so"), str(source)]
        clang = tuple(f for f in NATIVE if f != "-fvect-cost-model=dynamic")
        for native in (NATIVE, clang, ("-ffp-contract=off",)):
            try:
                run = subprocess.run([*command, *native, *probe], capture_output=True, text=True, check=False,
                                     timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                break
            if run.returncode == 0 and not run.stderr.strip():
                return (*FLAGS, *native)
    return FLAGS


@functools.cache
def _host() -> str:
    """This CPU, as LLVM names it and its features: part of a shared object's name under NATIVE."""
    import llvmlite.binding as llvm

    return f"{llvm.get_host_cpu_name()} {llvm.get_host_cpu_features().flatten()}"


def _folder() -> Path:
    """Where shared objects are kept: ``c/`` beside the Numba cache when it is trusted, else a private
    temporary directory for this process."""
    numba_folder = cache.cache_dir()
    if numba_folder is not None:
        folder = numba_folder.parent / "c"
        if cache.refused(folder) is None:
            return folder
    return _private()


@functools.cache
def _private() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="symgrad-c-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def lines(text: str, others: Sequence[str] = ()) -> int:
    """The lines of the C files ``text`` and ``others`` (LONG_LINES, QUICK_LINES).

    >>> lines("double one(void);\\n", ["double one(void) { return 1.0; }\\n"])
    2
    """
    return sum(t.count("\n") for t in (text, *others))


def build(text: str, stem: str, others: Sequence[str] = (), quick: bool = False) -> Path:
    """The shared object of the C file ``text`` and any ``others`` it calls (compiled now, at once on
    this machine's cores, and linked; or found built from the same texts and compiler before);
    ``quick``: at -Og without the vectoriser (a first tier, sooner).

    >>> build("double one(void) { return 1.0; }", "doc").suffix
    '.so'
    """
    command, options, target = _target(text, stem, others, quick)
    folder = target.parent
    with _LOCK:
        lock = _BUILDS.setdefault(target, threading.Lock())
    try:
        with lock:  # (not one lock for all: a background tier's build would hold up a new function's first)
            if target.is_file() and not target.is_symlink():
                with contextlib.suppress(OSError):
                    os.utime(target)  # (used: the cache's eviction goes by last use)
                return target
            tmp = Path(tempfile.mkdtemp(prefix="build-", dir=folder))  # (cache.STALE_BUILD: one left behind goes)
            try:
                _compiled(command, options, tmp, stem, (text, *others))
                os.replace(tmp / f"{stem}.so", target)
            finally:
                with _LOCK:
                    _RUNNING.pop(tmp, None)
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        with _LOCK:
            if _BUILDS.get(target) is lock:  # (one waiting on it finds the object built: none is kept)
                del _BUILDS[target]
    numba_folder = cache.cache_dir()
    if numba_folder is not None and folder == numba_folder.parent / "c":
        cache.wrote(numba_folder)  # (the size limit counts both)
    return target


def _target(text: str, stem: str, others: Sequence[str], quick: bool) -> tuple[list[str], tuple[str, ...], Path]:
    """The compiler's command and options for ``build``, and the shared object it makes: named by all of them."""
    version, command, options = compiler()[1], _command(), flags()
    if quick or lines(text, others) > LONG_LINES:
        level = "-O0" if max(map(lines, (text, *others))) > HUGE_LINES else "-Og" if quick else "-O1"
        options = tuple(level if o == "-O2" else o for o in options if not (quick and o in QUICK_LEAVES_OUT))
    host = _host() if "-march=native" in options else ""
    key = hashlib.sha256("\0".join((text, *others, *command, version, host, *options)).encode()).hexdigest()[:32]
    return command, options, _folder() / f"{stem}-{key}.so"


def built(text: str, stem: str, others: Sequence[str] = ()) -> bool:
    """Whether ``build(text, stem, others)`` finds its shared object built before (no compiling).

    >>> text = "double one(void) { return 1.0; }"
    >>> _ = build(text, "doc")
    >>> built(text, "doc"), built(text + " ", "doc")
    (True, False)
    """
    try:
        target = _target(text, stem, others, False)[2]
    except CompilerError:
        return False
    return target.is_file() and not target.is_symlink()


def _compiled(command: list[str], options: tuple[str, ...], tmp: Path, stem: str, texts: tuple[str, ...]) -> None:
    """``tmp/stem.so`` built from the C files ``texts`` (written into ``tmp``): one at once, or each an
    object of its own, all compiled at once (the machine's cores), then linked."""
    sources = [tmp / f"{stem}{'' if k == 0 else f'_{k}'}.c" for k in range(len(texts))]
    for source, content in zip(sources, texts, strict=True):
        source.write_text(content, encoding="utf-8")
    built = tmp / f"{stem}.so"
    if len(sources) == 1:
        _run([[*command, *options, "-o", str(built), str(sources[0]), "-lm"]], [sources[0].name], tmp)
        return
    compile_only = [o for o in options if o != "-shared"]
    _run([[*command, *compile_only, "-c", "-o", str(c.with_suffix(".o")), str(c)] for c in sources],
         [c.name for c in sources], tmp)
    _run([[*command, "-shared", "-o", str(built), *(str(c.with_suffix(".o")) for c in sources), "-lm"]],
         [f"{stem}.so"], tmp)


def _run(commands: list[list[str]], names: list[str], folder: Path) -> None:
    """Run the compiler ``commands`` at once (writing in ``folder``), or raise CompilerError.

    gcc's own temporary files go to ``folder`` too: a compiler killed mid-build (at exit, on a timeout)
    would leave them in /tmp for good."""
    processes: list[subprocess.Popen] = []
    try:
        with _LOCK:
            if _EXITING.is_set():
                raise CompilerError("the interpreter is exiting")
            _RUNNING[folder] = processes  # (killed at exit)
            for command in commands:
                processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                  text=True, **_GROUP, env={**os.environ, "TMPDIR": str(folder)}))
                if getattr(_BACKGROUND, "on", False):
                    _yielding(processes[-1])
        limit = TIMEOUT if getattr(_BACKGROUND, "on", False) else FOREGROUND_TIMEOUT
        for command, name, process in zip(commands, names, processes, strict=True):
            try:
                said = process.communicate(timeout=limit)[0]
            except subprocess.TimeoutExpired:
                raise CompilerError(f"{command[0]} took over {limit} s on symgrad's generated C "
                                    f"({name})") from None
            if process.returncode != 0:
                said = " ".join(said.split())[:400] or "no message"
                raise CompilerError(f"{command[0]} failed (exit status {process.returncode}) on symgrad's "
                                    f"generated C ({name}): {said}")
    finally:
        for process in processes:  # (after a failure: the others too)
            if process.poll() is None:
                _kill(process)
                process.communicate()


# A compiler in a process group of its own (_kill: its cc1 and as too), in this process's session: in a new
# one Linux's autogroups shared the CPU between sessions alike, whatever a background build's nice.
_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


def _yielding(process: subprocess.Popen) -> None:
    """A background build's compiler (and what it starts) at the lowest priority: it takes the cores the
    caller leaves idle and gives them back when the caller runs, so a build's files all compile at once.
    (An LSTM gradient's full C kernels: in 1.5-1.7 s, not 2.1-2.3, where the caller waits; where it calls
    them in a loop, in at 2.5 s either way, the calls meanwhile 59-61 ms either way.)"""
    with contextlib.suppress(OSError, AttributeError):  # (gone already, or no setpriority: as it is)
        os.setpriority(os.PRIO_PGRP, process.pid, 19)


def _kill(process: subprocess.Popen) -> None:
    """Kill a compiler and what it started (gcc's cc1 and as: killing gcc alone leaves them running)."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)


@atexit.register
def _stop_builds() -> None:
    """At exit: no new compiler, those under way killed, their folders removed (a tier built in the
    background is not waited for: nobody would call it)."""
    with _LOCK:
        _EXITING.set()
        running = {folder: list(processes) for folder, processes in _RUNNING.items()}
    for folder, processes in running.items():
        for process in processes:
            _kill(process)
            with contextlib.suppress(OSError):
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Builds on this thread inside are a later tier's: their compilers run at the lowest priority, on the
    cores the caller, running the kernels it has meanwhile, leaves idle (an LSTM gradient's first call took
    0.24-0.55 s beside both cores' gcc at the same priority, 0.07 s beside one).

    >>> with background():
    ...     pass
    """
    _BACKGROUND.on = True
    try:
        yield
    finally:
        _BACKGROUND.on = False


def exiting() -> bool:
    """Whether the interpreter is exiting (a build then fails quietly: nobody waits for it).

    >>> exiting()
    False
    """
    return _EXITING.is_set()


def has_room() -> bool:
    """Whether one more shared object fits under ``$SYMGRAD_MAX_PROGRAMS`` (as Numba's modules: loaded code is
    never freed, so a process compiling new functions forever would grow without bound); past it "auto" leaves
    the C tier out.

    >>> has_room() in (True, False)
    True
    """
    return len(_OPENED) < cache.max_programs()


def load(text: str, stem: str, others: Sequence[str] = (), quick: bool = False) -> ctypes.CDLL:
    """The loaded shared object of ``build(text, stem, others, quick)``; a cached one that does not load (cut
    short, say) is built again once; CompilerError where it still does not (a cache directory mounted noexec).

    >>> load("double one(void) { return 1.0; }", "doc").one is not None
    True
    """
    target = build(text, stem, others, quick)
    _OPENED.add(target)
    try:
        return ctypes.CDLL(str(target))
    except OSError:
        with contextlib.suppress(OSError):
            target.unlink()
    try:
        return ctypes.CDLL(str(build(text, stem, others, quick)))
    except OSError as e:
        raise CompilerError(f"the C compiler's shared object does not load ({e}): a cache directory mounted "
                            "noexec? ($SYMGRAD_CACHE_DIR)") from None


def _arrays(*arrays: np.ndarray, written: int = 1) -> None:
    """The kernels' arguments: C-contiguous float64 arrays, the last ``written`` of them writable (the C code
    would write a read-only buffer, even one over a bytes object)."""
    for k, a in enumerate(arrays):
        if not isinstance(a, np.ndarray) or a.dtype != np.float64 or not a.flags.c_contiguous:
            raise TypeError("symgrad: the c backend takes C-contiguous float64 arrays")
        if k >= len(arrays) - written and not a.flags.writeable:
            raise ValueError("symgrad: the c backend writes its results into a writable array")


@register("program", "c")
def c_kernels(program: Program, roots: Any = None) -> Kernels:
    """The C kernels of ``program``: built (or loaded) on first use."""
    sizes = len(program.inputs), len(program.params), program.n_out, program.returns_value
    return _kernels(kernel_source(program, "sg"), f"k{program.key[:16]}", sizes, None)


@register("loops", "c")
def c_loop_kernels(program: LoopProgram, roots: Any = None) -> Kernels:
    """The C kernels of the rolled ``program``: its loops as C (c_loops.py), built (or loaded) on first use."""
    parts = program.parts
    kernel, pieces = c_loops.loop_c_pieces(parts, _cores(), blas=True)
    sizes = parts.nx, parts.n_p, parts.n_out, program.returns_value
    text = c_loops.kernel_source(kernel, parts)
    tables = functools.cache(lambda: c_loops.table_values(parts))  # (parsed once, for either build)
    made = functools.partial(_kernels, text, f"l{program.key[:16]}", sizes, (kernel.work, kernel.iwork), pieces,
                             tables=tables)
    if lines(text, pieces) <= QUICK_LINES:
        return made()
    full = made()
    # (one file: its quick build takes one core, and the full one the other meanwhile, as a later tier: an
    # ODE's 350 lines in full 0.04-0.05 s sooner; more files would take the quick build's cores)
    beside = functools.partial(_built_beside, full) if not pieces and _cores() > 1 else None
    return dataclasses.replace(full, quick=made(quick=True, beside=beside))


def _cores() -> int:
    """The cores this process may run on (at most 8: files a kernel is split into)."""
    return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)


def _built_beside(kernels: Kernels) -> None:
    """Start building ``kernels`` on a thread as a later tier does (at the lowest priority), beside a first
    tier's build; a failure is the later tier's to report."""
    def build() -> None:
        with background(), contextlib.suppress(CompilerError):
            kernels.kernel("point")
    threading.Thread(target=build, name="symgrad-compile-c-beside", daemon=True).start()


def _kernels(text: str, stem: str, sizes: tuple[int, int, int, bool], scratch: tuple[int, int] | None,
             others: Sequence[str] = (), quick: bool = False, beside: Callable[[], None] | None = None,
             tables: Callable[[], list[np.ndarray]] = list) -> Kernels:
    """point / batch / total over the C file ``text``: a straight-line program's, or (``scratch``: the floats
    and integers of workspace each call takes) a loop kernel's, whose calls also take a status (an index
    out of bounds raises IndexError, as the Numba loops); ``quick``: built as ``build`` says; ``beside``:
    started before building these (a later tier's build, on the core this one leaves); ``tables``: the
    values its tables point at (c_loops.table_values)."""
    nx, n_p, nout, value = sizes
    extra = (_c, _c, _c) if scratch is not None else ()

    @functools.cache
    def library() -> Any:
        if "sg_set_blas" in text:
            c_blas.prefetch()
        first = scratch is not None and scratch[0] > FAULTED_MIN and not getattr(_BACKGROUND, "on", False)
        keep = faulted(scratch[0]) if first else None  # (the first call's workspace, while gcc runs)
        # (not where a workspace is faulted in meanwhile: that takes the core; least squares at 16392 in a
        # fresh process: its first result 0.09 -> 0.09-0.14 s)
        if beside is not None and keep is None and not getattr(_BACKGROUND, "on", False) \
                and not built(text, stem, others):
            beside()
        lib = load(text, stem, others, quick)
        if keep is not None:
            keep()
        if not hasattr(lib, "sg_point"):
            raise CompilerError(f"{compiler()[0]} built C without its names (sg_point): a C++ compiler? Set $CC "
                                "to a C compiler")
        lib.sg_point.argtypes, lib.sg_point.restype = (_c, _c, _c, *extra), _d
        lib.sg_batch.argtypes, lib.sg_batch.restype = (_c, _c, _ll, _c, _c, _ll, _ll, *extra), None
        lib.sg_total.argtypes, lib.sg_total.restype = (_c, _c, _c, _ll, _ll, _c, *extra), None
        if hasattr(lib, "sg_set_blas"):  # (its products call Numba's BLAS: c_blas.py)
            lib.sg_set_blas.argtypes, lib.sg_set_blas.restype = (_c, _c, _c), None
            lib.sg_set_blas(*c_blas.addresses())
        if hasattr(lib, "sg_set_tables"):
            with _LOCK:  # (one set of values an object, kept while it is loaded: for good)
                values = _TABLES.setdefault(lib._name, tables())
            lib.sg_set_tables.argtypes, lib.sg_set_tables.restype = (_c,), None
            lib.sg_set_tables((_c * len(values))(*(v.ctypes.data for v in values)))
        return lib

    def call(fn: Any, *args: Any) -> Any:
        if scratch is None:
            return fn(*args)
        work = take(max(scratch[0], 1))  # (the thread's spare workspace, as the Numba loops' point)
        iwork, status = np.empty(max(scratch[1], 1), np.int64), ctypes.c_int(0)
        try:
            result = fn(*args, work.ctypes.data, iwork.ctypes.data, ctypes.byref(status))
        finally:
            give(work)
        if status.value:
            raise IndexError("symgrad: an index read from a traced integer argument is out of bounds for the axis "
                             "it indexes")
        return result

    def point(x: np.ndarray, p: np.ndarray, out: np.ndarray) -> float:
        _arrays(x, p, out)
        if x.shape != (nx,) or p.shape != (n_p,) or out.shape != (nout,):
            raise ValueError("symgrad: wrong shape")
        return call(library().sg_point, x.ctypes.data, p.ctypes.data, out.ctypes.data)

    def batch(X: np.ndarray, P: np.ndarray, V: np.ndarray, OUT: np.ndarray, lo: int, hi: int) -> None:
        _arrays(X, P, V, OUT, written=2)
        n = X.shape[0]
        if (X.ndim != 2 or X.shape[1] != nx or P.ndim != 2 or P.shape[1] != n_p or P.shape[0] not in (n, 1)
                or V.shape != (n * value,) or OUT.shape != (n, nout) or not 0 <= lo <= hi <= n):
            raise ValueError("symgrad: wrong shape")
        values = V.ctypes.data if V.shape[0] else None
        call(library().sg_batch, X.ctypes.data, P.ctypes.data, P.shape[0], values, OUT.ctypes.data, lo, hi)

    def total(x: np.ndarray, P: np.ndarray, acc: np.ndarray, lo: int, hi: int) -> None:
        _arrays(x, P, acc)
        if x.shape != (nx,) or P.ndim != 2 or P.shape[1] != n_p or acc.shape != (nout + 1,) \
                or not 0 <= lo <= hi <= P.shape[0]:
            raise ValueError("symgrad: wrong shape")
        row = np.empty(nout)
        call(library().sg_total, x.ctypes.data, P.ctypes.data, acc.ctypes.data, lo, hi, row.ctypes.data)

    variants = {"point": point, "batch": batch, "total": total}
    return Kernels("c", lambda variant: (library(), variants[variant])[1], text,
                   on_disk=lambda: not quick and built(text, stem, others))
