"""Helpers of the store tests: generated WAV sources."""

from __future__ import annotations

from audiogate.testing.audio import noise, tone, wav_bytes


def source(seconds: float = 1.0, *, seed: int = 0, rate_hz: int = 16_000) -> bytes:
    """A WAV source: noise over a tone, distinct per ``seed``."""
    samples = noise(samples=int(seconds * rate_hz), amplitude=0.2, seed=seed)
    samples = samples + tone(seconds=seconds, rate_hz=rate_hz, amplitude=0.2)
    return wav_bytes(samples, rate_hz=rate_hz)
