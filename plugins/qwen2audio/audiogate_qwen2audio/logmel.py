"""Qwen2-Audio's log-mel: the shared Whisper frontend (:mod:`audiogate.dsp.whisper`) with
128 bins and one 30 s window (``padding="max_length"``, as ``Qwen2AudioProcessor`` calls
``WhisperFeatureExtractor``), shaped as this family's features ``[shape=(128, 3000)]``.

The kernel, its blocks, threads, per-thread scratch and the reference's quirks (torch's
Hann window, the float32 clamp floor) are documented in :mod:`audiogate.dsp.whisper`; the
names it shares are re-exported here for this package's MLX kernel and tests.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp import whisper
from audiogate.dsp.whisper import BLOCK_FRAMES, LOG_FLOOR, hann_window_torch
from audiogate_qwen2audio.geometry import N_MELS, WhisperGeometry

__all__ = [
    "BLOCK_FRAMES",
    "LOG_FLOOR",
    "hann_window_torch",
    "whisper_log_mel",
    "working_bytes",
]


def _plan(geometry: WhisperGeometry) -> whisper.WhisperPlan:
    return whisper.whisper_plan(geometry.samples, n_mels=N_MELS, padding="max_length")


def working_bytes(geometry: WhisperGeometry) -> int:
    """Peak scratch of :func:`whisper_log_mel` besides its result
    (:attr:`audiogate.dsp.whisper.WhisperPlan.working_bytes`)."""
    return _plan(geometry).working_bytes


def whisper_log_mel(
    waveform: npt.NDArray[np.float32],
    geometry: WhisperGeometry,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Log-mel features and frame mask of one clip, equal to the reference's.

    :param waveform: mono float32 at 16 kHz ``[shape=(geometry.samples,)]``.
    :param geometry: from :func:`~audiogate_qwen2audio.geometry.whisper_geometry`.
    :param clip_index: zero-based clip index (cancellation).
    :param cancel: polled every :data:`BLOCK_FRAMES` frames.
    :returns: read-only features float32 ``[shape=(128, 3000)]`` and read-only mask bool
        ``[shape=(3000,)]`` with ``geometry.valid_frames`` leading ones.
    """
    features, mask = whisper.whisper_log_mel(
        waveform, _plan(geometry), clip_index=clip_index, cancel=cancel
    )
    return features[0], mask[0]
