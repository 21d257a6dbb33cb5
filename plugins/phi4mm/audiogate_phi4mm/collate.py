"""Batch a request's clips into ``Phi4MultimodalForCausalLM``'s audio inputs.

Names and layout follow transformers' ``Phi4MultimodalFeatureExtractor`` (and the
original's ``pad_sequence``): ``audio_input_features`` zero-padded to the longest clip,
``audio_embed_sizes`` the per-clip token counts, and ``audio_attention_mask`` marking
real frames. The mask is always included, also for one clip, where the reference omits
it; the model accepts it either way (``tiny-models.md`` §1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_phi4mm.melbank import MEL_FILTERS

__all__ = ["collate_features"]


def collate_features(clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Pad and stack per-clip features.

    :param clips: per-clip features ``[shape=(T_i, 80)]`` in clip order.
    :returns: ``audio_input_features`` float32 ``[shape=(n, T_max, 80)]``,
        ``audio_embed_sizes`` int64 ``[shape=(n,)]``, ``audio_attention_mask`` bool
        ``[shape=(n, T_max)]``; ``tokens`` per clip.
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        shape = tuple(clip.features.shape)
        if shape != (clip.frames, MEL_FILTERS):
            raise ValueError(
                f"clip {index} has features {shape}, expected ({clip.frames}, {MEL_FILTERS})"
            )
    longest = max(clip.frames for clip in clips)
    features = np.zeros((len(clips), longest, MEL_FILTERS), dtype=np.float32)
    mask = np.zeros((len(clips), longest), dtype=np.bool_)
    for index, clip in enumerate(clips):
        features[index, : clip.frames] = clip.features
        mask[index, : clip.frames] = True
    sizes = np.array([clip.tokens for clip in clips], dtype=np.int64)
    return FeatureBatch(
        inputs={
            "audio_input_features": readonly(features),
            "audio_embed_sizes": readonly(sizes),
            "audio_attention_mask": readonly(mask),
        },
        tokens=tuple(clip.tokens for clip in clips),
    )
