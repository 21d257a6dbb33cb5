"""Vectorised, blockwise downmix of interleaved samples to one clamped float32 channel.

The arithmetic is mlxcel's (``decode_wav``, ``src/audio/preprocessing_wav.rs``): each
frame's channels are summed in float64 in channel order starting from ``0.0``, divided by
the channel count, clamped to ``[-1, 1]`` and stored as float32. That is also exactly what
``x.astype(float64).mean(axis=1)`` computes, so NumPy is a bit-exact oracle. Two
consequences worth knowing:

* an all ``-0.0`` frame decodes to ``+0.0`` (``0.0 + -0.0 == +0.0``);
* for PCM16 the channel sum is formed in int32, which is exact, and divided once by
  ``32768 * channels``: one correctly rounded division of the same exact quotient, so
  it equals the float64 mean of ``int16 / 32768`` bit for bit (multiplying by a rounded
  reciprocal would not, for 3, 5, 6 or 7 channels). The mean of PCM16 lies in
  ``[-1, 32767/32768]``, so it needs no clamp.

Non-finite float samples are found on the float64 channel sum: the sum of finite
float32 values cannot overflow float64, so a frame's sum is non-finite exactly when one
of its samples is, and the first such frame is reported before anything is clamped.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint

__all__ = ["BLOCK_FRAMES", "downmix_f32", "downmix_pcm16"]

#: Frames converted per block; the cancel token is polled once per block.
BLOCK_FRAMES: Final = 65_536

_PCM16_SCALE: Final = 32768.0


def downmix_pcm16(
    samples: npt.NDArray[np.int16],
    out: npt.NDArray[np.float32],
    *,
    channels: int,
    clip_index: int,
    cancel: CancelToken,
) -> None:
    """Write the mono mean of interleaved PCM16 ``samples`` into ``out``.

    :param samples: ``[shape=(frames * channels,)]`` little-endian int16 view of the
        source bytes (read-only, possibly unaligned).
    :param out: ``[shape=(frames,)]`` preallocated float32 output.
    :param channels: interleaved channels, at least 1.
    :param clip_index: named by a cancellation.
    :param cancel: polled before each block of :data:`BLOCK_FRAMES` frames.
    """
    frames = out.shape[0]
    if channels == 1:
        # int16 → float32 is exact and so is scaling by a power of two.
        scale32 = np.float32(1.0 / _PCM16_SCALE)
        for start in range(0, frames, BLOCK_FRAMES):
            cancel.check(Checkpoint.DECODE, clip_index)
            stop = min(start + BLOCK_FRAMES, frames)
            np.multiply(samples[start:stop], scale32, out=out[start:stop])
        return
    divisor = _PCM16_SCALE * channels
    acc = np.empty(min(frames, BLOCK_FRAMES), dtype=np.int32)
    for start in range(0, frames, BLOCK_FRAMES):
        cancel.check(Checkpoint.DECODE, clip_index)
        stop = min(start + BLOCK_FRAMES, frames)
        block = samples[start * channels : stop * channels].reshape(stop - start, channels)
        total = acc[: stop - start]
        np.add(block[:, 0], block[:, 1], out=total, dtype=np.int32)
        for channel in range(2, channels):
            np.add(total, block[:, channel], out=total)
        np.divide(total, divisor, out=out[start:stop], dtype=np.float64, casting="same_kind")


def downmix_f32(
    samples: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    *,
    channels: int,
    clip_index: int,
    cancel: CancelToken,
) -> int | None:
    """Write the clamped mono mean of interleaved float32 ``samples`` into ``out``.

    :param samples: ``[shape=(frames * channels,)]`` little-endian float32 view of the
        source bytes (read-only, possibly unaligned).
    :param out: ``[shape=(frames,)]`` preallocated float32 output.
    :param channels: interleaved channels, at least 1.
    :param clip_index: named by a cancellation.
    :param cancel: polled before each block of :data:`BLOCK_FRAMES` frames.
    :returns: ``None``, or the zero-based index of the first frame holding a NaN or an
        infinity (``out`` is then only partly written).
    """
    frames = out.shape[0]
    acc = np.empty(min(frames, BLOCK_FRAMES), dtype=np.float64)
    # inf + -inf is NaN, reported below as a non-finite frame, not as a RuntimeWarning.
    with np.errstate(invalid="ignore"):
        return _downmix_f32_blocks(samples, out, acc, channels, clip_index, cancel)


def _downmix_f32_blocks(
    samples: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    acc: npt.NDArray[np.float64],
    channels: int,
    clip_index: int,
    cancel: CancelToken,
) -> int | None:
    frames = out.shape[0]
    for start in range(0, frames, BLOCK_FRAMES):
        cancel.check(Checkpoint.DECODE, clip_index)
        stop = min(start + BLOCK_FRAMES, frames)
        total = acc[: stop - start]
        if channels == 1:
            # float32 → float64 is exact, as are + 0.0, the clamp and the way back.
            np.add(samples[start:stop], 0.0, out=total, dtype=np.float64)
        else:
            block = samples[start * channels : stop * channels].reshape(stop - start, channels)
            np.add(block[:, 0], 0.0, out=total, dtype=np.float64)
            for channel in range(1, channels):
                np.add(total, block[:, channel], out=total)
        if not math.isfinite(float(np.add.reduce(total))):
            bad = np.flatnonzero(~np.isfinite(total))
            return start + int(bad[0])
        if channels > 1:
            np.divide(total, float(channels), out=total)
        np.clip(total, -1.0, 1.0, out=total)
        out[start:stop] = total
    return None
