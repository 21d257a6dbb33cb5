"""The GLM-ASR features stage: plan (windows, frames, tokens, bytes) and extraction.

Extraction is :func:`audiogate.dsp.whisper.whisper_log_mel` in its ``"windows"`` mode: the
clip cut into 30 s windows, each padded to 480,000 samples, transformed and clamped on
its own, as ``GlmAsrProcessor`` passes the windows to its extractor as a batch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.whisper import WhisperPlan, whisper_log_mel, whisper_plan
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_glmasr.geometry import (
    MAX_ROWS,
    MAX_SAMPLES,
    N_MELS,
    SAMPLE_RATE_HZ,
    WINDOW_SAMPLES,
    GlmAsrGeometry,
    glmasr_geometry,
)
from audiogate_glmasr.policy import MIN_SAMPLES

__all__ = ["extract_features", "frontend_plan", "plan_features"]


def frontend_plan(geometry: GlmAsrGeometry) -> WhisperPlan:
    """The shared Whisper frontend's plan of one clip (its windows, bytes and scratch)."""
    plan = whisper_plan(
        geometry.samples, n_mels=N_MELS, padding="windows", chunk_samples=WINDOW_SAMPLES
    )
    # One arithmetic, two places: the frontend's windows and mask must be the geometry's.
    assert plan.feature_shape == geometry.feature_shape, (plan.feature_shape, geometry)
    assert plan.valid_frames == geometry.valid_frames, (plan.valid_frames, geometry)
    return plan


def _checked_geometry(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> GlmAsrGeometry:
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Whisper frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
            clip_index=clip_index,
        )
    minimum = max(MIN_SAMPLES, policy.min_samples_per_clip)
    if samples < minimum:
        raise FeatureError(
            f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: more than "
            f"{minimum - 1} are needed (at least {minimum}) to produce one <|pad|> row",
            clip_index=clip_index,
        )
    maximum = min(MAX_SAMPLES, policy.max_samples_per_clip)
    if samples > maximum:
        # The processor would keep the first 21 windows and drop the rest silently.
        raise LimitError("duration samples", actual=samples, maximum=maximum, clip_index=clip_index)
    geometry = glmasr_geometry(samples)
    rows = min(MAX_ROWS, int(policy.options.get("max_rows_per_clip", MAX_ROWS)))
    assert 1 <= geometry.tokens <= rows, (samples, geometry.tokens, rows)
    return geometry


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Windows, frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or 320 samples or fewer (no pooled row).
    :raises LimitError: ``duration samples``: more than 10,080,000 (630 s, 21 windows).
    """
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    plan = frontend_plan(geometry)
    return FeaturePlan(
        frames=geometry.valid_frames,
        tokens=geometry.tokens,
        feature_shape=geometry.feature_shape,
        feature_bytes=plan.feature_bytes,
        working_bytes=plan.working_bytes,
        detail={
            "windows": geometry.windows,
            "valid_frames": geometry.valid_frames,
            "computed_frames": plan.computed_frames,
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
    """Features ``[shape=(windows, 128, 3000)]`` and the per-window frame masks
    ``[shape=(windows, 3000)]`` of one clip, as planned."""
    geometry = _checked_geometry(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    if (geometry.valid_frames, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {waveform.shape[0]} samples give {geometry.valid_frames} "
            f"frames / {geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    features, mask = whisper_log_mel(
        np.ascontiguousarray(waveform, dtype=np.float32),
        frontend_plan(geometry),
        clip_index=clip_index,
        cancel=cancel,
    )
    return ClipFeatures(
        features=features, mask=mask, frames=geometry.valid_frames, tokens=geometry.tokens
    )
