"""``audiogate families``: the installed audio families."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from audiogate.cli.common import EXIT_OK, table
from audiogate.host import FamilyHost

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``families`` to the subcommands ``sub``."""
    p = sub.add_parser("families", help="list installed audio families")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """List the families (a table, or JSON with ``--json``)."""
    families = host.families
    if args.json:
        payload = [
            {
                "name": name,
                "distribution": fam.distribution,
                "version": fam.distribution_version or fam.spec.version,
                "model_types": list(fam.spec.model_types),
                "revision": fam.spec.revision,
                "summary": fam.spec.summary,
            }
            for name, fam in families.items()
        ]
        out.write(json.dumps(payload, indent=2) + "\n")
        return EXIT_OK
    if not families:
        out.write("no audio families installed\n")
        return EXIT_OK
    rows = [["family", "distribution", "version", "model types", "pinned revision"]]
    for name, fam in families.items():
        rows.append(
            [
                name,
                fam.distribution,
                fam.distribution_version or fam.spec.version,
                ", ".join(fam.spec.model_types),
                fam.spec.revision,
            ]
        )
    table(rows, out)
    return EXIT_OK
