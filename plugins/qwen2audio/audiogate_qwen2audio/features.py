"""The Qwen2-Audio features stage: plan (frames, tokens, bytes) and extraction, from one geometry.

Extraction runs :func:`~audiogate_qwen2audio.logmel.whisper_log_mel`, or with
``policy.feature_backend == "mlx"`` the same algorithm in
:mod:`audiogate_qwen2audio.mlx_logmel` (``docs/mlx.md``); the plan is the same for both.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_qwen2audio.geometry import (
    FEATURE_SHAPE,
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    SAMPLE_RATE_HZ,
    WhisperGeometry,
    whisper_geometry,
)
from audiogate_qwen2audio.logmel import whisper_log_mel, working_bytes
from audiogate_qwen2audio.policy import MIN_SAMPLES, ROW_BYTES

__all__ = ["MLX_MODULE", "extract_features", "feature_bytes", "plan_features"]

#: The MLX kernel, imported only for ``feature_backend == "mlx"``.
MLX_MODULE: Final = "audiogate_qwen2audio.mlx_logmel"


def feature_bytes(geometry: WhisperGeometry) -> int:
    """Bytes of one clip's prepared result.

    The 128 × 3000 float32 features, the 3000-frame bool mask, and one 4096-float32 row
    (16,384 B) per pooled token: the Qwen2-Audio serving guide's row capacity ("An audio
    feature row costs 16384 bytes"), which the projected encoder output occupies.
    """
    return math.prod(FEATURE_SHAPE) * 4 + MAX_FRAMES + geometry.tokens * ROW_BYTES


def _checked_geometry(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> WhisperGeometry:
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Whisper frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
            clip_index=clip_index,
        )
    minimum = max(MIN_SAMPLES, policy.min_samples_per_clip)
    if samples < minimum:
        raise FeatureError(
            f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: more than "
            f"{minimum - 1} are needed (at least {minimum}) to produce one pooled audio row",
            clip_index=clip_index,
        )
    maximum = min(MAX_SAMPLES, policy.max_samples_per_clip)
    if samples > maximum:
        raise LimitError("duration samples", actual=samples, maximum=maximum, clip_index=clip_index)
    geometry = whisper_geometry(samples)
    rows = min(MAX_ROWS, int(policy.options.get("max_rows_per_clip", MAX_ROWS)))
    # 480,000 samples give 750 rows; a policy can only lower the sample cap.
    assert 1 <= geometry.tokens <= rows, (samples, geometry.tokens, rows)
    return geometry


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or 320 samples or fewer (no pooled row).
    :raises LimitError: ``duration samples``: more than 480,000 (30 s).
    """
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    return FeaturePlan(
        frames=geometry.valid_frames,
        tokens=geometry.tokens,
        feature_shape=FEATURE_SHAPE,
        feature_bytes=feature_bytes(geometry),
        working_bytes=working_bytes(geometry),
        detail={
            "valid_frames": geometry.valid_frames,
            "computed_frames": geometry.computed_frames,
            "rows": geometry.tokens,
            "row_bytes": ROW_BYTES,
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
    """Features ``[shape=(128, 3000)]`` and the frame mask of one clip, as planned
    (``mx.array`` when ``policy.feature_backend == "mlx"``).

    :raises MissingExtraError: the mlx backend is selected and MLX is not importable.
    """
    geometry = _checked_geometry(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    if (geometry.valid_frames, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {waveform.shape[0]} samples give {geometry.valid_frames} "
            f"frames / {geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    compute = whisper_log_mel
    if policy.feature_backend == "mlx":
        # The same algorithm in MLX; features and mask are ``mx.array``.
        mlx_logmel = load_mlx_module(MLX_MODULE, family="qwen2audio", clip_index=clip_index)
        compute = mlx_logmel.whisper_log_mel
    features, mask = compute(
        np.ascontiguousarray(waveform, dtype=np.float32),
        geometry,
        clip_index=clip_index,
        cancel=cancel,
    )
    return ClipFeatures(
        features=features, mask=mask, frames=geometry.valid_frames, tokens=geometry.tokens
    )
