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
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from audiogate.dsp.melbank import triangular_filters
from audiogate.records import readonly

__all__ = [
    "FFT_BINS",
    "MAX_FREQUENCY_HZ",
    "MEL_FILTERS",
    "BankName",
    "float32_bank",
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

#: The remote-code extractor's bank, or the transformers-native one (``policy.variant``).
BankName = Literal["speechlib", "native"]


def kaldi_mel(frequency_hz: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Kaldi mel ``1127·ln(1 + f/700)`` of frequencies in Hz (float64)."""
    return np.asarray(1127.0 * np.log(1.0 + np.asarray(frequency_hz, dtype=np.float64) / 700.0))


@cache
def speechlib_mel_bank() -> npt.NDArray[np.float32]:
    """SpeechLib's bank, read-only float32 ``[shape=(80, 257)]`` (filters × bins).

    ``speechlib_mel``'s float64 expressions, so that every weight rounds to the same
    float32: centres ``linspace(mel(0), mel(7690), 82)``, one width ``Δ = (mel(7690) -
    mel(0)) / 81`` for every triangle (:func:`audiogate.dsp.melbank.triangular_filters`
    with ``width``), over bins ``klo..khi-1`` only.
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
    bank[:, klo:khi] = triangular_filters(centers, bin_mels, width=step).T
    return readonly(bank)


@cache
def native_mel_bank() -> npt.NDArray[np.float64]:
    """transformers' bank for ``Phi4MultimodalFeatureExtractor``, read-only float64
    ``[shape=(257, 80)]`` (bins × filters); the extractor casts it to float32.

    ``_create_triangular_filter_bank`` on Kaldi mels (triangles in mel space):
    :func:`audiogate.dsp.melbank.triangular_filters` with the slopes formula.
    """
    filter_mels = np.linspace(
        kaldi_mel(MIN_FREQUENCY_HZ), kaldi_mel(MAX_FREQUENCY_HZ), MEL_FILTERS + 2
    )
    bin_width_hz = BANK_RATE_HZ / ((FFT_BINS - 1) * 2)
    fft_mels = kaldi_mel(bin_width_hz * np.arange(FFT_BINS))
    bank = triangular_filters(filter_mels, fft_mels)
    return readonly(np.ascontiguousarray(bank, dtype=np.float64))


@cache
def float32_bank(name: BankName) -> npt.NDArray[np.float32]:
    """The bank the kernels multiply with, read-only float32 ``[shape=(257, 80)]`` (bins ×
    filters): transformers casts its float64 bank to float32 for the matmul."""
    if name == "native":
        return readonly(np.asarray(native_mel_bank(), dtype=np.float32))
    return speechlib_mel_bank().T
