"""The Whisper log-mel frontend (numpy), shared by every family whose processor runs
``WhisperFeatureExtractor``: 80 or 128 Slaney bins, ``n_fft`` 400, hop 160, 16 kHz.

The reference (``WhisperFeatureExtractor.__call__``, torch path, transformers 5.24) pads
each item with zeros to a length ``P``, reflect-pads 200 samples at both ends, runs a
centred STFT (periodic Hann(400) as ``torch.hann_window`` computes it, hop 160), drops the
last of its ``P // 160 + 1`` frames, takes the power spectrum, applies the Slaney bank
(float32), then ``log10(max(x, 1e-10))``, ``max(x, x.max() - 8)`` with the maximum taken
**per item over all its ``P // 160`` frames** (``max(dim=2).max(dim=1)`` of the batch) and
``(x + 4) / 4``. Its mask (``return_attention_mask``) is the sample mask taken every 160
samples: ``min(P // 160, ceil(N / 160))`` leading ones for ``N`` samples.

How ``P`` is chosen is what tells the families apart; :func:`whisper_plan` takes it as
``padding``:

* ``"max_length"``: one ``chunk_samples`` window (480,000 = 30 s): the extractor's default
  (``padding="max_length"``). Qwen2-Audio, Qwen2.5-Omni. The reference *truncates* a longer
  item silently (``truncation=True``); here a longer clip is a ``ValueError``, so a family
  refuses it (a typed ``LimitError``) or picks another mode.
* ``"longest"``: ``padded_samples`` (default: the clip's own length ``N``; in a batch the
  longest clip's, which changes a shorter clip's last frames and mask):
  ``padding="longest"`` with ``truncation=False``. Qwen3-Omni. ``P`` must exceed 200
  (torch's reflect padding needs it).
* ``"multiple"``: the next multiple of ``chunk_samples`` (at least one), one STFT and one
  clamp over all of it, then split into windows of ``chunk_samples // 160`` frames:
  ``padding=True, truncation=False, pad_to_multiple_of=480000`` and the reshape of
  ``VoxtralProcessor._retrieve_input_features``. Voxtral.
* ``"windows"``: the clip cut into ``chunk_samples`` windows (at least one), each padded
  to ``chunk_samples`` and transformed and clamped **on its own**: the 30 s chunking of
  ``AudioFlamingo3Processor._process_audio`` / ``GlmAsrProcessor._process_audio``, whose
  chunks then go through the extractor as a batch with its default padding. (Their
  ``max_audio_len`` cut is the family's: refuse instead of truncating.)

``normalize=True`` is the extractor's ``do_normalize``: each item's samples become
``(x - mean) / sqrt(var + 1e-7)`` in float32 over its unpadded length (per window in
``"windows"``, as each chunk is an item there), padding kept at zero. Dither is not
implemented (0.0 in every checkpoint of these families).

Every mode's result is ``features`` float32 ``[shape=(windows, n_mels, window_frames)]``
and ``mask`` bool ``[shape=(windows, window_frames)]``, read-only; ``window_frames`` is
``chunk_samples // 160`` (3000), or ``P // 160`` for ``"longest"`` (one window).

Only frames that hold audio are computed. A frame whose 400-sample window lies entirely
in the zero padding has an exactly zero spectrum, so its log-mel is the constant
``log10(1e-10) = -10`` before the clamp; such frames are filled, and still take part in
the item's maximum. Frames whose window lies inside the clip are a strided view of the
waveform itself; only the first two and the last few, which see the reflection or the
zero padding, are framed from short padded copies (so a long clip is never copied). The
computed frames go through in blocks of :data:`BLOCK_FRAMES`
(strided view → window → batched float64 rFFT → power → one sparse mel product → log)
that never straddle two windows, into buffers kept per thread
(:func:`audiogate.dsp.scratch.thread_scratch`), with a cancellation check before each
block; an item's blocks are spread over :data:`~audiogate.dsp.blocks.BLOCK_THREADS`
threads (:func:`audiogate.dsp.blocks.run_blocks`) and give the same values on any
thread. The FFT is float64 where the reference's is float32: what remains is the
reference's own float32 FFT error (about 1e-5 near the clamp floor, up to 1e-4 on rare
near-silent bins).

The plan and its arithmetic (:func:`whisper_plan`, :class:`WhisperPlan`, the constants)
live in :mod:`audiogate.dsp.whisper_geometry`, which imports no SciPy, for a family's
policy and prompt modules; this module re-exports them and builds the 80- and 128-bin
banks when imported, so import it from the family's features stage. Use::

    plan = whisper_plan(samples, n_mels=128, padding="max_length")
    plan.working_bytes, plan.feature_bytes  # for the family's FeaturePlan
    features, mask = whisper_log_mel(waveform, plan, clip_index=i, cancel=token)
"""

