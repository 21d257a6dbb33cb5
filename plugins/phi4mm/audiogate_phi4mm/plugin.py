"""The ``audiogate.families`` entry point of Phi-4 Multimodal: its hook implementations.

Each hook returns ``None`` for another family's policy and otherwise delegates to one
function of the module named after its stage (the file map in :mod:`audiogate_phi4mm`),
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
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.records import (
    ClipFeatures,
    ClipSlot,
    ExpandedPrompt,
    FeatureBatch,
    FeaturePlan,
    PromptSegment,
    ResamplePlan,
)
from audiogate_phi4mm.policy import FAMILY, parse_policy, spec

__all__ = [
    "audiogate_collate_features",
    "audiogate_expand_prompt",
    "audiogate_extract_features",
    "audiogate_parse_policy",
    "audiogate_plan_features",
    "audiogate_plan_resample",
    "audiogate_register_families",
    "audiogate_resample",
]


@hookimpl
def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
    """Register the ``phi4mm`` family."""
    register(spec())


@hookimpl
def audiogate_parse_policy(family: FamilySpec, configs: CheckpointConfigs) -> AudioPolicy | None:
    """Apply the keys, then select the remote-code or native variant."""
    if family.name != FAMILY:
        return None
    return parse_policy(family, configs)


@hookimpl
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """The SpeechLib integer-ratio rule, or soxr HQ to 16 kHz for the native variant."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import resample

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
    """Run the plan from :func:`audiogate_plan_resample`."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import resample

    return resample.resample(policy, plan, samples, clip_index=clip_index, cancel=cancel)


@hookimpl
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan | None:
    """Frames ``(n - win)//hop + 1`` and tokens ``ceil(T/8)`` from one function."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import features

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
    """SpeechLib log-mel ``[shape=(T, 80)]``, blockwise and cancellable."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import features

    return features.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )


@hookimpl
def audiogate_collate_features(
    policy: AudioPolicy, clips: Sequence[ClipFeatures]
) -> FeatureBatch | None:
    """The padded features, ``audio_embed_sizes`` and ``audio_attention_mask``, named for
    the variant's model (:func:`audiogate_phi4mm.collate.name_inputs`)."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import collate

    return collate.collate_features(policy, clips)


@hookimpl
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    chat: bool,
) -> ExpandedPrompt | None:
    """``<|audio_N|>`` (remote code) or ``<|audio|>`` (native), expanded per clip."""
    if policy.family != FAMILY:
        return None
    from audiogate_phi4mm import prompt

    return prompt.expand_prompt(policy, segments, clips, tokenizer, chat=chat)
