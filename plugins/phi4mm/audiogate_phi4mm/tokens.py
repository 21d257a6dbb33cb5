"""Prompt positions of one clip: ``ceil(ceil(T / compression) / downsample)``.

Source: ``Phi4MMAudioFeatureExtractor._compute_audio_embed_size`` (and the identical
``Phi4MultimodalFeatureExtractor._compute_audio_embed_size``): the encoder's time
reduction (``audio_compression_rate`` 8), then the qformer step (``audio_downsample_rate``
1, a no-op). This is the only place the count is computed; the feature plan calls it and
the extractor checks its output against the plan.
"""

from __future__ import annotations

from audiogate.policy import AudioPolicy

__all__ = ["audio_embed_size", "policy_embed_size"]


def audio_embed_size(frames: int, *, compression_rate: int, downsample_rate: int) -> int:
    """Prompt tokens for ``frames`` feature frames (``audio_feat_stride`` is 1)."""
    if frames < 0 or compression_rate < 1 or downsample_rate < 1:
        raise ValueError(
            f"frames must be >= 0 and rates >= 1; got {frames}, {compression_rate}, "
            f"{downsample_rate}"
        )
    compressed = -(-frames // compression_rate)
    return -(-compressed // downsample_rate)


def policy_embed_size(policy: AudioPolicy, frames: int) -> int:
    """:func:`audio_embed_size` with the rates in ``policy.options``."""
    return audio_embed_size(
        frames,
        compression_rate=int(policy.options["audio_compression_rate"]),
        downsample_rate=int(policy.options["audio_downsample_rate"]),
    )
