"""The ``audiogate`` command line.

Exit codes: 0 success (``serve``: a graceful shutdown on SIGINT or SIGTERM); 2 usage or
bad input (bad audio, bad config, an output file that cannot be written, a server address
that cannot be bound); 3 a limit was exceeded; 4 a plugin or internal error; 130 cancelled
(Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import attrs

from audiogate import __version__
from audiogate.argtypes import positive_int
from audiogate.errors import (
    AudioGateError,
    LimitError,
    PluginError,
    PreprocessCancelled,
    SizeOverflowError,
)
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy, dump_schema

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_LIMIT", "main"]

EXIT_OK: Final = 0
EXIT_BAD_INPUT: Final = 2
EXIT_LIMIT: Final = 3
EXIT_INTERNAL: Final = 4
EXIT_CANCELLED: Final = 130


class _UsageError(Exception):
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
        raise _UsageError("audiogate policy: give exactly one of MODEL_DIR or --family NAME")
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


# --- prepare -------------------------------------------------------------------------

_SUMMARY_COLUMNS = (
    ("clip", "ordinal"),
    ("source Hz", "source_rate"),
    ("ch", "channels"),
    ("source samples", "source_samples"),
    ("duration s", "duration_us"),
    ("encoded B", "encoded_bytes"),
    ("normalized", "normalized_samples"),
    ("effective Hz", "effective_rate"),
    ("frames", "frames"),
    ("tokens", "tokens"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "duration_us":
        return f"{value / 1_000_000:.3f}"
    return str(value)


def print_summary(summary: dict[str, Any], out: TextIO) -> None:
    """The family preparation summary as a readable table."""
    out.write(f"family {summary['family']} ({summary['policy_source']})\n\n")
    rows = [[title for title, _ in _SUMMARY_COLUMNS]]
    for clip in summary["clips"]:
        rows.append([_cell(key, clip.get(key)) for _, key in _SUMMARY_COLUMNS])
    totals = summary["totals"]
    rows.append(
        [
            "total",
            "",
            "",
            _cell("source_samples", totals.get("source_samples")),
            _cell("duration_us", totals.get("duration_us")),
            _cell("encoded_bytes", totals.get("encoded_bytes")),
            _cell("normalized_samples", totals.get("normalized_samples")),
            "",
            _cell("frames", totals.get("frames")),
            _cell("tokens", totals.get("tokens")),
        ]
    )
    _table(rows, out)
    for clip in summary["clips"]:
        if clip.get("truncated"):
            kept, received = clip["processed_duration_us"] / 1e6, clip["duration_us"] / 1e6
            out.write(f"clip {clip['ordinal']}: truncated to {kept:.3f} s of {received:.3f} s\n")
    if "prefill_positions" in totals:
        out.write(f"\nprefill positions: {totals['prefill_positions']}\n")


class _ProgressBar:
    """A one-line progress bar on a terminal (stderr), silent otherwise."""

    def __init__(self, stream: TextIO, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.drawn = False

    def clear(self) -> None:
        """Erase a bar left on the line (the work failed or was interrupted)."""
        if self.drawn:
            self("done", 0, 0)

    def __call__(self, stage: str, index: int, count: int) -> None:
        if not self.enabled:
            return
        if stage == "done":
            self.stream.write("\r" + " " * 60 + "\r")
            self.drawn = False
        else:
            self.drawn = True
            width = 24
            filled = int(width * index / max(count, 1))
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r[{bar}] clip {index + 1}/{count}: {stage:<10}")
        self.stream.flush()


def _output_path(text: str) -> Path:
    """The file ``--out`` names: ``text``, with ``.npz`` appended when it lacks the suffix
    (as ``np.savez`` does), checked before any work.

    :raises _UsageError: ``text`` names a directory, or the file's directory is missing or
        cannot be written to.
    """
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        raise _UsageError(f"audiogate prepare: cannot write {text}: it is a directory")
    path = Path(text if text.endswith(".npz") else f"{text}.npz")
    if path.is_dir():
        raise _UsageError(f"audiogate prepare: cannot write {path}: it is a directory")
    parent = path.parent
    if not parent.is_dir():
        problem = "is not a directory" if parent.exists() else "does not exist"
        raise _UsageError(f"audiogate prepare: cannot write {path}: {parent} {problem}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _UsageError(f"audiogate prepare: cannot write {path}: permission denied")
    return path


def _write_npz(path: Path, arrays: dict[str, Any]) -> None:
    """Write ``arrays`` as an .npz archive to exactly ``path``, through a temporary file
    beside it: a write that fails or is interrupted leaves no partial file and keeps a
    file already there."""
    import numpy as np

    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with partial.open("wb") as file:
            np.savez(file, **arrays)
        os.replace(partial, path)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _UsageError(
                f"audiogate prepare: cannot write {path}: {exc.strerror or exc}"
            ) from None
        raise


def _cmd_prepare(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    import numpy as np

    from audiogate.acquire import AcquisitionPolicy, acquire_bytes, acquire_paths
    from audiogate.api import AudioGate
    from audiogate.decode.geometry import AUTO

    if bool(args.family) == bool(args.model):
        raise _UsageError("audiogate prepare: give exactly one of --model DIR or --family NAME")
    out_path = _output_path(args.out) if args.out else None
    if args.model:
        gate = AudioGate.from_model_dir(args.model, host=host)
    else:
        gate = AudioGate.from_family(args.family, host=host)
    acquisition = AcquisitionPolicy().narrowed(gate.policy)
    if STDIN in args.audio:
        clips = acquire_bytes(
            [_read_stdin(args.audio, acquisition.max_bytes_per_clip)],
            policy=acquisition,
            source_format=AUTO,
        )
    else:
        # Every accepted container, recognised from the bytes (docs/formats.md).
        clips = acquire_paths(args.audio, policy=acquisition, source_format=AUTO)
    seconds = sum(len(c.data) for c in clips) / 32_000  # rough: 16 kHz PCM16 mono
    bar = _ProgressBar(sys.stderr, enabled=sys.stderr.isatty() and seconds > 5)
    prompt = args.prompt
    has_template = gate.tokenizer is not None and getattr(gate.tokenizer, "chat_template", None)
    if prompt is not None and has_template:
        # The checkpoint's chat turn around the prompt; the family's placeholders in it
        # place the clips, or the family inserts them where its processor would.
        prompt = gate.chat_prompt(prompt)
    try:
        result = gate.prepare(prompt=prompt, clips=clips, progress=bar)
    finally:
        bar.clear()
    summary = result.summary(policy_source=gate.policy_source)
    # The file first: a command that fails prints no result.
    if out_path is not None:
        arrays: dict[str, Any] = {}
        for clip, features, mask in zip(
            result.batch.clips if result.batch else (), result.features, result.masks, strict=True
        ):
            arrays[f"features_{clip.ordinal}"] = np.asarray(features)
            if mask is not None:
                arrays[f"mask_{clip.ordinal}"] = np.asarray(mask)
        if result.input_ids:
            arrays["input_ids"] = np.asarray(result.input_ids, dtype=np.int64)
        _write_npz(out_path, arrays)
    if args.json:
        out.write(json.dumps(summary, indent=2) + "\n")
    else:
        print_summary(summary, out)
        if result.text is not None and args.show_prompt:
            out.write(f"\nexpanded prompt:\n{fold_repeats(result.text)}\n")
    if out_path is not None:
        # Where it went, as an absolute path; on stderr with --json (stdout stays JSON).
        (sys.stderr if args.json else out).write(f"wrote {out_path.resolve()}\n")
    return EXIT_OK


#: ``--audio -``: the clip comes from standard input.
STDIN: Final = "-"

_REPEATED_TOKEN: Final = re.compile(r"(<[^<>\s]{1,64}>)\1{2,}")


def fold_repeats(text: str) -> str:
    """``text`` with each run of three or more of the same ``<token>`` written once with
    its count: ``<audio_soft_token> x188`` (for ``--show-prompt``)."""
    return _REPEATED_TOKEN.sub(
        lambda m: f"{m.group(1)} x{len(m.group(0)) // len(m.group(1))}", text
    )


def _read_stdin(audio: Sequence[str], max_bytes: int) -> bytes:
    """The clip on standard input, at most ``max_bytes + 1`` bytes read (one more than the
    cap: the acquisition refuses it by size instead of reading on).

    :raises _UsageError: ``-`` is combined with files or given twice, or stdin is a terminal.
    """
    if list(audio) != [STDIN]:
        raise _UsageError(
            "audiogate prepare: --audio - (standard input) is one clip: give it alone, "
            f"not with {len(audio) - 1} other --audio"
        )
    if sys.stdin is None or sys.stdin.isatty():
        raise _UsageError(
            "audiogate prepare: --audio - reads an audio file from standard input: pipe one in"
        )
    return sys.stdin.buffer.read(max_bytes + 1)


#: What ``prepare --help`` says about formats (docs/formats.md has the details).
PREPARE_EPILOG: Final = """\
accepted formats (recognised from the bytes, whatever the file name):
  WAV: PCM 8 (unsigned), 16, 24, 32-bit, float32, float64, mu-law, A-law;
       plain and WAVE_FORMAT_EXTENSIBLE headers, RF64
  AIFF, AIFF-C, FLAC, MP3, Ogg Vorbis, Ogg Opus,
  WebM/Matroska Opus (browser recordings)             with audiogate[codecs]
  MP4/M4A AAC, WebM/Matroska Vorbis                   with audiogate[codecs-ffmpeg]
                                                      (PyAV; its wheels bundle GPL code)
  compressed formats decode in capped child processes; see docs/formats.md.
