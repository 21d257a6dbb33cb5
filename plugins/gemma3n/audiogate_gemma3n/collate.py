"""The batch view of a request's clips, equal to ``Gemma3nAudioFeatureExtractor`` on a batch.

``input_features`` ``[shape=(clips, T_max, 128)]`` float32 and ``input_features_mask``
``[shape=(clips, T_max)]`` bool, the names ``Gemma3nForConditionalGeneration.forward``
takes. ``T_max`` is the frame count of the longest clip padded to a multiple of 128.

The FE pads the **waveforms** of a batch to the longest (then to a multiple of 128) and
frames the padded batch, so its batch view is not simply each clip's own features padded
with filler rows. This module reproduces it exactly, without the FE:

* **Right padding** (default): a shorter clip's frames ``0..T-1`` are its own features (the
  samples after it are zeros either way). The FE then also computes, and marks valid,
  the frames whose first sample is still real audio but which reach past the clip's own
  padded length (``ceil(n/160) - T``: 2 to 4 frames; the FE's "always 3 longer" TODO):
  :func:`~audiogate_gemma3n.features.extract_features` computes those in the same pass
  and keeps them as ``tail``. Every later frame is all zeros: ``float32(ln 1e-5)``, masked.
* **Left padding**: the leading zeros shift a shorter clip's frame grid by
  ``N_pad,max - n`` samples, which is generally not a multiple of the hop, so its frames
  are recomputed from the waveform the clip's features carry; the mask is valid from the
  first frame that starts on real audio. Clips as long (after padding to 128) as the
  longest reuse their features.

Plain :class:`~audiogate.records.ClipFeatures` (without the Gemma 3n extras) are accepted
for right padding, with the tail frames left as masked filler; left padding needs the
waveform and refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_gemma3n.features import MLX_MODULE, Gemma3nClipFeatures, padding_side
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FRAME_HOP_SAMPLES,
    feature_frames,
    padded_samples,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.logmel import floor_value, log_mel_frames

__all__ = ["collate_features"]


def _check(clip: ClipFeatures, index: int) -> None:
    shape = tuple(clip.features.shape)
    if shape != (clip.frames, FEATURE_SIZE) or clip.features.dtype != np.float32:
        raise PluginError(
            f"gemma3n clip {index + 1} has features {clip.features.dtype}{list(shape)}, expected "
            f"float32[{clip.frames}, {FEATURE_SIZE}]"
        )


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Pad every clip to the batch's frame count, as the FE pads a batch.

    :returns: read-only ``input_features`` and ``input_features_mask``; ``tokens`` per clip
        (``mx.array`` when ``policy.feature_backend == "mlx"``, see
        :mod:`audiogate_gemma3n.mlx_logmel`).
    :raises PluginError: malformed clip features, or left padding without the waveform.
    """
    if policy.feature_backend == "mlx":
        mlx_logmel = load_mlx_module(MLX_MODULE, family="gemma3n")
        batch: FeatureBatch = mlx_logmel.collate_features(policy, clips)
        return batch
    side = padding_side(policy)
    for index, clip in enumerate(clips):
        _check(clip, index)
    # The longest clip, padded to a multiple of 128, decides the batch's frame count.
    padded = max(
        (padded_samples(c.samples) for c in clips if isinstance(c, Gemma3nClipFeatures)),
        default=0,
    )
    frames = max([feature_frames(padded), *(clip.frames for clip in clips)])
    features = np.full((len(clips), frames, FEATURE_SIZE), floor_value(), dtype=np.float32)
    mask = np.zeros((len(clips), frames), dtype=np.bool_)
    for index, clip in enumerate(clips):
        row, row_mask = features[index], mask[index]
        if not isinstance(clip, Gemma3nClipFeatures):
            if side == "left":
                raise PluginError(
                    f"gemma3n clip {index + 1}: left padding needs the clip's waveform, which "
                    f"only the features of audiogate_gemma3n's extractor carry"
                )
            row[: clip.frames] = clip.features
            row_mask[: clip.frames] = True if clip.mask is None else clip.mask
        elif clip.padding_side != side:
            raise PluginError(
                f"gemma3n clip {index + 1} was extracted with {clip.padding_side} padding, but "
                f"the policy pads on the {side}"
            )
        elif side == "right":
            valid = min(frames, valid_frames_in_padded_batch(clip.samples))
            row[: clip.frames] = clip.features
            row[clip.frames : valid] = clip.tail[: valid - clip.frames]
            row_mask[:valid] = True
        else:
            lead = padded - clip.samples
            if padded_samples(clip.samples) == padded:
                # Same padded length, same shift: the clip's own frames.
                row[: clip.frames] = clip.features
            elif clip.waveform is None:
                raise PluginError(
                    f"gemma3n clip {index + 1}: left padding in a longer batch needs the clip's "
                    f"waveform, and these features carry none"
                )
            else:
                log_mel_frames(
                    clip.waveform,
                    lead_samples=lead,
                    first_frame=0,
                    stop_frame=frames,
                    out=row,
                    clip_index=index,
                )
            row_mask[:] = _left_mask(frames, lead)
    return FeatureBatch(
        inputs={
            "input_features": readonly(features),
            "input_features_mask": readonly(mask),
        },
        tokens=tuple(clip.tokens for clip in clips),
    )


def _left_mask(frames: int, lead: int) -> npt.NDArray[np.bool_]:
    return np.arange(frames) * FRAME_HOP_SAMPLES >= lead
