"""Granite Speech's incremental stream (issue #34): bit-identical to the whole clip at
the edge lengths of its frames and rows, and its extra fields feed a batch the same."""

from __future__ import annotations

import numpy as np
import pytest
from stream_helpers import (
    chunked,
    family_host,
    noise_pcm16,
    policy_of,
    raw_pcm16,
    same_clip,
    whole_clip,
)

from audiogate.decode import inspect
from audiogate.pipeline.prepared import PreparedClip
from audiogate.streaming.frontend import IncrementalClipStream, open_clip_stream
from audiogate.streaming.transport import streamed_prepared_clip

FAMILY = "granitespeech"


def _streamed(
    rate: int, frames: int, sizes: list[int], seed: int = 0
) -> tuple[PreparedClip, PreparedClip]:
    policy = policy_of(FAMILY)
    data = noise_pcm16(frames, seed=seed).tobytes()
    whole = whole_clip(policy, data, raw_pcm16(rate))
    stream = open_clip_stream(
        family_host(), policy, inspect(data, clip_index=0, source_format=raw_pcm16(rate))
    )
    assert isinstance(stream, IncrementalClipStream)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    for part in chunked(frames, sizes):
        stream.push(samples[part])
    streamed = stream.finish()
    assert streamed.incremental
    clip = streamed_prepared_clip(streamed, sha256=whole.sha256, encoded_bytes=len(data))
    same_clip(clip, whole)
    return clip, whole


# 16 kHz lengths around the frame and row borders: the minimum (257), a window just
# inside (360: frame 1 interior), an odd frame count (N // 160 + 1 odd), a block border.
@pytest.mark.parametrize("frames", [257, 359, 360, 361, 480, 640, 5_279, 5_280, 5_440, 16_000])
def test_edge_lengths_at_16_khz(frames: int) -> None:
    _streamed(16_000, frames, [7, 160, 401])


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100, 48_000])
def test_resampled_rates(rate: int) -> None:
    _streamed(rate, rate * 2 + 17, [rate // 50], seed=rate)


def test_one_sample_pushes() -> None:
    _streamed(48_000, 4_801, [1])


def test_the_streamed_clip_collates_as_the_whole_one() -> None:
    """The peak, interior peak and waveform a batch re-clamps with are the whole clip's."""
    host = family_host()
    policy = policy_of(FAMILY)
    short, short_whole = _streamed(16_000, 9_000, [320])
    long, long_whole = _streamed(16_000, 20_001, [320], seed=1)
    for name in ("peak", "interior_peak", "samples"):
        assert getattr(short.features, name) == getattr(short_whole.features, name)
    streamed = host.collate_features(policy, [short.features, long.features])
    whole = host.collate_features(policy, [short_whole.features, long_whole.features])
    for key, array in whole.inputs.items():
        assert np.array_equal(np.asarray(streamed.inputs[key]), np.asarray(array)), key