"""


# --- batch (datasets; see docs/datasets.md) ------------------------------------------


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


def _add_batch_parser(sub: Any) -> None:
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
    p.set_defaults(handler=_cmd_batch)


def _cmd_batch(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    from audiogate.batch import BatchOptions, GateSpec, run_batch

    if bool(args.family) == bool(args.model):
        raise _UsageError("audiogate batch: give exactly one of --model DIR or --family NAME")
    if args.media_path is not None and not os.path.isdir(args.media_path):
        raise _UsageError(f"audiogate batch: --media-path {args.media_path} is not a directory")
    if not os.path.isfile(args.manifest):
        raise _UsageError(f"audiogate batch: --manifest {args.manifest} is not a file")
    if args.ray_address is not None and args.engine != "ray":
        raise _UsageError("audiogate batch: --ray-address goes with --engine ray")
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


SOURCES_EPILOG: Final = """\
The store is the directory `audiogate serve --store DIR` uses: sources added here are
referenced by {"type": "audio_ref", "audio_ref": {"sha256": ...}} parts (and by
[audio:<sha256>] in Qwen2-Audio prompts). Each subcommand prints JSON; opening the store
recovers it (unfinished uploads removed, missing blobs marked lost; --verify also checks
every digest) and prints what it repaired on stderr. See docs/sources.md.
"""


def _add_sources_parser(sub: Any) -> None:
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
    p.set_defaults(handler=_cmd_sources)


def _cmd_sources(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    from audiogate.store import SourceStore, check_digest

    if args.sources_command != "add":
        try:
            check_digest(getattr(args, "sha256", "0" * 64))
        except ValueError as exc:
            raise _UsageError(f"audiogate sources {args.sources_command}: {exc}") from None
    elif bool(args.family) == bool(args.model):
        raise _UsageError("audiogate sources add: give exactly one of --model DIR or --family NAME")
    store = SourceStore.open(args.store, verify=args.verify)
    try:
        report = store.recovery
        if report.unfinished_removed or report.orphans_removed or report.lost or report.resumed:
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


SERVE_EPILOG: Final = """\
endpoints:
  POST /v1/audio/prepare   chat messages with audio in; token ids and features out
  /v1/audio/sources        with --store DIR: upload (POST), list, show, retire (DELETE)
  GET  /metrics            Prometheus metrics
  GET  /healthz            200 while the worker runs, 503 once it is closed

