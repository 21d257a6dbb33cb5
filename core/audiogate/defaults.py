"""The core's default hook implementations, registered ``trylast``.

Families override any of them by returning a non-``None`` result first.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.family import FamilySpec
from audiogate.hookspecs import hookimpl
from audiogate.policy import AudioPolicy, CheckpointConfigs, apply_keys
from audiogate.records import ResamplePlan
from audiogate.resample.soxr_hq import plan_soxr_hq, run_soxr_hq_plan

__all__ = [
    "audiogate_parse_policy",
    "audiogate_plan_resample",
    "audiogate_resample",
]


@hookimpl(trylast=True)
def audiogate_parse_policy(family: FamilySpec, configs: CheckpointConfigs) -> AudioPolicy:
    """Apply the family's declared keys to its pinned defaults."""
    return apply_keys(family.defaults, family.keys, family.schema, configs)


@hookimpl(trylast=True)
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int
) -> ResamplePlan | None:
    """Plan the identity (same rate) or ``"soxr_hq"``; other algorithms are the family's."""
    if source_rate_hz != policy.target_rate_hz and policy.resampling != "soxr_hq":
        return None
    return plan_soxr_hq(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        target_rate_hz=policy.target_rate_hz,
    )


@hookimpl(trylast=True)
def audiogate_resample(
    plan: ResamplePlan, samples: npt.NDArray[np.float32], clip_index: int, cancel: CancelToken
) -> npt.NDArray[np.float32] | None:
    """Run the identity or ``"soxr_hq"`` plans."""
    if plan.algorithm not in {"identity", "soxr_hq"}:
        return None
    return run_soxr_hq_plan(plan, samples, clip_index=clip_index, cancel=cancel)
