"""The batch view of a request's clips, equal to ``GraniteSpeechProcessor`` on a batch.

``input_features`` ``[shape=(clips, rows_max, 160)]`` float32 and
``input_features_mask`` ``[shape=(clips, tokens_max)]`` bool (``arange(tokens_max) <
tokens``), the names ``GraniteSpeechForConditionalGeneration.forward`` takes.

The reference pads the batch's **waveforms** with zeros to the longest (``pad_sequence``)
and computes every clip's features over its padded waveform, so a shorter clip's row is
not its own features plus filler:

* its frames that read a sample at or past its end (the last two or three) see zeros
  instead of its reflected end, and frames follow up to the longest clip's count, all
  silent (``log10(1e-10)``) except the few that still reach the clip or, within 200
  samples of the batch's end, its reflection;
* its clamp floor is the maximum over those padded frames less 8, not its own.

Frames that read only the clip's samples (``interior``) are unchanged; everything else
is recomputed from the clip's waveform, which its
:class:`~audiogate_granitespeech.features.GraniteSpeechClipFeatures` carries. When the
batch maximum is not below the clip's own, the interior frames are the clip's features
clamped again at the higher floor (clamping commutes with the monotone scaling); when it
is below (the clip's loudest frame was one of its reflected last frames), they are
recomputed too. The longest clips' rows are their own features.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate_granitespeech.features import GraniteSpeechClipFeatures
from audiogate_granitespeech.geometry import (
    FEATURE_DIM,
    HALF_WINDOW,
    HOP,
    N_MELS,
    granite_geometry,
)
from audiogate_granitespeech.logmel import (
    LOG_FLOOR,
    batch_frames,
    clamp_and_scale,
    clip_interior_frames,
)

__all__ = ["collate_features"]


def _check(clip: ClipFeatures, index: int) -> None:
    shape = tuple(clip.features.shape)
    if shape != (clip.frames, FEATURE_DIM) or clip.features.dtype != np.float32:
        raise PluginError(
            f"granitespeech clip {index + 1} has features {clip.features.dtype}{list(shape)}, "
            f"expected float32[{clip.frames}, {FEATURE_DIM}]"
        )


def _scaled(value: np.float32) -> np.float32:
    out = np.array([value], dtype=np.float32)
    clamp_and_scale(out, np.float32(-np.inf))
    return np.float32(out[0])


def _padded_row(
    clip: GraniteSpeechClipFeatures,
    total: int,
    out: npt.NDArray[np.float32],
    index: int,
) -> None:
    """Write ``clip`` as the reference computes it zero-padded to ``total`` samples into
    ``out`` ``[shape=(frames_stored, 80)]``."""
    frames = granite_geometry(total).frames
    stored = out.shape[0]
    own = granite_geometry(clip.samples)
    interior = own.interior
    # Frames whose window reaches the clip, or (within 200 samples of the batch's end)
    # its reflection; every later frame is silent.
    if total - clip.samples <= HALF_WINDOW:
        reach = frames
    else:
        reach = min(frames, -(-(clip.samples + HALF_WINDOW) // HOP))
    tail = batch_frames(
        clip.waveform,
        total_samples=total,
        first=interior,
        stop=reach,
        clip_index=index,
        cancel=NEVER,
    )
    peak = max(clip.interior_peak, float(tail.max()) if tail.size else -np.inf)
    if reach < frames:
        peak = max(peak, float(LOG_FLOOR))
    floor = np.float32(np.float32(peak) - np.float32(8.0))
    if peak >= clip.peak:
        # Re-clamping the clip's own (scaled) values at the higher floor is exact.
        own_frames = clip.features.reshape(-1, N_MELS)[:interior]
        np.maximum(own_frames, _scaled(floor), out=out[:interior])
    else:
        head = out[:interior]
        clip_interior_frames(clip.waveform, head, clip_index=index, cancel=NEVER)
        clamp_and_scale(head, floor)
    clamp_and_scale(tail, floor)
    kept = max(0, min(stored, reach) - interior)
    out[interior : interior + kept] = tail[:kept]
    out[max(interior, reach) :] = _scaled(max(LOG_FLOOR, floor))


def collate_features(policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
    """Pad every clip to the batch's rows as the reference pads a batch.

    :returns: read-only ``input_features`` and ``input_features_mask``; ``tokens`` per clip.
    :raises PluginError: malformed clip features, no clip, or a shorter clip without the
        waveform its padded frames are computed from.
    """
    if not clips:
        raise PluginError("granitespeech collate_features needs at least one clip")
    for index, clip in enumerate(clips):
        _check(clip, index)
    lengths = [c.samples if isinstance(c, GraniteSpeechClipFeatures) else None for c in clips]
    known = [n for n in lengths if n is not None]
    total = max(known) if known else 0
    rows = max([granite_geometry(total).rows if known else 0, *(c.frames for c in clips)])
    tokens = max(c.tokens for c in clips)
    features = np.empty((len(clips), rows, FEATURE_DIM), dtype=np.float32)
    mask = np.arange(tokens)[None, :] < np.array([c.tokens for c in clips])[:, None]
    for index, clip in enumerate(clips):
        row = features[index]
        if isinstance(clip, GraniteSpeechClipFeatures) and clip.samples < total:
            _padded_row(clip, total, row.reshape(-1, N_MELS), index)
        elif clip.frames == rows:
            row[...] = clip.features
        else:
            raise PluginError(
                f"granitespeech clip {index + 1} is shorter than the batch's longest and "
                f"carries no waveform: its padded frames cannot be computed (features from "
                f"audiogate_granitespeech's extractor carry it)"
            )
    return FeatureBatch(
        inputs={
            "input_features": readonly(features),
            "input_features_mask": readonly(mask),
        },
        tokens=tuple(clip.tokens for clip in clips),
    )
