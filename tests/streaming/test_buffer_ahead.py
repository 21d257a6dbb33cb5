"""Stream buffers grow a batch ahead (issue #34): after a full batch there is room for
the next, so a stream's last (shorter) batch and ``finish()`` never grow and copy the
clip."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.streaming.buffer import GrowingArray, capacity_bound, planned_capacity
from audiogate.streaming.scaffold import FrameRows


def _batches(total: int, batch: int) -> list[np.ndarray]:
    values = np.arange(total, dtype=np.float32)
    return [values[i : i + batch] for i in range(0, total, batch)]


@pytest.mark.parametrize("total", [16_001, 23_500, 31_000, 40_000 + 1, 60_000, 100_123])
def test_the_last_shorter_batch_never_grows_the_waveform(total: int) -> None:
    buffer = GrowingArray(np.float32)
    batches = _batches(total, 8_000)
    for batch in batches[:-1]:
        buffer.extend(batch)
        # Room for one more full batch after every full batch (but the first).
        assert buffer.nbytes // 4 - len(buffer) >= 8_000
    before = buffer._buffer
    buffer.extend(batches[-1])
    buffer.extend(np.ones(3, np.float32))  # a resampler's flush in finish()
    assert buffer._buffer is before  # no growth, no copy
    view = buffer.view()
    assert np.array_equal(view[:total], np.arange(total, dtype=np.float32))
    assert np.array_equal(view[total:], np.ones(3, np.float32))
    assert not view.flags.writeable


def test_the_old_rule_grew_in_the_tail() -> None:
    # 32,000 samples in 8,000-sample batches: the old doubling (grow only when an
    # append does not fit) left capacity 32,000 and grew in the 100-sample tail.
    buffer = GrowingArray(np.float32)
    for batch in _batches(32_000, 8_000):
        buffer.extend(batch)
    assert buffer.nbytes // 4 >= 32_000 + 8_000
    assert buffer.capacity_for(32_100) == buffer.nbytes // 4


def test_a_whole_clip_at_once_does_not_grow_ahead() -> None:
    buffer = GrowingArray(np.float32)
    buffer.extend(np.zeros(480_000, np.float32))
    assert buffer.nbytes == 480_000 * 4


@pytest.mark.parametrize("frames", [300, 600, 700, 1_023, 1_300, 16_400])
def test_the_last_partial_block_never_grows_the_rows(frames: int) -> None:
    rows = FrameRows(8)
    values = np.arange(frames * 8, dtype=np.float32).reshape(frames, 8)
    for stop in range(256, frames, 256):  # full 256-row blocks, as phi4mm computes
        buffer = rows.grow(stop)
        buffer[rows.done : stop] = values[rows.done : stop]
        rows.done = stop
    before = rows._rows
    buffer = rows.grow(frames)  # finish(): the last, partial block
    assert buffer is before or rows.done == 0
    buffer[rows.done : frames] = values[rows.done :]
    rows.done = frames
    taken = rows.take(frames)
    assert np.array_equal(taken, values)


def test_the_bound_covers_any_shorter_append() -> None:
    # The reservation (capacity_for) bounds what one append, or any shorter one, takes.
    for capacity, size, margin in ((0, 0, 0), (16_000, 8_000, 8_000), (40_000, 32_000, 8_000)):
        for stop in range(size, size + 70_000, 977):
            bound = capacity_bound(
                capacity=capacity,
                size=size,
                stop=stop,
                margin=margin,
                minimum=4096,
                first_ahead=1 << 15,
            )
            for shorter in range(size, stop + 1, 613):
                grown, _ = planned_capacity(
                    capacity=capacity, size=size, stop=shorter, margin=margin, minimum=4096
                )
                assert grown <= bound, (capacity, size, margin, stop, shorter)
