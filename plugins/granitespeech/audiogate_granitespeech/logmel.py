"""The Granite Speech log-mel kernel (numpy): 80 HTK bins, frames stacked in pairs.

The reference (``GraniteSpeechFeatureExtractor`` of transformers 5.24.0) runs
torchaudio's ``MelSpectrogram(sample_rate=16000, n_fft=512, win_length=400,
hop_length=160, n_mels=80)`` on the float32 waveform: ``torch.stft`` with the periodic
``hann_window(400)`` centred in each 512-sample frame, ``center=True`` and reflect
padding (256 samples each side), the power spectrum, the HTK bank
(:mod:`~audiogate_granitespeech.melbank`). Then ``log10(max(mel, 1e-10))``,
``max(x, x.max() - 8)`` with the maximum over every frame of the clip (the odd last
frame included), ``x / 4 + 1``, the odd last frame dropped, and pairs of frames
reshaped into rows of 160: row ``r`` is frame ``2r``'s 80 values, then frame ``2r + 1``'s.

Only the 400 samples under the window count, so frame ``t`` reads samples
``160 t - 200 .. 160 t + 199`` of the clip reflected at both ends (``x[-k] = x[k]``,
``x[N - 1 + k] = x[N - 1 - k]``): the reflect padding's extra 56 samples a side only
set the minimum length (:data:`~audiogate_granitespeech.policy.MIN_SAMPLES`). The
512-point spectrum of the zero-extended 400 samples equals the reference's up to the
phase of its 56-sample offset, which the power discards.

Frames go through in blocks of :data:`BLOCK_FRAMES`: a strided view, the window product
in float32 (as ``torch.stft`` forms it), a batched float64 rFFT, the float32 power, one
sparse float32 product with the bank, and a correctly rounded float32 ``log10``; blocks run on
:func:`audiogate.dsp.blocks.run_blocks` with per-thread scratch and a cancellation poll
before each. The window maximum and clamp come after the last block.

For batches, :func:`batch_frames` computes frames of the clip as the reference sees it
zero-padded to a longer clip (:mod:`~audiogate_granitespeech.collate`).
"""

from __future__ import annotations

from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.blocks import block_threads, run_blocks
from audiogate.dsp.direct import rfft_rows
from audiogate.dsp.melbank import sparse_projection
from audiogate.dsp.scratch import thread_scratch
from audiogate.records import readonly
from audiogate_granitespeech.geometry import (
    FEATURE_DIM,
    HALF_WINDOW,
    HOP,
    N_FFT,
    N_MELS,
    WIN_LENGTH,
    GraniteGeometry,
)
from audiogate_granitespeech.melbank import BINS, htk_mel_bank

__all__ = [
    "BLOCK_FRAMES",
    "HEAD_FRAMES",
    "LOG_FLOOR",
    "LogMel",
    "batch_frames",
    "clamp_and_scale",
    "clip_interior_frames",
    "granite_log_mel",
    "hann_window_torch",
    "interior_block",
    "log_mel_block",
    "working_bytes",
]

#: Frames per vectorised block; the cancellation token is polled before each block.
BLOCK_FRAMES: Final = 256
#: Frames that read the reflection of the clip's start (``160 t - 200 < 0``).
HEAD_FRAMES: Final = 2
#: ``log10`` of the reference's float32 floor ``1e-10``, correctly rounded: -10.0, the
#: value of a silent frame before the clamp.
LOG_FLOOR: Final = np.float32(np.log10(np.float64(np.float32(1e-10))))
_ENERGY_FLOOR: Final = np.float32(1e-10)
#: Per block and thread besides :class:`_BlockScratch`: the sparse product's float32
#: result, numpy's casting buffers and pocketfft's per-call work arrays.
_LIBRARY_BYTES: Final = BLOCK_FRAMES * N_MELS * 4 + (256 << 10)

