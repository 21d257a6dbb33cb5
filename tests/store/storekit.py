"""Helpers of the store tests: generated WAV sources, and a blob backend that crashes."""

from __future__ import annotations

import os
import signal

from audiogate.store.backend import BlobBackend
from audiogate.testing.audio import noise, tone, wav_bytes


def source(seconds: float = 1.0, *, seed: int = 0, rate_hz: int = 16_000) -> bytes:
    """A WAV source: noise over a tone, distinct per ``seed``."""
    samples = noise(samples=int(seconds * rate_hz), amplitude=0.2, seed=seed)
    samples = samples + tone(seconds=seconds, rate_hz=rate_hz, amplitude=0.2)
    return wav_bytes(samples, rate_hz=rate_hz)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingBlobs:
    """A blob backend that SIGKILLs its process at :attr:`crash_at`, to show what recovery
    makes of that moment: ``"upload"`` (half the bytes staged), ``"blob"`` (the blob
    published, its record not committed), ``"retire"`` (the retirement committed, the
    blob not yet removed)."""

    def __init__(self, inner: BlobBackend) -> None:
        self.inner = inner
        self.crash_at: str | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def stage(self, sha256: str, data: bytes) -> str:
        if self.crash_at == "upload":
            self.inner.stage(sha256, data[: len(data) // 2])
            _die()
        return self.inner.stage(sha256, data)

    def publish(self, handle: str, sha256: str, feature_key: str | None = None) -> None:
        self.inner.publish(handle, sha256, feature_key)
        if self.crash_at == "blob" and feature_key is None:
            _die()

    def remove(self, sha256: str) -> None:
        if self.crash_at == "retire":
            _die()
        self.inner.remove(sha256)
