"""Resampling to 16 kHz the way transformers loads audio for the processor.

``apply_transcription_request`` and ``apply_chat_template`` read paths and URLs with
``transformers.audio_utils.load_audio`` (``librosa.load(sr=16000)``, or soundfile + soxr):
soxr HQ over the complete clip, zero-padded to ``ceil(n·16000/rate)`` samples (librosa's
``fix_length``; the soundfile backend does the same), so the normalized
length, and with it the windows, the masks and the token count, equal the reference's.
Every rate the policy admits is converted (8 to 192 kHz, as ``librosa.load`` does).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import DecodeError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan
from audiogate.resample.soxr_hq import plan_soxr_hq, run_soxr_hq_plan
from audiogate_audioflamingo3.geometry import SAMPLE_RATE_HZ

__all__ = ["plan_resample", "resample"]


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
