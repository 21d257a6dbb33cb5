"""The Whisper stream clamps as it goes (issue #34): each block with the item's running
maximum minus 8, and ``finish`` re-clamps only the blocks the final maximum changes. The
result stays the whole clip's, bit for bit, where the maximum rises late and where
silence sits under the floor; a clip whose values all stay above the floor is not
clamped again at ``finish``; frames go straight into the features in the direct layout."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_helpers import chunked

from audiogate.cancel import NEVER
from audiogate.dsp.whisper import whisper_log_mel, whisper_plan
from audiogate.streaming.whisper import WhisperLogMelStream

PADDINGS = ("max_length", "longest", "multiple", "windows")


def _signal(samples: int, shape: str, seed: int) -> npt.NDArray[np.float32]:
    """Noise whose loudness follows ``shape``: ``"rising"`` (the maximum rises to the
    end), ``"late"`` (quiet, a loud burst near the end), ``"silence"`` (exact zeros, then
    noise, then zeros: values far under the floor), ``"steady"``."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(samples)
    position = np.arange(samples) / max(samples, 1)
    if shape == "rising":
        gain = 1e-4 * 1e4**position
    elif shape == "late":
        gain = np.where(position > 0.8, 0.5, 1e-3)
    elif shape == "silence":
        gain = np.where((position > 0.3) & (position < 0.6), 0.2, 0.0)
    else:
        gain = np.full(samples, 0.1)
    return (noise * gain).astype(np.float32)


def _same(
    waveform: npt.NDArray[np.float32], padding: str, chunk: int, sizes: list[int], n_mels: int
) -> WhisperLogMelStream:
    plan = whisper_plan(waveform.shape[0], n_mels=n_mels, padding=padding, chunk_samples=chunk)  # type: ignore[arg-type]
    features, mask = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    stream = WhisperLogMelStream(n_mels=n_mels, padding=padding, chunk_samples=chunk)  # type: ignore[arg-type]
    for part in chunked(waveform.shape[0], sizes):
        stream.push(waveform[part])
    streamed_plan, streamed, streamed_mask = stream.finish()
    assert streamed_plan == plan
    assert np.array_equal(streamed.view(np.uint32), features.view(np.uint32))
    assert np.array_equal(streamed_mask, mask)
    assert not streamed.flags.writeable
    assert streamed.flags.c_contiguous
    return stream


@settings(max_examples=60, deadline=None)
@given(
    padding=st.sampled_from(PADDINGS),
    shape=st.sampled_from(["rising", "late", "silence", "steady"]),
    samples=st.integers(201, 12_000),
    sizes=st.lists(st.integers(1, 1_500), min_size=1, max_size=6),
    n_mels=st.sampled_from([80, 128]),
    seed=st.integers(0, 2**16),
)
def test_clamped_as_it_streams_equals_the_whole_clip(
    padding: str, shape: str, samples: int, sizes: list[int], n_mels: int, seed: int
) -> None:
    """Small windows (2,400 samples: 15 frames) put window and block borders everywhere."""
    chunk = 2_400
    if padding == "max_length":
        samples = min(samples, chunk)
    _same(_signal(samples, shape, seed), padding, chunk, sizes, n_mels)


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("shape", ["rising", "late", "silence"])
def test_thirty_seconds_with_the_floor_moving(padding: str, shape: str) -> None:
    """The shipped 30 s window, in 20 ms chunks: many streamed blocks, most of them
    clamped with a floor the final maximum raises (``"rising"``, ``"late"``)."""
    stream = _same(_signal(16_000 * 30, shape, 1), padding, 480_000, [320], 128)
    if shape != "silence":
        assert stream.reclamped_frames > 0


@pytest.mark.parametrize("padding", PADDINGS)
def test_a_steady_clip_is_not_clamped_again(padding: str) -> None:
    """Every value above the final floor: ``finish`` clamps nothing (no pass over the
    features)."""
    stream = _same(_signal(16_000 * 12, "steady", 2), padding, 480_000, [320], 128)
    assert stream.reclamped_frames == 0


@pytest.mark.parametrize(
    ("padding", "seconds"), [("max_length", 30), ("multiple", 65), ("windows", 65)]
)
def test_frames_go_straight_into_the_features(padding: str, seconds: int) -> None:
    """The direct layout: the streamed windows are the features ``finish`` returns (no
    copy), cut to the plan's windows, and held as the stream's bytes."""
    waveform = _signal(16_000 * seconds, "steady", 3)
    stream = WhisperLogMelStream(n_mels=80, padding=padding)  # type: ignore[arg-type]
    stream.push(waveform[:-8_000])
    held = stream._windows  # the features being written
    assert held.shape[0] >= 1
    assert stream.nbytes == stream._samples.nbytes + held.nbytes
    assert stream.nbytes <= stream.planned_nbytes(stream.samples)
    stream.push(waveform[-8_000:])
    _, features, _ = stream.finish()
    assert np.shares_memory(features, held)
    assert features.shape[0] == -(-waveform.shape[0] // 480_000)


@pytest.mark.parametrize("padding", ["max_length", "multiple", "windows"])
def test_a_short_stream_holds_no_window(padding: str) -> None:
    """Up to 256 frames (2.56 s) an item's frames stay in a buffer of their own (128 kB
    at 128 mels, not a 1.5 MB window), copied into the features at ``finish``."""
    waveform = _signal(16_000 * 2, "late", 5)
    stream = WhisperLogMelStream(n_mels=128, padding=padding)  # type: ignore[arg-type]
    stream.push(waveform)
    assert stream._windows.size == 0
    assert stream.nbytes <= stream.planned_nbytes(stream.samples) < 128 * 3_000 * 4
    _, features, _ = stream.finish()
    plan = whisper_plan(waveform.shape[0], n_mels=128, padding=padding)  # type: ignore[arg-type]
    reference, _ = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))


def test_a_wide_window_is_buffered() -> None:
    """Qwen2.5-Omni's 300 s window is not held whole from the first block: its frames
    are buffered per item and copied into the features at ``finish``."""
    stream = WhisperLogMelStream(n_mels=128, padding="max_length", chunk_samples=4_800_000)
    waveform = _signal(16_000 * 2, "late", 4)
    stream.push(waveform)
    assert stream._windows.size == 0
    assert stream.nbytes < 128 * 30_000 * 4
    _, features, _ = stream.finish()
    plan = whisper_plan(waveform.shape[0], n_mels=128, chunk_samples=4_800_000)
    reference, _ = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))
