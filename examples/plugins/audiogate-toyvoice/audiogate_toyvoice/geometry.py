"""toyvoice's frames and tokens: how many of each a clip of ``n`` samples gives.

Frames are 400-sample windows every 160 samples, not centred and not padded, so a clip
of ``n >= 400`` samples has ``(n - 400) // 160 + 1`` frames and a shorter one has none
(refused). The (imaginary) encoder pools four frames into one prompt position, so a clip
takes ``ceil(frames / 4)`` positions. :func:`clip_geometry` is the only place those
numbers and the feature shape are computed: the feature plan uses it, the extractor
allocates by the plan, and the prompt expansion writes the plan's tokens.
"""

from __future__ import annotations

import math
from typing import Final, NamedTuple

__all__ = [
    "FRAMES_PER_TOKEN",
    "FRAME_HOP_SAMPLES",
    "FRAME_SAMPLES",
    "N_FFT",
    "N_MELS",
    "ClipGeometry",
    "clip_geometry",
    "frame_count",
    "token_count",
]

# 25 ms Hann frames every 10 ms at 16 kHz, a 512-point FFT, 40 mel bins; the encoder
# pools 4 frames into one prompt position.
FRAME_SAMPLES: Final = 400
FRAME_HOP_SAMPLES: Final = 160
N_FFT: Final = 512
N_MELS: Final = 40
FRAMES_PER_TOKEN: Final = 4


class ClipGeometry(NamedTuple):
    """Frames, prompt positions and feature shape of one clip."""

    frames: int
    tokens: int
    #: ``(frames, 40)``: one row of mel energies per frame.
    feature_shape: tuple[int, int]


def frame_count(samples: int) -> int:
    """Feature frames of ``samples`` normalized samples (0 when shorter than a frame)."""
    if samples < FRAME_SAMPLES:
        return 0
    return (samples - FRAME_SAMPLES) // FRAME_HOP_SAMPLES + 1


def token_count(frames: int) -> int:
    """Prompt positions of a clip with ``frames`` frames."""
    return math.ceil(frames / FRAMES_PER_TOKEN)


def clip_geometry(samples: int) -> ClipGeometry:
    """Frames, tokens and feature shape of a clip of ``samples`` normalized samples."""
    frames = frame_count(samples)
    return ClipGeometry(frames=frames, tokens=token_count(frames), feature_shape=(frames, N_MELS))
