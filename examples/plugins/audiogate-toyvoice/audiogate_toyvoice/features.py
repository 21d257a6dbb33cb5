"""toyvoice's features stage: plan a clip's frames and tokens, then extract its log-mel.

The plan takes its numbers from :func:`~audiogate_toyvoice.geometry.clip_geometry` and its
scratch from the kernel (:func:`~audiogate_toyvoice.logmel.working_bytes`); extraction
runs the kernel (:func:`~audiogate_toyvoice.logmel.log_mel`) for exactly the planned
frames. Only 16 kHz clips of at least one frame are accepted.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import FeatureError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_toyvoice import logmel
from audiogate_toyvoice.geometry import FRAME_SAMPLES, FRAMES_PER_TOKEN, N_MELS, clip_geometry

__all__ = ["extract_features", "plan_features"]


def _check_rate(policy: AudioPolicy, rate_hz: int, clip_index: int) -> None:
    if rate_hz != policy.target_rate_hz:
        raise FeatureError(
            f"the toyvoice frontend takes {policy.target_rate_hz} Hz, got {rate_hz} Hz",
            clip_index=clip_index,
        )


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and sizes of one clip.

    :raises FeatureError: the clip is not at 16 kHz or is shorter than one frame.
    """
    _check_rate(policy, rate_hz, clip_index)
    geometry = clip_geometry(samples)
    if geometry.frames == 0:
        raise FeatureError(
            f"{samples} samples is shorter than one {FRAME_SAMPLES}-sample frame",
            clip_index=clip_index,
        )
    return FeaturePlan(
        frames=geometry.frames,
        tokens=geometry.tokens,
        feature_shape=geometry.feature_shape,
        feature_bytes=geometry.frames * N_MELS * 4,
        working_bytes=logmel.working_bytes(geometry.frames),
        detail={"frames_per_token": FRAMES_PER_TOKEN},
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
    """Log-mel features ``[shape=(plan.frames, 40)]`` of a 16 kHz mono waveform.

    :param waveform: read-only float32 ``[shape=(samples,)]``.
    :param cancel: polled at the ``Feature`` checkpoint before each block of frames.
    :raises FeatureError: the waveform is not at 16 kHz.
    """
    _check_rate(policy, rate_hz, clip_index)
    features = logmel.log_mel(waveform, frames=plan.frames, clip_index=clip_index, cancel=cancel)
    return ClipFeatures(features=features, frames=plan.frames, tokens=plan.tokens)
