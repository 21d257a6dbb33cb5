"""Batch a request's clips into ``Qwen2AudioForConditionalGeneration.forward`` inputs.

With ``policy.feature_backend == "mlx"`` the same batch is built from MLX arrays by
:func:`audiogate_qwen2audio.mlx_logmel.collate_features`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_qwen2audio.features import MLX_MODULE
from audiogate_qwen2audio.geometry import FEATURE_SHAPE, MAX_FRAMES

__all__ = ["MASK_DTYPE", "collate_features"]

#: ``Qwen2AudioProcessor`` returns ``feature_attention_mask`` as the feature extractor's
#: int32 sample mask; the model only sums it, so the same dtype is passed on.
MASK_DTYPE: Final = np.int32


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Stack clips in order.

    :returns: ``input_features`` float32 ``[shape=(n, 128, 3000)]`` and
        ``feature_attention_mask`` int32 ``[shape=(n, 3000)]`` (1 for the valid frames);
        ``mx.array`` when ``policy.feature_backend == "mlx"``.
    :raises ValueError: a clip is not a Qwen2-Audio clip (shape, mask) or there is none.
    :raises MissingExtraError: the mlx backend is selected and MLX is not importable.
    """
    if policy.feature_backend == "mlx":
        mlx_logmel = load_mlx_module(MLX_MODULE, family="qwen2audio")
        batch: FeatureBatch = mlx_logmel.collate_features(clips)
        return batch
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
