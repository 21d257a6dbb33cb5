"""The ``audiogate`` command: its parser, and running a subcommand with the exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from audiogate import __version__
from audiogate.cli import batch, families, policy, prepare, schema, serve, sources
from audiogate.cli.common import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_OK, UsageError, exit_code_for
from audiogate.errors import AudioGateError
from audiogate.host import create_host

__all__ = ["build_parser", "main"]


def build_parser(*, serve_arguments: bool = True) -> argparse.ArgumentParser:
    """The argument parser (also used to generate the CLI reference).

    :param serve_arguments: give ``serve`` its arguments (``False``: its name and help
        only, for a command line that runs another command).
    """
    parser = argparse.ArgumentParser(
        prog="audiogate",
        description="Strict, budgeted audio input preprocessing for multimodal LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"audiogate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    families.add_parser(sub)
    policy.add_parser(sub)
    prepare.add_parser(sub)
    schema.add_parser(sub)
    batch.add_parser(sub)
    sources.add_parser(sub)
    serve.add_parser(sub, arguments=serve_arguments)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code."""
    out = stdout or sys.stdout
    # transformers advises at import that PyTorch is missing; no command uses torch (only
    # the tokenizers), so the advice is noise here. Any non-empty value silences it; set
    # the variable to an empty value to see it.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    words = sys.argv[1:] if argv is None else list(argv)
    command = next((word for word in words if not word.startswith("-")), None)
    args = build_parser(serve_arguments=command in {None, "serve"}).parse_args(words)
    try:
        host = create_host()
        code: int = args.handler(args, host, out)
        return code
    except AudioGateError as exc:
        sys.stderr.write(f"audiogate: error: {exc}\n")
        return exit_code_for(exc)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        # Ctrl-C. The work ran in this thread (AudioGate.prepare without a worker), so it
        # has stopped; an acquisition on its own event loop was cancelled by asyncio.run.
        sys.stderr.write("audiogate: cancelled (interrupted)\n")
        return EXIT_CANCELLED
    except BrokenPipeError:
        # The reader went away (``audiogate policy ... | head``): stop quietly, and point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        if stdout is None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
