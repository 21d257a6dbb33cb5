"""``audiogate sources``: add, show, list, retire sources in a store, or repair it
(docs/sources.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final, TextIO

from audiogate.cli.common import EXIT_OK, UsageError
from audiogate.host import FamilyHost

__all__ = ["SOURCES_EPILOG", "add_parser", "run"]

SOURCES_EPILOG: Final = """\
The store is the directory `audiogate serve --store DIR` uses: sources added here are
referenced by {"type": "audio_ref", "audio_ref": {"sha256": ...}} parts (and by
[audio:<sha256>] in Qwen2-Audio prompts). Each subcommand prints JSON; opening the store
recovers it (unfinished uploads removed, missing blobs marked lost; --verify also checks
every digest) and prints what it repaired on stderr. A damaged index refuses to open:
`audiogate sources repair --store DIR` rebuilds it from the blobs. See docs/sources.md.
"""


def add_parser(sub: Any) -> None:
    """Add ``sources`` and its actions to the subcommands ``sub``."""
    p = sub.add_parser(
        "sources",
        help="add, show, list or retire sources in a source store",
        description="Manage the sources of a source store directory.",
        epilog=SOURCES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="DIR", required=True, help="the store directory")
    common.add_argument(
        "--owner", default="anonymous", help="act as this owner (default: anonymous)"
    )
    common.add_argument("--verify", action="store_true", help="check every digest on open")
    a = actions.add_parser(
        "add",
        parents=[common],
        help="admit an audio file under a model's policy and store it",
    )
    a.add_argument("audio", metavar="FILE", help="the audio file (any accepted format)")
    a.add_argument("--model", metavar="DIR", help="admit under this checkpoint's policy")
    a.add_argument("--family", metavar="NAME", help="admit under a family's pinned policy")
    a.add_argument("--scope", choices=("private", "shared"), default="private")
    s = actions.add_parser("show", parents=[common], help="print one source's record")
    s.add_argument("sha256", metavar="SHA256")
    ls = actions.add_parser("list", parents=[common], help="list the owner's sources")
    ls.add_argument("--all", action="store_true", help="include retired sources (history)")
    r = actions.add_parser("retire", parents=[common], help="retire a source (its history is kept)")
    r.add_argument("sha256", metavar="SHA256")
    fix = actions.add_parser(
        "repair",
        help="rebuild a damaged index from the blobs; quarantine what nothing accounts for",
        description=(
            "Open the store with every digest verified. A damaged index is renamed "
            "(index.sqlite3.damaged-<ns>) and rebuilt from the manifests kept beside the "
            "blobs; a blob nothing accounts for is moved to quarantine/, never deleted."
        ),
    )
    fix.add_argument("--store", metavar="DIR", required=True, help="the store directory")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Open the store, run the action, print its JSON."""
    from audiogate.store import SourceStore, check_digest

    if args.sources_command != "add":
        try:
            check_digest(getattr(args, "sha256", "0" * 64))
        except ValueError as exc:
            raise UsageError(f"audiogate sources {args.sources_command}: {exc}") from None
    if args.sources_command == "repair":
        from audiogate.store.repair import repair_store

        out.write(json.dumps(repair_store(args.store).as_dict(), indent=2) + "\n")
        return EXIT_OK
    if args.sources_command == "add" and bool(args.family) == bool(args.model):
        raise UsageError("audiogate sources add: give exactly one of --model DIR or --family NAME")
    store = SourceStore.open(args.store, verify=args.verify)
    try:
        report = store.recovery
        if (
            report.unfinished_removed
            or report.orphans_removed
            or report.lost
            or report.resumed
            or report.rebuilt
            or report.quarantined
        ):
            print(f"recovered {args.store}: {json.dumps(report.as_dict())}", file=sys.stderr)
        if args.sources_command == "add":
            payload: Any = _source_add(args, host, store)
        elif args.sources_command == "show":
            payload = store.get(args.sha256, owner=args.owner).as_dict()
        elif args.sources_command == "list":
            records = store.list(args.owner, include_retired=args.all)
            payload = [record.as_dict() for record in records]
        else:
            payload = store.retire(args.sha256, owner=args.owner).as_dict()
    finally:
        store.close()
    out.write(json.dumps(payload, indent=2) + "\n")
    return EXIT_OK


def _source_add(args: argparse.Namespace, host: FamilyHost, store: Any) -> dict[str, Any]:
    from audiogate.acquire import AcquisitionPolicy, acquire_paths
    from audiogate.api import AudioGate
    from audiogate.decode.geometry import AUTO

    if args.model:
        gate = AudioGate.from_model_dir(args.model, host=host, store=store)
    else:
        gate = AudioGate.from_family(args.family, host=host, store=store)
    acquisition = AcquisitionPolicy().narrowed(gate.policy)
    (clip,) = acquire_paths([args.audio], policy=acquisition, source_format=AUTO)
    added = gate.add_source(
        clip.data, owner=args.owner, scope=args.scope, source_format=clip.source_format
    )
    return {**added.record.as_dict(), "created": added.created}


# --- serve (the reference HTTP server; see docs/server.md) ----------------------------
