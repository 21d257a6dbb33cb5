"""What the Whisper stream leaves for ``finish`` (issue #34): the pushes re-clamp the
blocks a risen running maximum changes, so a clip whose maximum stops rising early is
not clamped again at ``finish``; ``finish`` makes the frames the pushes left in one
kernel call where they fit one block; the tail's padded copy, made by slices, is
:func:`~audiogate.dsp.whisper.padded_segment`'s. Every result is the whole clip's."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import audiogate.streaming.whisper as whisper_stream
from audiogate.cancel import NEVER
from audiogate.dsp.whisper import padded_segment, whisper_log_mel
from audiogate.streaming.whisper import WhisperLogMelStream, _end_segment

PADDINGS = ("max_length", "longest", "multiple", "windows")


def _early_peak(samples: int, seed: int) -> npt.NDArray[np.float32]:
    """Quiet noise, a loud second from 1 s (the maximum's last rise), then quiet noise
    with stretches of exact zeros (values far under the floor)."""
    rng = np.random.default_rng(seed)
    position = np.arange(samples) / 16_000
    gain = np.where((position > 1) & (position < 2), 0.5, 1e-3)
    gain = np.where((position % 3 > 2.5) & (position > 2), 0.0, gain)
    return (rng.standard_normal(samples) * gain).astype(np.float32)


def _stream(
    waveform: npt.NDArray[np.float32], padding: str, batch: int = 8_000
) -> tuple[WhisperLogMelStream, npt.NDArray[np.float32]]:
    stream = WhisperLogMelStream(n_mels=128, padding=padding)  # type: ignore[arg-type]
    for start in range(0, waveform.shape[0], batch):
        stream.push(waveform[start : start + batch])
    plan, features, _ = stream.finish()
    reference, _ = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))
    return stream, features


@pytest.mark.parametrize("padding", PADDINGS)
def test_the_pushes_re_clamp_what_a_risen_floor_changes(padding: str) -> None:
    """The floor rises during the loud second: the pushes re-clamp the earlier quiet
    blocks, and ``finish`` re-clamps nothing."""
    stream, _ = _stream(_early_peak(16_000 * 12, 1), padding)
    assert stream.settled_frames > 0
    assert stream.reclamped_frames == 0


@pytest.mark.parametrize("padding", PADDINGS)
def test_finish_makes_the_frames_left_in_one_kernel_call(
    monkeypatch: pytest.MonkeyPatch, padding: str
) -> None:
    """The interior frames of the last incomplete block and the tail's frames: one call."""
    waveform = _early_peak(16_000 * 30 - 1_234, 2)
    stream = WhisperLogMelStream(n_mels=128, padding=padding)  # type: ignore[arg-type]
    stream.push(waveform[:-3_000])
    stream.push(waveform[-3_000:])  # (under a block: left for finish)
    calls: list[int] = []
    kernel = whisper_stream.log_mel_block

    def counted(parts: list[npt.NDArray[np.float32]], out: npt.NDArray[np.float32]) -> np.float32:
        calls.append(out.shape[1])
        return kernel(parts, out)

    monkeypatch.setattr(whisper_stream, "log_mel_block", counted)
    plan, features, _ = stream.finish()
    reference, _ = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))
    assert len(calls) == 1
    assert calls[0] > 3_000 // 160  # interior frames with the tail's


def test_a_rising_clip_leaves_its_re_clamps_to_finish() -> None:
    """A maximum that rises at every push: the pushes re-clamp a bounded number of
    frames (at most four passes over the frames and SETTLE_FRAMES per rise), the rest
    waits for ``finish``."""
    rng = np.random.default_rng(3)
    samples = 16_000 * 60
    gain = 1e-4 * 1e4 ** (np.arange(samples) / samples)
    stream, _ = _stream((rng.standard_normal(samples) * gain).astype(np.float32), "multiple")
    frames = samples // 160
    assert stream.settled_frames <= 4 * frames + whisper_stream.SETTLE_FRAMES * (samples // 8_000)
    assert stream.reclamped_frames > 0


@settings(max_examples=300, deadline=None)
@given(
    samples=st.integers(401, 3_000),
    extra=st.integers(0, 2_000),
    start=st.integers(0, 5_000),
    length=st.integers(1, 400),
    seed=st.integers(0, 2**16),
)
def test_the_end_segment_is_padded_segment(
    samples: int, extra: int, start: int, length: int, seed: int
) -> None:
    """Any segment from a sample of the clip to at most 400 past the padded end (the
    reflection's reach; a shorter item's tail is in its head copy)."""
    clip = np.random.default_rng(seed).standard_normal(samples).astype(np.float32)
    padded = samples + extra
    start = min(start, padded)
    expected = padded_segment(clip, padded, start, start + length)
    got = _end_segment(clip, padded, start, start + length)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
