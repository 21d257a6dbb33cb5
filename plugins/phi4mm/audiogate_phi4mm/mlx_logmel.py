"""The SpeechLib log-mel of :mod:`audiogate_phi4mm.logmel`, computed with MLX.

Selected by ``policy.feature_backend == "mlx"``; ``import mlx.core`` happens only here,
so the numpy path never needs MLX. Same algorithm, same framing, same blocks:

* the waveform (numpy, the resampler's output) is copied to MLX once;
* per block of :data:`~audiogate_phi4mm.logmel.BLOCK_FRAMES` frames: SpeechLib
  pre-emphasis (``y[0] = x[0] - 0.97·x[0]``, ``y[i] = x[i] - 0.97·x[i-1]``) in float32,
  the frames as a strided view, times the symmetric Hamming window scaled by 32768, one
  batched real FFT (512 points at 16 kHz; 256 at 8 kHz, bins 0..127 kept and the rest
  zero, the ``"fillzero"`` method) of the bins the bank covers, power ``|S|²``, one matmul
  with the bank, ``ln(max(·, 1))``; ``mx.eval`` and a ``Feature`` cancellation check.

The numpy path keeps the original's float64 window product and FFT, rounded to complex64.
MLX has no float64 (on the GPU) and its FFT is float32 only, whose rounding, relative to
the whole frame, moves bands near the power floor of 1 by up to 5e-3 in the log. So the
window product and the FFT are done in float-float arithmetic (:mod:`audiogate.dsp.mlx_fft`)
and the features stay within 1e-4 of the numpy path on every band (``tests/mlx``).
Frames, tokens and shapes come from :func:`~audiogate_phi4mm.geometry.clip_geometry`, as
on the numpy path, never a second copy.

Batches from :func:`collate_features` (which :func:`audiogate_phi4mm.collate.
collate_features` calls for the mlx backend) are all MLX: float32 features, int64 token counts
and a bool frame mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, cast

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.melbank import covered_bins
from audiogate.dsp.mlx_constants import thread_constant
from audiogate.dsp.mlx_fft import FloatFloat, float_float_constant, rfft_float_float
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_phi4mm.collate import name_inputs
from audiogate_phi4mm.geometry import Frontend, frame_count
from audiogate_phi4mm.logmel import BLOCK_FRAMES, INPUT_SCALE, PREEMPHASIS
from audiogate_phi4mm.melbank import MEL_FILTERS, BankName, float32_bank

__all__ = ["collate_features", "log_mel"]


@cache
def _dense_bank(name: BankName, kept_bins: int) -> tuple[npt.NDArray[np.float32], int, int]:
    """The float32 bank over the bins ``[low, high)`` it covers below ``kept_bins`` (the
    fillzero bins are zero and contribute nothing) ``[shape=(high - low, 80)]``."""
    dense = float32_bank(name)
    low, high = covered_bins(dense[:kept_bins])
    return readonly(np.ascontiguousarray(dense[low:high])), low, high


def _bank(name: BankName, kept_bins: int) -> tuple[Any, int, int]:
    """:func:`_dense_bank` as an mx array, and its bins ``[low, high)``."""
    weights, low, high = _dense_bank(name, kept_bins)
    return thread_constant(("phi4mm.bank", name, kept_bins), lambda: mx.array(weights)), low, high


def _window(window_samples: int) -> FloatFloat:
    """The symmetric float64 Hamming window times 32768 as a float-float constant for
    :func:`audiogate.dsp.mlx_fft.rfft_float_float`, each part ``[shape=(window_samples,)]``."""
    return cast(
        FloatFloat,
        thread_constant(
            ("phi4mm.window", window_samples),
            lambda: float_float_constant(np.hamming(window_samples) * INPUT_SCALE),
        ),
    )


def log_mel(
    waveform: npt.NDArray[np.float32],
    *,
    frontend: Frontend,
    bank: BankName,
    frames: int,
    clip_index: int,
    cancel: CancelToken,
) -> Any:
    """SpeechLib log-mel of a mono waveform with MLX, block by block.

    :param waveform: float32 ``[shape=(n,)]`` with ``frame_count(n) == frames >= 1``.
    :returns: ``mx.array`` float32 ``[shape=(frames, 80)]``, evaluated.
    """
    wave_np = np.ascontiguousarray(waveform, dtype=np.float32)
    if frames < 1 or frame_count(wave_np.shape[0], frontend) != frames:
        raise ValueError(
            f"clip {clip_index + 1}: {wave_np.shape[0]} samples give "
            f"{frame_count(wave_np.shape[0], frontend)} frames, not {frames}"
        )
    win, hop, kept = frontend.window_samples, frontend.hop_samples, frontend.kept_bins
    weights, low, high = _bank(bank, kept)
    window = _window(win)
    coefficient = mx.array(float(PREEMPHASIS), dtype=mx.float32)
    floor = mx.array(1.0, dtype=mx.float32)
    wave = mx.array(wave_np)
    blocks: list[Any] = []
    cancel.check(Checkpoint.FEATURE, clip_index)
    for start in range(0, frames, BLOCK_FRAMES):
        count = min(BLOCK_FRAMES, frames - start)
        origin = start * hop
        length = (count - 1) * hop + win
        region = wave[origin : origin + length]
        # Pre-emphasis once per sample (frames overlap 2.5x): e[j] = x[j+1] - 0.97·x[j].
        emphasis = region[1:] - region[:-1] * coefficient
        rest = mx.as_strided(emphasis, (count, win - 1), (hop, 1))
        # The first sample of each frame is pre-emphasised against itself: x0 - 0.97·x0.
        heads = region[: (count - 1) * hop + 1 : hop]
        first = heads - heads * coefficient
        framed = mx.concatenate([first[:, None], rest], axis=1)
        # The original's float64 window product, kept in float-float for the FFT.
        real, imag = rfft_float_float(
            framed, n=frontend.fft_size, low=low, high=high, window=window
        )
        power = real * real + imag * imag
        mel = mx.maximum(power @ weights, floor)
        block = mx.log(mel)
        mx.eval(block)
        blocks.append(block)
        cancel.check(Checkpoint.FEATURE, clip_index)
    out = blocks[0] if len(blocks) == 1 else mx.concatenate(blocks, axis=0)
    mx.eval(out)
    return out


def collate_features(clips: Sequence[ClipFeatures], *, variant: str) -> FeatureBatch:
    """:func:`audiogate_phi4mm.collate.collate_features` with MLX arrays.

    :returns: features float32 ``[shape=(n, T_max, 80)]``, ``audio_embed_sizes`` int64
        ``[shape=(n,)]``, ``audio_attention_mask`` bool ``[shape=(n, T_max)]``, all
        ``mx.array`` and named for ``variant``; ``tokens`` per clip.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        shape = tuple(clip.features.shape)
        if shape != (clip.frames, MEL_FILTERS):
            raise ValueError(
                f"clip {index + 1} has features {shape}, expected ({clip.frames}, {MEL_FILTERS})"
            )
    longest = max(clip.frames for clip in clips)
    features = mx.stack(
        [
            mx.pad(mx.array(clip.features, dtype=mx.float32), [(0, longest - clip.frames), (0, 0)])
            for clip in clips
        ]
    )
    frames = mx.array([clip.frames for clip in clips])
    mask = mx.arange(longest)[None, :] < frames[:, None]
    sizes = mx.array(np.array([clip.tokens for clip in clips], dtype=np.int64))
    mx.eval(features, mask, sizes)
    return FeatureBatch(
        inputs=name_inputs(variant, features=features, sizes=sizes, mask=mask, clips=len(clips)),
        tokens=tuple(clip.tokens for clip in clips),
    )
