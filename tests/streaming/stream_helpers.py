"""Shared helpers of the streaming tests: the whole-clip reference and chunkings."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from audiogate.acquire.clip import EncodedClip
from audiogate.decode.geometry import SourceFormat
from audiogate.host import FamilyHost, create_host
from audiogate.pipeline.preflight import preflight
from audiogate.pipeline.prepared import PreparedClip
from audiogate.pipeline.process import process_request
from audiogate.policy import AudioPolicy

__all__ = [
    "FAMILIES",
    "byte_chunks",
    "chunked",
    "family_host",
    "noise_pcm16",
    "policy_of",
    "raw_pcm16",
    "same_clip",
    "whole_clip",
]


@functools.cache
def family_host() -> FamilyHost:
    """One host for the module's examples (hypothesis reuses it across examples)."""
    return create_host(load_entry_points=True)


FAMILIES: tuple[str, ...] = tuple(sorted(family_host().families))


def policy_of(family: str) -> AudioPolicy:
    return family_host().default_policy(family)


def noise_pcm16(frames: int, channels: int = 1, *, seed: int = 0) -> npt.NDArray[np.int16]:
    """Speech-level noise with a tone, interleaved ``[shape=(frames * channels,)]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames * channels) / 16_000
    signal = rng.standard_normal(frames * channels) * 2000 + 6000 * np.sin(2 * np.pi * 440 * t)
    return np.clip(signal, -32768, 32767).astype("<i2")


def raw_pcm16(rate_hz: int, channels: int = 1) -> SourceFormat:
    return SourceFormat.raw("pcm16", rate_hz=rate_hz, channels=channels)


def whole_clip(policy: AudioPolicy, data: bytes, source_format: SourceFormat) -> PreparedClip:
    """The whole-clip path: preflight and process the complete bytes."""
    host = family_host()
    clip = EncodedClip(data=data, source_format=source_format, ordinal=1, origin="stream")
    plan = preflight(host, policy, [clip])
    return process_request(host, plan, [clip]).clips[0]


def chunked(total: int, sizes: Sequence[int]) -> Iterator[slice]:
    """Slices over ``range(total)`` of the given sizes, cycled."""
    start = 0
    index = 0
    while start < total:
        size = max(1, sizes[index % len(sizes)])
        index += 1
        yield slice(start, min(total, start + size))
        start += size


async def byte_chunks(data: bytes, sizes: Sequence[int]) -> AsyncIterator[bytes]:
    for part in chunked(len(data), sizes):
        yield data[part]


def same_clip(streamed: PreparedClip, whole: PreparedClip) -> None:
    """Bit-identical features, mask and waveform, and the same accounting."""
    assert streamed.features.features.dtype == whole.features.features.dtype
    assert np.array_equal(
        streamed.features.features.view(np.uint8), whole.features.features.view(np.uint8)
    )
    if whole.features.mask is None:
        assert streamed.features.mask is None
    else:
        assert streamed.features.mask is not None
        assert np.array_equal(streamed.features.mask, whole.features.mask)
    assert np.array_equal(streamed.waveform.view(np.uint8), whole.waveform.view(np.uint8))
    assert (streamed.features.frames, streamed.features.tokens) == (
        whole.features.frames,
        whole.features.tokens,
    )
    assert streamed.accounting() == whole.accounting()
