"""The Slaney mel scale and its area-normalised filter bank (Whisper's frontend).

Equal to transformers' ``mel_filter_bank(n_fft // 2 + 1, n_mels, f_min, f_max, rate,
norm="slaney", mel_scale="slaney")`` (= ``librosa.filters.mel(sr=rate, n_fft=n_fft,
n_mels=n_mels)``, transposed) bit for bit: triangles in Hz between centres equally
spaced on the Slaney mel scale (linear below 1 kHz, logarithmic above), each scaled by
``2 / (f[j+2] - f[j])`` (equal area), through :func:`audiogate.dsp.melbank.
triangular_filters`.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.dsp.melbank import triangular_filters

__all__ = ["hz_to_mel_slaney", "mel_to_hz_slaney", "slaney_mel_filters"]

# Operations in the order librosa and transformers use, so the bank is bit-identical.
_MIN_LOG_HZ: Final = 1000.0
_MIN_LOG_MEL: Final = 15.0  # 1000 Hz at 200/3 Hz per mel
_MELS_PER_LOG: Final = 27.0 / np.log(6.4)
_LOGS_PER_MEL: Final = np.log(6.4) / 27.0


def hz_to_mel_slaney(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Slaney (Auditory Toolbox) mel of ``hz``, float64 ``[shape=hz.shape]``."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = 3.0 * hz / 200.0
    log = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) * _MELS_PER_LOG
    return np.where(hz >= _MIN_LOG_HZ, log, linear)


def mel_to_hz_slaney(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Inverse of :func:`hz_to_mel_slaney`, float64 ``[shape=mel.shape]``."""
    mel = np.asarray(mel, dtype=np.float64)
    linear = 200.0 * mel / 3.0
    log = _MIN_LOG_HZ * np.exp(_LOGS_PER_MEL * (np.maximum(mel, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log, linear)


def slaney_mel_filters(
    *, n_fft: int, n_mels: int, f_min_hz: float, f_max_hz: float, rate_hz: int
) -> npt.NDArray[np.float64]:
    """Slaney-normalised triangular mel filters ``[shape=(n_fft // 2 + 1, n_mels)]``.

    :param n_fft: FFT size (the spectrum has ``n_fft // 2 + 1`` bins from 0 to
        ``rate_hz // 2``).
    :param n_mels: number of filters.
    :param f_min_hz: lowest band edge.
    :param f_max_hz: highest band edge.
    :param rate_hz: sample rate.
    :raises ValueError: an empty or inverted band, or a band past Nyquist.
    """
    if n_fft < 2 or n_mels < 1 or not 0 <= f_min_hz < f_max_hz <= rate_hz / 2:
        raise ValueError(
            f"need n_fft >= 2, n_mels >= 1 and 0 <= f_min_hz < f_max_hz <= rate_hz / 2; got "
            f"n_fft={n_fft}, n_mels={n_mels}, f_min_hz={f_min_hz}, f_max_hz={f_max_hz}, "
            f"rate_hz={rate_hz}"
        )
    edges_mel = np.linspace(
        hz_to_mel_slaney(np.array(f_min_hz)), hz_to_mel_slaney(np.array(f_max_hz)), n_mels + 2
    )
    edges_hz = mel_to_hz_slaney(edges_mel)
    # ``rate // 2`` as transformers' mel_filter_bank spells it (equal for even rates).
    bins_hz = np.linspace(0, rate_hz // 2, n_fft // 2 + 1)
    return triangular_filters(edges_hz, bins_hz, norm="slaney")
