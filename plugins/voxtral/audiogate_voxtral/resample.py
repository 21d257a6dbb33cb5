"""Resampling to 16 kHz as mistral-common's ``Audio.resample`` does it for Voxtral.

``soxr.resample(x, rate, 16000, quality="HQ")`` over the complete clip, at soxr's own
output length ``round(n·16000/rate)`` (unlike ``librosa.load``, no zero sample is added
to reach ``ceil``), and the identity at 16 kHz. The length matters only at a window
boundary: a clip of exactly 30 s at 44.1 kHz is 480,000 samples here and one window, where
a ``ceil`` length would be too. Every rate the policy admits is converted.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.identity import plan_identity, resample_identity
from audiogate.errors import DecodeError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan
from audiogate.resample.soxr_hq import (
    SOXR_QUALITY,
    SOXR_WORKING_BYTES,
    soxr_output_length,
    soxr_resample,
)
from audiogate_voxtral.geometry import SAMPLE_RATE_HZ

__all__ = ["ALGORITHM", "plan_resample", "resample"]

#: The plan's algorithm label: soxr HQ at soxr's own output length.
ALGORITHM: Final = "soxr_hq_native"


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan:
    """Plan one clip: the identity at 16 kHz, soxr HQ from any other rate.

    :raises DecodeError: ``rate_not_allowed`` for a rate outside the policy's allowed rates.
    """
    allowed = policy.allowed_source_rates_hz
    if allowed is not None and source_rate_hz not in allowed:
        raise DecodeError(
            f"source sample rate {source_rate_hz} Hz is not allowed by the policy; allowed "
            f"rates: {', '.join(str(rate) for rate in allowed)} Hz",
            clip_index=clip_index,
            code="rate_not_allowed",
        )
    if source_rate_hz == SAMPLE_RATE_HZ:
        return plan_identity(source_rate_hz=source_rate_hz, source_samples=source_samples)
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=SAMPLE_RATE_HZ,
        output_samples=soxr_output_length(
            source_samples, in_rate_hz=source_rate_hz, out_rate_hz=SAMPLE_RATE_HZ
        ),
        working_bytes=SOXR_WORKING_BYTES,
        algorithm=ALGORITHM,
        detail={"quality": SOXR_QUALITY, "length": "round(n·out/in), as soxr.resample"},
    )


def resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """Run a plan from :func:`plan_resample`.

    :param samples: mono float32 ``[shape=(plan.source_samples,)]``.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    if samples.shape != (plan.source_samples,):
        raise ValueError(
            f"clip {clip_index + 1}: {samples.shape} samples given, "
            f"planned ({plan.source_samples},)"
        )
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if plan.algorithm == "identity":
        return resample_identity(samples)
    return soxr_resample(
        samples,
        in_rate_hz=plan.source_rate_hz,
        out_rate_hz=plan.output_rate_hz,
        clip_index=clip_index,
        cancel=cancel,
    )
