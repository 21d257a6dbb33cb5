"""``python -m audiogate``: the ``audiogate`` command."""

from __future__ import annotations

import sys

from audiogate.cli import main

if __name__ == "__main__":
    sys.exit(main())