request body (JSON): OpenAI-style chat messages with audio parts
  {"model": "optional name",
   "messages": [{"role": "user", "content": [
       {"type": "input_audio", "input_audio": {"data": "<base64 WAV>", "format": "wav"}},
       {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,..."}},
       {"type": "text", "text": "What is said?"}]}],
   "audiogate": {"feature_format": "npy", "return_features": true}}
  audio_url also takes file:// URLs (under --media-path) and http(s):// (--allow-url-fetch).

answer: {"object": "audiogate.prepared", "family", "input_ids", "prefill_positions",
  "text", "audio_spans", "clips", "totals", "features"}; an error is
  {"error": {"type", "reason", "message", "clip_index", ...}} with a 4xx/5xx status.
  See docs/server.md.
"""


def _add_serve_parser(sub: Any, *, arguments: bool) -> None:
    p = sub.add_parser(
        "serve",
        help="serve POST /v1/audio/prepare, /metrics and /healthz (Starlette on uvicorn)",
        description="Serve the checkpoint's audio preparation over HTTP.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if arguments:
        # Its defaults come from the server's and the worker's limits, whose modules import
        # prometheus_client and the acquisition (httpx): only for ``serve`` itself.
        from audiogate.server.options import add_serve_arguments

        add_serve_arguments(p)
        ray = p.add_argument_group("Ray Serve (--engine ray; docs/ray.md)")
        ray.add_argument(
            "--engine",
            choices=["uvicorn", "ray"],
            default="uvicorn",
            help="uvicorn: one process (default); ray: replicas on Ray Serve (audiogate[ray])",
        )
        ray.add_argument(
            "--num-replicas", type=positive_int, metavar="N", help="fixed replicas (default 1)"
        )
        ray.add_argument("--min-replicas", type=int, metavar="N", help="autoscale from N replicas")
        ray.add_argument(
            "--max-replicas", type=positive_int, metavar="N", help="autoscale up to N replicas"
        )
        ray.add_argument(
            "--ray-address",
            metavar="ADDRESS",
            help="an existing Ray cluster (default: a local one started by ray.init())",
        )
    p.set_defaults(handler=_cmd_serve)


def _cmd_serve(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    from audiogate.server.options import serve_options

    ray_only = [
        flag
        for flag, value in (
            ("--num-replicas", args.num_replicas),
            ("--min-replicas", args.min_replicas),
            ("--max-replicas", args.max_replicas),
            ("--ray-address", args.ray_address),
        )
        if value is not None
    ]
    if args.engine != "ray":
        if ray_only:
            raise _UsageError(f"audiogate serve: {ray_only[0]} goes with --engine ray")
        from audiogate.server.run import serve

        return serve(serve_options(args), host=host)
    autoscaling = None
    if args.min_replicas is not None or args.max_replicas is not None:
        if args.num_replicas is not None:
            raise _UsageError(
                "audiogate serve: give --num-replicas or --min/--max-replicas, not both"
            )
        low = args.min_replicas if args.min_replicas is not None else 1
        autoscaling = {"min_replicas": low, "max_replicas": args.max_replicas or max(low, 1)}
    from audiogate.integrations.ray_serve import serve_on_ray

    return serve_on_ray(
        serve_options(args),
        num_replicas=args.num_replicas,
        autoscaling_config=autoscaling,
        address=args.ray_address,
    )


# --- parser --------------------------------------------------------------------------


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

    p = sub.add_parser(
        "prepare",
        help="prepare audio files for a model: decode, resample, features, prompt expansion",
        description="Prepare audio files for a model: decode, resample, features, prompt "
        "expansion.",
        epilog=PREPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", metavar="DIR", help="model directory (config files, tokenizer)")
    p.add_argument("--family", metavar="NAME", help="a family's pinned defaults instead")
    p.add_argument(
        "--audio",
        metavar="FILE",
        action="append",
        required=True,
        help="an audio file in any accepted format (repeatable; recognised from its bytes); "
        "- reads one clip from standard input",
    )
    p.add_argument(
        "--prompt",
        metavar="TEXT",
        help="user prompt (inside the checkpoint's chat template, when --model has one); the "
        "family's placeholders in it place the clips, and are inserted where absent",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write features_N, mask_N, input_ids to FILE (an .npz archive; .npz is "
        "appended to a name without it; an existing file is replaced); checked before any "
        "work: a directory, or a directory that does not exist, is refused",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--show-prompt",
        action="store_true",
        help="also print the expanded prompt (runs of a repeated token folded: <tok> x188)",
    )
    p.set_defaults(handler=_cmd_prepare)

    p = sub.add_parser("schema", help="print a family's JSON schema of recognized config keys")
    p.add_argument("family", metavar="FAMILY")
    p.set_defaults(handler=_cmd_schema)

    _add_batch_parser(sub)
    _add_sources_parser(sub)
    _add_serve_parser(sub, arguments=serve_arguments)
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
    except _UsageError as exc:
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


if __name__ == "__main__":
    sys.exit(main())
