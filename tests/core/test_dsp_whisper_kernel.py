"""The Whisper kernel's shortcuts are scipy's and NumPy's results bit for bit: the mel
product called straight into scipy's ``csr_matvecs`` equals ``bank @ x`` for every frame
count (one frame goes through scipy's ``csr_matvec``), and :func:`framed` over a
contiguous array is ``as_strided``'s view, read-only, and refuses frames past its end."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.dsp import whisper
from audiogate.dsp.whisper import framed, whisper_mel_matrix


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("count", [1, 2, 3, 54, 64, 255, 256])
def test_the_mel_product_is_scipys(n_mels: int, count: int) -> None:
    bank = whisper_mel_matrix(n_mels)
    rng = np.random.default_rng(count)
    power = rng.standard_normal((201, count)) ** 2 * 10.0 ** rng.uniform(-8, 4, (201, 1))
    power = power.astype(np.float32)
    expected = bank @ power
    got = whisper._mel_product(bank, power)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_framed_is_the_strided_view() -> None:
    samples = np.arange(5_000, dtype=np.float32)
    got = framed(samples, 120, 20)
    expected = np.lib.stride_tricks.as_strided(
        samples[120:], shape=(20, 400), strides=(640, 4), writeable=False
    )
    assert np.array_equal(got, expected)
    assert np.shares_memory(got, samples)
    assert not got.flags.writeable
    assert samples.flags.writeable
    with pytest.raises(ValueError, match="strides"):
        framed(samples, 5_000 - 399, 2)  # past the end


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("count", [1, 2, 3, 54, 64, 65, 200])
def test_a_small_block_is_the_large_blocks_columns(n_mels: int, count: int) -> None:
    """Frames are independent in the kernel: a block of any size (the transposed sum up
    to 64 frames, the transposed copy above) gives the 256-frame block's columns."""
    samples = np.random.default_rng(count).standard_normal(160 * 300).astype(np.float32)
    large = np.empty((n_mels, 256), dtype=np.float32)
    peak = whisper.log_mel_block([framed(samples, 0, 256)], large)
    small = np.empty((n_mels, count), dtype=np.float32)
    first = 256 - count
    small_peak = whisper.log_mel_block([framed(samples, 160 * first, count)], small)
    assert np.array_equal(small.view(np.uint32), large[:, first:].view(np.uint32))
    assert small_peak <= peak
    windowed = np.asarray(framed(samples, 0, 4) * whisper._WINDOW, dtype=np.float64)
    expected = np.fft.rfft(windowed, axis=-1)
    got = np.empty((4, 201), dtype=np.complex128)
    whisper._rfft(windowed, got)
    assert np.array_equal(got.view(np.float64), expected.view(np.float64))
