"""Resampling to 16 kHz the way the reference pipeline loads audio (``librosa.load(sr=16000)``).

soxr HQ over the complete clip, then zero-padded to ``ceil(n·16000/rate)`` samples
(librosa's ``fix_length``; transformers' soundfile ``load_audio`` does the same), so the
normalized length, and with it the frame mask and the token count, equal the
reference's. Only the three rates of the Qwen2-Audio serving guide are accepted
(docs/provenance.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import DecodeError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan
from audiogate.resample.soxr_hq import plan_soxr_hq, run_soxr_hq_plan
from audiogate_qwen2audio.geometry import SAMPLE_RATE_HZ
from audiogate_qwen2audio.policy import SOURCE_RATES_HZ

__all__ = ["ALGORITHM", "plan_resample", "resample"]

#: The plan's algorithm label: soxr HQ with librosa's output length.
ALGORITHM = "soxr_hq"


def _allowed(policy: AudioPolicy) -> tuple[int, ...]:
    allowed = policy.allowed_source_rates_hz or SOURCE_RATES_HZ
    # A checkpoint may narrow the serving guide's rates, never widen them.
    return tuple(rate for rate in allowed if rate in SOURCE_RATES_HZ)


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan:
    """Plan one clip: the identity at 16 kHz, soxr HQ from 44.1 and 48 kHz.

    :raises DecodeError: ``rate_not_allowed`` for any other source rate.
    """
    allowed = _allowed(policy)
    if source_rate_hz not in allowed:
        raise DecodeError(
            f"source sample rate {source_rate_hz} Hz is not allowed; allowed rates: "
            f"{', '.join(str(rate) for rate in allowed)} Hz",
            clip_index=clip_index,
            code="rate_not_allowed",
        )
    return plan_soxr_hq(
        source_rate_hz=source_rate_hz, source_samples=source_samples, target_rate_hz=SAMPLE_RATE_HZ
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

    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    return run_soxr_hq_plan(plan, samples, clip_index=clip_index, cancel=cancel)
