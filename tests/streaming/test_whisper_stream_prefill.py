"""A wide window's padding is filled in the pushes (issue #34): Qwen2.5-Omni's 300 s
window is mostly padding (13.8 MB of constant frames for a 30 s clip); once the item's
running floor has held for :data:`~audiogate.streaming.whisper.PREFILL_STEADY_FRAMES`
frames, the pushes fill it with that floor's constant, and ``finish`` writes only the
columns left, or all of them when the final floor is another. The result is the whole
clip's, bit for bit, C-contiguous."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_helpers import chunked

from audiogate.cancel import NEVER
from audiogate.dsp.whisper import whisper_log_mel, whisper_plan
from audiogate.streaming.whisper import PREFILL_STEADY_FRAMES, WhisperLogMelStream

WIDE = 4_800_000  # Qwen2.5-Omni's 300 s window


def _noise(samples: int, seed: int, loud_from: int | None = None) -> npt.NDArray[np.float32]:
    """Steady noise; from ``loud_from`` on, louder (the maximum's last rise)."""
    gain = np.full(samples, 0.1)
    if loud_from is not None:
        gain[loud_from:] = 0.8
    return (np.random.default_rng(seed).standard_normal(samples) * gain).astype(np.float32)


def _padding(samples: int) -> int:
    """The constant frames of the window."""
    return 30_000 - whisper_plan(samples, n_mels=128, chunk_samples=WIDE).items[0].computed


def _streamed(waveform: npt.NDArray[np.float32], sizes: list[int]) -> WhisperLogMelStream:
    stream = WhisperLogMelStream(n_mels=128, padding="max_length", chunk_samples=WIDE)
    for part in chunked(waveform.shape[0], sizes):
        stream.push(waveform[part])
    plan, features, mask = stream.finish()
    assert plan == whisper_plan(waveform.shape[0], n_mels=128, chunk_samples=WIDE)
    reference, reference_mask = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))
    assert np.array_equal(mask, reference_mask)
    assert features.flags.c_contiguous
    assert not features.flags.writeable
    return stream


def test_a_steady_floor_leaves_no_padding_to_finish() -> None:
    stream = _streamed(_noise(16_000 * 12, 1), [8_000])
    assert stream.prefilled_frames > 0
    assert stream.padded_frames == 0


def test_a_floor_risen_in_the_last_push_fills_at_finish() -> None:
    """The pushes filled the padding with the earlier floor's constant: ``finish``
    writes all of it again."""
    samples = 16_000 * 12
    stream = _streamed(_noise(samples, 2, loud_from=samples - 4_000), [8_000])
    assert stream.prefilled_frames > 0
    assert stream.padded_frames == _padding(samples)


def test_a_short_stream_is_not_prefilled() -> None:
    """Under the steady frames (and the buffered layout's), ``finish`` fills it all."""
    samples = 160 * PREFILL_STEADY_FRAMES
    stream = _streamed(_noise(samples, 3), [8_000])
    assert stream.prefilled_frames == 0
    assert stream.padded_frames == _padding(samples)


@settings(max_examples=12, deadline=None)
@given(
    samples=st.integers(16_000 * 3, 16_000 * 9),
    loud=st.floats(0.0, 1.0),
    sizes=st.lists(st.integers(1, 20_000), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_any_chunking_and_rise_is_the_whole_clip(
    samples: int, loud: float, sizes: list[int], seed: int
) -> None:
    _streamed(_noise(samples, seed, loud_from=int(loud * samples)), sizes)
