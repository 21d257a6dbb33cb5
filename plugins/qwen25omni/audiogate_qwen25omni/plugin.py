"""The ``audiogate.families`` entry point of Qwen2.5-Omni: its hook implementations.

The host calls a family's stage hooks only for that family's policy, so each hook
delegates to one function of the module named after its stage (the file map in
:mod:`audiogate_qwen25omni`), imported on the hook's first call: loading the plugin
registers the family without importing its numerics.
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
from audiogate_qwen25omni.policy import spec

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
    """Register the ``qwen25omni`` family."""
    register(spec())


@hookimpl
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan:
    """16 kHz as is; any other admitted rate through soxr HQ at librosa's length."""
    from audiogate_qwen25omni import resample

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
) -> npt.NDArray[np.float32]:
    """Run the plan from :func:`audiogate_plan_resample`."""
    from audiogate_qwen25omni import resample

    return resample.resample(policy, plan, samples, clip_index=clip_index, cancel=cancel)


@hookimpl
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Whisper frames, encoder rows and prepared-result bytes of one clip."""
    from audiogate_qwen25omni import features

    return features.plan_features(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)


@hookimpl
def audiogate_extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures:
    """128 × 30,000 Whisper log-mel features and the frame mask."""
    from audiogate_qwen25omni import features

    return features.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )


@hookimpl
def audiogate_collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """``input_features`` and ``feature_attention_mask`` for the thinker's forward."""
    from audiogate_qwen25omni import collate

    return collate.collate_features(policy, clips)


@hookimpl
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Audio parts or plain ``<|audio_bos|><|AUDIO|><|audio_eos|>`` → n × ``<|AUDIO|>`` per clip."""
    from audiogate_qwen25omni import prompt

    return prompt.expand_prompt(policy, segments, clips, tokenizer)
