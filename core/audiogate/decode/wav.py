"""RIFF/WAVE header walk: the geometry of a clip from its header, without touching samples.

Stricter than mlxcel's decoder (``inspect_wav`` in ``src/audio/preprocessing_wav.rs``;
docs/provenance.md), on purpose:

* the RIFF size field must match the buffer exactly (``riff_size + 8 == len``);
* every chunk is walked to the end of the buffer, trailing chunks included, so the
  complete declared extent is checked; ``data`` before ``fmt `` is therefore fine;
* a chunk running past the end is refused: no clamping, and ``0xFFFFFFFF`` is not a
  streaming sentinel, just a size past the end;
* an odd-sized chunk must be followed by its pad byte, also after the last chunk (a
  missing final pad byte is a truncation, ``missing_pad_byte``); the pad byte's value is
  not checked, since writers disagree about it;
* duplicate ``fmt `` or ``data`` chunks are refused instead of "last/first wins";
* ``block_align`` and ``byte_rate`` are cross-checked;
* the encodings are PCM at 8 (unsigned), 16, 24 and 32 bits (12 and 20-bit PCM in 16
  and 24-bit containers, left-justified, read as their container), IEEE float at 32 and
  64 bits, and 8-bit A-law and µ-law (mlxcel takes PCM16 and float32 only); a plain
  ``fmt `` is 16 bytes or 18 + ``cbSize`` (18, and 20 for A-law and µ-law);
* ``WAVE_FORMAT_EXTENSIBLE`` is unwrapped (mlxcel refuses it) when it is exactly the
  40-byte form with ``cbSize`` 22, ``wValidBitsPerSample`` equal to the container bits
  (or, for integer samples, fewer: 24 valid in 32, left-justified) and one of those
  encodings' sub-format GUIDs. The channel mask is not checked: it only
  names speaker positions, and every channel is averaged anyway;
* RF64 (and BW64, its ITU twin) is a RIFF/WAVE whose 32-bit sizes are ``0xFFFFFFFF``:
  its first chunk must be ``ds64``, whose 64-bit RIFF size must match the buffer exactly
  and whose 64-bit data size stands in for a ``data`` chunk declaring ``0xFFFFFFFF``.

The caller's rate policy (minimum, maximum, allowed rates) runs where mlxcel's ``inspect_wav``
puts it: right after the zero channel/rate check and before the encoding checks, empty data
and partial frames. The other policy limits (channels, frames, duration) are
applied by the caller, :func:`audiogate.decode.inspect`, once the header is valid.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.decode.geometry import BYTES_PER_SAMPLE, CONVERT_ADVICE, ClipGeometry, Encoding
from audiogate.errors import DecodeError, EmptyAudioError

__all__ = ["MAX_CHUNKS", "inspect_wav"]

#: Most chunks walked after the 12-byte RIFF header (mlxcel's ``MAX_WAV_CHUNKS``).
MAX_CHUNKS: Final = 256

_RIFF_HEADER_BYTES: Final = 12
_CHUNK_HEADER_BYTES: Final = 8

_FORMAT_PCM: Final = 0x0001
_FORMAT_IEEE_FLOAT: Final = 0x0003
_FORMAT_ALAW: Final = 0x0006
_FORMAT_MULAW: Final = 0x0007
_FORMAT_EXTENSIBLE: Final = 0xFFFE
_SUB_FORMATS: Final = (_FORMAT_PCM, _FORMAT_IEEE_FLOAT, _FORMAT_ALAW, _FORMAT_MULAW)

_FORMAT_NAMES: Final[dict[int, str]] = {
    0x0001: "PCM",
    0x0002: "Microsoft ADPCM",
    0x0003: "IEEE float",
    0x0006: "A-law",
    0x0007: "µ-law",
    0x0011: "IMA ADPCM",
    0x0031: "GSM 6.10",
    0x0055: "MPEG layer 3",
    0xFFFE: "WAVE_FORMAT_EXTENSIBLE",
}

#: (format or sub-format, bits per sample) → encoding.
_ENCODINGS: Final[dict[tuple[int, int], Encoding]] = {
    (_FORMAT_PCM, 8): "u8",
    (_FORMAT_PCM, 16): "pcm16",
    (_FORMAT_PCM, 24): "pcm24",
    (_FORMAT_PCM, 32): "pcm32",
    (_FORMAT_IEEE_FLOAT, 32): "f32",
    (_FORMAT_IEEE_FLOAT, 64): "f64",
    (_FORMAT_ALAW, 8): "alaw",
    (_FORMAT_MULAW, 8): "mulaw",
}

_ACCEPTED: Final = (
    "format 1 (PCM) at 8, 16, 24 or 32 bits, format 3 (IEEE float) at 32 or 64 bits, "
    "format 6 (A-law) or 7 (µ-law) at 8 bits, or WAVE_FORMAT_EXTENSIBLE (0xFFFE) with one "
    "of these as its sub-format"
)

#: Bytes 4..16 of every KSDATAFORMAT_SUBTYPE_* GUID (xxxxxxxx-0000-0010-8000-00aa00389b71,
#: stored little-endian in its first three fields); bytes 0..4 hold the format code.
_GUID_TAIL: Final = bytes.fromhex("000010008000" + "00aa00389b71")

_FMT_PLAIN_SIZES: Final = (16, 18)
_FMT_EXTENSIBLE_SIZE: Final = 40
_EXTENSIBLE_CB_SIZE: Final = 22

_U32: Final = struct.Struct("<I")
_DS64: Final = struct.Struct("<QQQI")
_SIZE_IN_DS64: Final = 0xFFFFFFFF
_RF64_MAGICS: Final = (b"RF64", b"BW64")
_CHUNK: Final = struct.Struct("<4sI")
_FMT_BASE: Final = struct.Struct("<HHIIHH")
_FMT_EXTENSION: Final = struct.Struct("<HHI16s")


def _show_id(chunk_id: bytes) -> str:
    # Chunk ids are four ASCII characters in well-formed files; anything else is shown
    # escaped so a hostile id cannot inject text into logs.
    return ascii(chunk_id.decode("latin-1"))


def _format_name(tag: int) -> str:
    name = _FORMAT_NAMES.get(tag)
    return f"{tag} (0x{tag:04X}, {name})" if name else f"{tag} (0x{tag:04X})"


def _guid(raw: bytes) -> str:
    d1, d2, d3 = struct.unpack_from("<IHH", raw)
    rest = raw[8:].hex()
    return f"{d1:08x}-{d2:04x}-{d3:04x}-{rest[:4]}-{rest[4:]}"


def inspect_wav(
    view: memoryview,
    *,
    clip_index: int,
    cancel: CancelToken,
    check_rate: Callable[[int], None] | None = None,
) -> ClipGeometry:
    """Walk a RIFF/WAVE header and return the clip's geometry; samples are never read.

    :param view: the whole encoded clip as a 1-D unsigned-byte view.
    :param clip_index: zero-based clip index, named in every error.
    :param cancel: polled at the start and after each chunk (``Decode`` checkpoint).
    :param check_rate: the caller's rate policy, called with the header's non-zero rate
        before the encoding is checked; it raises to refuse.
    :returns: the geometry; other policy limits are not applied here.
    :raises DecodeError: the header is malformed or describes an unsupported encoding
        (the ``code`` says which rule failed).
    :raises EmptyAudioError: the buffer or the ``data`` chunk holds no sample frames.
    """
    cancel.check(Checkpoint.DECODE, clip_index)
    size = view.nbytes
    if size == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="no bytes")
    if size < _RIFF_HEADER_BYTES:
        raise DecodeError(
            f"missing RIFF/WAVE header: {size} bytes, need at least {_RIFF_HEADER_BYTES}",
            clip_index=clip_index,
            code="too_short",
        )
    magic = bytes(view[0:4])
    form = bytes(view[8:12])
    if magic not in (b"RIFF", *_RF64_MAGICS) or form != b"WAVE":
        raise DecodeError(
            f"missing RIFF/WAVE header: got {_show_id(magic)}…{_show_id(form)} "
            f"at bytes 0..4 and 8..12, expected 'RIFF'…'WAVE' (or 'RF64'…'WAVE')",
            clip_index=clip_index,
            code="not_riff_wave",
        )
    (riff_size,) = _U32.unpack_from(view, 4)
    offset = _RIFF_HEADER_BYTES
    data_size64: int | None = None
    if magic in _RF64_MAGICS:
        riff_size, data_size64, offset = _read_ds64(view, riff_size, clip_index=clip_index)
    if riff_size + 8 != size:
        raise DecodeError(
            f"RIFF size field declares {riff_size} bytes after the 8-byte RIFF header "
            f"({riff_size + 8} in all) but the buffer holds {size} bytes",
            clip_index=clip_index,
            code="riff_size_mismatch",
        )

    fmt: tuple[int, int] | None = None  # (payload offset, payload size)
    data: tuple[int, int] | None = None
    chunks = 1 if data_size64 is not None else 0
    while offset < size:
        if chunks == MAX_CHUNKS:
            raise DecodeError(
                f"more than {MAX_CHUNKS} chunks (chunk {chunks + 1} starts at byte {offset})",
                clip_index=clip_index,
                code="too_many_chunks",
            )
        if offset + _CHUNK_HEADER_BYTES > size:
            raise DecodeError(
                f"truncated chunk header at byte {offset}: {size - offset} bytes left, "
                f"a chunk header needs {_CHUNK_HEADER_BYTES}",
                clip_index=clip_index,
                code="truncated_chunk_header",
            )
        chunk_id, declared = _CHUNK.unpack_from(view, offset)
        if data_size64 is not None and chunk_id == b"data" and declared == _SIZE_IN_DS64:
            declared = data_size64
        start = offset + _CHUNK_HEADER_BYTES
        end = start + declared
        if end > size:
            raise DecodeError(
                f"chunk {_show_id(chunk_id)} at byte {offset} declares {declared} bytes "
                f"but only {size - start} remain in the buffer",
                clip_index=clip_index,
                code="chunk_past_end",
            )
        if declared & 1 and end == size:
            raise DecodeError(
                f"chunk {_show_id(chunk_id)} at byte {offset} has an odd size ({declared}) "
                f"and the buffer ends before its pad byte",
                clip_index=clip_index,
                code="missing_pad_byte",
            )
        if chunk_id == b"fmt ":
            if fmt is not None:
                raise DecodeError(
                    f"duplicate 'fmt ' chunk at byte {offset} (the first is at byte "
                    f"{fmt[0] - _CHUNK_HEADER_BYTES})",
                    clip_index=clip_index,
                    code="duplicate_fmt",
                )
            fmt = (start, declared)
        elif chunk_id == b"data":
            if data is not None:
                raise DecodeError(
                    f"duplicate 'data' chunk at byte {offset} (the first is at byte "
                    f"{data[0] - _CHUNK_HEADER_BYTES})",
                    clip_index=clip_index,
                    code="duplicate_data",
                )
            data = (start, declared)
        # Any other chunk (LIST, fact, JUNK, bext, PEAK, ...) is skipped.
        offset = end + (declared & 1)
        chunks += 1
        cancel.check(Checkpoint.DECODE, clip_index)

    if fmt is None:
        raise DecodeError("missing 'fmt ' chunk", clip_index=clip_index, code="missing_fmt")
    if data is None:
        raise DecodeError("missing 'data' chunk", clip_index=clip_index, code="missing_data")
    encoding, channels, rate_hz = _parse_fmt(
        view, fmt, clip_index=clip_index, check_rate=check_rate
    )

    data_offset, data_length = data
    frame_bytes = channels * BYTES_PER_SAMPLE[encoding]
    if data_length == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="the 'data' chunk holds no bytes")
    if data_length % frame_bytes:
        raise DecodeError(
            f"'data' chunk of {data_length} bytes is not a whole number of {frame_bytes}-byte "
            f"frames ({channels} channel(s) of {encoding})",
            clip_index=clip_index,
            code="partial_frame",
        )
    frames = data_length // frame_bytes
    return ClipGeometry(
        container="wav",
        encoding=encoding,
        rate_hz=rate_hz,
        channels=channels,
        frames=frames,
        duration_us=frames * 1_000_000 // rate_hz,
        data_offset=data_offset,
        data_length=data_length,
    )


def _read_ds64(view: memoryview, riff_size: int, *, clip_index: int) -> tuple[int, int, int]:
    """Check an RF64 header's ``ds64`` chunk; return ``(riff size, data size, next offset)``."""
    if riff_size != _SIZE_IN_DS64:
        raise DecodeError(
            f"RF64 size field is {riff_size}, expected 0xFFFFFFFF (the sizes are in 'ds64')",
            clip_index=clip_index,
            code="riff_size_mismatch",
        )
    size = view.nbytes
    start = _RIFF_HEADER_BYTES + _CHUNK_HEADER_BYTES
    if size < start:
        raise DecodeError(
            f"truncated chunk header at byte {_RIFF_HEADER_BYTES}: an RF64 file starts with "
            f"a 'ds64' chunk",
            clip_index=clip_index,
            code="truncated_chunk_header",
        )
    chunk_id, declared = _CHUNK.unpack_from(view, _RIFF_HEADER_BYTES)
    if chunk_id != b"ds64" or declared < _DS64.size:
        raise DecodeError(
            f"an RF64 file's first chunk must be a 'ds64' of at least {_DS64.size} bytes, "
            f"got {_show_id(chunk_id)} of {declared} bytes",
            clip_index=clip_index,
            code="missing_ds64",
        )
    end = start + declared
    if end > size:
        raise DecodeError(
            f"chunk 'ds64' at byte {_RIFF_HEADER_BYTES} declares {declared} bytes but only "
            f"{size - start} remain in the buffer",
            clip_index=clip_index,
            code="chunk_past_end",
        )
    riff_size64, data_size64, _samples, _table = _DS64.unpack_from(view, start)
    return riff_size64, data_size64, end + (declared & 1)


