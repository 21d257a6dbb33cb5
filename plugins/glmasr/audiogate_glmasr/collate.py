"""Batch a request's clips into ``GlmAsrForConditionalGeneration.forward`` inputs.

``GlmAsrProcessor`` returns one row per 30 s window, the windows of all clips in clip
order: ``input_features`` ``(windows, 128, 3000)`` and ``input_features_mask``
``(windows, 3000)``. The model merges each row's encoder frames and concatenates the
rows' valid positions in that order, so a clip's ``<|pad|>`` run is filled by its own
windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_glmasr.geometry import N_MELS, WINDOW_FRAMES

__all__ = ["MASK_DTYPE", "collate_features"]

#: The processor returns the extractor's int32 attention mask as ``input_features_mask``;
#: the model only sums it, so the same dtype is passed on.
MASK_DTYPE: Final = np.int32


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Stack every clip's windows in order.

    :returns: ``input_features`` float32 ``[shape=(windows, 128, 3000)]`` and
        ``input_features_mask`` int32 ``[shape=(windows, 3000)]`` (1 for the valid frames),
        ``windows`` summed over the clips.
    :raises ValueError: a clip is not a GLM-ASR clip (shape, mask) or there is none.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        shape = clip.features.shape
        if (
            len(shape) != 3
            or shape[1:] != (N_MELS, WINDOW_FRAMES)
            or clip.mask is None
            or clip.mask.shape != (shape[0], WINDOW_FRAMES)
        ):
            raise ValueError(
                f"clip {index + 1} has features {shape} and mask "
                f"{None if clip.mask is None else clip.mask.shape}; expected (windows, "
                f"{N_MELS}, {WINDOW_FRAMES}) and (windows, {WINDOW_FRAMES})"
            )
        if int(clip.mask.sum()) != clip.frames:
            raise ValueError(
                f"clip {index + 1}: mask has {int(clip.mask.sum())} valid frames, not {clip.frames}"
            )
    windows = sum(int(clip.features.shape[0]) for clip in clips)
    features = np.empty((windows, N_MELS, WINDOW_FRAMES), dtype=np.float32)
    masks = np.empty((windows, WINDOW_FRAMES), dtype=MASK_DTYPE)
    row = 0
    for clip in clips:
        assert clip.mask is not None
        count = int(clip.features.shape[0])
        features[row : row + count] = clip.features
        masks[row : row + count] = clip.mask
        row += count
    return FeatureBatch(
        inputs={"input_features": readonly(features), "input_features_mask": readonly(masks)},
        tokens=tuple(clip.tokens for clip in clips),
    )
