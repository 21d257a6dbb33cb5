"""``argparse`` value types shared by the CLI's commands and ``audiogate serve``'s options."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """``text`` as an integer >= 1, or the ``argparse`` error that names it."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value
