"""The ``audiogate.families`` entry point of Audio Flamingo 3: its hook implementations.

The host calls these only for this family's policy. Each delegates to one function of the
module named after its stage (the file map in :mod:`audiogate_audioflamingo3`), imported
on the hook's first call: loading the plugin registers the family without importing its
numerics.
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
from audiogate_audioflamingo3.policy import spec

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
    """Register the ``audioflamingo3`` family."""
    register(spec())


@hookimpl
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """16 kHz as is; any other admitted rate through soxr HQ at librosa's length."""
    from audiogate_audioflamingo3 import resample

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
    from audiogate_audioflamingo3 import resample

    return resample.resample(policy, plan, samples, clip_index=clip_index, cancel=cancel)


@hookimpl
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan | None:
    """30 s windows, Whisper frames, pooled rows and prepared-result bytes of one clip."""
    from audiogate_audioflamingo3 import features

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
    """(windows, 128, 3000) Whisper log-mel features and the per-window frame masks."""
    from audiogate_audioflamingo3 import features

    return features.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )


@hookimpl
def audiogate_collate_features(
    policy: AudioPolicy, clips: Sequence[ClipFeatures]
) -> FeatureBatch | None:
    """``input_features`` and ``input_features_mask``, a row per window, for the forward."""
    from audiogate_audioflamingo3 import collate

    return collate.collate_features(policy, clips)


@hookimpl
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    chat: bool,
) -> ExpandedPrompt | None:
    """Chat audio parts or ``<sound>`` placeholders → n × ``<sound>`` per clip."""
    from audiogate_audioflamingo3 import prompt

    return prompt.expand_prompt(policy, segments, clips, tokenizer, chat=chat)
