"""What every subcommand shares: exit codes, the usage error and table printing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TextIO

from audiogate.errors import (
    AudioGateError,
    LimitError,
    PluginError,
    PreprocessCancelled,
    SizeOverflowError,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CANCELLED",
    "EXIT_INTERNAL",
    "EXIT_LIMIT",
    "EXIT_OK",
    "UsageError",
    "exit_code_for",
    "format_value",
    "table",
]

EXIT_OK: Final = 0
EXIT_BAD_INPUT: Final = 2
EXIT_LIMIT: Final = 3
EXIT_INTERNAL: Final = 4
EXIT_CANCELLED: Final = 130


class UsageError(Exception):
    """A command line that cannot run (exit 2, like argparse's own usage errors)."""


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error (documented in the CLI reference)."""
    if isinstance(error, PreprocessCancelled):
        return EXIT_CANCELLED
    if isinstance(error, LimitError | SizeOverflowError):
        return EXIT_LIMIT
    if isinstance(error, PluginError) or not isinstance(error, AudioGateError):
        return EXIT_INTERNAL
    return EXIT_BAD_INPUT


def table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """``rows`` as aligned columns, the first row a header underlined with dashes."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
        if index == 0:
            out.write("  ".join("-" * width for width in widths) + "\n")


def format_value(value: Any) -> str:
    """A policy value as a table shows it (a tuple joined, a MiB multiple in MiB)."""
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value) if value else "()"
    if value is None:
        return "-"
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1 << 20
        and value % (1 << 20) == 0
    ):
        return f"{value} ({value >> 20} MiB)"
    return str(value)
