"""The ``audiogate.families`` entry point of toyvoice: its hook implementations.

Thin on purpose: each hook checks that the policy is toyvoice's (and returns ``None``
otherwise, so other families' hooks answer) and calls one function of the module named
after the stage. ``audiogate_parse_policy`` is not implemented: the core default applies
the key table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from audiogate import hookimpl
from audiogate.cancel import CancelToken
from audiogate.family import FamilySpec
from audiogate.policy import AudioPolicy
from audiogate.records import (
    ClipFeatures,
    ClipSlot,
    ExpandedPrompt,
    FeatureBatch,
    FeaturePlan,
    PromptSegment,
    ResamplePlan,
)
from audiogate_toyvoice import collate, features, prompt, resample
from audiogate_toyvoice.policy import FAMILY, spec

__all__ = [
    "audiogate_collate_features",
    "audiogate_expand_prompt",
    "audiogate_extract_features",
    "audiogate_plan_features",
    "audiogate_plan_resample",
    "audiogate_register_families",
    "audiogate_resample",
]


@hookimpl
def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
    """Register the ``toyvoice`` family."""
    register(spec())


@hookimpl
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan the windowed-sinc resampler (the core plans the identity at 16 kHz)."""
    if policy.family != FAMILY:
        return None
    return resample.plan_resample(
        policy, source_rate_hz=source_rate_hz, source_samples=source_samples, clip_index=clip_index
    )


@hookimpl
def audiogate_resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32] | None:
    """Run a ``"toy_sinc"`` plan (the core runs the identity)."""
    if policy.family != FAMILY or plan.algorithm != resample.ALGORITHM:
        return None
    return resample.resample(policy, plan, samples, clip_index=clip_index, cancel=cancel)


@hookimpl
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan | None:
    """Frames ``(n - 400) // 160 + 1`` and tokens ``ceil(frames / 4)``."""
    if policy.family != FAMILY:
        return None
    return features.plan_features(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)


@hookimpl
def audiogate_extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures | None:
    """Log-mel features ``[shape=(frames, 40)]``."""
    if policy.family != FAMILY:
        return None
    return features.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )


@hookimpl
def audiogate_collate_features(
    policy: AudioPolicy, clips: Sequence[ClipFeatures]
) -> FeatureBatch | None:
    """``input_features`` and ``input_features_mask``, one row per clip."""
    if policy.family != FAMILY:
        return None
    return collate.collate_features(policy, clips)


@hookimpl
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    chat: bool,
) -> ExpandedPrompt | None:
    """Each clip: ``<|toy_audio_start|>`` + tokens × ``<|toy_audio|>`` + ``<|toy_audio_end|>``."""
    if policy.family != FAMILY:
        return None
    return prompt.expand_prompt(policy, segments, clips, tokenizer, chat=chat)
