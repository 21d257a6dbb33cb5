"""The HTK mel bank of torchaudio's ``MelSpectrogram`` as Granite Speech configures it.

``torchaudio.functional.melscale_fbanks(257, 0, 8000, 80, 16000, norm=None,
mel_scale="htk")``: 82 edges equally spaced on the HTK scale ``2595 log10(1 + f / 700)``
from 0 to 8 kHz (a float32 ``torch.linspace``), converted back to Hz in float32, and
unnormalised triangles over the bin frequencies ``linspace(0, 8000, 257)``, every step
in float32 as torchaudio runs it, so the bank is torchaudio's bit for bit
(``tests/test_granitespeech_features.py`` compares them).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.records import readonly
from audiogate_granitespeech.geometry import N_FFT, N_MELS, SAMPLE_RATE_HZ

__all__ = ["BINS", "htk_mel_bank", "linspace_torch"]

#: One-sided spectrum bins of the 512-point FFT.
BINS: Final = N_FFT // 2 + 1
_F32 = np.float32
#: ``torch.pow(10.0, x)`` (float32, vectorised) is one ulp above the correctly rounded
#: power at this edge; kept so the bank stays torchaudio's.
_TORCH_POW_FIXES: Final = {38: 0x4050BE3C}


def linspace_torch(start: float, end: float, steps: int) -> npt.NDArray[np.float32]:
    """``torch.linspace(start, end, steps)`` in float32: ``start + step * i`` for the
    first half, ``end - step * (steps - 1 - i)`` for the second."""
    first, last = _F32(start), _F32(end)
    step = _F32((last - first) / _F32(steps - 1))
    index = np.arange(steps)
    rising = first + step * index.astype(_F32)
    falling = last - step * (steps - 1 - index).astype(_F32)
    return np.where(index < steps // 2, rising, falling).astype(_F32)


def htk_mel_bank() -> npt.NDArray[np.float32]:
    """The 257 × 80 bank (bins by filters), float32, read-only."""
    top_mel = 2595.0 * math.log10(1.0 + (SAMPLE_RATE_HZ // 2) / 700.0)
    mels = linspace_torch(0.0, top_mel, N_MELS + 2)
    power = np.power(10.0, (mels / _F32(2595.0)).astype(np.float64)).astype(_F32)
    bits = power.view(np.uint32)
    for index, value in _TORCH_POW_FIXES.items():
        bits[index] = value
    edges = (_F32(700.0) * (power - _F32(1.0))).astype(_F32)
    bins = linspace_torch(0.0, float(SAMPLE_RATE_HZ // 2), BINS)
    gaps = edges[1:] - edges[:-1]
    slopes = edges[None, :] - bins[:, None]
    down = (_F32(-1.0) * slopes[:, :-2]) / gaps[:-1]
    up = slopes[:, 2:] / gaps[1:]
    bank = np.maximum(_F32(0.0), np.minimum(down, up)).astype(_F32)
    return readonly(np.ascontiguousarray(bank))
