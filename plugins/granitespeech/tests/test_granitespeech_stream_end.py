"""The streamed clip's end frames (:func:`audiogate_granitespeech.streaming._end_frames`,
one kernel call on the reflected end's samples) equal :func:`~audiogate_granitespeech.
logmel.batch_frames` of the clip alone, bit for bit, at every length around the hop and
the window; where a window also reads the clip's start it declines (``batch_frames``
then runs, as before). The frames' view (``_framed``) reads every hop and refuses a
buffer too short for its frames."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate_granitespeech.geometry import N_MELS, granite_geometry
from audiogate_granitespeech.logmel import batch_frames
from audiogate_granitespeech.streaming import _end_frames


@pytest.mark.parametrize(
    "samples", [*range(520, 700, 7), 679, 680, 681, 839, 840, 841, 16_000, 480_000, 480_001]
)
def test_end_frames_equal_batch_frames(samples: int) -> None:
    x = (np.random.default_rng(samples).standard_normal(samples) * 0.1).astype(np.float32)
    geometry = granite_geometry(samples)
    first, stop = geometry.interior, geometry.frames
    assert first < stop
    expected = batch_frames(
        x, total_samples=samples, first=first, stop=stop, clip_index=0, cancel=NEVER
    )
    out = np.full((stop - first, N_MELS), np.nan, dtype=np.float32)
    assert _end_frames(x, first, out)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("samples", [257, 300, 359])  # under 2 interior frames
def test_windows_reading_the_start_are_left_to_batch_frames(samples: int) -> None:
    x = np.ones(samples, dtype=np.float32)
    geometry = granite_geometry(samples)
    out = np.full((geometry.frames - geometry.interior, N_MELS), 7.0, dtype=np.float32)
    assert geometry.interior < 2
    assert not _end_frames(x, geometry.interior, out)
    assert (out == 7.0).all()  # nothing written


def test_framed_views_every_hop_and_refuses_a_short_buffer() -> None:
    from audiogate_granitespeech.logmel import _framed

    x = np.arange(160 * 4 + 400, dtype=np.float32)
    frames = _framed(x, 5)
    expected = np.lib.stride_tricks.sliding_window_view(x, 400)[::160]
    np.testing.assert_array_equal(frames, expected)
    assert not frames.flags.writeable
    assert np.shares_memory(frames, x)
    with pytest.raises(ValueError, match="size of buffer"):  # a 6th frame: past the end
        _framed(x, 6)


def test_the_kernels_rfft_is_numpys() -> None:
    from audiogate_granitespeech.logmel import _rfft

    rows = np.random.default_rng(3).standard_normal((7, 512))
    out = np.empty((7, 257), dtype=np.complex128)
    _rfft(rows, out)
    expected = np.fft.rfft(rows, axis=-1)
    np.testing.assert_array_equal(out.view(np.uint64), expected.view(np.uint64))
