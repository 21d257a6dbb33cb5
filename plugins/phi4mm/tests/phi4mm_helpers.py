"""Phi-4 MM test helpers: special tokens, chat template, test signals, WAV bytes, cancel tokens."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from audiogate.cancel import CancelToken, Checkpoint

#: The real special tokens of microsoft/Phi-4-multimodal-instruct at their real ids
#: (o200k-based tokenizer; ``config.json`` bos/eos/pad 199999, ``eos_token_id`` [199999,
#: 200020] in ``Phi4MultimodalConfig``; ``processing_phi4mm.py`` 200010/200011; the role
#: tokens are those of the shared Phi-4-mini tokenizer).
REMOTE_SPECIAL_TOKENS = {
    "<|endoftext|>": 199_999,
    "<|endoftext10|>": 200_010,
    "<|endoftext11|>": 200_011,
    "<|assistant|>": 200_019,
    "<|end|>": 200_020,
    "<|user|>": 200_021,
    "<|system|>": 200_022,
}
#: The native conversion renames 200010/200011 to ``<|image|>`` / ``<|audio|>``
#: (``tokenizer.image_token`` / ``audio_token``; ``Phi4MultimodalConfig`` ids).
NATIVE_SPECIAL_TOKENS = {
    "<|endoftext|>": 199_999,
    "<|image|>": 200_010,
    "<|audio|>": 200_011,
    "<|assistant|>": 200_019,
    "<|end|>": 200_020,
    "<|user|>": 200_021,
    "<|system|>": 200_022,
}
#: The real chat templates, as the bundled checkpoints carry them (one copy, there):
#: the remote-code template of ``tokenizer_config.json`` and the native processor's.
_MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"
REMOTE_CHAT_TEMPLATE = (_MODELS / "phi-4-multimodal-instruct" / "chat_template.jinja").read_text()
NATIVE_CHAT_TEMPLATE = (
    _MODELS / "phi-4-multimodal-instruct-hf" / "chat_template.jinja"
).read_text()


def signal(
    samples: int, rate_hz: int, *, channels: int = 1, seed: int = 0, amplitude: float = 0.45
) -> np.ndarray:
    """Noise plus a chirp plus a tone, different per channel ``[shape=(samples, channels)]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    duration = max(samples / rate_hz, 1e-3)
    columns = []
    for channel in range(channels):
        f0, f1 = 60.0 + 40 * channel, 0.45 * rate_hz
        phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * duration))
        tone = np.sin(2 * np.pi * (440.0 + 110 * channel) * t)
        noise = rng.standard_normal(samples)
        mix = 0.4 * np.sin(phase) + 0.25 * tone + 0.2 * noise
        columns.append(amplitude * mix / max(1.0, float(np.abs(mix).max())))
    return np.stack(columns, axis=1)


def wav_bytes(data: np.ndarray, rate_hz: int, encoding: str) -> bytes:
    """A RIFF/WAVE file of ``data`` ``[shape=(n, channels)]``: ``"pcm16"`` or ``"f32"``."""
    import soundfile

    buffer = io.BytesIO()
    subtype = {"pcm16": "PCM_16", "f32": "FLOAT"}[encoding]
    soundfile.write(buffer, data, rate_hz, subtype=subtype, format="WAV")
    return buffer.getvalue()


def sine(samples: int, rate_hz: int, *, frequency_hz: float = 440.0, amplitude: float = 0.25):
    """``amplitude·sin(2π·f·n/rate)`` as float32.

    mlxcel's golden input (``src/audio/phi4mm/feature_extractor.rs`` tests).
    """
    n = np.arange(samples)
    return (amplitude * np.sin(2 * np.pi * frequency_hz * n / rate_hz)).astype(np.float32)


class CancelAfter(CancelToken):
    """A token that cancels itself on its ``after``-th check at ``checkpoint``."""

    def __init__(self, checkpoint: Checkpoint, after: int) -> None:
        super().__init__()
        self._watch = checkpoint
        self._after = after
        self.checks = 0

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        if checkpoint == self._watch:
            self.checks += 1
            if self.checks >= self._after:
                self.cancel()
        super().check(checkpoint, clip_index)
