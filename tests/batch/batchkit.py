"""Batch test helpers: a small manifest of generated WAVs, good rows of every kind and bad
rows."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from audiogate.testing.audio import encoded_clip

__all__ = ["EXPECTED", "GEMMA", "write_manifest"]

GEMMA = Path(__file__).parents[2] / "examples" / "models" / "gemma-3n-e4b-it"

#: Expected (status, error_code) per id of :func:`write_manifest`'s rows.
EXPECTED = {
    "a0": ("ok", None),
    "a1": ("ok", None),
    "a2": ("ok", None),
    "m0": ("ok", None),
    "t0": ("ok", None),
    "missing": ("error", "acquisition"),
    "url": ("error", "acquisition"),
    "escape": ("error", "acquisition"),
    "corrupt": ("error", "riff_size_mismatch"),
    "long": ("error", "limit"),
    "both": ("error", "bad_row"),
}


def write_manifest(root: Path) -> tuple[Path, Path]:
    """``(manifest.jsonl, media root)``: 11 rows with ids plus one row without an id and
    one line that is not JSON (13 rows)."""
    media = root / "media"
    media.mkdir()
    for name, seconds in (("c0", 1.0), ("c1", 2.5), ("c2", 0.5)):
        (media / f"{name}.wav").write_bytes(encoded_clip(seconds=seconds, seed=len(name)).data)
    good = encoded_clip(seconds=0.7, seed=3).data
    (media / "corrupt.wav").write_bytes(good[:-200])  # the RIFF size says more
    (media / "long.wav").write_bytes(encoded_clip(seconds=31.0, seed=4).data)
    inline = base64.b64encode(encoded_clip(seconds=1.2, seed=9).data).decode()
    audio_part = {"type": "input_audio", "input_audio": {"data": inline, "format": "wav"}}
    rows: list[object] = [
        {"id": "a0", "audio": "c0.wav", "prompt": "What is said?"},
        {"id": "a1", "audio": "file://c1.wav"},
        {"id": "a2", "audio": "c2.wav", "prompt": "Transcribe."},
        {
            "id": "m0",
            "messages": [{"role": "user", "content": [audio_part, {"type": "text", "text": "Hi"}]}],
        },
        {"id": "t0", "messages": [{"role": "user", "content": "No audio here."}]},
        {"id": "missing", "audio": "nope.wav"},
        {"id": "url", "audio": "https://example.com/x.wav"},
        {"id": "escape", "audio": "../outside.wav"},
        {"id": "corrupt", "audio": "corrupt.wav"},
        {"id": "long", "audio": "long.wav"},
        {"id": "both", "audio": "c0.wav", "messages": [{"role": "user", "content": "x"}]},
        {"no_id": True, "audio": "c0.wav"},
    ]
    manifest = root / "manifest.jsonl"
    lines = [json.dumps(row) for row in rows]
    lines.insert(6, "this line is not JSON")
    lines.insert(3, "")  # blank lines are skipped
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, media
