"""The Voxtral features stage: plan (windows, frames, tokens, bytes) and extraction.

``VoxtralProcessor._retrieve_input_features`` runs ``WhisperFeatureExtractor(feature_size=
128)`` once per clip on the clip mistral-common zero-padded to ``k`` × 30 s
(``padding=True, pad_to_multiple_of=480000, truncation=False``) and reshapes the
``(128, 3000 k)`` result into ``k`` windows of ``(128, 3000)``. That is the shared
frontend's ``"multiple"`` mode (:mod:`audiogate.dsp.whisper`): one centred STFT over the
whole padded clip (frames straddle window boundaries) and one ``max - 8`` clamp over all
its windows. The processor returns no feature mask, and neither does this stage.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.whisper_geometry import WhisperPlan, whisper_plan
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_voxtral.geometry import (
    HOP,
    N_MELS,
    SAMPLE_RATE_HZ,
    WINDOW_FRAMES,
    VoxtralGeometry,
    voxtral_geometry,
)

__all__ = ["PADDING", "extract_features", "feature_bytes", "plan_features"]

#: The shared frontend's mode for the processor's padding and reshape.
PADDING: Final = "multiple"


def feature_bytes(geometry: VoxtralGeometry) -> int:
    """Bytes of one clip's prepared result: ``k`` windows of 128 × 3000 float32."""
    return geometry.windows * N_MELS * WINDOW_FRAMES * 4


def _checked(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> tuple[VoxtralGeometry, WhisperPlan]:
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Whisper frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
            clip_index=clip_index,
        )
    minimum = max(1, policy.min_samples_per_clip)
    if samples < minimum:
        raise FeatureError(
            f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: at least "
            f"{minimum} are needed for one 30 s window (the processor fails on empty audio)",
            clip_index=clip_index,
        )
    if samples > policy.max_samples_per_clip:
        raise LimitError(
            "duration samples",
            actual=samples,
            maximum=policy.max_samples_per_clip,
            clip_index=clip_index,
        )
    geometry = voxtral_geometry(samples)
    if geometry.frames > policy.max_frames_per_clip:
        raise LimitError(
            "feature frames",
            actual=geometry.frames,
            maximum=policy.max_frames_per_clip,
            clip_index=clip_index,
        )
    plan = whisper_plan(samples, n_mels=N_MELS, padding=PADDING)
    assert plan.feature_shape == (geometry.windows, N_MELS, WINDOW_FRAMES), (samples, plan)
    return geometry, plan


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Windows, frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or no sample.
    :raises LimitError: more samples or frames than the policy allows per clip.
    """
    geometry, plan = _checked(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    return FeaturePlan(
        frames=geometry.frames,
        tokens=geometry.tokens,
        feature_shape=plan.feature_shape,
        feature_bytes=feature_bytes(geometry),
        working_bytes=plan.working_bytes,
        detail={
            "windows": geometry.windows,
            "padded_samples": geometry.padded_samples,
            "audio_frames": -(-samples // HOP),
            "computed_frames": plan.computed_frames,
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
    """Features ``[shape=(k, 128, 3000)]`` of one clip, as planned (no mask)."""
    from audiogate.dsp.whisper import whisper_log_mel

    geometry, whisper = _checked(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    if (geometry.frames, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {waveform.shape[0]} samples give {geometry.frames} "
            f"frames / {geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    features, _ = whisper_log_mel(
        np.ascontiguousarray(waveform, dtype=np.float32),
        whisper,
        clip_index=clip_index,
        cancel=cancel,
    )
    return ClipFeatures(
        features=features, mask=None, frames=geometry.frames, tokens=geometry.tokens
    )
