"""Strict decoding of one clip's encoded bytes into a mono float32 waveform.

RIFF/WAVE (PCM16, IEEE float32, and their validated WAVE_FORMAT_EXTENSIBLE forms) and
headerless raw ``pcm16`` / ``f32``. :func:`inspect` reads the header and applies the
per-clip :class:`DecodeLimits` (:func:`check_limits` applies them to a geometry read
before); :func:`decode` converts the samples. The error codes
are listed in :mod:`audiogate.decode.decoder`.
"""

from __future__ import annotations

from audiogate.decode.decoder import check_limits, decode, inspect
from audiogate.decode.geometry import WAV, ClipGeometry, DecodeLimits, SourceFormat

__all__ = [
    "WAV",
    "ClipGeometry",
    "DecodeLimits",
    "SourceFormat",
    "check_limits",
    "decode",
    "inspect",
]
