"""A sink's rows are handed over without a copy (issue #34): :meth:`FrameRows.take` cuts
the grown buffer to the clip's rows in place, so ``finish()`` copies no feature rows and
the clip holds no spare capacity."""

from __future__ import annotations

import numpy as np

from audiogate.streaming.scaffold import FrameRows


def test_take_cuts_the_buffer_in_place() -> None:
    rows = FrameRows(128)
    rows.grow(100)
    buffer = rows.grow(300)
    assert buffer.shape[0] == 512  # grown with spare capacity
    values = np.arange(300 * 128, dtype=np.float32).reshape(300, 128)
    buffer[:300] = values
    rows.done = 300
    taken = rows.take(290)
    assert taken is buffer  # the same array, not a copy
    assert taken.shape == (290, 128)
    assert taken.nbytes == 290 * 128 * 4
    assert taken.flags.c_contiguous
    assert taken.flags.owndata
    assert np.array_equal(taken, values[:290])
    assert rows.nbytes == 0


def test_take_of_a_full_buffer_and_of_a_view() -> None:
    rows = FrameRows(4)
    buffer = rows.grow(256)
    buffer[:] = 1.0
    assert rows.take(256) is buffer
    # A buffer that is not an owned array (a view) is copied, not cut.
    rows = FrameRows(4)
    rows._rows = np.ones((10, 8), dtype=np.float32)[:, :4]
    taken = rows.take(5)
    assert taken.shape == (5, 4)
    assert np.all(taken == 1.0)
