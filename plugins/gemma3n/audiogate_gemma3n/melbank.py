"""The HTK mel filter bank of Gemma 3n's USM frontend, built without transformers.

Equal, value for value, to transformers' ``create_fb_matrix(513, 125, 7600, 128, 16000,
fft_length=1024, norm=None)`` (``feature_extraction_gemma3n.py``): HTK mel
``2595·log10(1 + f/700)``, 130 points evenly spaced in mel, triangles built in the
**Hz** domain over the bin frequencies ``k · 15.625`` Hz, no area normalization.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from audiogate.dsp.melbank import SparseProjection, sparse_projection, triangular_filters
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FFT_LENGTH,
    MAX_FREQUENCY_HZ,
    MIN_FREQUENCY_HZ,
    SAMPLE_RATE_HZ,
)

__all__ = ["htk_mel_filter_bank", "mel_projection"]


def htk_mel_filter_bank(
    *,
    fft_bins: int = FFT_LENGTH // 2 + 1,
    min_hz: float = MIN_FREQUENCY_HZ,
    max_hz: float = MAX_FREQUENCY_HZ,
    mels: int = FEATURE_SIZE,
    rate_hz: int = SAMPLE_RATE_HZ,
    fft_length: int = FFT_LENGTH,
) -> npt.NDArray[np.float64]:
    """Triangular HTK mel filters ``[shape=(fft_bins, mels)]``, float64.

    The bin frequencies are float32 and everything after is float64, exactly the dtype
    path of the reference, so the result is bit-identical to it.
    """
    if fft_bins < 1 or mels < 1 or not 0 <= min_hz < max_hz or rate_hz <= 0 or fft_length <= 0:
        raise ValueError(
            f"invalid mel bank: fft_bins={fft_bins}, mels={mels}, min_hz={min_hz}, "
            f"max_hz={max_hz}, rate_hz={rate_hz}, fft_length={fft_length}"
        )
    # float32 on purpose: the reference's ``np.arange(n_freqs, dtype=np.float32)``.
    bin_hz = np.arange(fft_bins, dtype=np.float32) * (rate_hz / fft_length)
    mel_min = 2595.0 * math.log10(1.0 + min_hz / 700.0)
    mel_max = 2595.0 * math.log10(1.0 + max_hz / 700.0)
    edges_hz = 700.0 * (10 ** (np.linspace(mel_min, mel_max, mels + 2) / 2595.0) - 1.0)
    # Triangles in Hz (``create_fb_matrix``'s slopes, expression for expression).
    return triangular_filters(edges_hz, bin_hz)


@functools.cache
def mel_projection() -> SparseProjection:
    """The pinned bank as a float32 sparse matrix over its non-zero FFT bins.

    Each bin feeds at most two filters (946 weights in all), so a sparse product is
    several times faster than a dense matmul, single-threaded, and it sums every frame's
    terms in the same order whatever the number of frames.

    :returns: ``(matrix, start, stop)``: ``matrix`` is a read-only SciPy CSR array
        ``[shape=(128, stop - start)]`` to multiply magnitudes ``[shape=(stop - start, T)]``;
        bins outside ``start:stop`` (below 9 and from 487 on) have no weight in any filter.
    """
    return sparse_projection(htk_mel_filter_bank())
