"""``audiogate policy``: the effective audio policy and where each value came from."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

import attrs

from audiogate.cli.common import EXIT_OK, UsageError, format_value, table
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy

__all__ = ["add_parser", "policy_payload", "resolve_policy", "run"]


def add_parser(sub: Any) -> None:
    """Add ``policy`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "policy", help="print the effective audio policy of a checkpoint or a family's defaults"
    )
    p.add_argument("model", nargs="?", metavar="MODEL_DIR", help="model directory with config.json")
    p.add_argument("--family", metavar="NAME", help="a family's pinned defaults instead")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run)


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


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Print the policy of ``MODEL_DIR`` or ``--family`` (a table, or JSON)."""
    if bool(args.family) == bool(args.model):
        raise UsageError("audiogate policy: give exactly one of MODEL_DIR or --family NAME")
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
            [field.name, format_value(getattr(policy, field.name)), payload["sources"][field.name]]
        )
    for option, value in policy.options.items():
        rows.append(
            [f"options.{option}", format_value(value), payload["sources"][f"options.{option}"]]
        )
    table(rows, out)
    return EXIT_OK
