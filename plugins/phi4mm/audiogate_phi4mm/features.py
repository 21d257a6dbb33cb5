"""The Phi-4 MM features stage: one clip's plan, then its SpeechLib log-mel as planned.

Frames, tokens and the feature shape come from :func:`audiogate_phi4mm.geometry.
clip_geometry`; the numpy kernel is :func:`audiogate_phi4mm.logmel.log_mel`. With
``policy.feature_backend == "mlx"``, :func:`extract_features` runs the same algorithm in
:mod:`audiogate_phi4mm.mlx_logmel` and returns ``mx.array`` (``docs/mlx.md``); the plan
gives the same frames, tokens and shapes, and its ``working_bytes`` counts one thread's
block arrays plus the MLX FFT's temporaries (:data:`audiogate.dsp.mlx_budget.FFT_PASS_BYTES`).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.blocks import block_threads
from audiogate.dsp.mlx_budget import FFT_PASS_BYTES
from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate_phi4mm.geometry import Frontend, clip_geometry, frontend_for
from audiogate_phi4mm.logmel import BLOCK_FRAMES, block_count, log_mel, working_bytes
from audiogate_phi4mm.melbank import MEL_FILTERS

__all__ = ["MLX_MODULE", "extract_features", "plan_features"]

#: The MLX kernel, imported only for ``feature_backend == "mlx"``.
MLX_MODULE: Final = "audiogate_phi4mm.mlx_logmel"
_F32: Final = 4


def _plan_working_bytes(frontend: Frontend, frames: int, backend: str) -> int:
    """The numpy path's scratch on its threads; the mlx backend runs its blocks on one
    thread, with the same arrays per block, and its float-float FFT's temporaries."""
    if backend == "mlx":
        return working_bytes(frontend, 1) + FFT_PASS_BYTES
    return working_bytes(frontend, block_threads(block_count(frames)))


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and sizes of one clip's features, before extraction.

    :raises FeatureError: fewer samples than one frame, or a rate the frontend refuses.
    """
    geometry = clip_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    frontend, frames = geometry.frontend, geometry.frames
    return FeaturePlan(
        frames=frames,
        tokens=geometry.tokens,
        feature_shape=geometry.feature_shape,
        feature_bytes=frames * MEL_FILTERS * _F32,
        working_bytes=_plan_working_bytes(frontend, frames, policy.feature_backend),
        detail={
            "rate_hz": rate_hz,
            "window_samples": frontend.window_samples,
            "hop_samples": frontend.hop_samples,
            "fft_size": frontend.fft_size,
            "bank": "native" if policy.variant == "native" else "speechlib",
            "block_frames": BLOCK_FRAMES,
        },
    )


def extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    *,
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures:
    """Compute one clip's features exactly as :func:`plan_features` planned them.

    :param waveform: read-only mono float32 ``[shape=(n,)]`` at ``rate_hz``.
    :returns: read-only float32 ``[shape=(plan.frames, 80)]`` (an ``mx.array`` when
        ``policy.feature_backend == "mlx"``), no mask (one clip has no padding;
        :func:`~audiogate_phi4mm.collate.collate_features` builds the batch mask).
    :raises MissingExtraError: the mlx backend is selected and MLX is not importable.
    """
    replanned = plan_features(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    if (replanned.frames, replanned.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: the waveform gives {replanned.frames} frames / "
            f"{replanned.tokens} tokens, but the plan says {plan.frames} / {plan.tokens}"
        )
    compute = log_mel
    if policy.feature_backend == "mlx":
        # The same algorithm in MLX; the result is an ``mx.array``.
        compute = load_mlx_module(MLX_MODULE, family="phi4mm", clip_index=clip_index).log_mel
    features = compute(
        waveform,
        frontend=frontend_for(policy, rate_hz, clip_index=clip_index),
        bank="native" if policy.variant == "native" else "speechlib",
        frames=plan.frames,
        clip_index=clip_index,
        cancel=cancel,
    )
    if isinstance(features, np.ndarray):
        readonly(features)
    return ClipFeatures(features=features, frames=plan.frames, tokens=plan.tokens)
