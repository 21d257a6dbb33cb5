"""The two 80-filter mel banks of Phi-4 MM.

Both use the Kaldi mel scale ``1127·ln(1 + f/700)`` from 0 to 7690 Hz with triangles in
mel space and no normalization, over the 257 bins of a 512-point FFT at 16 kHz.

* :func:`speechlib_mel_bank` is ``speechlib_mel(16000, 512, 80, fmax=7690)`` of the
  remote-code ``processing_phi4mm.py`` (SpeechLib ``FbankFC``): only FFT bins 1..245 are
  used (``khi = int(7690·512/16000 + 0.5) = 246`` is exclusive), weights
  ``1 - |m_c - mel(k)|/Δ`` strictly inside the triangle, stored as float32.
* :func:`native_mel_bank` is transformers' ``mel_filter_bank(257, 80, 0, 7690, 16000,
  triangularize_in_mel_space=True, mel_scale="kaldi")`` of
  ``Phi4MultimodalFeatureExtractor``, computed here with the same float64 expressions so
  that it is equal bit for bit (transformers is not imported at run time). It differs
  from SpeechLib's in one entry: FFT bin 246 (7687.5 Hz) has weight ≈ 0.00972 in filter 79.
"""

from __future__ import annotations

from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.records import readonly

__all__ = [
    "FFT_BINS",
    "MAX_FREQUENCY_HZ",
    "MEL_FILTERS",
    "kaldi_mel",
    "native_mel_bank",
    "speechlib_mel_bank",
]

MEL_FILTERS: Final = 80
#: Bins of the 512-point FFT the bank is defined on (8 kHz input is padded to it).
FFT_BINS: Final = 257
BANK_RATE_HZ: Final = 16_000
BANK_FFT_SIZE: Final = 512
MIN_FREQUENCY_HZ: Final = 0.0
MAX_FREQUENCY_HZ: Final = 7690.0


def kaldi_mel(frequency_hz: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Kaldi mel ``1127·ln(1 + f/700)`` of frequencies in Hz (float64)."""
    return np.asarray(1127.0 * np.log(1.0 + np.asarray(frequency_hz, dtype=np.float64) / 700.0))


@cache
def speechlib_mel_bank() -> npt.NDArray[np.float32]:
    """SpeechLib's bank, read-only float32 ``[shape=(80, 257)]`` (filters × bins).

    The loops and float64 expressions are those of ``speechlib_mel`` so that every
    weight rounds to the same float32.
    """

    def f2bin(frequency: float) -> int:
        return int((frequency * BANK_FFT_SIZE / BANK_RATE_HZ) + 0.5)

    klo = f2bin(MIN_FREQUENCY_HZ) + 1
    khi = max(f2bin(MAX_FREQUENCY_HZ), klo)
    mlo = float(kaldi_mel(MIN_FREQUENCY_HZ))
    mhi = float(kaldi_mel(MAX_FREQUENCY_HZ))
    centers = np.linspace(mlo, mhi, MEL_FILTERS + 2)
    step = (mhi - mlo) / (MEL_FILTERS + 1)
    bins = np.arange(klo, khi)
    # bin2mel(k) = 1127·ln(1 + k·sr/(n_fft·700)), in that association order.
    bin_mels = 1127.0 * np.log(1.0 + bins * BANK_RATE_HZ / (BANK_FFT_SIZE * 700.0))
    bank = np.zeros((MEL_FILTERS, FFT_BINS), dtype=np.float32)
    for m in range(MEL_FILTERS):
        left, center, right = centers[m], centers[m + 1], centers[m + 2]
        inside = (left < bin_mels) & (bin_mels < right)
        bank[m, bins[inside]] = 1.0 - np.abs(center - bin_mels[inside]) / step
    return readonly(bank)


@cache
def native_mel_bank() -> npt.NDArray[np.float64]:
    """transformers' bank for ``Phi4MultimodalFeatureExtractor``, read-only float64
    ``[shape=(257, 80)]`` (bins × filters); the extractor casts it to float32."""
    mel_min = kaldi_mel(MIN_FREQUENCY_HZ)
    mel_max = kaldi_mel(MAX_FREQUENCY_HZ)
    filter_mels = np.linspace(mel_min, mel_max, MEL_FILTERS + 2)
    bin_width_hz = BANK_RATE_HZ / ((FFT_BINS - 1) * 2)
    fft_mels = kaldi_mel(bin_width_hz * np.arange(FFT_BINS))
    # _create_triangular_filter_bank, expression for expression.
    filter_diff = np.diff(filter_mels)
    slopes = np.expand_dims(filter_mels, 0) - np.expand_dims(fft_mels, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    bank = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    return readonly(np.ascontiguousarray(bank, dtype=np.float64))
