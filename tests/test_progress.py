"""Progress bars."""


import numpy as np

import symgrad as sg

x, y, z = sg.symbols("x y z")


def test_progress_bars_on_a_terminal_only(capsys, monkeypatch):
    from symgrad.util import progress

    v = sg.vector("v", 3000)
    w = v[np.random.default_rng(0).permutation(3000)]  # (alike terms at no constant step: not rolled)
    f = np.sum(np.sin(w[1:] * w[:-1]))
    monkeypatch.setattr(progress, "MIN_TOTAL", 1000)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    sg.value_and_grad(f, v, backend="vm")  # stderr is captured, not a terminal: silent
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SYMGRAD_PROGRESS", "1")
    sg.value_and_grad(f, v, backend="vm")
    err = capsys.readouterr().err
    assert "gradient:" in err and "lowering:" in err and "nodes/s" in err
    monkeypatch.setenv("SYMGRAD_PROGRESS", "0")
    sg.value_and_grad(f, v, backend="vm")
    assert capsys.readouterr().err == ""


class _Clock:
    """A fake monotonic clock the test moves (no sleeping)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _phases(monkeypatch, forced):
    """progress with a fake clock, a fresh status line, no ticker redraws; SYMGRAD_PROGRESS=forced."""
    from symgrad.util import progress

    clock = _Clock()
    monkeypatch.setattr(progress, "clock", clock)
    monkeypatch.setattr(progress, "_line", progress._Line())
    monkeypatch.setattr(progress, "TICK_S", 3600.0)
    if forced is None:
        monkeypatch.delenv("SYMGRAD_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("SYMGRAD_PROGRESS", forced)
    return progress, clock


def _solve(progress, clock):
    """A phase noting each step (IPOPT's iterations), the clock moved between steps."""
    with progress.phase("IPOPT") as note:
        for k, dt in enumerate([0.0, 1.0, 1.5, 0.2, 1.0]):
            clock.now += dt
            note(f"iteration {k}")


def test_a_long_phase_reports_after_two_seconds_rate_limited(capsys, monkeypatch):
    progress, clock = _phases(monkeypatch, "1")
    _solve(progress, clock)  # (0, 1 s: too early; 2.5 s: shown; 2.7 s: too soon after; 3.7 s: shown)
    assert capsys.readouterr().err.splitlines() == ["symgrad 2 s: IPOPT: iteration 2",
                                                    "symgrad 4 s: IPOPT: iteration 4"]
    with progress.phase("compiling"):  # (within GAP_S of the last: the run of work goes on, shown at once)
        clock.now += 1.0
        progress._line.draw()  # (the ticker's redraw: a compile notes nothing itself)
    assert capsys.readouterr().err == "symgrad 5 s: compiling\n"


def test_progress_is_silent_off_a_terminal_or_when_turned_off(capsys, monkeypatch):
    for forced in (None, "0"):  # (pytest's captured stderr is no terminal)
        progress, clock = _phases(monkeypatch, forced)
        _solve(progress, clock)
        with progress.progress(10 ** 6, "gradient") as update:
            clock.now += 10.0
            update(progress.CHUNK)
        assert capsys.readouterr().err == ""


def test_on_a_terminal_the_line_is_overwritten_and_cleared(monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    progress, clock = _phases(monkeypatch, None)
    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress.phase("tracing"), progress.progress(10 ** 6, "gradient") as update:
        clock.now += 3.0
        update(progress.CHUNK)
        clock.now += 1.0
        update(progress.CHUNK)
    out = sys.stderr.getvalue()
    first = "symgrad 3 s: tracing > gradient: 4,096/1,000,000 nodes (1,365 nodes/s)"
    second = "symgrad 4 s: tracing > gradient: 8,192/1,000,000 nodes (2,048 nodes/s)"
    assert out == f"\r{first}\r{second.ljust(len(first))}\r{' ' * len(second)}\r"


def test_ipopt_iterations_are_reported(capsys, monkeypatch):
    progress, _ = _phases(monkeypatch, "1")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    sg.minimize(lambda v: np.sum((v - 1.0) ** 2), np.zeros(3), method="ipopt")
    err = capsys.readouterr().err
    assert "IPOPT: iteration 0, objective 3.000000e+00, infeasibility 0.0e+00" in err
