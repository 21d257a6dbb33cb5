"""toyvoice's log-mel kernel in NumPy: frames of a 16 kHz waveform to 40 log mel energies.

Each 400-sample frame is multiplied by a periodic Hann window; its 512-point power
spectrum goes through one matrix product with :func:`~audiogate_toyvoice.melbank.mel_bank`
and a natural log floored at :data:`LOG_FLOOR`. The waveform is framed with stride tricks
(no copy) and processed in blocks of :data:`BLOCK_FRAMES`, one batched FFT each, polling
the cancel token once per block.
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.records import readonly
from audiogate_toyvoice.geometry import FRAME_HOP_SAMPLES, FRAME_SAMPLES, N_FFT, N_MELS
from audiogate_toyvoice.melbank import mel_bank

__all__ = ["BLOCK_FRAMES", "LOG_FLOOR", "log_mel", "working_bytes"]

#: Frames per block; the cancel token is polled once per block.
BLOCK_FRAMES: Final = 256
LOG_FLOOR: Final = 1e-10
_BINS: Final = N_FFT // 2 + 1
#: Scratch per frame of a block: the windowed frame (float32); NumPy's FFT, which works in
#: float64 (the zero-padded frame, a complex128 spectrum, then its complex64 copy); the
#: power and its two squared terms (float32); the mel energies and their floor (float32).
_BYTES_PER_FRAME: Final = (
    FRAME_SAMPLES * 4 + N_FFT * 8 + _BINS * (16 + 8) + _BINS * 4 * 3 + N_MELS * 4 * 2
)


@functools.lru_cache(maxsize=1)
def _window() -> npt.NDArray[np.float32]:
    return readonly(np.hanning(FRAME_SAMPLES + 1)[:-1].astype(np.float32))  # periodic Hann


def working_bytes(frames: int) -> int:
    """Scratch bytes of :func:`log_mel` for ``frames`` frames, besides its input and output:
    one block, the window and the mel bank."""
    block = min(frames, BLOCK_FRAMES)
    return block * _BYTES_PER_FRAME + FRAME_SAMPLES * 4 + _BINS * N_MELS * 4


def log_mel(
    waveform: npt.NDArray[np.float32],
    *,
    frames: int,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """Log-mel energies of the first ``frames`` frames of ``waveform``.

    :param waveform: float32 ``[shape=(samples,)]`` at 16 kHz, with at least ``frames``
        whole frames.
    :param frames: frames to compute (the plan's).
    :param clip_index: zero-based clip index, for the cancel token.
    :param cancel: polled at the ``Feature`` checkpoint before each block of frames.
    :returns: read-only float32 ``[shape=(frames, 40)]``.
    """
    window, bank = _window(), mel_bank()
    out = np.empty((frames, N_MELS), dtype=np.float32)
    framed = sliding_window_view(waveform, FRAME_SAMPLES)[::FRAME_HOP_SAMPLES]
    for start in range(0, frames, BLOCK_FRAMES):
        cancel.check(Checkpoint.FEATURE, clip_index)
        stop = min(start + BLOCK_FRAMES, frames)
        spectrum = np.fft.rfft(framed[start:stop] * window, n=N_FFT)
        power = spectrum.real**2 + spectrum.imag**2
        np.log(np.maximum(power @ bank, LOG_FLOOR), out=out[start:stop])
    return readonly(out)
