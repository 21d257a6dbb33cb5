"""Batch a request's clips into the audio inputs of either Phi-4 MM model.

The layout follows transformers' ``Phi4MultimodalFeatureExtractor`` and the original's
``pad_sequence``: features zero-padded to the longest clip, the per-clip token counts,
and a mask marking real frames. The names follow the variant's model forward
(:func:`name_inputs`):

* native (``Phi4MultimodalForCausalLM``): ``audio_input_features``,
  ``audio_embed_sizes`` and ``audio_attention_mask``. The mask is always included, also
  for one clip, where the reference omits it; the model accepts it either way
  (the tiny-model test, ``plugins/phi4mm/tests/test_phi4mm_model.py``).
* remote code (``Phi4MMForCausalLM`` of ``modeling_phi4mm.py``, whose ``forward`` takes no
  other names): ``input_audio_embeds``, ``audio_embed_sizes``, and
  ``audio_attention_mask`` only for more than one clip, exactly as its
  ``Phi4MMAudioFeatureExtractor`` returns them. Its ``input_mode`` comes from the prompt
  (:mod:`audiogate_phi4mm.prompt`).

With ``policy.feature_backend == "mlx"`` the same batch is built from MLX arrays by
:func:`audiogate_phi4mm.mlx_logmel.collate_features`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_phi4mm.features import MLX_MODULE
from audiogate_phi4mm.melbank import MEL_FILTERS

__all__ = ["collate_features", "name_inputs"]


def name_inputs(
    variant: str, *, features: Any, sizes: Any, mask: Any, clips: int
) -> dict[str, Any]:
    """The collated arrays under the names the variant's model forward takes.

    :param variant: ``policy.variant``: ``"native"`` or ``"remote_code"``.
    :param clips: clips in the batch (the remote processor adds a mask for more than one).
    """
    if variant == "native":
        return {
            "audio_input_features": features,
            "audio_embed_sizes": sizes,
            "audio_attention_mask": mask,
        }
    inputs = {"input_audio_embeds": features, "audio_embed_sizes": sizes}
    if clips > 1:
        inputs["audio_attention_mask"] = mask
    return inputs


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Pad and stack per-clip features.

    :param clips: per-clip features ``[shape=(T_i, 80)]`` in clip order.
    :returns: features float32 ``[shape=(n, T_max, 80)]``, ``audio_embed_sizes`` int64
        ``[shape=(n,)]``, ``audio_attention_mask`` bool ``[shape=(n, T_max)]``, named for
        ``policy.variant`` (:func:`name_inputs`); ``tokens`` per clip. All ``mx.array``
        when ``policy.feature_backend == "mlx"``.
    :raises MissingExtraError: the mlx backend is selected and MLX is not importable.
    """
    if policy.feature_backend == "mlx":
        mlx_logmel = load_mlx_module(MLX_MODULE, family="phi4mm")
        batch: FeatureBatch = mlx_logmel.collate_features(clips, variant=policy.variant)
        return batch
    return _collate_numpy(clips, variant=policy.variant)


def _collate_numpy(clips: Sequence[ClipFeatures], *, variant: str) -> FeatureBatch:
    if not clips:
        raise ValueError("collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        shape = tuple(clip.features.shape)
        if shape != (clip.frames, MEL_FILTERS):
            raise ValueError(
                f"clip {index + 1} has features {shape}, expected ({clip.frames}, {MEL_FILTERS})"
            )
    longest = max(clip.frames for clip in clips)
    features = np.zeros((len(clips), longest, MEL_FILTERS), dtype=np.float32)
    mask = np.zeros((len(clips), longest), dtype=np.bool_)
    for index, clip in enumerate(clips):
        features[index, : clip.frames] = clip.features
        mask[index, : clip.frames] = True
    sizes = np.array([clip.tokens for clip in clips], dtype=np.int64)
    return FeatureBatch(
        inputs=name_inputs(
            variant,
            features=readonly(features),
            sizes=readonly(sizes),
            mask=readonly(mask),
            clips=len(clips),
        ),
        tokens=tuple(clip.tokens for clip in clips),
    )
