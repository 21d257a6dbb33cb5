"""The Granite Speech features stage: plan (rows, tokens, bytes) and extraction, from one
geometry."""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.errors import FeatureError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_granitespeech.geometry import SAMPLE_RATE_HZ, GraniteGeometry, granite_geometry
from audiogate_granitespeech.logmel import granite_log_mel, result_bytes, working_bytes
from audiogate_granitespeech.policy import MAX_SAMPLES, MIN_SAMPLES

__all__ = ["GraniteSpeechClipFeatures", "extract_features", "plan_features"]


@attrs.frozen(kw_only=True)
class GraniteSpeechClipFeatures(ClipFeatures):
    """One clip's features plus what collating it into a longer batch needs.

    The reference pads a batch's *waveforms* to the longest and clamps each clip at its
    own maximum over the padded frames, so a shorter clip's last frames and its clamp
    floor change in a batch (:mod:`~audiogate_granitespeech.collate`).

    :param samples: normalized samples of the clip.
    :param peak: largest unclamped log-mel value over the clip's frames.
    :param interior_peak: the same over the frames that read no sample past the clip
        (``-inf`` if none): those are unchanged in a batch.
    :param waveform: the read-only normalized waveform (the pipeline's own array, not a
        copy), from which a batch recomputes the frames that change.
    """

    samples: int
    peak: float
    interior_peak: float
    waveform: npt.NDArray[np.float32]


def _checked_geometry(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> GraniteGeometry:
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Granite Speech frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
            clip_index=clip_index,
        )
    minimum = max(MIN_SAMPLES, policy.min_samples_per_clip)
    if samples < minimum:
        raise FeatureError(
            f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: at least "
            f"{minimum} are needed (the reference's STFT reflect-pads 256 samples a side)",
            clip_index=clip_index,
        )
    maximum = min(MAX_SAMPLES, policy.max_samples_per_clip)
    if samples > maximum:
        raise LimitError("duration samples", actual=samples, maximum=maximum, clip_index=clip_index)
    return granite_geometry(samples)


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Rows, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or 256 samples or fewer.
    :raises LimitError: ``duration samples``: more than the policy's per-clip cap.
    """
    geometry = _checked_geometry(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)
    return FeaturePlan(
        frames=geometry.rows,
        tokens=geometry.tokens,
        feature_shape=geometry.feature_shape,
        feature_bytes=result_bytes(geometry),
        working_bytes=working_bytes(geometry),
        detail={
            "mel_frames": geometry.frames,
            "rows": geometry.rows,
            "projector_windows": geometry.tokens // 3,
        },
    )


def extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    *,
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> GraniteSpeechClipFeatures:
    """Features ``[shape=(rows, 160)]`` of one clip, as planned."""
    geometry = _checked_geometry(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    if (geometry.rows, geometry.tokens) != (plan.frames, plan.tokens):
        raise ValueError(
            f"clip {clip_index + 1}: {waveform.shape[0]} samples give {geometry.rows} rows / "
            f"{geometry.tokens} tokens, but the plan has {plan.frames} / {plan.tokens}"
        )
    wave = np.ascontiguousarray(waveform, dtype=np.float32)
    result = granite_log_mel(wave, geometry, clip_index=clip_index, cancel=cancel)
    if wave is not waveform or wave.flags.writeable:
        # Keep a read-only array of our own only when the caller's could not be shared.
        wave = np.array(wave)
        wave.flags.writeable = False
    return GraniteSpeechClipFeatures(
        features=result.features,
        mask=None,
        frames=geometry.rows,
        tokens=geometry.tokens,
        samples=geometry.samples,
        peak=result.peak,
        interior_peak=result.interior_peak,
        waveform=wave,
    )
