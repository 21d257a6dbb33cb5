"""Batch a request's clips into ``Qwen3OmniMoeThinkerForConditionalGeneration.forward`` inputs.

The processor pads a call's clips to the longest and frames them together; here each clip
keeps the frames it has alone (:mod:`audiogate_qwen3omni.geometry`) and the batch pads
them to the longest, mask 0 there. The thinker takes only the masked-in frames
(``input_features[feature_attention_mask.bool()]``), so the padding's values never reach
it; they are the clip's clamp floor, what the reference's log-mel of zero padding is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_qwen3omni.geometry import N_MELS

__all__ = ["MASK_DTYPE", "collate_features"]

#: ``Qwen3OmniMoeProcessor`` returns ``feature_attention_mask`` as the feature extractor's
#: int32 sample mask taken every 160 samples; the thinker sums it and selects with it.
MASK_DTYPE: Final = np.int32


def _floor(features: np.ndarray) -> np.float32:
    """The scaled clamp floor of a clip: ``(max(log_max - 8, -10) + 4) / 4``."""
    log_max = float(features.max()) * 4.0 - 4.0
    return np.float32((max(log_max - 8.0, -10.0) + 4.0) / 4.0)


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Stack clips in order, padded to the longest.

    :returns: ``input_features`` float32 ``[shape=(n, 128, frames)]`` and
        ``feature_attention_mask`` int32 ``[shape=(n, frames)]`` (1 for each clip's frames),
        ``frames`` the longest clip's.
    :raises ValueError: a clip is not a Qwen3-Omni clip (shape, mask) or there is none.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        shape = clip.features.shape
        if (
            len(shape) != 2
            or shape[0] != N_MELS
            or shape[1] != clip.frames
            or clip.mask is None
            or clip.mask.shape != (clip.frames,)
            or int(clip.mask.sum()) != clip.frames
        ):
            raise ValueError(
                f"clip {index + 1} has features {shape} and mask "
                f"{None if clip.mask is None else clip.mask.shape} for {clip.frames} frames; "
                f"expected ({N_MELS}, {clip.frames}) and an all-ones ({clip.frames},) mask"
            )
    width = max(clip.frames for clip in clips)
    features = np.empty((len(clips), N_MELS, width), dtype=np.float32)
    masks = np.zeros((len(clips), width), dtype=MASK_DTYPE)
    for index, clip in enumerate(clips):
        features[index, :, : clip.frames] = clip.features
        features[index, :, clip.frames :] = _floor(np.asarray(clip.features))
        masks[index, : clip.frames] = 1
    return FeatureBatch(
        inputs={"input_features": readonly(features), "feature_attention_mask": readonly(masks)},
        tokens=tuple(clip.tokens for clip in clips),
    )
