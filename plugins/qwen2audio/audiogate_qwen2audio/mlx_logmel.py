"""The Whisper log-mel of :mod:`audiogate_qwen2audio.logmel`, computed with MLX.

Used when ``policy.feature_backend == "mlx"``: :func:`~audiogate_qwen2audio.features.
extract_features` keeps its checks and geometry and calls :func:`whisper_log_mel`; the
plugin's collate hook calls :func:`collate_features`. ``mlx.core`` is imported only by this
module, on first use of the backend.

Same algorithm as the numpy path: the clip in the 30 s window, reflect-padded by 200
samples at both ends (built with MLX slices), only the frames that touch the clip framed
(a strided view, hop 160), the periodic Hann(400) of torch (the numpy module's bit-exact
table) in float32, a 400-point ``mx.fft.rfft``, power, one matmul with the Slaney bank over
its non-zero bins, ``log10(max(·, 1e-10))``; per block of :data:`~audiogate_qwen2audio.
logmel.BLOCK_FRAMES` frames ``mx.eval`` and a ``Feature`` cancellation check. Then
``max(x, x.max() - 8)`` over the whole window, where every frame that sees only zero
padding is the constant ``log10(1e-10)`` and still takes part in the maximum, and
``(x + 4) / 4``.

The FFT is float32 (MLX has no float64 FFT) where the numpy path uses float64; what differs
is the float32 FFT's rounding (``tests/mlx`` bounds it). Frames, the mask and the pooled
rows come from :func:`~audiogate_qwen2audio.geometry.whisper_geometry`, as on the numpy path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.melbank import covered_bins
from audiogate.dsp.mlx_constants import thread_constant
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_qwen2audio.collate import MASK_DTYPE
from audiogate_qwen2audio.geometry import (
    FEATURE_SHAPE,
    HOP,
    MAX_FRAMES,
    MAX_SAMPLES,
    N_FFT,
    WhisperGeometry,
)
from audiogate_qwen2audio.logmel import BLOCK_FRAMES, LOG_FLOOR, hann_window_torch
from audiogate_qwen2audio.melbank import whisper_mel_matrix

__all__ = ["collate_features", "whisper_log_mel"]

_PAD: Final = N_FFT // 2


@functools.cache
def _dense_bank() -> tuple[npt.NDArray[np.float32], int, int]:
    """The float32 Slaney bank (as the reference casts it) over its non-zero bins
    ``[low, high)`` ``[shape=(high - low, 128)]`` (built once)."""
    dense = whisper_mel_matrix().toarray().T  # [shape=(201, 128)]
    low, high = covered_bins(dense)
    return readonly(np.ascontiguousarray(dense[low:high], dtype=np.float32)), low, high


def _bank() -> tuple[Any, int, int]:
    """:func:`_dense_bank` as an mx array, and its bins ``[low, high)``."""
    weights, low, high = _dense_bank()
    return thread_constant("qwen2audio.bank", lambda: mx.array(weights)), low, high


def _padded_buffer(wave: Any, samples: int, computed_frames: int) -> Any:
    """The reflect-padded window up to the last computed frame's end (see the numpy
    module's ``_padded_buffer``): index ``i + 200`` holds padded sample ``i``."""
    end = HOP * (computed_frames - 1) + _PAD  # exclusive, in padded-sample coordinates
    body = mx.pad(wave, [(0, min(end, MAX_SAMPLES) - samples)])
    # A clip has more than 320 samples, so the front reflection (samples 200..1) exists.
    parts = [wave[1 : _PAD + 1][::-1], body]
    if end > MAX_SAMPLES:
        # The window's own end reflects padded samples 479,998 downwards.
        parts.append(body[2 * MAX_SAMPLES - 1 - end : MAX_SAMPLES - 1][::-1])
    buffer = mx.concatenate(parts)
    mx.eval(buffer)
    return buffer


