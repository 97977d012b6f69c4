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