# ``torch.hann_window(400)`` (float32) is ``0.5 - 0.5 * cos(float32(2π/400) * n)`` with
# torch's vectorised float32 cosine, which is not correctly rounded at these indices;
# the window is kept bit for bit (tests compare it with torch's).
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
    phase = np.arange(WIN_LENGTH, dtype=np.float32) * np.float32(2.0 * np.pi / WIN_LENGTH)
    cosine = np.cos(phase.astype(np.float64)).astype(np.float32)
    window = np.float32(0.5) + np.float32(-0.5) * cosine
    bits = window.view(np.uint32)
    for index, value in _TORCH_HANN_FIXES.items():
        bits[index] = value
    return window


_WINDOW: Final = readonly(hann_window_torch())
#: Built at import, so no request's blocks build it.
_BANK: Final = htk_mel_bank()
#: The bank as float32 CSR ``[shape=(80, 257)]``: 502 of its 20,560 weights are non-zero.
_SPARSE_BANK: Final = sparse_projection(_BANK, trim=False).matrix


class _BlockScratch:
    """One block's buffers, allocated once per thread and reused by every clip."""

    def __init__(self) -> None:
        # Zero-extended to the FFT size once: each block writes the first 400 columns,
        # the last 112 stay zero (pocketfft then skips numpy's padding copy).
        self.frames = np.zeros((BLOCK_FRAMES, N_FFT), dtype=np.float64)
        self.spectrum = np.empty((BLOCK_FRAMES, BINS), dtype=np.complex128)
        self.power = np.empty((BLOCK_FRAMES, BINS), dtype=np.float32)
        # Flat, so that a partial block's (bins, count) view is contiguous too.
        self.bins_by_frames = np.empty(BINS * BLOCK_FRAMES, dtype=np.float32)
        self.logs = np.empty(N_MELS * BLOCK_FRAMES, dtype=np.float64)


_SCRATCH_BYTES: Final = BLOCK_FRAMES * (N_FFT * 8 + BINS * (16 + 4 + 4) + N_MELS * 8)


