"""The Audio Flamingo 3 streaming stage: its Whisper log-mel computed as the samples arrive
(each 30 s window its own item, with the mask),
through :func:`audiogate.streaming.whisper.open_whisper_feature_stream`.

Only the global step (the clamp to the maximum minus 8, the mask) and the frames that
need the clip's end remain for ``finish()`` (``docs/streaming.md``).
"""

from __future__ import annotations

from audiogate.cancel import CancelToken
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan
from audiogate.streaming.whisper import WhisperFeatureStream, open_whisper_feature_stream
from audiogate_audioflamingo3.geometry import N_MELS, WINDOW_SAMPLES

__all__ = ["open_feature_stream"]


def open_feature_stream(
    policy: AudioPolicy, *, resample: ResamplePlan, clip_index: int, cancel: CancelToken
) -> WhisperFeatureStream | None:
    """The clip's feature stream (``None``: the mlx backend, or a resampler that does not
    stream: the accumulating frontend takes the clip)."""
    return open_whisper_feature_stream(
        policy,
        resample=resample,
        n_mels=N_MELS,
        padding="windows",
        chunk_samples=WINDOW_SAMPLES,
        clip_index=clip_index,
        cancel=cancel,
    )
