"""Headerless sources: little-endian interleaved ``pcm16`` or ``f32`` with declared geometry.

The whole buffer is sample data. The declared rate and channel count come from the
client, so they are validated here per clip, with the same rules (and codes) as the
matching WAV header fields.
"""

from __future__ import annotations

from audiogate.decode.geometry import BYTES_PER_SAMPLE, ClipGeometry, SourceFormat
from audiogate.errors import DecodeError, EmptyAudioError

__all__ = ["inspect_raw"]


def inspect_raw(nbytes: int, source_format: SourceFormat, *, clip_index: int) -> ClipGeometry:
    """Return the geometry of a raw source of ``nbytes`` bytes.

    :param nbytes: length of the encoded clip in bytes.
    :param source_format: a ``SourceFormat.raw(...)`` declaration.
    :param clip_index: zero-based clip index, named in every error.
    :raises EmptyAudioError: ``nbytes`` is 0.
    :raises DecodeError: the declared rate or channel count is not positive
        (``zero_channels_or_rate``) or the length is not a whole number of frames
        (``partial_frame``).
    """
    encoding = source_format.encoding
    rate_hz = source_format.rate_hz
    channels = source_format.channels
    if encoding is None or rate_hz is None or channels is None:
        # SourceFormat's validator rules this out for container "raw".
        raise TypeError(f"inspect_raw needs a SourceFormat.raw(...), not {source_format!r}")
    if nbytes == 0:
        raise EmptyAudioError(clip_index=clip_index, detail=f"raw {encoding} source has no bytes")
    if channels < 1 or rate_hz < 1:
        raise DecodeError(
            f"declared raw channel count and sample rate must be positive (got {channels} "
            f"channel(s) at {rate_hz} Hz)",
            clip_index=clip_index,
            code="zero_channels_or_rate",
        )
    frame_bytes = channels * BYTES_PER_SAMPLE[encoding]
    if nbytes % frame_bytes:
        raise DecodeError(
            f"raw {encoding} source of {nbytes} bytes is not a whole number of "
            f"{frame_bytes}-byte frames ({channels} channel(s))",
            clip_index=clip_index,
            code="partial_frame",
        )
    frames = nbytes // frame_bytes
    return ClipGeometry(
        container="raw",
        encoding=encoding,
        rate_hz=rate_hz,
        channels=channels,
        frames=frames,
        duration_us=frames * 1_000_000 // rate_hz,
        data_offset=0,
        data_length=nbytes,
    )