def _parse_fmt(
    view: memoryview,
    fmt: tuple[int, int],
    *,
    clip_index: int,
    check_rate: Callable[[int], None] | None,
) -> tuple[Encoding, int, int]:
    """Validate the ``fmt `` chunk; return ``(encoding, channels, rate_hz)``."""
    start, fmt_size = fmt
    if fmt_size < _FMT_BASE.size:
        raise DecodeError(
            f"'fmt ' chunk is {fmt_size} bytes, shorter than {_FMT_BASE.size}",
            clip_index=clip_index,
            code="fmt_too_short",
        )
    tag, channels, rate_hz, byte_rate, block_align, bits = _FMT_BASE.unpack_from(view, start)
    if channels == 0 or rate_hz == 0:
        raise DecodeError(
            f"channel count and sample rate must be non-zero (got {channels} channel(s) "
            f"at {rate_hz} Hz)",
            clip_index=clip_index,
            code="zero_channels_or_rate",
        )
    if check_rate is not None:
        check_rate(rate_hz)

    if tag not in (*_SUB_FORMATS, _FORMAT_EXTENSIBLE):
        raise DecodeError(
            f"unsupported WAV encoding: format {_format_name(tag)} at {bits} bits; "
            f"accepted: {_ACCEPTED}; {CONVERT_ADVICE}",
            clip_index=clip_index,
            code="unsupported_format",
        )
    if tag == _FORMAT_EXTENSIBLE:
        if fmt_size != _FMT_EXTENSIBLE_SIZE:
            raise DecodeError(
                f"WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk is {fmt_size} bytes, "
                f"expected {_FMT_EXTENSIBLE_SIZE}",
                clip_index=clip_index,
                code="fmt_size_mismatch",
            )
        cb_size, valid_bits, _channel_mask, guid = _FMT_EXTENSION.unpack_from(
            view, start + _FMT_BASE.size
        )
        if cb_size != _EXTENSIBLE_CB_SIZE:
            raise DecodeError(
                f"WAVE_FORMAT_EXTENSIBLE cbSize is {cb_size}, expected {_EXTENSIBLE_CB_SIZE}",
                clip_index=clip_index,
                code="bad_cb_size",
            )
        (sub_format,) = _U32.unpack_from(guid)
        if guid[4:] != _GUID_TAIL or sub_format not in _SUB_FORMATS:
            raise DecodeError(
                f"unsupported WAVE_FORMAT_EXTENSIBLE sub-format GUID {_guid(guid)}; "
                f"accepted: PCM (00000001-0000-0010-8000-00aa00389b71), IEEE float "
                f"(00000003-...), A-law (00000006-...) and µ-law (00000007-...)",
                clip_index=clip_index,
                code="unsupported_subformat",
            )
        encoding = _ENCODINGS.get((sub_format, bits))
        if encoding is None:
            raise DecodeError(
                f"unsupported WAV encoding: WAVE_FORMAT_EXTENSIBLE with sub-format "
                f"{_format_name(sub_format)} at {bits} bits; accepted: {_ACCEPTED}",
                clip_index=clip_index,
                code="unsupported_format",
            )
        # Integer samples may use fewer bits than their container (24 valid in 32):
        # they are left-justified, so the container's value is the sample (libsndfile
        # and FFmpeg read them so); float samples use every bit.
        integer = sub_format != _FORMAT_IEEE_FLOAT
        if not (valid_bits == bits or (integer and bits > 8 and 1 <= valid_bits < bits)):
            raise DecodeError(
                f"WAVE_FORMAT_EXTENSIBLE wValidBitsPerSample is {valid_bits}, expected "
                f"{'1 to ' if integer and bits > 8 else ''}{bits} (the container bits per "
                f"sample)",
                clip_index=clip_index,
                code="extensible_valid_bits",
            )
    else:
        if tag == _FORMAT_PCM and 8 < bits < 32 and bits % 8:
            # 12 or 20-bit PCM in 16 or 24-bit containers, left-justified (as above).
            bits = (bits + 7) // 8 * 8
        encoding = _ENCODINGS.get((tag, bits))
        if encoding is None:
            raise DecodeError(
                f"unsupported WAV encoding: format {_format_name(tag)} at {bits} bits; "
                f"accepted: {_ACCEPTED}",
                clip_index=clip_index,
                code="unsupported_format",
            )
        # 16 bytes, or 18 + cbSize: A-law and µ-law writers (sox, Windows) add a
        # 2-byte extension (a 20-byte chunk with cbSize 2), which carries nothing used.
        plain_sizes = (16, 18, 20) if tag in (_FORMAT_ALAW, _FORMAT_MULAW) else _FMT_PLAIN_SIZES
        if fmt_size not in plain_sizes:
            raise DecodeError(
                f"'fmt ' chunk of format {_format_name(tag)} is {fmt_size} bytes, "
                f"expected one of {plain_sizes}",
                clip_index=clip_index,
                code="fmt_size_mismatch",
            )
        if fmt_size > 16:
            (cb_size,) = struct.unpack_from("<H", view, start + _FMT_BASE.size)
            if cb_size != fmt_size - 18:
                raise DecodeError(
                    f"'fmt ' chunk of {fmt_size} bytes has cbSize {cb_size}, "
                    f"expected {fmt_size - 18}",
                    clip_index=clip_index,
                    code="bad_cb_size",
                )

    expected_align = channels * BYTES_PER_SAMPLE[encoding]
    if block_align != expected_align:
        raise DecodeError(
            f"block_align is {block_align}, expected {expected_align} "
            f"({channels} channel(s) × {BYTES_PER_SAMPLE[encoding]} bytes)",
            clip_index=clip_index,
            code="block_align_mismatch",
        )
    expected_rate = block_align * rate_hz
    if byte_rate != expected_rate:
        raise DecodeError(
            f"byte_rate is {byte_rate}, expected {expected_rate} "
            f"(block_align {block_align} × {rate_hz} Hz)",
            clip_index=clip_index,
            code="byte_rate_mismatch",
        )
    return encoding, channels, rate_hz
