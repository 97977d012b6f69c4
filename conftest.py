"""Test-wide setup: compiled kernels go to a cache inside the checkout, not the user's."""

import os
from pathlib import Path

os.environ.setdefault("SYMGRAD_CACHE_DIR", str(Path(__file__).parent / ".pytest_cache" / "symgrad-kernels"))
