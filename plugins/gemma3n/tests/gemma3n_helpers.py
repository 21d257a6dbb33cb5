"""Gemma 3n test helpers: special tokens, the chat template, test signals, cancel tokens."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.records import MediaSegment, PromptSegment, TextSegment

#: The special tokens of google/gemma-3n-E2B-it / E4B-it at their real ids (Gemma 3
#: tokenizer; ``Gemma3nConfig`` defaults for the audio and image ids).
SPECIAL_TOKENS = {
    "<pad>": 0,
    "<eos>": 1,
    "<bos>": 2,
    "<start_of_turn>": 105,
    "<end_of_turn>": 106,
    "<start_of_image>": 255_999,
    "<start_of_audio>": 256_000,
    "<end_of_image>": 262_144,
    "<image_soft_token>": 262_145,
    "<end_of_audio>": 262_272,
    "<audio_soft_token>": 262_273,
}

#: The checkpoints' chat template, verbatim as printed from the real tokenizer (the copy
#: under ``examples/models``; also stored in unslothai/unsloth ``unsloth/chat_templates.py``
#: as ``gemma3n_template``, and in the GGUF metadata of google_gemma-3n-E2B-it).
CHAT_TEMPLATE = (
    Path(__file__).resolve().parents[3] / "examples/models/gemma-3n-e4b-it/chat_template.jinja"
).read_text("utf-8")

_MEDIA = re.compile(r"(<audio_soft_token>|<image_soft_token>)")


def segments_from_rendered(rendered: str) -> list[PromptSegment]:
    """Split a rendered template at its media placeholders, as the core's sentinels do."""
    segments: list[PromptSegment] = []
    counts = {"audio": 0, "image": 0}
    for part in _MEDIA.split(rendered):
        if part in {"<audio_soft_token>", "<image_soft_token>"}:
            kind = "audio" if part == "<audio_soft_token>" else "image"
            counts[kind] += 1
            segments.append(MediaSegment(kind, counts[kind]))
        elif part:
            segments.append(TextSegment(part))
    return segments


def mix(samples: int, *, seed: int = 0) -> npt.NDArray[np.float32]:
    """440 Hz + 1 kHz tones, a slow sweep and a little noise, in [-1, 1]."""
    t = np.arange(samples, dtype=np.float64) / 16_000
    rng = np.random.default_rng(seed)
    x = (
        0.3 * np.sin(2 * np.pi * 440 * t)
        + 0.2 * np.sin(2 * np.pi * 1000 * t + 0.3)
        + 0.2 * np.sin(2 * np.pi * (100 * t + 120 * t * t))
        + 0.01 * rng.standard_normal(samples)
    )
    return np.clip(x, -1, 1).astype(np.float32)


def sweep(samples: int) -> npt.NDArray[np.float32]:
    """A pure 50 Hz → 8 kHz sweep over 30 s (its high bands sit at the rounding floor)."""
    t = np.arange(samples, dtype=np.float64) / 16_000
    return (0.8 * np.sin(2 * np.pi * (50 * t + (7950 / 60) * t * t))).astype(np.float32)


def noise(samples: int, *, seed: int = 1, amplitude: float = 0.3) -> npt.NDArray[np.float32]:
    """Clipped Gaussian noise."""
    rng = np.random.default_rng(seed)
    return np.clip(amplitude * rng.standard_normal(samples), -1, 1).astype(np.float32)


class CancelAfter(CancelToken):
    """A token that cancels itself at the ``n``-th check of ``checkpoint`` (inside a loop)."""

    __slots__ = ("_checkpoint", "_left", "checks")

    def __init__(self, checkpoint: Checkpoint, n: int) -> None:
        super().__init__()
        self._checkpoint = checkpoint
        self._left = n
        self.checks = 0

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        if checkpoint == self._checkpoint:
            self.checks += 1
            self._left -= 1
            if self._left <= 0:
                self.cancel()
        super().check(checkpoint, clip_index)
