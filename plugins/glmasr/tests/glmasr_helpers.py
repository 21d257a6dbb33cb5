"""GLM-ASR test helpers: signals, WAV bytes, the reference processor and loader."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Final

import numpy as np

from audiogate_glmasr.prompt import CHAT_TEMPLATE

#: Feature tolerance against the reference (absolute, log-mel units after (x + 4) / 4).
TOLERANCE: Final = 1e-4


def make_signal(
    kind: str, *, samples: int, rate_hz: int = 16_000, channels: int = 1, seed: int = 0
) -> np.ndarray:
    """float32 ``[shape=(n,)]`` or ``[shape=(n, channels)]``.

    ``noise`` and ``am`` stay within [-0.9, 0.9]; ``silence`` is all zero; ``clipped`` is
    a loud tone and noise hard-clipped at ±1 (full scale in PCM).
    """
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    columns = []
    for channel in range(channels):
        f0 = rng.uniform(150, 3_000)
        if kind == "noise":
            x = np.clip(0.2 * rng.standard_normal(samples), -0.9, 0.9)
        elif kind == "am":
            envelope = 1 + 0.5 * np.sin(2 * np.pi * 3 * t + channel)
            x = 0.3 * envelope * np.sin(2 * np.pi * f0 * t) + 0.15 * rng.standard_normal(samples)
            x = np.clip(x, -0.9, 0.9)
        elif kind == "silence":
            x = np.zeros(samples)
        elif kind == "clipped":
            x = 3.0 * np.sin(2 * np.pi * f0 * t) + 0.5 * rng.standard_normal(samples)
            x = np.clip(x, -1.0, 1.0)
        else:
            raise ValueError(kind)
        columns.append(x)
    data = np.stack(columns, axis=1) if channels > 1 else columns[0]
    return data.astype(np.float32)


def wav_bytes(data: np.ndarray, *, rate_hz: int, subtype: str) -> bytes:
    """A WAV written by soundfile (``subtype`` ``"PCM_16"`` or ``"FLOAT"``)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate_hz, format="WAV", subtype=subtype)
    return buffer.getvalue()


def transformers_load(data: bytes, tmp_path: Path, name: str) -> np.ndarray:
    """The waveform transformers' ``load_audio`` (soundfile backend: ``librosa.load``'s
    decode, mean downmix, soxr HQ and length) gives."""
    from transformers.audio_utils import load_audio

    path = tmp_path / name
    path.write_bytes(data)
    return np.asarray(load_audio(str(path), sampling_rate=16_000, backend="soundfile"))


def build_processor(tokenizer: Any) -> Any:
    """``GlmAsrProcessor`` from components, as the checkpoint configures it (offline)."""
    from transformers import GlmAsrProcessor, WhisperFeatureExtractor

    # As the conversion builds it; the processor asks for the mask itself.
    extractor = WhisperFeatureExtractor(feature_size=128)
    return GlmAsrProcessor(
        feature_extractor=extractor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def conversation(text: str = "Please transcribe this audio into text") -> list[dict[str, Any]]:
    """One user turn, audio then text: what ``apply_transcription_request`` builds."""
    return [
        {
            "role": "user",
            "content": [{"type": "audio", "audio": "x"}, {"type": "text", "text": text}],
        }
    ]


def reference(processor: Any, waveforms: list[np.ndarray], text: str) -> Any:
    """The processor's output for ``text`` (one ``<|pad|>`` per waveform) as numpy."""
    out = processor(text=text, audio=waveforms, sampling_rate=16_000)
    return {name: value.numpy() for name, value in out.items()}
