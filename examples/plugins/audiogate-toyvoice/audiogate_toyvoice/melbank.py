"""toyvoice's mel bank: 40 triangular HTK mel filters from 0 Hz to Nyquist.

The mel scale and the band edges are toyvoice's own: edges equally spaced on the HTK
mel scale (``2595 log10(1 + f/700)``), evaluated at the 257 bins of a 512-point real FFT,
in Hz. :func:`audiogate.dsp.triangular_filters` turns them into triangles that rise from
0 at a filter's lower edge to 1 at its centre and fall back to 0 at its upper edge,
unnormalized (peak 1).
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from audiogate.dsp import triangular_filters
from audiogate.records import readonly
from audiogate_toyvoice.geometry import N_FFT, N_MELS

__all__ = ["mel_bank"]


def _hz_to_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _mel_to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


@functools.lru_cache(maxsize=1)
def mel_bank(rate_hz: int = 16_000) -> npt.NDArray[np.float32]:
    """Triangular HTK mel filters ``[shape=(257, 40)]`` from 0 Hz to Nyquist."""
    edges_hz = _mel_to_hz(np.linspace(0.0, _hz_to_mel(np.array(rate_hz / 2)), N_MELS + 2))
    bins_hz = np.fft.rfftfreq(N_FFT, d=1.0 / rate_hz)
    return readonly(triangular_filters(edges_hz, bins_hz).astype(np.float32))