def _blocks(frames: int) -> int:
    return -(-frames // BLOCK_FRAMES)


def _scratch_bytes(frames: int) -> int:
    return block_threads(_blocks(frames)) * (_SCRATCH_BYTES + _LIBRARY_BYTES)


def working_bytes(geometry: GraniteGeometry) -> int:
    """Peak scratch of :func:`granite_log_mel` besides its result: the reflect-padded
    copy of the clip, per thread one block's buffers, and the per-block maxima."""
    buffer = (geometry.samples + 2 * HALF_WINDOW) * 4
    return buffer + _scratch_bytes(geometry.frames) + _blocks(geometry.frames) * 8


def result_bytes(geometry: GraniteGeometry) -> int:
    """Bytes of the features' buffer: every frame's 80 values (an odd last frame is
    computed in place for the maximum, then left out of the rows)."""
    return geometry.frames * N_MELS * 4


def _rfft(padded: npt.NDArray[np.float64], out: npt.NDArray[np.complex128]) -> None:
    """``np.fft.rfft(padded, axis=-1, out=out)`` of 512-point rows: the ufunc it calls,
    called directly (its wrapper's Python steps run cold in a stream's ``finish()``)."""
    rfft_rows(padded, out)


def log_mel_block(frames: npt.NDArray[np.float32], out: npt.NDArray[np.float32]) -> None:
    """Unclamped float32 ``log10(max(mel, 1e-10))`` of ``frames`` ``[shape=(count, 400)]``
    into ``out`` ``[shape=(count, 80)]``."""
    scratch = thread_scratch("granitespeech.log_mel", _BlockScratch)
    count = frames.shape[0]
    padded = scratch.frames[:count]
    # The window product in float32, as torch.stft forms it; the FFT in float64.
    np.multiply(frames, _WINDOW, out=padded[:, :WIN_LENGTH], dtype=np.float32)
    spectrum = scratch.spectrum[:count]
    _rfft(padded, spectrum)
    parts = spectrum.view(np.float64)
    np.square(parts, out=parts)
    power = scratch.power[:count]
    np.add(parts[:, 0::2], parts[:, 1::2], out=power, casting="same_kind")
    # Bins by frames, the layout the sparse product reads (a dense float32 matmul this
    # small is slower in OpenBLAS than the copy and 502 stored weights).
    bins_by_frames = scratch.bins_by_frames[: BINS * count].reshape(BINS, count)
    np.copyto(bins_by_frames, power.T)
    energies = _SPARSE_BANK @ bins_by_frames
    np.maximum(energies, _ENERGY_FLOOR, out=energies)
    # Correctly rounded float32 log10 (numpy's float32 log10 is an ulp off in about
    # half the cases; torch's is correctly rounded in all but a few 1e-4 of them).
    logs = scratch.logs[: N_MELS * count].reshape(N_MELS, count)
    np.log10(energies, out=logs, dtype=np.float64)
    np.copyto(out, logs.T, casting="same_kind")


def _reflect_padded(waveform: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The clip with 200 reflected samples at each end: index ``i + 200`` holds ``x[i]``."""
    samples = waveform.shape[0]
    buffer = np.empty(samples + 2 * HALF_WINDOW, dtype=np.float32)
    buffer[HALF_WINDOW : HALF_WINDOW + samples] = waveform
    buffer[:HALF_WINDOW] = waveform[HALF_WINDOW:0:-1]
    buffer[HALF_WINDOW + samples :] = waveform[samples - 2 : samples - 2 - HALF_WINDOW : -1]
    return buffer


def _framed(buffer: npt.NDArray[np.float32], count: int) -> npt.NDArray[np.float32]:
    """``count`` frames of 400 every 160 samples from the start of ``buffer`` (C
    contiguous float32), a read-only view. The ``ndarray`` constructor rather than
    ``as_strided`` (its Python: ~3 us a call warm, tens on a core woken cold, as a
    stream's last batch is); it also refuses a buffer too short for the frames."""
    frames: npt.NDArray[np.float32] = np.ndarray(
        (count, WIN_LENGTH), dtype=np.float32, buffer=buffer, strides=(HOP * 4, 4)
    )
    frames.flags.writeable = False
    return frames


def _run(
    frames: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> None:
    def block(index: int) -> None:
        start = index * BLOCK_FRAMES
        stop = min(frames.shape[0], start + BLOCK_FRAMES)
        log_mel_block(frames[start:stop], out[start:stop])

    run_blocks(
        _blocks(frames.shape[0]),
        block,
        cancel=cancel,
        checkpoint=Checkpoint.FEATURE,
        clip_index=clip_index,
    )


def clamp_and_scale(logs: npt.NDArray[np.float32], floor: np.float32) -> None:
    """``max(logs, floor) / 4 + 1`` in place, each step rounded to float32 as the
    reference's ``torch.maximum``, ``div_(4)`` and ``add_(1)`` round it."""
    np.maximum(logs, floor, out=logs)
    logs *= np.float32(0.25)
    logs += np.float32(1.0)


@attrs.frozen(kw_only=True)
class LogMel:
    """One clip's features and what a batch needs to re-clamp them.

    :param features: read-only float32 ``[shape=(rows, 160)]``.
    :param peak: the largest unclamped log-mel value over all the clip's frames.
    :param interior_peak: the same over its interior frames only (``-inf`` if none).
    """

    features: npt.NDArray[np.float32]
    peak: float
    interior_peak: float


def granite_log_mel(
    waveform: npt.NDArray[np.float32],
    geometry: GraniteGeometry,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> LogMel:
    """The features of one clip, equal to the reference's for this clip alone.

    :param waveform: mono float32 at 16 kHz ``[shape=(geometry.samples,)]``, more than
        256 samples.
    :param geometry: from :func:`~audiogate_granitespeech.geometry.granite_geometry`.
    :param clip_index: zero-based clip index (cancellation).
    :param cancel: polled every :data:`BLOCK_FRAMES` frames.
    """
    if waveform.shape != (geometry.samples,) or geometry.samples <= N_FFT // 2:
        raise ValueError(
            f"clip {clip_index + 1}: waveform shape {waveform.shape} does not match the "
            f"planned {geometry.samples} samples (more than {N_FFT // 2} are needed)"
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    buffer = _reflect_padded(waveform)
    flat = np.empty(geometry.frames * N_MELS, dtype=np.float32)
    logs = flat.reshape(geometry.frames, N_MELS)
    _run(_framed(buffer, geometry.frames), logs, clip_index=clip_index, cancel=cancel)
    del buffer
    peak = np.float32(logs.max())
    interior = geometry.interior
    interior_peak = float(logs[:interior].max()) if interior else float("-inf")
    clamp_and_scale(logs, np.float32(peak - np.float32(8.0)))
    # The rows are a view of the frames' buffer: an odd last frame stays behind them
    # (80 floats), which saves copying every other value.
    features = flat[: geometry.rows * FEATURE_DIM].reshape(geometry.rows, FEATURE_DIM)
    readonly(flat)
    return LogMel(features=readonly(features), peak=float(peak), interior_peak=interior_peak)


def _batch_segment(
    waveform: npt.NDArray[np.float32], total_samples: int, start: int, stop: int
) -> npt.NDArray[np.float32]:
    """Samples ``start .. stop - 1`` (may be negative or past the end) of the clip
    zero-padded to ``total_samples`` and reflected at both ends of that length."""
    index = np.arange(start, stop)
    index = np.where(index < 0, -index, index)
    index = np.where(index >= total_samples, 2 * (total_samples - 1) - index, index)
    samples = waveform.shape[0]
    inside = index < samples
    return np.where(inside, waveform[np.minimum(index, samples - 1)], np.float32(0.0)).astype(
        np.float32
    )


def batch_frames(
    waveform: npt.NDArray[np.float32],
    *,
    total_samples: int,
    first: int,
    stop: int,
    clip_index: int,
    cancel: CancelToken,
    out: npt.NDArray[np.float32] | None = None,
) -> npt.NDArray[np.float32]:
    """Unclamped log-mel frames ``first .. stop - 1`` of the clip as the reference sees
    it zero-padded to ``total_samples`` samples in a batch ``[shape=(stop - first, 80)]``.

    :param waveform: the clip's mono float32 samples, at most ``total_samples``.
    :param out: where to write them (a new array by default).
    """
    count = max(0, stop - first)
    if out is None:
        out = np.empty((count, N_MELS), dtype=np.float32)
    if count:
        segment = _batch_segment(
            waveform,
            total_samples,
            HOP * first - HALF_WINDOW,
            HOP * (stop - 1) + HALF_WINDOW,
        )
        _run(_framed(segment, count), out, clip_index=clip_index, cancel=cancel)
    return out


def interior_block(
    waveform: npt.NDArray[np.float32], first: int, out: npt.NDArray[np.float32]
) -> None:
    """Unclamped log-mel frames ``first .. first + len(out) - 1`` into ``out``
    ``[shape=(count, 80)]``, straight from the clip's samples (no padded copy): every
    frame from :data:`HEAD_FRAMES` on whose window ends inside ``waveform``.

    :raises ValueError: a frame reads a sample outside ``waveform``.
    """
    count = out.shape[0]
    start = HOP * first - HALF_WINDOW
    if first < HEAD_FRAMES or start + HOP * (count - 1) + WIN_LENGTH > waveform.shape[0]:
        raise ValueError(f"frames {first}..{first + count - 1} are not inside the samples")
    for lo in range(0, count, BLOCK_FRAMES):
        hi = min(lo + BLOCK_FRAMES, count)
        log_mel_block(_framed(waveform[start + HOP * lo :], hi - lo), out[lo:hi])


def clip_interior_frames(
    waveform: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> None:
    """Unclamped log-mel frames ``0 .. len(out) - 1`` of the clip into ``out``
    ``[shape=(count, 80)]``, all of them interior (they read no sample past the clip, so
    they are the same alone and in a batch): frames 0 and 1 from a reflected copy of the
    clip's first 360 samples, the rest straight from the clip, without a padded copy."""
    count = out.shape[0]
    head = min(2, count)
    if head:
        segment = _batch_segment(
            waveform, waveform.shape[0], -HALF_WINDOW, HOP * (head - 1) + HALF_WINDOW
        )
        _run(_framed(segment, head), out[:head], clip_index=clip_index, cancel=cancel)
    if count > 2:
        # Frame 2 starts at sample 160 * 2 - 200 = 120.
        start = 2 * HOP - HALF_WINDOW
        _run(_framed(waveform[start:], count - 2), out[2:], clip_index=clip_index, cancel=cancel)
