"""Batching toyvoice clips: zero-padded features and a frame mask, one row per clip."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_toyvoice.geometry import N_MELS

__all__ = ["collate_features"]


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """``input_features [shape=(clips, frames, 40)]`` padded with zeros after each clip's
    frames, and ``input_features_mask [shape=(clips, frames)]`` (True = a real frame).

    :param policy: the request's policy (toyvoice's batch does not depend on it).
    """
    longest = max(clip.frames for clip in clips)
    features = np.zeros((len(clips), longest, N_MELS), dtype=np.float32)
    mask = np.zeros((len(clips), longest), dtype=np.bool_)
    for row, clip in enumerate(clips):
        features[row, : clip.frames] = clip.features
        mask[row, : clip.frames] = True
    return FeatureBatch(
        inputs={"input_features": readonly(features), "input_features_mask": readonly(mask)},
        tokens=tuple(clip.tokens for clip in clips),
    )
