"""The Audio Flamingo 3 features stage: plan (windows, frames, tokens, bytes) and extraction.

Extraction is :func:`audiogate.dsp.whisper.whisper_log_mel` in its ``"windows"`` mode
(:class:`audiogate.dsp.whisper_windows.WindowedWhisper`): the clip cut into 30 s windows,
each padded to 480,000 samples, transformed and clamped on its own, as
``AudioFlamingo3Processor`` passes the windows to its extractor as a batch.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.whisper import WhisperPlan
from audiogate.dsp.whisper_windows import WindowedWhisper
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate_audioflamingo3.collate import MASK_DTYPE
from audiogate_audioflamingo3.geometry import (
    MAX_ROWS,
    MAX_SAMPLES,
    N_MELS,
    WINDOW_SAMPLES,
    AF3Geometry,
    af3_geometry,
)
from audiogate_audioflamingo3.policy import AUDIO_TOKEN, MIN_SAMPLES

__all__ = ["FRONTEND", "extract_features", "frontend_plan", "plan_features"]

#: The windowed Whisper frontend with Audio Flamingo 3's geometry and limits.
FRONTEND: Final = WindowedWhisper(
    geometry=af3_geometry,
    n_mels=N_MELS,
    window_samples=WINDOW_SAMPLES,
    min_samples=MIN_SAMPLES,
    max_samples=MAX_SAMPLES,
    max_rows=MAX_ROWS,
    token=AUDIO_TOKEN,
    mask_itemsize=np.dtype(MASK_DTYPE).itemsize,
)


def frontend_plan(geometry: AF3Geometry) -> WhisperPlan:
    """The shared Whisper frontend's plan of one clip (its windows, bytes and scratch)."""
    return FRONTEND.frontend_plan(geometry)


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Windows, frames, tokens and bytes of one clip, before extraction.

    :raises FeatureError: not 16 kHz, or 320 samples or fewer (no pooled row).
    :raises LimitError: ``duration samples``: more than 9,600,000 (600 s, 20 windows).
    """
    return FRONTEND.plan_features(policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index)


def extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    *,
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures:
    """Features ``[shape=(windows, 128, 3000)]`` and the per-window frame masks
    ``[shape=(windows, 3000)]`` of one clip, as planned."""
    return FRONTEND.extract_features(
        policy, plan, waveform, rate_hz=rate_hz, clip_index=clip_index, cancel=cancel
    )
