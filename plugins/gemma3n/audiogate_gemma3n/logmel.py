"""The Gemma 3n USM log-mel kernel (numpy), as ``Gemma3nAudioFeatureExtractor`` computes it.

``[shape=(T, 128)]`` float32 per clip, ``T`` from :func:`~audiogate_gemma3n.geometry.
feature_frames`: the clip is padded with zeros to a multiple of 128 samples, framed in 513
samples with a hop of 160 (no centring), pre-emphasised HTK style on the first 512
(``y[0] = 0.03·x[0]``, ``y[i] = x[i] - 0.97·x[i-1]``), windowed with a periodic Hann(512),
transformed with a 1024-point real FFT, reduced to its **magnitude**, projected on the HTK
mel bank (125–7600 Hz) and logged with a floor of 1e-5. Maximum error against the FE is
about 1e-6 (parity bound 5e-6).

Numerics, measured against transformers 5.24.0 / NumPy 2.4:

* Everything up to the FFT input is computed with the FE's own float32 operations, in its
  order, so the FFT input is bit-identical.
* NumPy >= 2 runs the FE's ``rfft`` of float32 frames in **double** precision and rounds
  the result to complex64 (checked: bit-equal to the float64 ``rfft`` cast to complex64).
  So the FFT here is NumPy's float64 ``rfft`` of the same values, zero-padded in place and
  written into a preallocated block, rounded to complex64 the same way: the FE's spectrum
  bit for bit, in less than half its time. A float32 FFT (SciPy's, ducc0's or torch's) is
  not enough: bins near a frame's rounding floor (high bands of tones and sweeps, single
  bins of noise) then differ by up to 1.07 in the log on a sweep, 1e-4 on noise. The FFT
  is most of the run time (see ``benchmarks/bench_gemma3n.py``).
* The magnitude is the FE's own complex64 ``abs`` (the complex64 rounding happens in
  numpy's cast buffer, reading the spectrum bins-by-frames). The mel projection is a sparse
  float32 product per block over the bank's non-zero bins 9..486 (946 weights; the FE's dense
  float64 matmul does 65,664 multiply-adds per frame) and the log is float32; the
  difference from the FE's float64 path stays below 1e-6 (one float32 ulp). Every frame
  is summed in the same order, so a frame's values do not depend on the clip around it.

Frames go through in blocks of :data:`FRAMES_PER_BLOCK`, with a cancellation check per
block. Clips of several blocks are spread over :data:`~audiogate.dsp.blocks.BLOCK_THREADS`
threads (:func:`audiogate.dsp.blocks.run_blocks`; the FFT is most of the work and every
block gives the same values on any thread). Each thread's block buffers (about 4.5 MiB)
are allocated once and reused (:func:`audiogate.dsp.scratch.thread_scratch`), so a call
allocates only its result and per-block products.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.blocks import run_blocks
from audiogate.dsp.scratch import thread_scratch
from audiogate.errors import PluginError
from audiogate.records import readonly
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FFT_LENGTH,
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    MEL_FLOOR,
    PREEMPHASIS,
)
from audiogate_gemma3n.melbank import mel_projection

__all__ = [
    "FRAMES_PER_BLOCK",
    "HANN_WINDOW",
    "SCRATCH_BYTES",
    "UFUNC_BUFFER_BYTES",
    "block_count",
    "floor_value",
    "log_mel_frames",
]

#: Frames per FFT block: one cancellation check each, and the scratch bound. Below 256 so
#: that the per-block product (128 × 240 float32) stays under malloc's 128 KiB mmap threshold.
FRAMES_PER_BLOCK: Final = 240
_FLOAT32: Final = 4
_FLOAT64: Final = 8
_COMPLEX128: Final = 16
_BINS: Final = FFT_LENGTH // 2 + 1
#: Fixed scratch of one block and thread (see :class:`_BlockScratch`): the zero-padded
#: source span and its pre-emphasis, the float64 FFT input, the complex128 spectrum, the
#: magnitudes, and the sparse product's result (allocated per block by SciPy); plans add
#: numpy's casting buffers (:data:`UFUNC_BUFFER_BYTES`).
SCRATCH_BYTES: Final = 2 * _FLOAT32 * (
    FRAME_HOP_SAMPLES * (FRAMES_PER_BLOCK - 1) + FRAME_SAMPLES
) + FRAMES_PER_BLOCK * (
    FFT_LENGTH * _FLOAT64 + _BINS * (_COMPLEX128 + _FLOAT32) + FEATURE_SIZE * _FLOAT32
)
#: NumPy's casting buffers (8,192 elements per operand) and small per-block temporaries.
UFUNC_BUFFER_BYTES: Final = 256 << 10


def block_count(frames: int) -> int:
    """Blocks of :data:`FRAMES_PER_BLOCK` frames for ``frames`` frames."""
    return -(-frames // FRAMES_PER_BLOCK)


# The FE's float32 constants: NumPy 2 casts the Python floats to the array's float32.
_PREEMPHASIS32: Final = np.float32(PREEMPHASIS)
_FIRST_SCALE32: Final = np.float32(1.0 - PREEMPHASIS)
_MEL_FLOOR32: Final = np.float32(MEL_FLOOR)
#: The floor as a row: numpy (2.4) runs ``maximum`` with a scalar operand in a scalar
#: loop, 2-3x slower than with a broadcast row.
_MEL_FLOOR_ROW: Final = readonly(np.full(FRAMES_PER_BLOCK, _MEL_FLOOR32))
#: Periodic Hann(512) in float32, computed with the FE's float32 operations.
HANN_WINDOW: Final = readonly(
    (
        0.5 * (1 - np.cos(2 * np.pi * np.arange(FRAME_SAMPLES, dtype=np.float32) / FRAME_SAMPLES))
    ).astype(np.float32)
)


class _BlockScratch:
    """One block's buffers, allocated once per thread (:func:`_scratch`) and reused by every call.

    Reuse keeps each call from mapping (and page-faulting) megabytes of fresh memory,
    which in a process whose malloc has not yet raised its mmap threshold costs more than
    the FFT itself. The FFT input's upper half is zero once and never written.
    """

    def __init__(self) -> None:
        _, start, stop = mel_projection()
        span = FRAME_HOP_SAMPLES * (FRAMES_PER_BLOCK - 1) + FRAME_SAMPLES
        self.source = np.empty(span, dtype=np.float32)
        self.emphasis = np.empty(span - 1, dtype=np.float32)
        # Samples 1..511 of frame t are emphasis[160·t :]; built once (as_strided is slow).
        self.frames = np.lib.stride_tricks.as_strided(
            self.emphasis,
            shape=(FRAMES_PER_BLOCK, FRAME_SAMPLES - 1),
            strides=(FRAME_HOP_SAMPLES * _FLOAT32, _FLOAT32),
            writeable=False,
        )
        self.fft_input = np.zeros((FRAMES_PER_BLOCK, FFT_LENGTH), dtype=np.float64)
        self.spectrum = np.empty((FRAMES_PER_BLOCK, _BINS), dtype=np.complex128)
        self.magnitude = np.empty((stop - start) * FRAMES_PER_BLOCK, dtype=np.float32)


def _scratch() -> _BlockScratch:
    return thread_scratch("gemma3n.log_mel", _BlockScratch)


def floor_value() -> np.float32:
    """The feature value of an all-zero frame: ``float32(ln(1e-5))`` (the FE's float64 log)."""
    return np.float32(np.log(np.float64(MEL_FLOOR)))


def log_mel_frames(
    waveform: npt.NDArray[np.float32],
    *,
    lead_samples: int,
    first_frame: int,
    stop_frame: int,
    out: npt.NDArray[np.float32],
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> None:
    """Compute frames ``first_frame:stop_frame`` of a zero-padded clip into ``out``.

    The padded clip is ``lead_samples`` zeros, then ``waveform``, then zeros; frame ``t``
    starts at its sample ``160·t``. Right padding is ``lead_samples = 0``; left padding in
    a batch of padded length ``N`` is ``N - len(waveform)``.

    :param out: float32 ``[shape=(stop_frame - first_frame, 128)]``, written in place.
    :param cancel: polled at the ``Feature`` checkpoint before every block.
    """
    count = stop_frame - first_frame
    if count < 0 or out.shape != (count, FEATURE_SIZE) or out.dtype != np.float32:
        raise PluginError(
            f"gemma3n frames {first_frame}:{stop_frame} cannot go into {out.dtype}{list(out.shape)}"
        )
    if count == 0:
        return

    def block(index: int) -> None:
        t0 = first_frame + index * FRAMES_PER_BLOCK
        row = t0 - first_frame
        rows = min(FRAMES_PER_BLOCK, stop_frame - t0)
        _log_mel_block(
            waveform, start=FRAME_HOP_SAMPLES * t0 - lead_samples, out=out[row : row + rows]
        )

    run_blocks(
        block_count(count),
        block,
        cancel=cancel,
        checkpoint=Checkpoint.FEATURE,
        clip_index=clip_index,
    )


def _log_mel_block(
    waveform: npt.NDArray[np.float32], *, start: int, out: npt.NDArray[np.float32]
) -> None:
    """Log-mel of ``len(out)`` frames into ``out``; the first starts at sample ``start``
    of the waveform (negative: inside the leading zeros)."""
    projection, bin_start, bin_stop = mel_projection()
    scratch = _scratch()
    rows = out.shape[0]
    n = waveform.shape[0]
    span = FRAME_HOP_SAMPLES * (rows - 1) + FRAME_SAMPLES
    lo, hi = max(start, 0), min(start + span, n)
    if lo == start and hi == start + span:
        src = waveform[start : start + span]
    else:
        # The padded clip's samples [start, start + span), zeros outside the waveform.
        src = scratch.source[:span]
        if lo >= hi:
            src.fill(0.0)
        else:
            src[: lo - start].fill(0.0)
            src[lo - start : hi - start] = waveform[lo:hi]
            src[hi - start :].fill(0.0)
    # Pre-emphasis once over the span: samples 1..511 of every frame are
    # ``x[i] - 0.97·x[i-1]`` whatever the frame, in the FE's float32 operation order.
    emph = scratch.emphasis[: span - 1]
    np.multiply(src[:-1], _PREEMPHASIS32, out=emph)
    np.subtract(src[1:], emph, out=emph)
    frames = scratch.fft_input[:rows]
    # Windowing rounds in float32, as in the FE; the float64 copy is exact.
    np.multiply(
        scratch.frames[:rows], HANN_WINDOW[1:], out=frames[:, 1:FRAME_SAMPLES], dtype=np.float32
    )
    # HTK flavour: the first sample is scaled by 0.03, then windowed by Hann[0] = 0.
    firsts = src[: FRAME_HOP_SAMPLES * (rows - 1) + 1 : FRAME_HOP_SAMPLES]
    np.multiply(firsts * _FIRST_SCALE32, HANN_WINDOW[0], out=frames[:, 0], dtype=np.float32)
    # NumPy >= 2 computes the FE's float32 ``rfft`` in double precision and rounds it
    # to complex64: the float64 ``rfft`` of the same values, rounded here, is the FE's
    # spectrum bit for bit, and the magnitude is then the FE's own complex64 ``abs``.
    spectrum = scratch.spectrum[:rows]
    np.fft.rfft(frames, axis=-1, out=spectrum)
    # Bins by frames, contiguous, the layout the sparse product reads; the complex64
    # rounding ("F->f") happens in numpy's cast buffer as it reads the spectrum transposed.
    magnitude = scratch.magnitude[: (bin_stop - bin_start) * rows].reshape(-1, rows)
    np.absolute(
        spectrum[:, bin_start:bin_stop].T, out=magnitude, signature="F->f", casting="same_kind"
    )
    mel = projection @ magnitude
    np.maximum(mel, _MEL_FLOOR_ROW[:rows], out=mel)
    # In place, then transposed: numpy's SIMD log needs a contiguous output (written
    # through ``out.T`` it takes the scalar loop, 5x slower; the values are the same).
    np.log(mel, out=mel)
    np.copyto(out, mel.T)