def whisper_log_mel(
    waveform: npt.NDArray[np.float32],
    geometry: WhisperGeometry,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> tuple[Any, Any]:
    """Log-mel features and frame mask of one clip with MLX.

    :param waveform: mono float32 at 16 kHz ``[shape=(geometry.samples,)]`` (numpy).
    :returns: evaluated ``mx.array`` features float32 ``[shape=(128, 3000)]`` and mask
        bool ``[shape=(3000,)]`` with ``geometry.valid_frames`` leading ones.
    """
    if waveform.shape != (geometry.samples,):
        raise ValueError(
            f"clip {clip_index + 1}: waveform shape {waveform.shape} does not match the planned "
            f"{geometry.samples} samples"
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    computed = geometry.computed_frames
    # A window that sees only zero padding gives log10(1e-10) and still counts in the max.
    peak = mx.array(float(LOG_FLOOR) if computed < MAX_FRAMES else -np.inf, dtype=mx.float32)
    columns: list[Any] = []
    if computed:
        weights, low, high = _bank()
        window = thread_constant("qwen2audio.window", lambda: mx.array(hann_window_torch()))
        energy_floor = mx.array(1e-10, dtype=mx.float32)
        buffer = _padded_buffer(
            mx.array(np.ascontiguousarray(waveform, dtype=np.float32)), geometry.samples, computed
        )
        for start in range(0, computed, BLOCK_FRAMES):
            count = min(computed, start + BLOCK_FRAMES) - start
            span = buffer[start * HOP : start * HOP + HOP * (count - 1) + N_FFT]
            frames = mx.as_strided(span, (count, N_FFT), (HOP, 1))
            spectrum = mx.fft.rfft(frames * window, n=N_FFT, axis=-1)[:, low:high]
            power = mx.square(mx.real(spectrum)) + mx.square(mx.imag(spectrum))
            logs = mx.log10(mx.maximum(power @ weights, energy_floor))
            peak = mx.maximum(peak, mx.max(logs))
            # (x + 4) / 4 as x * 0.25 + 1: exact scaling by a power of two, as numpy does.
            block = logs * 0.25 + 1.0
            mx.eval(block, peak)
            columns.append(block)
            cancel.check(Checkpoint.FEATURE, clip_index)
    floor = ((peak - 8.0) + 4.0) * 0.25
    silent = mx.maximum(
        mx.array(float((LOG_FLOOR + np.float32(4.0)) * np.float32(0.25)), dtype=mx.float32), floor
    )
    parts = []
    if columns:
        head = columns[0] if len(columns) == 1 else mx.concatenate(columns, axis=0)
        parts.append(mx.maximum(head, floor).T)
    if computed < MAX_FRAMES:
        parts.append(mx.broadcast_to(silent, (FEATURE_SHAPE[0], MAX_FRAMES - computed)))
    features = parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=1)
    # A row-contiguous (128, 3000) result, like the numpy path's, not a transposed view.
    features = mx.contiguous(features)
    mask = mx.arange(MAX_FRAMES) < geometry.valid_frames
    mx.eval(features, mask)
    return features, mask


def collate_features(clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """:func:`audiogate_qwen2audio.collate.collate_features` with MLX arrays.

    :returns: ``input_features`` float32 ``[shape=(n, 128, 3000)]`` and
        ``feature_attention_mask`` int32 ``[shape=(n, 3000)]``, both ``mx.array``.
    :raises ValueError: a clip is not a Qwen2-Audio clip (shape, mask) or there is none.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        if tuple(clip.features.shape) != FEATURE_SHAPE or clip.mask is None:
            raise ValueError(
                f"clip {index + 1} has features {tuple(clip.features.shape)} and mask "
                f"{None if clip.mask is None else tuple(clip.mask.shape)}; expected "
                f"{FEATURE_SHAPE} and ({MAX_FRAMES},)"
            )
        if int(clip.mask.sum()) != clip.frames:
            raise ValueError(
                f"clip {index + 1}: mask has {int(clip.mask.sum())} valid frames, not {clip.frames}"
            )
    features = mx.stack([mx.array(clip.features, dtype=mx.float32) for clip in clips])
    masks = mx.stack(
        [mx.array(clip.mask).astype(_MASK_DTYPE) for clip in clips if clip.mask is not None]
    )
    mx.eval(features, masks)
    return FeatureBatch(
        inputs={"input_features": features, "feature_attention_mask": masks},
        tokens=tuple(clip.tokens for clip in clips),
    )


#: ``collate.MASK_DTYPE`` (int32) as an MLX dtype.
_MASK_DTYPE: Final = {np.dtype(np.int32): mx.int32}[np.dtype(MASK_DTYPE)]
