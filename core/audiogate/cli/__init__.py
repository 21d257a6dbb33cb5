"""The ``audiogate`` command line.

Exit codes: 0 success (``serve``: a graceful shutdown on SIGINT or SIGTERM); 2 usage or
bad input (bad audio, bad config, an output file that cannot be written, a server address
that cannot be bound); 3 a limit was exceeded; 4 a plugin or internal error; 130 cancelled
(Ctrl-C). In ``prepare`` a first Ctrl-C stops the work at its next checkpoint (within a
block of decode, resample or features), so it is never lost; a second stops it at once.
"""

from __future__ import annotations

# One module per subcommand (families, policy, prepare, schema, batch, sources, serve);
# command.py builds the parser and runs one, common.py holds the exit codes.
from audiogate.cli.command import build_parser, main
from audiogate.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_INTERNAL,
    EXIT_LIMIT,
    EXIT_OK,
    exit_code_for,
)
from audiogate.cli.policy import policy_payload, resolve_policy
from audiogate.cli.prepare import STDIN, fold_repeats, print_summary

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CANCELLED",
    "EXIT_INTERNAL",
    "EXIT_LIMIT",
    "EXIT_OK",
    "STDIN",
    "build_parser",
    "exit_code_for",
    "fold_repeats",
    "main",
    "policy_payload",
    "print_summary",
    "resolve_policy",
]
