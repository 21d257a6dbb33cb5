"""The Whisper log-mel kernel (numpy): 128 bins, 30 s window, only the frames that hold audio.

The reference (``WhisperFeatureExtractor(feature_size=128)``, torch path, as
``Qwen2AudioProcessor`` calls it) zero-pads every clip to 480,000 samples, reflect-pads
200 samples at both ends, runs a centred STFT (periodic Hann(400), hop 160), drops the
last of 3001 frames, takes the power spectrum, applies the Slaney mel bank, then
``log10(max(x, 1e-10))``, ``max(x, x.max() - 8)`` over the whole window and
``(x + 4) / 4``.

A frame whose window lies entirely in the zero padding has an exactly zero spectrum, so
its log-mel column is ``log10(1e-10) = -10`` before the clamp: a constant. Only the
first ``min(3000, ceil((N + 200) / 160))`` frames are computed (all of them near 30 s,
where the last frames also see the reflected end of the padded window); the constant
columns still take part in the window maximum.

The computed frames go through in blocks of :data:`BLOCK_FRAMES` (strided view → window
→ batched float64 rFFT → power → one sparse mel product → log), into buffers kept per
thread, with a cancellation check before each block. Clips of several blocks are spread
over :data:`~audiogate.dsp.blocks.BLOCK_THREADS` threads (:func:`audiogate.dsp.blocks.run_blocks`);
each block gives the same values on any thread, and the window maximum is taken over the
blocks' maxima afterwards.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.blocks import block_threads, run_blocks
from audiogate.dsp.scratch import thread_scratch
from audiogate.records import readonly
from audiogate_qwen2audio.geometry import (
    FEATURE_SHAPE,
    HOP,
    MAX_FRAMES,
    MAX_SAMPLES,
    N_FFT,
    N_MELS,
    WhisperGeometry,
)
from audiogate_qwen2audio.melbank import whisper_mel_matrix

__all__ = [
    "BLOCK_FRAMES",
    "LOG_FLOOR",
    "hann_window_torch",
    "whisper_log_mel",
    "working_bytes",
]

#: Frames per vectorised block (strided view → batched rFFT → one sparse mel product); the
#: cancellation token is polled before each block, and blocks are what threads share.
BLOCK_FRAMES: Final = 256
_PAD: Final = N_FFT // 2
_BINS: Final = N_FFT // 2 + 1
#: Per block and thread, besides the buffers of :class:`_BlockScratch`: the sparse
#: product's float32 result and numpy's casting buffers (8,192 elements per operand).
_LIBRARY_BYTES: Final = BLOCK_FRAMES * N_MELS * 4 + (128 << 10)
#: ``log10`` of the reference's float32 clamp floor, correctly rounded: -10.0, the log-mel
#: value of a silent frame (numpy's float32 ``log10`` is one ulp off here; torch is not).
LOG_FLOOR: Final = np.float32(np.log10(np.float64(np.float32(1e-10))))

# ``torch.hann_window(400)`` (float32) is ``0.5 - 0.5 * cos(float32(2π/400) * n)`` with
# torch's vectorised float32 cosine (SLEEF on x86); at these 12 indices that cosine is
# not correctly rounded, so the reference window differs by an ulp from the formula.
# Kept for parity: the window's ulps alone move near-floor log-mel values by ~4e-6.
_TORCH_HANN_FIXES: Final = {
    18: 0x3CA2A310,
    26: 0x3D287040,
    36: 0x3D9F6884,
    55: 0x3E337B8E,
    88: 0x3ED007C8,
    160: 0x3F678DDE,
    195: 0x3F7F9AFC,
    239: 0x3F68B920,
    341: 0x3E4C95B0,
    381: 0x3CB51230,
    385: 0x3C625860,
    398: 0x39815C00,
}


def hann_window_torch() -> npt.NDArray[np.float32]:
    """``torch.hann_window(400)`` bit for bit, without torch ``[shape=(400,)]``."""
    phase = np.arange(N_FFT, dtype=np.float32) * np.float32(2.0 * np.pi / N_FFT)
    cosine = np.cos(phase.astype(np.float64)).astype(np.float32)
    window = np.float32(0.5) + np.float32(-0.5) * cosine
    bits = window.view(np.uint32)
    for index, value in _TORCH_HANN_FIXES.items():
        bits[index] = value
    return window


_WINDOW: Final = readonly(hann_window_torch())
#: Built once at import, so a request's blocks never build it (a cold build is ~0.7 MB of
#: temporaries the plan does not count, and two block threads could both miss the cache).
_MEL_MATRIX: Final = whisper_mel_matrix()
#: The energy clamp as a row: numpy (2.4) runs ``maximum`` with a scalar operand in a
#: scalar loop, 2-3x slower than with a broadcast row.
_ENERGY_FLOOR_ROW: Final = readonly(np.full(BLOCK_FRAMES, np.float32(1e-10)))


class _BlockScratch:
    """One block's buffers, allocated once per thread (:func:`audiogate.dsp.scratch.
    thread_scratch`) and reused by every clip.

    Fresh megabyte buffers per call would cost page faults on first touch, which for a
    one-second clip is more than its FFT.
    """

    def __init__(self) -> None:
        self.frames = np.empty((BLOCK_FRAMES, N_FFT), dtype=np.float64)
        self.spectrum = np.empty((BLOCK_FRAMES, _BINS), dtype=np.complex128)
        self.power = np.empty((BLOCK_FRAMES, _BINS), dtype=np.float32)
        # Flat, so that a partial block's (rows, count) view is contiguous too.
        self.bins_by_frames = np.empty(_BINS * BLOCK_FRAMES, dtype=np.float32)
        self.logs = np.empty(N_MELS * BLOCK_FRAMES, dtype=np.float64)


_SCRATCH_BYTES: Final = BLOCK_FRAMES * (N_FFT * 8 + _BINS * (16 + 4 + 4) + N_MELS * 8)


def _blocks(frames: int) -> int:
    return -(-frames // BLOCK_FRAMES)


def working_bytes(geometry: WhisperGeometry) -> int:
    """Peak scratch of :func:`whisper_log_mel` besides its result: the padded buffer, and
    per thread one block's buffers (float64 frames, complex128 spectrum, float32 power,
    its transpose, float64 logs), the sparse product's result and numpy's casting buffers."""
    frames = geometry.computed_frames
    buffer = (2 * _PAD + HOP * max(frames - 1, 0)) * 4
    threads = block_threads(_blocks(frames))
    return buffer + threads * (_SCRATCH_BYTES + _LIBRARY_BYTES) + _blocks(frames) * 4


def _padded_buffer(
    waveform: npt.NDArray[np.float32], computed_frames: int
) -> npt.NDArray[np.float32]:
    """The reference's reflect-padded 30 s window, up to the last computed frame's end.

    Index ``i + 200`` holds padded sample ``i``: the clip, then zeros up to 480,000, with
    the reflection of samples 1..200 in front and of samples 479,998.. behind 480,000.
    """
    samples = waveform.shape[0]
    end = HOP * (computed_frames - 1) + _PAD  # exclusive, in padded-sample coordinates
    buffer = np.zeros(_PAD + end, dtype=np.float32)
    buffer[_PAD : _PAD + samples] = waveform
    buffer[:_PAD] = buffer[2 * _PAD : _PAD : -1]
    if end > MAX_SAMPLES:
        tail = np.arange(MAX_SAMPLES, end)
        buffer[_PAD + tail] = buffer[_PAD + 2 * (MAX_SAMPLES - 1) - tail]
    return buffer


def whisper_log_mel(
    waveform: npt.NDArray[np.float32],
    geometry: WhisperGeometry,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Log-mel features and frame mask of one clip, equal to the reference's.

    :param waveform: mono float32 at 16 kHz ``[shape=(geometry.samples,)]``.
    :param geometry: from :func:`~audiogate_qwen2audio.geometry.whisper_geometry`.
    :param clip_index: zero-based clip index (cancellation).
    :param cancel: polled every :data:`BLOCK_FRAMES` frames.
    :returns: read-only features float32 ``[shape=(128, 3000)]`` and read-only mask bool
        ``[shape=(3000,)]`` with ``geometry.valid_frames`` leading ones.
    """
    if waveform.shape != (geometry.samples,):
        raise ValueError(
            f"clip {clip_index + 1}: waveform shape {waveform.shape} does not match the planned "
            f"{geometry.samples} samples"
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    computed = geometry.computed_frames
    features = np.empty(FEATURE_SHAPE, dtype=np.float32)
    # (x + 4) / 4 is applied per block as x * 0.25 + 1: scaling by a power of two is exact,
    # so both round identically; the clamp is applied afterwards in the scaled domain.
    peak = LOG_FLOOR if computed < MAX_FRAMES else np.float32(-np.inf)
    if computed:
        buffer = _padded_buffer(waveform, computed)
        frames = np.lib.stride_tricks.as_strided(
            buffer,
            shape=(computed, N_FFT),
            strides=(HOP * buffer.itemsize, buffer.itemsize),
            writeable=False,
        )
        peaks = np.empty(_blocks(computed), dtype=np.float32)

        def block(index: int) -> None:
            start = index * BLOCK_FRAMES
            stop = min(computed, start + BLOCK_FRAMES)
            peaks[index] = _log_mel_block(frames[start:stop], features[:, start:stop])

        run_blocks(
            peaks.size, block, cancel=cancel, checkpoint=Checkpoint.FEATURE, clip_index=clip_index
        )
        peak = max(peak, peaks.max())
    floor = (np.float32(peak - np.float32(8.0)) + np.float32(4.0)) * np.float32(0.25)
    head = features[:, :computed]
    np.maximum(head, np.full(computed, floor), out=head)  # a row: see _ENERGY_FLOOR_ROW
    features[:, computed:] = max((LOG_FLOOR + np.float32(4.0)) * np.float32(0.25), floor)
    mask = np.zeros(MAX_FRAMES, dtype=np.bool_)
    mask[: geometry.valid_frames] = True
    return readonly(features), readonly(mask)


def _log_mel_block(frames: npt.NDArray[np.float32], out: npt.NDArray[np.float32]) -> np.float32:
    """``(log10(max(mel, 1e-10)) + 4) / 4`` of ``frames`` ``[shape=(count, 400)]`` into
    ``out`` ``[shape=(128, count)]``; returns the block's largest float32 ``log10``."""
    scratch = thread_scratch("qwen2audio.log_mel", _BlockScratch)
    count = frames.shape[0]
    # The window product in float32, as torch.stft forms it; the FFT in float64, so what
    # remains is the reference's own float32 FFT error (see the module doc).
    windowed = scratch.frames[:count]
    np.multiply(frames, _WINDOW, out=windowed, dtype=np.float32)
    spectrum = scratch.spectrum[:count]
    np.fft.rfft(windowed, axis=-1, out=spectrum)
    parts = spectrum.view(np.float64)
    np.square(parts, out=parts)
    power = scratch.power[:count]
    np.add(parts[:, 0::2], parts[:, 1::2], out=power, casting="same_kind")
    # Bins by frames, the layout the sparse product reads; a plain transposed copy is
    # several times cheaper than writing the sum above transposed.
    bins_by_frames = scratch.bins_by_frames[: _BINS * count].reshape(_BINS, count)
    np.copyto(bins_by_frames, power.T)
    energies = _MEL_MATRIX @ bins_by_frames
    np.maximum(energies, _ENERGY_FLOOR_ROW[:count], out=energies)
    # Correctly rounded float32 log10, as torch's is in all but ~2e-4 of cases (numpy's
    # float32 log10 is an ulp off in half of them): float64 log10, then one rounding.
    logs = scratch.logs[: N_MELS * count].reshape(N_MELS, count)
    np.log10(energies, out=logs, dtype=np.float64)
    # Scaling by 0.25 commutes with the rounding to float32 (a power of two, no
    # underflow at these magnitudes), and rounding is monotonic, so the maximum of the
    # float32 logs is the rounded maximum.
    np.multiply(logs, 0.25, out=out, casting="same_kind")
    out += np.float32(1.0)
    return np.float32(logs.max())
