"""The ``audiogate`` command line.

Exit codes: 0 success; 2 usage or bad input (bad audio, bad config); 3 a limit was
exceeded; 4 a plugin or internal error; 130 cancelled.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

import attrs

from audiogate import __version__
from audiogate.errors import (
    AudioGateError,
    LimitError,
    PluginError,
    PreprocessCancelled,
)
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy, dump_schema

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_LIMIT", "main"]

EXIT_OK: Final = 0
EXIT_BAD_INPUT: Final = 2
EXIT_LIMIT: Final = 3
EXIT_INTERNAL: Final = 4
EXIT_CANCELLED: Final = 130


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error (documented in the CLI reference)."""
    if isinstance(error, PreprocessCancelled):
        return EXIT_CANCELLED
    if isinstance(error, LimitError):
        return EXIT_LIMIT
    if isinstance(error, PluginError) or not isinstance(error, AudioGateError):
        return EXIT_INTERNAL
    return EXIT_BAD_INPUT


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
        if index == 0:
            out.write("  ".join("-" * width for width in widths) + "\n")


def _format_value(value: Any) -> str:
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


# --- families ------------------------------------------------------------------------


def _cmd_families(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
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
    _table(rows, out)
    return EXIT_OK


# --- policy --------------------------------------------------------------------------


def resolve_policy(args: argparse.Namespace, host: FamilyHost) -> AudioPolicy:
    """The policy named by ``--family`` or a model directory argument."""
    if getattr(args, "family", None):
        return host.default_policy(args.family)
    return host.load_model_policy(args.model)


def policy_payload(policy: AudioPolicy) -> dict[str, Any]:
    """The policy as JSON: values plus the source of every value."""
    values = policy.as_dict()
    sources: dict[str, str] = {}
    for name in values:
        if name == "options":
            continue
        sources[name] = policy.source_of(name).describe()
    for option in policy.options:
        sources[f"options.{option}"] = policy.source_of(f"options.{option}").describe()
    return {"family": policy.family, "values": values, "sources": sources}


def _cmd_policy(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    if bool(args.family) == bool(args.model):
        raise SystemExit("audiogate policy: give exactly one of MODEL_DIR or --family NAME")
    policy = resolve_policy(args, host)
    payload = policy_payload(policy)
    if args.json:
        out.write(json.dumps(payload, indent=2) + "\n")
        return EXIT_OK
    origin = args.model or f"--family {args.family}"
    out.write(f"audio policy of {origin}: family {policy.family} ({policy.variant})\n\n")
    rows = [["setting", "value", "source"]]
    for field in attrs.fields(AudioPolicy):
        if field.name in {"sources", "options", "family"}:
            continue
        rows.append(
            [field.name, _format_value(getattr(policy, field.name)), payload["sources"][field.name]]
        )
    for option, value in policy.options.items():
        rows.append(
            [f"options.{option}", _format_value(value), payload["sources"][f"options.{option}"]]
        )
    _table(rows, out)
    return EXIT_OK


# --- schema --------------------------------------------------------------------------


def _cmd_schema(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    out.write(dump_schema(host.family(args.family).spec.schema))
    return EXIT_OK


# --- parser --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to generate the CLI reference)."""
    parser = argparse.ArgumentParser(
        prog="audiogate",
        description="Strict, budgeted audio input preprocessing for multimodal LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"audiogate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("families", help="list installed audio families")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_families)

    p = sub.add_parser(
        "policy", help="print the effective audio policy of a checkpoint or a family's defaults"
    )
    p.add_argument("model", nargs="?", metavar="MODEL_DIR", help="model directory with config.json")
    p.add_argument("--family", metavar="NAME", help="a family's pinned defaults instead")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_policy)

    p = sub.add_parser("schema", help="print a family's JSON schema of recognized config keys")
    p.add_argument("family", metavar="FAMILY")
    p.set_defaults(handler=_cmd_schema)

    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code."""
    out = stdout or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        host = create_host()
        code: int = args.handler(args, host, out)
        return code
    except AudioGateError as exc:
        sys.stderr.write(f"audiogate: error: {exc}\n")
        return exit_code_for(exc)


if __name__ == "__main__":
    sys.exit(main())
