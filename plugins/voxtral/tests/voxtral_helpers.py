"""Voxtral test helpers: generated signals and WAV files, and the reference pipeline.

The reference is what ``VoxtralProcessor.apply_chat_template`` runs on an audio part
(transformers 5.24.0 with mistral-common 1.13.1): soundfile decode to float32, channels
averaged (``load_audio_as(force_mono=True)`` for paths; base64 payloads must be mono),
``soxr.resample(x, rate, 16000, quality="HQ")``, zero padding to a multiple of 480,000
samples (``AudioEncoder.pad``), then ``VoxtralProcessor._retrieve_input_features``:
``WhisperFeatureExtractor`` on the padded clip and the reshape into 30 s windows.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

#: The processor's ``audio_kwargs`` (``VoxtralProcessor.audio_kwargs``) for the extractor.
EXTRACTOR_KWARGS = {
    "sampling_rate": 16_000,
    "padding": True,
    "truncation": False,
    "pad_to_multiple_of": 480_000,
    "return_tensors": "pt",
}
#: Feature tolerance against the reference on the same 16 kHz waveform (max abs): the
#: reference's own float32 FFT error near the clamp floor; ours runs a float64 FFT.
TOLERANCE = 1e-4


def make_signal(
    kind: str, *, samples: int, rate_hz: int = 16_000, channels: int = 1, seed: int = 0
) -> np.ndarray:
    """float32 ``[shape=(n,)]`` or ``[shape=(n, channels)]``.

    ``noise``, ``am`` (a tone with noise), ``tone``, ``silence`` (exact zeros) and
    ``clipped`` (a loud tone and noise clipped at ±1, the rails reached often).
    """
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    columns = []
    for channel in range(channels):
        f0 = rng.uniform(150, min(3_000, rate_hz / 3))
        if kind == "noise":
            x = 0.2 * rng.standard_normal(samples)
        elif kind == "am":
            envelope = 1 + 0.5 * np.sin(2 * np.pi * 3 * t + channel)
            x = 0.3 * envelope * np.sin(2 * np.pi * f0 * t) + 0.1 * rng.standard_normal(samples)
        elif kind == "tone":
            x = 0.5 * np.sin(2 * np.pi * f0 * t)
        elif kind == "silence":
            x = np.zeros(samples)
        elif kind == "clipped":
            x = 3.0 * np.sin(2 * np.pi * f0 * t) + 0.5 * rng.standard_normal(samples)
        else:
            raise ValueError(kind)
        columns.append(np.clip(x, -1.0, 1.0))
    data = np.stack(columns, axis=1) if channels > 1 else columns[0]
    return data.astype(np.float32)


def wav_bytes(data: np.ndarray, *, rate_hz: int, subtype: str = "FLOAT") -> bytes:
    """A WAV written by soundfile (``subtype`` ``"PCM_16"`` or ``"FLOAT"``)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate_hz, format="WAV", subtype=subtype)
    return buffer.getvalue()


def wav_base64(data: np.ndarray, *, rate_hz: int, subtype: str = "FLOAT") -> str:
    """:func:`wav_bytes` as base64, the form of an audio part's ``base64`` payload."""
    return base64.b64encode(wav_bytes(data, rate_hz=rate_hz, subtype=subtype)).decode("ascii")


def reference_waveform(data: bytes) -> np.ndarray:
    """The 16 kHz mono clip mistral-common encodes: soundfile float32, channel mean,
    soxr HQ at soxr's length (``Audio.from_bytes(strict=False)`` + ``Audio.resample``)."""
    import soundfile
    import soxr

    with soundfile.SoundFile(io.BytesIO(data)) as f:
        x = f.read(dtype="float32")
        rate = f.samplerate
    if x.ndim == 2:
        x = x.mean(axis=1)
    if rate != 16_000:
        x = soxr.resample(x, rate, 16_000, quality="HQ")
    return np.asarray(x, dtype=np.float32)


def reference_features(processor: Any, waveform: np.ndarray) -> np.ndarray:
    """``VoxtralProcessor._retrieve_input_features`` of one 16 kHz clip, padded as
    mistral-common's ``AudioEncoder.pad`` pads it: float32 ``[shape=(k, 128, 3000)]``."""
    windows = -(-waveform.shape[0] // 480_000)
    padded = np.zeros(windows * 480_000, dtype=np.float32)
    padded[: waveform.shape[0]] = waveform
    features = processor._retrieve_input_features([padded], 3000, **EXTRACTOR_KWARGS)
    return np.asarray(features.numpy())
