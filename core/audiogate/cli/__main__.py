"""``python -m audiogate.cli``."""

from __future__ import annotations

import sys

from audiogate.cli.command import main

if __name__ == "__main__":
    sys.exit(main())
