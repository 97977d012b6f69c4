"""``python -m symgrad.fuzz``: the command line (``symgrad.fuzz.cli.main``)."""

import sys

from symgrad.fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
