"""The Qwen2.5-Omni features stage: plan (frames, tokens, bytes) and extraction, from one
geometry, on the shared Whisper frontend (:mod:`audiogate.dsp.whisper`, one
``"max_length"`` window of 4,800,000 samples)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_qwen25omni.geometry import (
    FEATURE_SHAPE,
    MAX_ROWS,
    MAX_SAMPLES,
    MIN_SAMPLES,
    SAMPLE_RATE_HZ,
    ClipGeometry,
    clip_geometry,
    clip_plan,
)

__all__ = ["extract_features", "plan_features"]


def _checked_geometry(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> ClipGeometry:
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Whisper frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
            clip_index=clip_index,
        )
    minimum = max(MIN_SAMPLES, policy.min_samples_per_clip)
    if samples < minimum:
        raise FeatureError(
            f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: at least "
            f"{minimum} are needed to produce one audio row",
            clip_index=clip_index,
        )
    maximum = min(MAX_SAMPLES, policy.max_samples_per_clip)
    if samples > maximum:
        # The reference would truncate to its 300 s window without a word.
        raise LimitError("duration samples", actual=samples, maximum=maximum, clip_index=clip_index)
    geometry = clip_geometry(samples)
    rows = min(MAX_ROWS, int(policy.options.get("max_rows_per_clip", MAX_ROWS)))
    assert 1 <= geometry.tokens <= rows, (samples, geometry.tokens, rows)
    return geometry


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or fewer than 321 samples (no audio row).
    :raises LimitError: ``duration samples``: more than 4,800,000 (300 s).
    """
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    plan = clip_plan(samples)
    return FeaturePlan(
        frames=geometry.valid_frames,
        tokens=geometry.tokens,
        feature_shape=FEATURE_SHAPE,
        feature_bytes=plan.feature_bytes,
        working_bytes=plan.working_bytes,
        detail={
            "valid_frames": geometry.valid_frames,
            "computed_frames": geometry.computed_frames,
            "rows": geometry.tokens,
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
    """Features ``[shape=(128, 30000)]`` and the frame mask ``[shape=(30000,)]`` of one
    clip, as planned."""
    from audiogate.dsp import whisper

    samples = int(waveform.shape[0])
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    if (geometry.valid_frames, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {samples} samples give {geometry.valid_frames} frames / "
            f"{geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    features, mask = whisper.whisper_log_mel(
        np.ascontiguousarray(waveform, dtype=np.float32),
        clip_plan(samples),
        clip_index=clip_index,
        cancel=cancel,
    )
    return ClipFeatures(
        features=features[0], mask=mask[0], frames=geometry.valid_frames, tokens=geometry.tokens
    )
