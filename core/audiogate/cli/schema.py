"""``audiogate schema``: a family's JSON schema of recognized config keys."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from audiogate.cli.common import EXIT_OK
from audiogate.host import FamilyHost
from audiogate.policy import dump_schema

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``schema`` to the subcommands ``sub``."""
    p = sub.add_parser("schema", help="print a family's JSON schema of recognized config keys")
    p.add_argument("family", metavar="FAMILY")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Print the schema of ``FAMILY``."""
    out.write(dump_schema(host.family(args.family).spec.schema))
    return EXIT_OK
