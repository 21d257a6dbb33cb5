"""Granite Speech's stream clamps and scales as it goes (issue #34): each block to the
running maximum minus 8 when a value is under it, then ``x / 4 + 1``; ``finish``
re-clamps only the blocks the final maximum changes. Bit-identical to the whole clip
(features, ``peak``, ``interior_peak``) where the maximum rises late and where silence
sits under the floor; a clip whose values all stay above the floor is not clamped again."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from stream_helpers import chunked, family_host, policy_of, raw_pcm16, same_clip, whole_clip

from audiogate.decode import inspect
from audiogate.streaming.frontend import IncrementalClipStream, open_clip_stream
from audiogate.streaming.transport import streamed_prepared_clip
from audiogate_granitespeech.streaming import GraniteLogMelSink

FAMILY = "granitespeech"


def _pcm16(frames: int, shape: str, seed: int) -> npt.NDArray[np.int16]:
    rng = np.random.default_rng(seed)
    position = np.arange(frames) / frames
    if shape == "rising":
        gain = 3.0 * 1e4**position
    elif shape == "late":
        gain = np.where(position > 0.85, 12_000.0, 30.0)
    elif shape == "silence":
        gain = np.where((position > 0.3) & (position < 0.6), 5_000.0, 0.0)
    else:
        gain = np.full(frames, 3_000.0)
    signal = rng.standard_normal(frames) * gain
    return np.clip(signal, -32768, 32767).astype("<i2")


def _sink_after(shape: str, rate: int, seconds: float, sizes: list[int]) -> GraniteLogMelSink:
    policy = policy_of(FAMILY)
    frames = int(rate * seconds)
    data = _pcm16(frames, shape, 7).tobytes()
    whole = whole_clip(policy, data, raw_pcm16(rate))
    stream = open_clip_stream(
        family_host(), policy, inspect(data, clip_index=0, source_format=raw_pcm16(rate))
    )
    assert isinstance(stream, IncrementalClipStream)
    sink = stream._stream._sink  # type: ignore[attr-defined]
    assert isinstance(sink, GraniteLogMelSink)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    for part in chunked(frames, sizes):
        stream.push(samples[part])
    streamed = stream.finish()
    clip = streamed_prepared_clip(streamed, sha256=whole.sha256, encoded_bytes=len(data))
    same_clip(clip, whole)
    assert clip.features.peak == whole.features.peak  # type: ignore[attr-defined]
    assert clip.features.interior_peak == whole.features.interior_peak  # type: ignore[attr-defined]
    assert clip.features.features.flags.c_contiguous
    return sink


@pytest.mark.parametrize("shape", ["rising", "late", "silence", "steady"])
@pytest.mark.parametrize(("rate", "sizes"), [(16_000, [320]), (48_000, [7, 961, 4_001])])
def test_clamped_as_it_streams_equals_the_whole_clip(
    shape: str, rate: int, sizes: list[int]
) -> None:
    sink = _sink_after(shape, rate, 6.3, sizes)
    if shape in ("rising", "late"):
        assert sink.reclamped_frames > 0
    if shape == "steady":
        assert sink.reclamped_frames == 0
