"""The Gemma 3n USM log-mel of :mod:`audiogate_gemma3n.logmel`, computed with MLX.

Used when ``policy.feature_backend == "mlx"``: :func:`~audiogate_gemma3n.features.
extract_features` keeps its checks, frame layout and mask and calls :func:`log_mel` for the
frames; :func:`~audiogate_gemma3n.collate.collate_features` calls :func:`collate_features`.
``mlx.core`` is imported only by this module, on first use of the backend.

Same algorithm and blocks as :func:`~audiogate_gemma3n.logmel.log_mel_frames`: the clip
zero-padded on the policy's side, frames of 512 of a 513-sample unfold with a hop of 160,
HTK pre-emphasis (``y[0] = 0.03·x[0]``, ``y[i] = x[i] - 0.97·x[i-1]``) and the periodic
Hann(512) in float32 (bit-identical to the numpy path), a 1024-point real FFT of the bank's
non-zero bins 9..486, their magnitude, one matmul with the HTK bank and
``ln(max(·, 1e-5))``; per block of :data:`~audiogate_gemma3n.logmel.FRAMES_PER_BLOCK`
frames a ``Feature`` cancellation check, then ``mx.eval``.

The numpy path rounds a float64 FFT to complex64, as the FE does. MLX's own FFT is float32
only, and its rounding (relative to the whole frame) moves bands near the 1e-5 floor by up
to 0.6 in the log on pure tones; so the FFT here is
:func:`audiogate.dsp.mlx_fft.rfft_float_float`, in float-float arithmetic, and the features stay
within 1e-4 of the numpy path on every band (``tests/mlx``). Frames, masks and the 188
soft tokens come from :mod:`audiogate_gemma3n.geometry`, as on the numpy path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.melbank import covered_bins
from audiogate.dsp.mlx_constants import thread_constant
from audiogate.dsp.mlx_fft import rfft_float_float
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_gemma3n.features import Gemma3nClipFeatures, padding_side
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FFT_LENGTH,
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    MEL_FLOOR,
    PREEMPHASIS,
    feature_frames,
    padded_samples,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.logmel import FRAMES_PER_BLOCK, HANN_WINDOW, floor_value
from audiogate_gemma3n.melbank import htk_mel_filter_bank

__all__ = ["clip_arrays", "collate_features", "log_mel"]


@functools.cache
def _dense_bank() -> tuple[npt.NDArray[np.float32], int, int]:
    """The HTK bank as float32 over its non-zero bins ``[start, stop)`` (built once)."""
    dense = htk_mel_filter_bank()
    start, stop = covered_bins(dense)
    return readonly(np.ascontiguousarray(dense[start:stop], dtype=np.float32)), start, stop


def _bank() -> tuple[Any, int, int]:
    """The bank as an mx array ``[shape=(478, 128)]`` and its bins ``[start, stop)``."""
    weights, start, stop = _dense_bank()
    return thread_constant("gemma3n.bank", lambda: mx.array(weights)), start, stop


def log_mel(
    waveform: npt.NDArray[np.float32],
    *,
    lead_samples: int,
    stop_frame: int,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> Any:
    """Frames ``0:stop_frame`` of the clip after ``lead_samples`` zeros (and zeros after).

    :param waveform: mono float32 ``[shape=(n,)]`` (numpy: the waveform boundary).
    :param cancel: polled at the ``Feature`` checkpoint before every block.
    :returns: evaluated ``mx.array`` float32 ``[shape=(stop_frame, 128)]``.
    """
    if stop_frame < 1:
        raise PluginError(f"gemma3n clip {clip_index}: no frames to compute ({stop_frame})")
    weights, bin_start, bin_stop = _bank()
    window = thread_constant("gemma3n.window", lambda: mx.array(HANN_WINDOW))
    preemphasis = mx.array(PREEMPHASIS, dtype=mx.float32)
    first_scale = mx.array(1.0 - PREEMPHASIS, dtype=mx.float32)
    floor = mx.array(MEL_FLOOR, dtype=mx.float32)
    wave = mx.array(np.ascontiguousarray(waveform, dtype=np.float32))
    n = int(waveform.shape[0])
    blocks: list[Any] = []
    for t0 in range(0, stop_frame, FRAMES_PER_BLOCK):
        cancel.check(Checkpoint.FEATURE, clip_index)
        rows = min(FRAMES_PER_BLOCK, stop_frame - t0)
        span = FRAME_HOP_SAMPLES * (rows - 1) + FRAME_SAMPLES
        # The padded clip's samples [start, start + span).
        start = FRAME_HOP_SAMPLES * t0 - lead_samples
        lo, hi = max(start, 0), min(start + span, n)
        if lo >= hi:
            source = mx.zeros((span,), dtype=mx.float32)
        else:
            source = mx.pad(wave[lo:hi], [(lo - start, start + span - hi)])
        # Pre-emphasis once over the span, in the FE's float32 operation order.
        emphasis = source[1:] - source[:-1] * preemphasis
        rest = mx.as_strided(emphasis, (rows, FRAME_SAMPLES - 1), (FRAME_HOP_SAMPLES, 1))
        # HTK flavour: the first sample is scaled by 0.03, then windowed by Hann[0] = 0.
        firsts = source[: FRAME_HOP_SAMPLES * (rows - 1) + 1 : FRAME_HOP_SAMPLES]
        framed = mx.concatenate(
            [(firsts * first_scale * window[0])[:, None], rest * window[1:]], axis=1
        )
        real, imag = rfft_float_float(framed, n=FFT_LENGTH, low=bin_start, high=bin_stop)
        magnitude = mx.sqrt(real * real + imag * imag)
        block = mx.log(mx.maximum(magnitude @ weights, floor))
        mx.eval(block)
        blocks.append(block)
    out = blocks[0] if len(blocks) == 1 else mx.concatenate(blocks, axis=0)
    mx.eval(out)
    return out


def clip_arrays(
    waveform: npt.NDArray[np.float32],
    *,
    lead_samples: int,
    frames: int,
    tail_frames: int,
    mask: npt.NDArray[np.bool_],
    clip_index: int,
    cancel: CancelToken,
) -> tuple[Any, Any, Any]:
    """One clip's features ``[shape=(frames, 128)]``, right-padding tail ``[shape=(tail_frames,
    128)]`` and frame mask ``[shape=(frames,)]`` as evaluated ``mx.array`` (so that they can
    leave this thread), computed in one pass as the numpy path does."""
    computed = log_mel(
        waveform,
        lead_samples=lead_samples,
        stop_frame=frames + tail_frames,
        clip_index=clip_index,
        cancel=cancel,
    )
    features, tail, frame_mask = computed[:frames], computed[frames:], mx.array(mask)
    mx.eval(features, tail, frame_mask)
    return features, tail, frame_mask


def _check(clip: ClipFeatures, index: int) -> None:
    shape = tuple(clip.features.shape)
    dtype = clip.features.dtype
    float32 = dtype == mx.float32 if isinstance(dtype, mx.Dtype) else dtype == np.float32
    if shape != (clip.frames, FEATURE_SIZE) or not float32:
        raise PluginError(
            f"gemma3n clip {index} has features {clip.features.dtype}{list(shape)}, expected "
            f"float32[{clip.frames}, {FEATURE_SIZE}]"
        )


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """:func:`audiogate_gemma3n.collate.collate_features` with MLX arrays.

    :returns: ``input_features`` float32 ``[shape=(clips, T_max, 128)]`` and
        ``input_features_mask`` bool ``[shape=(clips, T_max)]``, both ``mx.array``.
    :raises PluginError: malformed clip features, or left padding without the waveform.
    """
    side = padding_side(policy)
    for index, clip in enumerate(clips):
        _check(clip, index)
    padded = max(
        (padded_samples(c.samples) for c in clips if isinstance(c, Gemma3nClipFeatures)),
        default=0,
    )
    frames = max([feature_frames(padded), *(clip.frames for clip in clips)])
    filler = float(floor_value())
    rows: list[Any] = []
    # The mask is index arithmetic: built in numpy, converted once.
    mask = np.zeros((len(clips), frames), dtype=np.bool_)
    for index, clip in enumerate(clips):
        own = mx.array(clip.features, dtype=mx.float32)
        if not isinstance(clip, Gemma3nClipFeatures):
            if side == "left":
                raise PluginError(
                    f"gemma3n clip {index}: left padding needs the clip's waveform, which "
                    f"only the features of audiogate_gemma3n's extractor carry"
                )
            row = _pad_rows(own, frames, filler)
            mask[index, : clip.frames] = True if clip.mask is None else np.asarray(clip.mask)
        elif clip.padding_side != side:
            raise PluginError(
                f"gemma3n clip {index} was extracted with {clip.padding_side} padding, but "
                f"the policy pads on the {side}"
            )
        elif side == "right":
            valid = min(frames, valid_frames_in_padded_batch(clip.samples))
            tail = mx.array(clip.tail, dtype=mx.float32)[: valid - clip.frames]
            row = _pad_rows(mx.concatenate([own, tail], axis=0), frames, filler)
            mask[index, :valid] = True
        else:
            lead = padded - clip.samples
            if padded_samples(clip.samples) == padded:
                # Same padded length, same shift: the clip's own frames.
                row = _pad_rows(own, frames, filler)
            elif clip.waveform is None:
                raise PluginError(
                    f"gemma3n clip {index}: left padding in a longer batch needs the clip's "
                    f"waveform, and these features carry none"
                )
            else:
                row = log_mel(clip.waveform, lead_samples=lead, stop_frame=frames, clip_index=index)
            mask[index] = np.arange(frames) * FRAME_HOP_SAMPLES >= lead
        rows.append(row)
    features = mx.stack(rows)
    mask_mx = mx.array(mask)
    mx.eval(features, mask_mx)
    return FeatureBatch(
        inputs={"input_features": features, "input_features_mask": mask_mx},
        tokens=tuple(clip.tokens for clip in clips),
    )


def _pad_rows(rows: Any, frames: int, filler: float) -> Any:
    """``rows`` ``[shape=(k, 128)]`` followed by ``frames - k`` rows of ``filler``."""
    missing = frames - int(rows.shape[0])
    if missing == 0:
        return rows
    return mx.pad(rows, [(0, missing), (0, 0)], constant_values=filler)
