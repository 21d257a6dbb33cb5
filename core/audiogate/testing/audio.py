"""Generated test audio: analytic signals and well-formed WAV bytes."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from audiogate.pipeline import EncodedClip

__all__ = ["encoded_clip", "noise", "tone", "wav_bytes"]


def tone(
    *,
    seconds: float | None = None,
    samples: int | None = None,
    rate_hz: int = 16_000,
    freq_hz: float = 440.0,
    amplitude: float = 0.25,
    channels: int = 1,
) -> npt.NDArray[np.float64]:
    """A sine tone ``[shape=(n,)]`` or ``[shape=(n, channels)]`` (channel k scaled by 1/(k+1))."""
    n = samples if samples is not None else round((seconds or 0.0) * rate_hz)
    t = np.arange(n, dtype=np.float64) / rate_hz
    mono = amplitude * np.sin(2 * np.pi * freq_hz * t)
    if channels == 1:
        return mono
    return np.stack([mono / (k + 1) for k in range(channels)], axis=1)


def noise(
    *, samples: int, channels: int = 1, amplitude: float = 0.3, seed: int = 0
) -> npt.NDArray[np.float64]:
    """Deterministic uniform noise in ``[-amplitude, amplitude]``."""
    rng = np.random.default_rng(seed)
    shape = (samples,) if channels == 1 else (samples, channels)
    return rng.uniform(-amplitude, amplitude, size=shape)


def wav_bytes(samples: npt.ArrayLike, *, rate_hz: int, encoding: str = "pcm16") -> bytes:
    """A canonical RIFF/WAVE file (PCM16 or IEEE float32) of ``samples``.

    :param samples: ``[shape=(n,)]`` mono or ``[shape=(n, channels)]``, floats in [-1, 1].
    :param encoding: ``"pcm16"`` (rounded, clipped) or ``"f32"``.
    """
    data = np.asarray(samples, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    _frames, channels = data.shape
    if encoding == "pcm16":
        payload = np.clip(np.round(data * 32768.0), -32768, 32767).astype("<i2").tobytes()
        tag, bits = 1, 16
    elif encoding == "f32":
        payload = data.astype("<f4").tobytes()
        tag, bits = 3, 32
    else:
        raise ValueError(f"encoding must be 'pcm16' or 'f32', not {encoding!r}")
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate_hz, rate_hz * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(payload)) + payload
    if len(payload) % 2:
        body += b"\x00"
    return b"RIFF" + struct.pack("<I", len(body)) + body


def encoded_clip(
    *,
    seconds: float | None = None,
    samples: int | None = None,
    rate_hz: int = 16_000,
    channels: int = 1,
    ordinal: int = 1,
    encoding: str = "pcm16",
    seed: int = 0,
) -> EncodedClip:
    """A WAV clip of deterministic noise over a 440 Hz tone, ready for the pipeline.

    :param seconds: duration (or give ``samples``, sample frames per channel).
    :param ordinal: the clip's one-based placeholder ordinal.
    :param encoding: ``"pcm16"`` or ``"f32"``.
    """
    n = samples if samples is not None else round((seconds or 0.0) * rate_hz)
    signal = noise(samples=n, channels=channels, amplitude=0.2, seed=seed)
    signal = signal + tone(samples=n, rate_hz=rate_hz, channels=channels, amplitude=0.2)
    return EncodedClip(
        data=wav_bytes(signal, rate_hz=rate_hz, encoding=encoding), ordinal=ordinal, origin="bytes"
    )
