"""Helpers of the real-file format tests: the corpus manifest, one gate per family (its
pinned defaults, as ``audiogate prepare --family``), the policy's admission rule, and a
float32 WAV writer for the path-against-path comparisons.

The corpus (``tests/data/audio``) is made by ``scripts/make_audio_corpus.py``: espeak-ng
speech encoded by sox, ffmpeg, lame, flac, opusenc and oggenc. Nothing here needs an
encoder or FFmpeg: the lossy files' references (FFmpeg's decoded sample counts) are in
``MANIFEST.json``. (A uniquely named module, imported by the tests of this folder.)
"""

from __future__ import annotations

import functools
import importlib.util
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from audiogate.api import AudioGate, PreparedRequest
from audiogate.decode import SourceFormat
from audiogate.pipeline import EncodedClip

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "audio"
FAMILIES = ("phi4mm", "gemma3n", "qwen2audio")

#: Each family's parity bound on features, as its own parity tests state it
#: (plugins/phi4mm/tests/test_phi4mm_parity.py, plugins/gemma3n/tests/test_gemma3n_parity.py,
#: plugins/qwen2audio/tests/qwen2audio_helpers.py PARITY).
TOLERANCE = {"phi4mm": 2e-6, "gemma3n": 5e-6, "qwen2audio": 3e-5}

#: The accounting that must agree between two paths holding the same samples.
SAME_SAMPLES = ("source_rate", "channels", "source_samples", "normalized_samples", "frames")
#: The accounting that follows from the duration alone: feature frames and tokens.
SAME_LENGTH = ("frames", "tokens")


#: Containers decoded through PyAV (``audiogate[codecs-ffmpeg]``); libsndfile
#: (``audiogate[codecs]``, soundfile, which the tests always have) decodes the others,
#: WebM/Matroska Opus (every WebM of the corpus) remuxed to Ogg Opus.
PYAV_CONTAINERS = frozenset({"mp4"})


def skip_without_decoder(container: str) -> None:
    """Skip a test of a ``container`` clip when its decoder is not installed."""
    import pytest

    if container in PYAV_CONTAINERS and importlib.util.find_spec("av") is None:
        pytest.skip("needs audiogate[codecs-ffmpeg] (PyAV)")


@functools.cache
def manifest() -> dict[str, Any]:
    return json.loads((CORPUS / "MANIFEST.json").read_text("utf-8"))


def entries(*, lossless: bool | None = None) -> list[dict[str, Any]]:
    return [e for e in manifest()["files"] if lossless is None or e["lossless"] is lossless]


def read(entry: dict[str, Any]) -> bytes:
    return (CORPUS / entry["file"]).read_bytes()


@functools.cache
def gate(family: str) -> AudioGate:
    """The family's pinned defaults (what ``audiogate prepare --family NAME`` uses)."""
    return AudioGate.from_family(family)


def auto_format() -> SourceFormat:
    """The format that is sniffed from the bytes (issue #20); before the compressed
    containers landed only WAV existed, and ``SourceFormat("wav")`` stands in for it."""
    try:
        return SourceFormat("auto")  # type: ignore[arg-type]
    except ValueError:
        return SourceFormat("wav")


def prepare(family: str, data: bytes) -> PreparedRequest:
    """One clip through the public API, its container sniffed from the bytes."""
    clip = EncodedClip(data=data, source_format=auto_format(), ordinal=1)
    return gate(family).prepare(prompt="Transcribe: ", clips=[clip])


def accounting(result: PreparedRequest) -> dict[str, Any]:
    assert result.batch is not None
    (clip,) = result.batch.clips
    return clip.accounting()


def admits(family: str, *, rate: int, channels: int, frames: int) -> bool:
    """Whether the family's policy admits a clip of this geometry (its source rate,
    channel count and duration; every corpus clip is far from the sample budgets)."""
    policy = gate(family).policy
    allowed = policy.allowed_source_rates_hz
    return (
        policy.min_source_rate_hz <= rate <= policy.max_source_rate_hz
        and (not allowed or rate in allowed)
        and channels <= policy.max_source_channels
        and frames <= policy.max_duration_seconds * rate
        and frames >= policy.min_samples_per_clip
    )


def float_wav(samples: np.ndarray, *, rate_hz: int) -> bytes:
    """``[shape=(frames, channels)]`` samples as a plain IEEE-float32 RIFF/WAVE file,
    written as is (no clipping, no scaling)."""
    channels = samples.shape[1]
    payload = np.ascontiguousarray(samples, dtype="<f4").tobytes()
    block = channels * 4
    fmt = struct.pack("<HHIIHH", 3, channels, rate_hz, rate_hz * block, block, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def stand_in(*, rate: int, channels: int, frames: int) -> bytes:
    """A float32 WAV of the given geometry holding speech-like noise (never all zero)."""
    rng = np.random.default_rng(frames)
    return float_wav(rng.uniform(-0.3, 0.3, size=(frames, channels)), rate_hz=rate)
