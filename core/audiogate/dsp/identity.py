"""The identity resample: a clip already at its target rate, or relabelled to it.

Plans with ``algorithm="identity"`` pass the decoded samples on unchanged. The core's soxr
HQ resampler (:mod:`audiogate.resample.soxr_hq`) plans it for a source at the target
rate; Phi-4 MM's SpeechLib rule plans it for a factor of 1, where the waveform is only
*labelled* with another rate (22.05 kHz called 16 kHz).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from audiogate.records import ResamplePlan, readonly

__all__ = ["plan_identity", "resample_identity"]


def plan_identity(
    *,
    source_rate_hz: int,
    source_samples: int,
    output_rate_hz: int | None = None,
    detail: Mapping[str, Any] | None = None,
) -> ResamplePlan:
    """Plan ``source_samples`` samples passed on unchanged, nothing allocated.

    :param output_rate_hz: the rate the output is labelled with (default: the source's).
    :param detail: the plan's ``detail`` (default: empty).
    """
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=source_rate_hz if output_rate_hz is None else output_rate_hz,
        output_samples=source_samples,
        algorithm="identity",
        detail={} if detail is None else detail,
    )


def resample_identity(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``samples`` themselves when read-only float32, else a read-only float32 copy."""
    if samples.flags.writeable or samples.dtype != np.float32:
        return readonly(np.array(samples, dtype=np.float32, copy=True))
    return samples
