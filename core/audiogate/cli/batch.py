"""``audiogate batch``: a manifest of clips in, Parquet shards out (docs/datasets.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Final, TextIO

from audiogate.argtypes import positive_int
from audiogate.cli.common import EXIT_OK, UsageError
from audiogate.host import FamilyHost

__all__ = ["BATCH_EPILOG", "add_parser", "run"]

BATCH_EPILOG: Final = """\
manifest rows (JSON Lines, or Parquet columns):
  {"id": "a1", "audio": "clips/a1.wav", "prompt": "Transcribe."}   under --media-path
  {"id": "a2", "audio": "https://host/a2.mp3"}                     with --allow-url-fetch
  {"id": "a3", "messages": [...OpenAI-style chat messages, as the server takes...]}

output: OUT/part-NNNNN.parquet (id, status, error_code, error, input_ids, tokens,
  frames, family, policy_fingerprint, features, masks, row_sha256; features and masks
  are one .npy file per clip) and OUT/_SUCCESS.json. A bad row is recorded, never
  fatal; a rerun with the same --out skips the rows already written. See
  docs/datasets.md.
"""


def add_parser(sub: Any) -> None:
    """Add ``batch`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "batch",
        help="prepare a dataset: a manifest of clips in, Parquet shards out",
        description="Prepare every row of a manifest with the model's exact preprocessing "
        "and write Parquet shards (local process pool or Ray Data).",
        epilog=BATCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", metavar="DIR", help="model directory (config files, tokenizer)")
    p.add_argument("--family", metavar="NAME", help="a family's pinned defaults instead")
    p.add_argument(
        "--manifest",
        metavar="FILE",
        required=True,
        help="JSON Lines (one row per line) or Parquet (.parquet) rows",
    )
    p.add_argument("--out", metavar="DIR", required=True, help="output directory (created)")
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: a process pool on this machine (default); ray: Ray Data (audiogate[ray])",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="processes (local) or actors (ray); default: this machine's cores",
    )
    p.add_argument(
        "--shard-rows",
        type=positive_int,
        default=128,
        metavar="N",
        help="rows per output shard (default 128)",
    )
    p.add_argument(
        "--media-path", metavar="ROOT", help="directory the rows' audio paths are confined to"
    )
    p.add_argument(
        "--allow-url-fetch", action="store_true", help="fetch http(s):// audio (public hosts)"
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="an existing Ray cluster (default: a local one started by ray.init())",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Run the batch and print its summary line."""
    from audiogate.batch import BatchOptions, GateSpec, run_batch

    if bool(args.family) == bool(args.model):
        raise UsageError("audiogate batch: give exactly one of --model DIR or --family NAME")
    if args.media_path is not None and not os.path.isdir(args.media_path):
        raise UsageError(f"audiogate batch: --media-path {args.media_path} is not a directory")
    if not os.path.isfile(args.manifest):
        raise UsageError(f"audiogate batch: --manifest {args.manifest} is not a file")
    if args.ray_address is not None and args.engine != "ray":
        raise UsageError("audiogate batch: --ray-address goes with --engine ray")
    spec = GateSpec(
        model_dir=args.model,
        family=args.family,
        media_root=args.media_path,
        allow_url_fetch=args.allow_url_fetch,
    )
    options = BatchOptions(
        gate=spec,
        manifest=args.manifest,
        out_dir=args.out,
        engine=args.engine,
        shard_rows=args.shard_rows,
        ray_address=args.ray_address,
        **({"workers": args.workers} if args.workers else {}),
    )
    summary = run_batch(options)
    errors = ", ".join(f"{code} {n}" for code, n in summary["errors_by_code"].items())
    out.write(
        f"{summary['rows']} rows: {summary['ok']} ok, {summary['errors']} errors"
        f"{f' ({errors})' if errors else ''}; this run {summary['rows_this_run']} rows in "
        f"{summary['seconds']:.1f} s ({summary['clips_per_s'] or 0:.1f} clips/s); wrote "
        f"{Path(args.out).resolve() / 'part-*.parquet'} and _SUCCESS.json\n"
    )
    return EXIT_OK


# --- sources (the source store; see docs/sources.md) ---------------------------------
