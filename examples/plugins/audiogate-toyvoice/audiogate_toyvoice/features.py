"""toyvoice's frontend: a 40-bin log-mel spectrogram, and the arithmetic that sizes it.

Frames are 400-sample Hann windows every 160 samples, not centred and not padded, so a
clip of ``n >= 400`` samples has ``(n - 400) // 160 + 1`` frames and a shorter one has
none (refused). Each frame's 512-point power spectrum goes through one matrix product
with a triangular HTK mel bank (0 Hz to 8 kHz) and a floored natural log. The prompt
holds ``ceil(frames / 4)`` positions per clip. :func:`frame_count` and
:func:`token_count` are the only place those numbers are computed: the plan uses them
and the extractor allocates by the plan.
"""

from __future__ import annotations

import functools
import math
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import FeatureError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate_toyvoice.policy import (
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    FRAMES_PER_TOKEN,
    N_FFT,
    N_MELS,
)

__all__ = [
    "BLOCK_FRAMES",
    "extract_features",
    "frame_count",
    "mel_bank",
    "plan_features",
    "token_count",
]

#: Frames per block; the cancel token is polled once per block.
BLOCK_FRAMES: Final = 256
LOG_FLOOR: Final = 1e-10
_BINS: Final = N_FFT // 2 + 1
#: Scratch per frame of a block: the windowed frame (float32); NumPy's FFT, which works in
#: float64 (the zero-padded frame, a complex128 spectrum, then its complex64 copy); the
#: power and its two squared terms (float32); the mel energies and their floor (float32).
_BYTES_PER_FRAME: Final = (
    FRAME_SAMPLES * 4 + N_FFT * 8 + _BINS * (16 + 8) + _BINS * 4 * 3 + N_MELS * 4 * 2
)


def frame_count(samples: int) -> int:
    """Feature frames of ``samples`` normalized samples (0 when shorter than a frame)."""
    if samples < FRAME_SAMPLES:
        return 0
    return (samples - FRAME_SAMPLES) // FRAME_HOP_SAMPLES + 1


def token_count(frames: int) -> int:
    """Prompt positions of a clip with ``frames`` frames."""
    return math.ceil(frames / FRAMES_PER_TOKEN)


def _hz_to_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _mel_to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


@functools.lru_cache(maxsize=1)
def mel_bank(rate_hz: int = 16_000) -> npt.NDArray[np.float32]:
    """Triangular HTK mel filters ``[shape=(257, 40)]`` from 0 Hz to Nyquist."""
    edges = _mel_to_hz(np.linspace(0.0, _hz_to_mel(np.array(rate_hz / 2)), N_MELS + 2))
    bins = np.fft.rfftfreq(N_FFT, d=1.0 / rate_hz)
    low, centre, high = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins[:, None] - low) / (centre - low)
    falling = (high - bins[:, None]) / (high - centre)
    return readonly(np.clip(np.minimum(rising, falling), 0.0, None).astype(np.float32))


@functools.lru_cache(maxsize=1)
def _window() -> npt.NDArray[np.float32]:
    return readonly(np.hanning(FRAME_SAMPLES + 1)[:-1].astype(np.float32))  # periodic Hann


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Frames, tokens and sizes of one clip.

    :raises FeatureError: the clip is not at 16 kHz or is shorter than one frame.
    """
    if rate_hz != policy.target_rate_hz:
        raise FeatureError(
            f"the toyvoice frontend takes {policy.target_rate_hz} Hz, got {rate_hz} Hz",
            clip_index=clip_index,
        )
    frames = frame_count(samples)
    if frames == 0:
        raise FeatureError(
            f"{samples} samples is shorter than one {FRAME_SAMPLES}-sample frame",
            clip_index=clip_index,
        )
    block = min(frames, BLOCK_FRAMES)
    return FeaturePlan(
        frames=frames,
        tokens=token_count(frames),
        feature_shape=(frames, N_MELS),
        feature_bytes=frames * N_MELS * 4,
        working_bytes=block * _BYTES_PER_FRAME + FRAME_SAMPLES * 4 + _BINS * N_MELS * 4,
        detail={"frames_per_token": FRAMES_PER_TOKEN},
    )


def extract_features(
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures:
    """Log-mel features ``[shape=(plan.frames, 40)]`` of a 16 kHz mono waveform.

    :param waveform: read-only float32 ``[shape=(samples,)]``.
    :param cancel: polled at the ``Feature`` checkpoint before each block of frames.
    """
    window, bank = _window(), mel_bank()
    out = np.empty(plan.feature_shape, dtype=np.float32)
    frames = sliding_window_view(waveform, FRAME_SAMPLES)[::FRAME_HOP_SAMPLES]
    for start in range(0, plan.frames, BLOCK_FRAMES):
        cancel.check(Checkpoint.FEATURE, clip_index)
        stop = min(start + BLOCK_FRAMES, plan.frames)
        spectrum = np.fft.rfft(frames[start:stop] * window, n=N_FFT)
        power = spectrum.real**2 + spectrum.imag**2
        np.log(np.maximum(power @ bank, LOG_FLOOR), out=out[start:stop])
    return ClipFeatures(features=readonly(out), frames=plan.frames, tokens=plan.tokens)
