"""Build RIFF/WAVE bytes by hand, field by field, for decoder tests.

Nothing here goes through a WAV library: every header field can be set to a wrong
value on purpose. Tests in this folder import it as ``import wavbuild``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = [
    "FORMAT_EXTENSIBLE",
    "FORMAT_IEEE_FLOAT",
    "FORMAT_PCM",
    "build_wav",
    "chunk",
    "encode_samples",
    "fmt_payload",
    "guid",
    "reference_downmix",
    "riff",
]

FORMAT_PCM = 0x0001
FORMAT_IEEE_FLOAT = 0x0003
FORMAT_EXTENSIBLE = 0xFFFE

_BITS = {"pcm16": 16, "f32": 32}
_TAGS = {"pcm16": FORMAT_PCM, "f32": FORMAT_IEEE_FLOAT}


def guid(sub_format: int) -> bytes:
    """KSDATAFORMAT_SUBTYPE GUID ``xxxxxxxx-0000-0010-8000-00aa00389b71`` as stored."""
    return struct.pack("<IHH", sub_format, 0x0000, 0x0010) + bytes.fromhex("800000aa00389b71")


def chunk(chunk_id: bytes, payload: bytes, *, size: int | None = None, pad: bool = True) -> bytes:
    """One chunk: id, size (default: the payload's), payload, and a pad byte if odd."""
    declared = len(payload) if size is None else size
    body = struct.pack("<4sI", chunk_id, declared) + payload
    if pad and len(payload) % 2:
        body += b"\x00"
    return body


def fmt_payload(
    *,
    format_tag: int = FORMAT_PCM,
    channels: int = 1,
    rate_hz: int = 16_000,
    bits: int = 16,
    byte_rate: int | None = None,
    block_align: int | None = None,
    cb_size: int | None = None,
    valid_bits: int | None = None,
    channel_mask: int = 0,
    sub_format_guid: bytes | None = None,
) -> bytes:
    """A ``fmt `` payload; consistent by default, every field overridable.

    16 bytes for PCM/float unless ``cb_size`` is given (then 18); 40 bytes for
    ``WAVE_FORMAT_EXTENSIBLE`` (``cb_size`` defaults to 22, ``valid_bits`` to ``bits``,
    the GUID to PCM for 16 bits and IEEE float otherwise).
    """
    if block_align is None:
        block_align = channels * (bits // 8)
    if byte_rate is None:
        byte_rate = block_align * rate_hz
    base = struct.pack("<HHIIHH", format_tag, channels, rate_hz, byte_rate, block_align, bits)
    if format_tag == FORMAT_EXTENSIBLE:
        if sub_format_guid is None:
            sub_format_guid = guid(FORMAT_PCM if bits == 16 else FORMAT_IEEE_FLOAT)
        return base + struct.pack(
            "<HHI16s",
            22 if cb_size is None else cb_size,
            bits if valid_bits is None else valid_bits,
            channel_mask,
            sub_format_guid,
        )
    if cb_size is not None:
        return base + struct.pack("<H", cb_size)
    return base


def riff(*chunks: bytes, riff_size: int | None = None, form: bytes = b"WAVE") -> bytes:
    """``RIFF`` + size + ``form`` + the chunks; the size is consistent unless given."""
    body = form + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def encode_samples(samples: npt.ArrayLike, encoding: str) -> bytes:
    """Little-endian interleaved bytes of ``samples`` ``[shape=(frames, channels)]``."""
    dtype = "<i2" if encoding == "pcm16" else "<f4"
    return np.ascontiguousarray(np.asarray(samples), dtype=dtype).tobytes()


def build_wav(
    samples: npt.ArrayLike,
    *,
    encoding: str = "pcm16",
    rate_hz: int = 16_000,
    extensible: bool = False,
    cb_size: int | None = None,
    before: Iterable[bytes] = (),
    after: Iterable[bytes] = (),
    data_first: bool = False,
) -> bytes:
    """A valid WAV of ``samples`` ``[shape=(frames, channels)]`` (int16 or float32 values).

    :param before: whole chunks (see :func:`chunk`) placed after ``fmt `` and before
        ``data``; ``after``: placed after ``data``.
    :param data_first: put ``data`` before ``fmt ``.
    """
    array = np.asarray(samples)
    if array.ndim == 1:
        array = array[:, None]
    channels = array.shape[1]
    bits = _BITS[encoding]
    fmt = fmt_payload(
        format_tag=FORMAT_EXTENSIBLE if extensible else _TAGS[encoding],
        channels=channels,
        rate_hz=rate_hz,
        bits=bits,
        cb_size=cb_size,
    )
    fmt_chunk = chunk(b"fmt ", fmt)
    data_chunk = chunk(b"data", encode_samples(array, encoding))
    head = [data_chunk, fmt_chunk] if data_first else [fmt_chunk]
    tail = [] if data_first else [data_chunk]
    return riff(*head, *before, *tail, *after)


def reference_downmix(samples: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The naive oracle: per frame, a Python float64 loop over channels.

    ``s = 0.0; s += x for each channel; s / channels``, clamped to [-1, 1], as float32;
    for int16 input each sample is first ``x / 32768``. Slow: for small inputs only.
    """
    array = np.asarray(samples)
    if array.ndim == 1:
        array = array[:, None]
    scale = 32768.0 if array.dtype == np.int16 else 1.0
    out = np.empty(array.shape[0], dtype=np.float32)
    for i, row in enumerate(array.tolist()):
        total = 0.0
        for value in row:
            total += value / scale
        out[i] = min(1.0, max(-1.0, total / len(row)))
    return out
