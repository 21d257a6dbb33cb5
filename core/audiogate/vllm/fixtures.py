"""The fixed request set audiogate's render is compared with vLLM's on.

``scripts/vllm/record_fixtures.py`` sends each request to vLLM's own render server and
records the answers under ``tests/data/vllm/``; ``tests/vllm/`` sends the same requests
to audiogate's endpoint and compares. The audio is generated here, deterministically
(tones and seeded noise as 16-bit PCM WAV), so the fixtures hold no audio.
"""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Mapping
from typing import Any, Final

import attrs
import numpy as np

__all__ = ["CLIPS", "RENDER_REQUESTS", "RenderCase", "clip_wav", "request_body"]


@attrs.frozen
class _Clip:
    seconds: float
    rate_hz: int
    channels: int
    seed: int


#: The clips, by name: 1 s / 5 s / 30 s at 16 kHz mono and 48 kHz stereo.
CLIPS: Final[Mapping[str, _Clip]] = {
    "mono16k_1s": _Clip(1.0, 16_000, 1, 1),
    "mono16k_5s": _Clip(5.0, 16_000, 1, 2),
    "mono16k_30s": _Clip(30.0, 16_000, 1, 3),
    "stereo48k_1s": _Clip(1.0, 48_000, 2, 4),
    "stereo48k_5s": _Clip(5.0, 48_000, 2, 5),
    "stereo48k_30s": _Clip(30.0, 48_000, 2, 6),
}


def clip_wav(name: str) -> bytes:
    """The WAV bytes of clip ``name``: a chirp, two tones and seeded noise, per channel
    slightly different, peak about -6 dBFS."""
    clip = CLIPS[name]
    n = round(clip.seconds * clip.rate_hz)
    t = np.arange(n, dtype=np.float64) / clip.rate_hz
    rng = np.random.default_rng(clip.seed)
    channels = []
    for c in range(clip.channels):
        chirp = np.sin(2 * np.pi * (200.0 + 150.0 * c + 400.0 * t / max(clip.seconds, 1.0)) * t)
        tones = 0.5 * np.sin(2 * np.pi * 440.0 * t) + 0.3 * np.sin(2 * np.pi * 3000.0 * t + c)
        noise = 0.05 * rng.standard_normal(n)
        channels.append(0.25 * (chirp + tones) + noise)
    samples = np.clip(np.stack(channels, axis=1), -1.0, 1.0)
    pcm = np.round(samples * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(clip.channels)
        out.setsampwidth(2)
        out.setframerate(clip.rate_hz)
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()


def _audio_part(name: str) -> dict[str, Any]:
    data = base64.b64encode(clip_wav(name)).decode("ascii")
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


@attrs.frozen
class RenderCase:
    """One request: its content parts (``"audio:NAME"`` or text) and extra fields."""

    name: str
    parts: tuple[str, ...]
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    families: tuple[str, ...] = (
        "qwen2audio",
        "gemma3n",
        "qwen25omni",
        "qwen3omni",
        "voxtral",
        "audioflamingo3",
        "glmasr",
        "granitespeech",
    )


RENDER_REQUESTS: Final[tuple[RenderCase, ...]] = (
    RenderCase("text_only", ("Say hello.",)),
    *(RenderCase(name, (f"audio:{name}", "What is in this clip?")) for name in CLIPS),
    RenderCase("two_clips", ("audio:mono16k_1s", "audio:stereo48k_5s", "Compare the two clips.")),
    RenderCase(
        "text_between",
        ("First clip:", "audio:mono16k_5s", "and the second clip:", "audio:stereo48k_1s", "Same?"),
    ),
    RenderCase(
        "sampling",
        ("audio:mono16k_5s", "Transcribe it."),
        {"temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["\n\n"]},
    ),
)


def request_body(case: RenderCase, model: str) -> dict[str, Any]:
    """The chat completions render body of ``case`` for the served ``model``."""
    content = [
        _audio_part(part[len("audio:") :])
        if part.startswith("audio:")
        else {"type": "text", "text": part}
        for part in case.parts
    ]
    return {"model": model, "messages": [{"role": "user", "content": content}], **case.fields}
