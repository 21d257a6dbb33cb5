"""A rise of the Whisper stream's running floor looks only at the blocks it may change
(issue #34): the blocks are split by their minimum into those holding a value under a
floor seen so far (re-clamped at each rise) and a heap of the others, of which a rise
takes only those under the new floor; ``finish`` does the same with the final floor.
Every result is the whole clip's (``tests/streaming/test_whisper_stream_clamp.py``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from audiogate.cancel import NEVER
from audiogate.dsp.whisper import whisper_log_mel
from audiogate.streaming.whisper import WhisperLogMelStream


def _clip(samples: int, silent: bool) -> npt.NDArray[np.float32]:
    """Noise rising tenfold over the clip (the floor rises at many pushes), with exact
    zeros every other second when ``silent`` (values far under every floor)."""
    rng = np.random.default_rng(5)
    position = np.arange(samples) / 16_000
    gain = 0.01 * 10 ** (position / position[-1])
    if silent:
        gain = np.where(position.astype(int) % 2 == 1, 0.0, gain)
    return (rng.standard_normal(samples) * gain).astype(np.float32)


@pytest.mark.parametrize("silent", [False, True])
@pytest.mark.parametrize("padding", ["max_length", "longest", "multiple", "windows"])
def test_a_rise_sees_only_the_blocks_under_the_floor(padding: str, silent: bool) -> None:
    waveform = _clip(16_000 * 20, silent)
    stream = WhisperLogMelStream(n_mels=128, padding=padding)  # type: ignore[arg-type]
    rises = 0
    for start in range(0, waveform.shape[0], 8_000):
        stream.push(waveform[start : start + 8_000])
        item = stream._items[0]
        rises += item.settled == item.floor
        low = {position for position in item.low}
        assert len(low) == len(item.low)
        assert low.isdisjoint(position for _, position in item.above)
        assert len(low) + len(item.above) == len(item.blocks)
        # Each side holds what it claims, against the floor the blocks settled.
        assert all(not item.blocks[position][3] >= item.floor for position in low)
        assert all(minimum >= item.settled for minimum, _ in item.above)
        assert item.low_frames == sum(item.blocks[position][1] for position in low)
        if not silent:  # (the first blocks' quietest bins only): a rise scans few
            assert len(low) <= 2
    assert rises > 1
    plan, features, _ = stream.finish()
    reference, _ = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    assert np.array_equal(features.view(np.uint32), reference.view(np.uint32))
    if silent:
        assert stream.settled_frames > 0
