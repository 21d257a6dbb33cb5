"""Resampling for the transformers-native variant: what ``load_audio`` does.

``Phi4MultimodalFeatureExtractor`` refuses anything but 16 kHz; transformers' file loader
(``audio_utils._load_audio_soundfile``, the same steps as ``librosa.load(sr=16000)``)
resamples any source rate with ``soxr.resample(..., quality="soxr_hq")`` and then pads or
trims to ``ceil(n·16000/fs)`` samples. There is no integer-ratio quirk and no 8 kHz path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.records import ResamplePlan, readonly
from audiogate.resample.soxr_hq import (
    SOXR_WORKING_BYTES,
    librosa_output_length,
    soxr_resample_librosa,
)

__all__ = ["ALGORITHM", "plan_native_resample", "resample_native"]

#: The policy's ``resampling`` value for this variant.
ALGORITHM = "soxr_hq"


def plan_native_resample(
    *, source_rate_hz: int, source_samples: int, target_rate_hz: int
) -> ResamplePlan:
    """Identity at the target rate, else soxr HQ with ``load_audio``'s output length."""
    if source_rate_hz == target_rate_hz:
        return ResamplePlan(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=target_rate_hz,
            output_samples=source_samples,
            algorithm="identity",
        )
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target_rate_hz,
        output_samples=librosa_output_length(
            source_samples, in_rate_hz=source_rate_hz, out_rate_hz=target_rate_hz
        ),
        working_bytes=SOXR_WORKING_BYTES,
        algorithm=ALGORITHM,
        detail={"output_length": "ceil(n·out/in), as transformers' load_audio"},
    )


def resample_native(
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """Run a plan from :func:`plan_native_resample`.

    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if plan.algorithm == "identity":
        if samples.flags.writeable or samples.dtype != np.float32:
            return readonly(np.array(samples, dtype=np.float32, copy=True))
        return samples
    return soxr_resample_librosa(
        samples,
        in_rate_hz=plan.source_rate_hz,
        out_rate_hz=plan.output_rate_hz,
        clip_index=clip_index,
        cancel=cancel,
    )
