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
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint

__all__ = [
    "ALAW_TABLE",
    "BLOCK_FRAMES",
    "MULAW_TABLE",
    "downmix_encoded",
    "downmix_f32",
    "downmix_pcm16",
]

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


def _g711_tables() -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]:
    """The ITU-T G.711 expansions of every µ-law and A-law byte to 16-bit PCM."""
    codes = np.arange(256, dtype=np.int32)
    u = ~codes & 0xFF
    exponent, mantissa = (u >> 4) & 7, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    mulaw = np.where(u & 0x80, -magnitude, magnitude)
    a = codes ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    magnitude = np.where(
        exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
    )
    alaw = np.where(a & 0x80, magnitude, -magnitude)
    return mulaw.astype(np.int16), alaw.astype(np.int16)


#: µ-law and A-law bytes → int16 (ITU-T G.711; the tables libsndfile and SoX use).
MULAW_TABLE, ALAW_TABLE = _g711_tables()

#: Integer encodings: (full-scale divisor, offset subtracted from each sample).
_INTEGER_SCALES: Final = {
    "u8": (128.0, 128),
    "pcm24": (float(1 << 23), 0),
    "pcm32": (float(1 << 31), 0),
    "mulaw": (_PCM16_SCALE, 0),
    "alaw": (_PCM16_SCALE, 0),
}


def _integer_block(raw: memoryview, encoding: str, count: int, offset: int) -> npt.NDArray[Any]:
    """``count`` samples of an integer encoding from ``raw[offset:]`` as int32 or int64."""
    if encoding == "u8":
        return np.frombuffer(raw, dtype=np.uint8, count=count, offset=offset).astype(np.int32)
    if encoding in ("mulaw", "alaw"):
        table = MULAW_TABLE if encoding == "mulaw" else ALAW_TABLE
        codes = np.frombuffer(raw, dtype=np.uint8, count=count, offset=offset)
        return table[codes].astype(np.int32)
    if encoding == "pcm32":
        return np.frombuffer(raw, dtype="<i4", count=count, offset=offset).astype(np.int64)
    triples = np.frombuffer(raw, dtype=np.uint8, count=count * 3, offset=offset).reshape(count, 3)
    # Little-endian 24-bit: the top byte goes in as int8 so the sign extends.
    return (
        triples[:, 0].astype(np.int32)
        | (triples[:, 1].astype(np.int32) << 8)
        | (triples[:, 2].astype(np.int8).astype(np.int32) << 16)
    )


def downmix_encoded(
    raw: memoryview,
    out: npt.NDArray[np.float32],
    *,
    encoding: str,
    data_offset: int,
    channels: int,
    clip_index: int,
    cancel: CancelToken,
) -> int | None:
    """Write the clamped mono mean of the other WAV encodings (not PCM16 or float32).

    Integer samples (``u8``, ``pcm24``, ``pcm32``, ``mulaw``, ``alaw``; the last two
    through :data:`MULAW_TABLE` / :data:`ALAW_TABLE`) are summed exactly in integers and
    divided once by ``scale * channels``, the float64 mean of ``x / scale`` bit for bit
    (as for PCM16). ``f64`` is summed in float64, divided and clamped like float32.

    :param raw: the clip's bytes; the samples start at ``data_offset``.
    :param out: ``[shape=(frames,)]`` preallocated float32 output.
    :param encoding: a key of :data:`~audiogate.decode.geometry.BYTES_PER_SAMPLE`.
    :param cancel: polled before each block of :data:`BLOCK_FRAMES` frames.
    :returns: ``None``, or the zero-based index of the first frame holding a NaN or an
        infinity (``f64`` only).
    """
    frames = out.shape[0]
    if encoding == "f64":
        samples = np.frombuffer(raw, dtype="<f8", count=frames * channels, offset=data_offset)
        acc = np.empty(min(frames, BLOCK_FRAMES), dtype=np.float64)
        for start in range(0, frames, BLOCK_FRAMES):
            cancel.check(Checkpoint.DECODE, clip_index)
            stop = min(start + BLOCK_FRAMES, frames)
            block = samples[start * channels : stop * channels].reshape(stop - start, channels)
            # Finite float64 samples can overflow their sum, so test the samples themselves.
            finite = np.isfinite(block).all(axis=1)
            if not finite.all():
                return start + int(np.flatnonzero(~finite)[0])
            total = acc[: stop - start]
            np.add(block[:, 0], 0.0, out=total)
            for channel in range(1, channels):
                np.add(total, block[:, channel], out=total)
            if channels > 1:
                np.divide(total, float(channels), out=total)
            np.clip(total, -1.0, 1.0, out=total)
            out[start:stop] = total
        return None
    scale, bias = _INTEGER_SCALES[encoding]
    width = 3 if encoding == "pcm24" else np.dtype(_WIDTHS[encoding]).itemsize
    divisor = scale * channels
    for start in range(0, frames, BLOCK_FRAMES):
        cancel.check(Checkpoint.DECODE, clip_index)
        stop = min(start + BLOCK_FRAMES, frames)
        count = (stop - start) * channels
        block = _integer_block(raw, encoding, count, data_offset + start * channels * width)
        total = block.reshape(stop - start, channels).sum(axis=1)
        if bias:
            total -= bias * channels
        np.divide(total, divisor, out=out[start:stop], dtype=np.float64, casting="same_kind")
    return None


_WIDTHS: Final = {"u8": np.uint8, "pcm32": np.int32, "mulaw": np.uint8, "alaw": np.uint8}
