"""Batch a request's clips into ``Qwen2_5OmniThinkerForConditionalGeneration.forward`` inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_qwen25omni.geometry import FEATURE_SHAPE, MAX_FRAMES

__all__ = ["MASK_DTYPE", "collate_features"]

#: ``Qwen2_5OmniProcessor`` returns ``feature_attention_mask`` as the feature extractor's
#: int32 sample mask taken every 160 samples; the thinker sums it and selects with it.
MASK_DTYPE: Final = np.int32


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Stack clips in order.

    :returns: ``input_features`` float32 ``[shape=(n, 128, 30000)]`` and
        ``feature_attention_mask`` int32 ``[shape=(n, 30000)]`` (1 for the valid frames).
    :raises ValueError: a clip is not a Qwen2.5-Omni clip (shape, mask) or there is none.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    features = np.empty((len(clips), *FEATURE_SHAPE), dtype=np.float32)
    masks = np.zeros((len(clips), MAX_FRAMES), dtype=MASK_DTYPE)
    for index, clip in enumerate(clips):
        if clip.features.shape != FEATURE_SHAPE or clip.mask is None:
            raise ValueError(
                f"clip {index + 1} has features {clip.features.shape} and mask "
                f"{None if clip.mask is None else clip.mask.shape}; expected {FEATURE_SHAPE} "
                f"and ({MAX_FRAMES},)"
            )
        if int(clip.mask.sum()) != clip.frames:
            raise ValueError(
                f"clip {index + 1}: mask has {int(clip.mask.sum())} valid frames, not {clip.frames}"
            )
        features[index] = clip.features
        masks[index] = clip.mask
    return FeatureBatch(
        inputs={"input_features": readonly(features), "feature_attention_mask": readonly(masks)},
        tokens=tuple(clip.tokens for clip in clips),
    )
