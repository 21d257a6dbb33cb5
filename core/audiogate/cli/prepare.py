"""``audiogate prepare``: prepare audio files for a model and print (or save) the result."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from audiogate.cli.common import EXIT_OK, UsageError, table
from audiogate.cli.interrupt import interrupt_cancels
from audiogate.host import FamilyHost

__all__ = [
    "PREPARE_EPILOG",
    "STDIN",
    "ProgressBar",
    "add_parser",
    "fold_repeats",
    "print_summary",
    "run",
]

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


def add_parser(sub: Any) -> None:
    """Add ``prepare`` to the subcommands ``sub``."""
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
    p.set_defaults(handler=run)


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
    table(rows, out)
    for clip in summary["clips"]:
        if clip.get("truncated"):
            kept, received = clip["processed_duration_us"] / 1e6, clip["duration_us"] / 1e6
            out.write(f"clip {clip['ordinal']}: truncated to {kept:.3f} s of {received:.3f} s\n")
    if "prefill_positions" in totals:
        out.write(f"\nprefill positions: {totals['prefill_positions']}\n")


class ProgressBar:
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

    :raises UsageError: ``text`` names a directory, or the file's directory is missing or
        cannot be written to.
    """
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        raise UsageError(f"audiogate prepare: cannot write {text}: it is a directory")
    path = Path(text if text.endswith(".npz") else f"{text}.npz")
    if path.is_dir():
        raise UsageError(f"audiogate prepare: cannot write {path}: it is a directory")
    parent = path.parent
    if not parent.is_dir():
        problem = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"audiogate prepare: cannot write {path}: {parent} {problem}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"audiogate prepare: cannot write {path}: permission denied")
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
            raise UsageError(
                f"audiogate prepare: cannot write {path}: {exc.strerror or exc}"
            ) from None
        raise


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Prepare ``--audio`` for ``--model`` or ``--family``; print the summary."""
    import numpy as np

    from audiogate.acquire import AcquisitionPolicy, acquire_bytes, acquire_paths
    from audiogate.api import AudioGate
    from audiogate.decode.geometry import AUTO

    if bool(args.family) == bool(args.model):
        raise UsageError("audiogate prepare: give exactly one of --model DIR or --family NAME")
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
    bar = ProgressBar(sys.stderr, enabled=sys.stderr.isatty() and seconds > 5)
    try:
        # Ctrl-C stops the work at its next checkpoint (interrupt.py says why).
        with interrupt_cancels() as cancel:
            if args.prompt is not None:
                # One user turn of the checkpoint's template: the clips as audio parts
                # before the prompt, or where the prompt's own placeholders put them.
                result = gate.prepare_user_turn(args.prompt, clips, cancel=cancel, progress=bar)
            else:
                result = gate.prepare(clips=clips, cancel=cancel, progress=bar)
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

#: A special token as the families write them: ``<...>`` (most), or Mistral's upper-case
#: control tokens in brackets (Voxtral's ``[AUDIO]``).
_REPEATED_TOKEN: Final = re.compile(r"(<[^<>\s]{1,64}>|\[[A-Z_]{1,64}\])\1{2,}")


def fold_repeats(text: str) -> str:
    """``text`` with each run of three or more of the same ``<token>`` (or ``[TOKEN]``)
    written once with its count: ``<audio_soft_token> x188``, ``[AUDIO] x375`` (for
    ``--show-prompt``)."""
    return _REPEATED_TOKEN.sub(
        lambda m: f"{m.group(1)} x{len(m.group(0)) // len(m.group(1))}", text
    )


def _read_stdin(audio: Sequence[str], max_bytes: int) -> bytes:
    """The clip on standard input, at most ``max_bytes + 1`` bytes read (one more than the
    cap: the acquisition refuses it by size instead of reading on).

    :raises UsageError: ``-`` is combined with files or given twice, or stdin is a terminal.
    """
    if list(audio) != [STDIN]:
        raise UsageError(
            "audiogate prepare: --audio - (standard input) is one clip: give it alone, "
            f"not with {len(audio) - 1} other --audio"
        )
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(
            "audiogate prepare: --audio - reads an audio file from standard input: pipe one in"
        )
    return sys.stdin.buffer.read(max_bytes + 1)
