"""Batch a request's clips into ``VoxtralForConditionalGeneration.forward`` inputs.

``VoxtralProcessor`` concatenates every clip's windows along the batch axis
(``torch.cat`` of the ``(k, 128, 3000)`` arrays, in prompt order) into ``input_features``;
the model encodes each window on its own and scatters ``375`` embeddings per window into
the ``[AUDIO]`` positions in order. There is no feature mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_voxtral.geometry import N_MELS, TOKENS_PER_WINDOW, WINDOW_FRAMES

__all__ = ["collate_features"]


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Concatenate the clips' windows in order.

    :returns: ``input_features`` float32 ``[shape=(sum of k, 128, 3000)]``.
    :raises ValueError: no clip, or a clip that is not Voxtral's (shape, token count).
    """
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    windows = 0
    for index, clip in enumerate(clips):
        shape = clip.features.shape
        if len(shape) != 3 or shape[1:] != (N_MELS, WINDOW_FRAMES) or shape[0] < 1:
            raise ValueError(
                f"clip {index + 1} has features {shape}; expected (k, {N_MELS}, {WINDOW_FRAMES})"
            )
        if clip.tokens != shape[0] * TOKENS_PER_WINDOW:
            raise ValueError(
                f"clip {index + 1}: {clip.tokens} tokens for {shape[0]} window(s); Voxtral "
                f"gives {TOKENS_PER_WINDOW} per window"
            )
        windows += shape[0]
    features = np.empty((windows, N_MELS, WINDOW_FRAMES), dtype=np.float32)
    start = 0
    for clip in clips:
        stop = start + clip.features.shape[0]
        features[start:stop] = clip.features
        start = stop
    return FeatureBatch(
        inputs={"input_features": readonly(features)},
        tokens=tuple(clip.tokens for clip in clips),
    )
