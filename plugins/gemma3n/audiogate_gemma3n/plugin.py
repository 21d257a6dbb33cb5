"""The ``audiogate.families`` entry point of Gemma 3n: its hook implementations.

Each hook returns ``None`` for another family's policy and otherwise delegates to one
function of the module named after its stage (the file map in :mod:`audiogate_gemma3n`),
imported on the hook's first call: loading the plugin registers the family without
importing its numerics.
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
from audiogate_gemma3n.policy import FAMILY, spec

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
    """Register the ``gemma3n`` family."""
    register(spec())


@hookimpl
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan the linear resampler (or the identity at 16 kHz)."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import resample

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
    """Run a ``"linear"`` or ``"identity"`` plan."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import resample

    return resample.resample(policy, plan, samples, clip_index=clip_index, cancel=cancel)


@hookimpl
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan | None:
    """Frames, 188 tokens and the encoder's real token count."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import features

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
    """USM log-mel features ``[shape=(T, 128)]``."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import features

    return features.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )


@hookimpl
def audiogate_collate_features(
    policy: AudioPolicy, clips: Sequence[ClipFeatures]
) -> FeatureBatch | None:
    """``input_features`` and ``input_features_mask`` as the FE batches them."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import collate

    return collate.collate_features(policy, clips)


@hookimpl
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt | None:
    """Per clip: ``\\n\\n<start_of_audio>`` + 188 soft tokens + ``<end_of_audio>\\n\\n``."""
    if policy.family != FAMILY:
        return None
    from audiogate_gemma3n import prompt

    return prompt.expand_prompt(policy, segments, clips, tokenizer)
