"""Test-wide setup: compiled kernels go to a cache inside the checkout, not the user's."""

import os
from pathlib import Path

os.environ.setdefault("SYMGRAD_CACHE_DIR", str(Path(__file__).parent / ".pytest_cache" / "symgrad-kernels"))
# A test that asks for Numba gets Numba: past the per-process cap (256 generated modules, and as many C shared
# objects, by default) new programs would run on the VM, and a numba-parametrised test late in a worker would
# test the VM instead.
os.environ.setdefault("SYMGRAD_MAX_PROGRAMS", "4096")
# Under "auto" loop programs stay on the VM's or the C compiler's kernels: Numba's, built in the background
# for each, cost seconds a test (Numba is tested where a test asks for it; the tiers' own tests turn it on).
os.environ.setdefault("SYMGRAD_NUMBA_TIER", "0")
collect_ignore = ["tests/data"]  # (scripts that made the tests' data, run by hand with a GradBench checkout)


import pytest  # noqa: E402 - after the cache setting, which must precede symgrad's import


@pytest.fixture(autouse=True)
def _background_compiles_end_with_their_test():
    """Tiered compilation compiles on a background thread: those not started when the test ends are
    dropped (their programs run on the VM: nobody calls them again), the one under way finishes inside
    the test that started it (not while a later test moves the cache folder)."""
    yield
    from symgrad.compile import tiers

    tiers.drop_background_compiles()
    tiers.compiles_done()


@pytest.fixture
def numba_tier(monkeypatch):
    """Numba's tier under "auto", as users have it (the tiers' own tests)."""
    from symgrad.compile import tiers

    monkeypatch.setattr(tiers, "NUMBA_TIER", True)