from __future__ import annotations

import functools
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.blocks import run_blocks
from audiogate.dsp.direct import csr_product_into, rfft_rows
from audiogate.dsp.melbank import sparse_projection
from audiogate.dsp.scratch import thread_scratch
from audiogate.dsp.slaney import slaney_mel_filters
from audiogate.dsp.whisper_geometry import (
    BLOCK_FRAMES,
    CHUNK_SAMPLES,
    HOP,
    MEL_BINS,
    N_FFT,
    SAMPLE_RATE_HZ,
    Padding,
    WhisperItem,
    WhisperPlan,
    block_ranges,
    interior_frames,
    whisper_plan,
)
from audiogate.records import readonly

__all__ = [
    "BLOCK_FRAMES",
    "CHUNK_SAMPLES",
    "HOP",
    "LOG_FLOOR",
    "MEL_BINS",
    "N_FFT",
    "SAMPLE_RATE_HZ",
    "Padding",
    "WhisperPlan",
    "framed",
    "hann_window_torch",
    "log_mel_block",
    "padded_segment",
    "whisper_log_mel",
    "whisper_mel_matrix",
    "whisper_plan",
]

_PAD: Final = N_FFT // 2
_BINS: Final = N_FFT // 2 + 1
#: Up to this many frames the kernel writes the power transposed in one call.
_TRANSPOSED_SUM_FRAMES: Final = 64
_MAX_MELS: Final = max(MEL_BINS)
_F_MAX_HZ: Final = 8000.0
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


@functools.cache
def whisper_mel_matrix(n_mels: int = 128) -> Any:
    """The ``n_mels`` × 201 Whisper bank (0-8 kHz, Slaney) as read-only float32 CSR (the
    reference casts it to float32); one sparse product replaces the reference's dense
    matmul (394 of the 128-bin bank's 25,728 weights are non-zero).

    :raises ValueError: ``n_mels`` is not one of :data:`MEL_BINS`.
    """
    if n_mels not in MEL_BINS:
        raise ValueError(f"n_mels must be one of {MEL_BINS}, not {n_mels}")
    dense = slaney_mel_filters(
        n_fft=N_FFT, n_mels=n_mels, f_min_hz=0.0, f_max_hz=_F_MAX_HZ, rate_hz=SAMPLE_RATE_HZ
    )
    # Every bin kept (not trimmed to the covered ones): the kernel projects all 201.
    return sparse_projection(dense, trim=False).matrix


_WINDOW: Final = readonly(hann_window_torch())
# Built at import, so a request's blocks never build a bank (a cold build is ~0.7 MB of
# temporaries no plan counts, and two block threads could both miss the cache).
for _n_mels in MEL_BINS:
    whisper_mel_matrix(_n_mels)
#: The energy clamp as a row: numpy (2.4) runs ``maximum`` with a scalar operand in a
#: scalar loop, 2-3x slower than with a broadcast row.
_ENERGY_FLOOR_ROW: Final = readonly(np.full(BLOCK_FRAMES, np.float32(1e-10)))


class _BlockScratch:
    """One block's buffers (sized for the largest bank), allocated once per thread and
    reused by every clip: fresh megabyte buffers per call would cost page faults on first
    touch, which for a one-second clip is more than its FFT."""

    def __init__(self) -> None:
        self.frames = np.empty((BLOCK_FRAMES, N_FFT), dtype=np.float64)
        self.spectrum = np.empty((BLOCK_FRAMES, _BINS), dtype=np.complex128)
        self.power = np.empty((BLOCK_FRAMES, _BINS), dtype=np.float32)
        # Flat, so that a partial block's (rows, count) view is contiguous too.
        self.bins_by_frames = np.empty(_BINS * BLOCK_FRAMES, dtype=np.float32)
        self.logs = np.empty(_MAX_MELS * BLOCK_FRAMES, dtype=np.float64)


