"""The Qwen3-Omni features stage: plan (frames, tokens, bytes) and extraction, from one
geometry, on the shared Whisper frontend (:mod:`audiogate.dsp.whisper`, ``"longest"``
padding of the clip alone)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_qwen3omni.geometry import (
    MAX_ROWS,
    MAX_SAMPLES,
    MIN_SAMPLES,
    N_MELS,
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
        raise LimitError("duration samples", actual=samples, maximum=maximum, clip_index=clip_index)
    geometry = clip_geometry(samples)
    rows = min(MAX_ROWS, int(policy.options.get("max_rows_per_clip", MAX_ROWS)))
    assert 1 <= geometry.tokens <= rows, (samples, geometry.tokens, rows)
    return geometry


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or 200 samples or fewer (the reference's STFT
        cannot frame them).
    :raises LimitError: ``duration samples``: more than the policy's cap (300 s).
    """
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    plan = clip_plan(samples)
    return FeaturePlan(
        frames=geometry.frames,
        tokens=geometry.tokens,
        feature_shape=(N_MELS, geometry.frames),
        feature_bytes=plan.feature_bytes,
        working_bytes=plan.working_bytes,
        detail={"frames": geometry.frames, "rows": geometry.tokens},
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
    """Features ``[shape=(128, N // 160)]`` and the frame mask (all ones) of one clip."""
    from audiogate.dsp import whisper

    samples = int(waveform.shape[0])
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    if (geometry.frames, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {samples} samples give {geometry.frames} frames / "
            f"{geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    features, mask = whisper.whisper_log_mel(
        np.ascontiguousarray(waveform, dtype=np.float32),
        clip_plan(samples),
        clip_index=clip_index,
        cancel=cancel,
    )
    return ClipFeatures(
        features=features[0], mask=mask[0], frames=geometry.frames, tokens=geometry.tokens
    )