def _normalized(clip: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``do_normalize`` of one item, in float32 as the reference computes it."""
    if clip.size == 0:
        return clip
    # ``(x - mean) / sqrt(var + 1e-7)``, the division in place: the same float32 operations,
    # and one clip-sized array at a time (``var`` frees its own before ``result`` exists).
    scale = np.sqrt(clip.var() + 1e-7)
    result: npt.NDArray[np.float32] = clip - clip.mean()
    result /= scale
    return result


def padded_segment(
    clip: npt.NDArray[np.float32], padded: int, start: int, stop: int
) -> npt.NDArray[np.float32]:
    """Samples ``[start, stop)`` of the reference's item in padded coordinates: the clip,
    zeros up to ``padded``, the reflection of samples 1..200 before 0 and of samples
    ``padded - 2``.. behind ``padded``."""
    index = np.arange(start, stop)
    index = np.where(index < 0, -index, index)
    index = np.where(index >= padded, 2 * (padded - 1) - index, index)
    out = np.zeros(stop - start, dtype=np.float32)
    inside = index < clip.shape[0]
    out[inside] = clip[index[inside]]
    return out


def framed(array: npt.NDArray[np.float32], offset: int, count: int) -> Any:
    """``count`` frames of 400 every 160 samples from ``array[offset:]``, a read-only view."""
    if not array.flags.c_contiguous:
        base = array[offset:]
        return np.lib.stride_tricks.as_strided(
            base,
            shape=(count, N_FFT),
            strides=(HOP * base.itemsize, base.itemsize),
            writeable=False,
        )
    # The ndarray constructor over the buffer: one C call where as_strided runs a few
    # Python ones (the streams' finish() frames after a pause, where each call is cold),
    # and it refuses frames past the array's end.
    view = np.ndarray(
        (count, N_FFT),
        dtype=array.dtype,
        buffer=array,
        offset=offset * array.itemsize,
        strides=(HOP * array.itemsize, array.itemsize),
    )
    view.flags.writeable = False
    return view


def _frame_sources(
    clip: npt.NDArray[np.float32], padded: int, computed: int
) -> list[tuple[int, int, Any]]:
    """``(first, stop, frames)`` covering frames ``[0, computed)``: the head and tail from
    short padded copies, the interior straight from the clip (no copy of the waveform)."""
    lo, hi = interior_frames(clip.shape[0], computed)
    sources = []
    if lo:
        head = padded_segment(clip, padded, -_PAD, HOP * (lo - 1) + _PAD)
        sources.append((0, lo, framed(head, 0, lo)))
    if hi > lo:
        sources.append((lo, hi, framed(clip, HOP * lo - _PAD, hi - lo)))
    if computed > hi:
        tail = padded_segment(clip, padded, HOP * hi - _PAD, HOP * (computed - 1) + _PAD)
        sources.append((hi, computed, framed(tail, 0, computed - hi)))
    return sources


def whisper_log_mel(
    waveform: npt.NDArray[np.float32],
    plan: WhisperPlan,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Log-mel features and frame mask of one clip, equal to the reference's.

    :param waveform: mono float32 at 16 kHz ``[shape=(plan.samples,)]``.
    :param plan: from :func:`whisper_plan`.
    :param clip_index: zero-based clip index (cancellation and errors).
    :param cancel: polled once before the clip and before every :data:`BLOCK_FRAMES`
        frames.
    :returns: read-only features float32 ``[shape=plan.feature_shape]`` and read-only
        mask bool ``[shape=(plan.windows, plan.window_frames)]``.
    :raises ValueError: the waveform is not the planned length.
    """
    if waveform.shape != (plan.samples,):
        raise ValueError(
            f"clip {clip_index + 1}: waveform shape {waveform.shape} does not match the planned "
            f"{plan.samples} samples"
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    # Framed in place (a strided view): no copy when it is contiguous float32 already.
    waveform = np.ascontiguousarray(waveform, dtype=np.float32)
    features = np.empty(plan.feature_shape, dtype=np.float32)
    mask = np.zeros((plan.windows, plan.window_frames), dtype=np.bool_)
    for item in plan.items:
        clip = waveform[item.start : item.start + item.samples]
        if plan.normalize:
            clip = _normalized(clip)
        rows = features[item.window : item.window + item.windows]
        _item_log_mel(clip, item, rows, plan.window_frames, clip_index=clip_index, cancel=cancel)
        ones = min(item.padded // HOP, -(-item.samples // HOP))
        mask[item.window : item.window + item.windows].reshape(-1)[:ones] = True
    return readonly(features), readonly(mask)


def _item_log_mel(
    clip: npt.NDArray[np.float32],
    item: WhisperItem,
    rows: npt.NDArray[np.float32],
    window_frames: int,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> None:
    """One item's scaled, clamped log-mel into ``rows`` ``[shape=(windows, n_mels,
    window_frames)]``."""
    computed = item.computed
    frames_total = item.windows * window_frames
    # (x + 4) / 4 is applied per block as x * 0.25 + 1: scaling by a power of two is exact,
    # so both round identically; the clamp is applied afterwards in the scaled domain.
    peak = LOG_FLOOR if computed < frames_total else np.float32(-np.inf)
    if computed:
        sources = _frame_sources(clip, item.padded, computed)
        ranges = block_ranges(computed, window_frames)
        peaks = np.empty(len(ranges), dtype=np.float32)

        def block(index: int) -> None:
            start, stop = ranges[index]
            row, column = divmod(start, window_frames)
            out = rows[row, :, column : column + stop - start]
            parts = [
                frames[max(start, first) - first : min(stop, end) - first]
                for first, end, frames in sources
                if max(start, first) < min(stop, end)
            ]
            peaks[index] = log_mel_block(parts, out)

        run_blocks(
            peaks.size, block, cancel=cancel, checkpoint=Checkpoint.FEATURE, clip_index=clip_index
        )
        peak = max(peak, peaks.max())
    floor = (np.float32(peak - np.float32(8.0)) + np.float32(4.0)) * np.float32(0.25)
    constant = max((LOG_FLOOR + np.float32(4.0)) * np.float32(0.25), floor)
    for row in range(item.windows):
        head_frames = min(window_frames, max(0, computed - row * window_frames))
        head = rows[row, :, :head_frames]
        np.maximum(head, np.full(head_frames, floor), out=head)  # a row: see _ENERGY_FLOOR_ROW
        rows[row, :, head_frames:] = constant


def _rfft(frames: npt.NDArray[np.float64], out: npt.NDArray[np.complex128]) -> None:
    """``np.fft.rfft(frames, axis=-1, out=out)`` for 400-point frames: the ufunc it
    calls, called directly (its wrapper's Python steps are cold in a stream's
    ``finish()``)."""
    rfft_rows(frames, out)


def _mel_product(bank: Any, bins_by_frames: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``bank @ bins_by_frames`` ``[shape=(n_mels, count)]``, float32: for more than one
    frame the routine scipy's product runs (``csr_matvecs`` into zeros), called directly
    (scipy's dispatch is a dozen Python calls, each cold in a stream's ``finish()``); one
    frame goes through scipy (its ``csr_matvec``)."""
    rows, count = bank.shape[0], bins_by_frames.shape[1]
    if count > 1 and bins_by_frames.flags.c_contiguous:
        energies = np.zeros((rows, count), dtype=np.float32)
        if csr_product_into(bank, bins_by_frames, energies):
            return energies
    product: npt.NDArray[np.float32] = bank @ bins_by_frames
    return product


def log_mel_block(parts: list[Any], out: npt.NDArray[np.float32]) -> np.float32:
    """``(log10(max(mel, 1e-10)) + 4) / 4`` of the frames in ``parts`` (consecutive
    ``[shape=(rows, 400)]`` views) into ``out`` ``[shape=(n_mels, count)]``; returns the
    block's largest float32 ``log10``."""
    scratch = thread_scratch("audiogate.dsp.whisper", _BlockScratch)
    count = out.shape[1]
    n_mels = out.shape[0]
    # The window product in float32, as torch.stft forms it; the FFT in float64, so what
    # remains is the reference's own float32 FFT error (see the module doc).
    windowed = scratch.frames[:count]
    first = 0
    for frames in parts:
        stop = first + frames.shape[0]
        np.multiply(frames, _WINDOW, out=windowed[first:stop], dtype=np.float32)
        first = stop
    spectrum = scratch.spectrum[:count]
    _rfft(windowed, spectrum)
    components = spectrum.view(np.float64)
    np.square(components, out=components)
    # Bins by frames, the layout the sparse product reads; for a large block a plain
    # transposed copy is several times cheaper than writing the sum transposed, for a
    # small one (a stream's last frames, run cold) one call fewer is.
    bins_by_frames = scratch.bins_by_frames[: _BINS * count].reshape(_BINS, count)
    small = count <= _TRANSPOSED_SUM_FRAMES
    power = bins_by_frames.T if small else scratch.power[:count]
    np.add(components[:, 0::2], components[:, 1::2], out=power, casting="same_kind")
    if not small:
        np.copyto(bins_by_frames, power.T)
    energies = _mel_product(whisper_mel_matrix(n_mels), bins_by_frames)
    np.maximum(energies, _ENERGY_FLOOR_ROW[:count], out=energies)
    # Correctly rounded float32 log10, as torch's is in all but ~2e-4 of cases (numpy's
    # float32 log10 is an ulp off in half of them): float64 log10, then one rounding.
    logs = scratch.logs[: n_mels * count].reshape(n_mels, count)
    np.log10(energies, out=logs, dtype=np.float64)
    # Scaling by 0.25 commutes with the rounding to float32 (a power of two, no
    # underflow at these magnitudes), and rounding is monotonic, so the maximum of the
    # float32 logs is the rounded maximum.
    np.multiply(logs, 0.25, out=out, casting="same_kind")
    out += np.float32(1.0)
    return np.float32(logs.max())
