"""Compressed containers: what the bytes are, and their geometry from the headers alone.

Admission before allocation (docs/formats.md): every compressed clip's codec, rate,
channels and length are read here, in pure Python, from the container's own headers,
before the codecs (untrusted C code, in a separate process) see a byte. Where the header
gives no length, the length is bounded from the byte count and the codec's largest
samples-per-byte ratio, and the clip is planned for that bound (``exact=False``).

What each container must hold:

* **AIFF / AIFF-C**: ``FORM`` sized exactly to the buffer, a ``COMM`` chunk (channels,
  frames, bits, the 80-bit rate; AIFF-C's compression ``NONE``, ``sowt``, ``fl32``,
  ``fl64``, ``ulaw`` or ``alaw``) and an ``SSND`` chunk holding every frame;
* **FLAC**: ``fLaC`` then ``STREAMINFO`` (rate, channels, bits, total samples);
* **MP3**: an optional ID3v2 tag, then an MPEG layer III frame header; the length from
  the Xing/Info frame count, else the byte count at the lowest bitrate;
* **Ogg**: one logical stream whose first packet is ``OpusHead`` or a Vorbis
  identification header; the length from the last page's granule position;
* **WebM / Matroska**: one audio track (``A_OPUS`` or ``A_VORBIS``) in ``Tracks`` before
  the first ``Cluster``; the length from ``Info/Duration`` where there is one;
* **MP4 / M4A**: one sound track of AAC (``mp4a``, QuickTime's version-1 and 2 sound
  descriptions too, the ``esds`` directly or in a ``wave`` box) with its
  ``AudioSpecificConfig``; the length from the sample count (1024 frames per AAC access
  unit, 2048 with SBR), of ``stsz`` or, fragmented, of every ``moof``'s ``trun``; or one
  of ALAC (``alac``, its ``ALACSpecificConfig``; a bound of whole packets);
* **Sun AU**, **CAF** (``lpcm``, ``ulaw``, ``alaw``, ``alac``), **RIFX** (PCM, float) and
  **ADPCM/GSM 6.10 WAV** (container ``wavcodec``): read by libsndfile; their lengths from
  their headers (ADPCM/GSM: a bound of whole blocks).

Every refusal is a :class:`~audiogate.errors.DecodeError` with one of
:data:`CONTAINER_ERROR_CODES`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import attrs

from audiogate.decode.geometry import (
    CONTAINER_LABELS,
    CONVERT_ADVICE,
    ClipGeometry,
    Container,
    Encoding,
    id3_size,
    sniff_container,
)
from audiogate.errors import DecodeError, EmptyAudioError

__all__ = [
    "CODEC_FRAME_SLACK",
    "CONTAINER_ERROR_CODES",
    "CONTAINER_LABELS",
    "MAX_MP3_PARTS",
    "MAX_OGG_LINKS",
    "WAV_CODEC_TAGS",
    "StreamHeader",
    "flac_without_total",
    "inspect_container",
    "mp3_parts",
    "ogg_links",
    "sniff_container",
    "wav_codec_tag",
]

#: The ``code`` of each refusal here.
CONTAINER_ERROR_CODES: Final = frozenset(
    {"unknown_container", "malformed_header", "unsupported_codec", "format_mismatch"}
)

#: Decoded frames one compressed codec frame may add past the header's estimate (and
#: the most end padding trimmed at a capped plan, ``ClipGeometry.padding_frames``).
CODEC_FRAME_SLACK: Final[Mapping[str, int]] = MappingProxyType(
    {"mp3": 1152, "vorbis": 8192, "opus": 5760, "aac": 2048}
)
_SLACK: Final = CODEC_FRAME_SLACK


@attrs.frozen
class StreamHeader:
    """What a compressed container's headers say.

    :param frames: the length in frames at ``rate_hz``, or an upper bound (``exact``).
    :param live: a WebM without a duration (a live recording: MediaRecorder's), whose
        bound is from the byte count alone.
    """

    container: Container
    codec: Encoding
    rate_hz: int
    channels: int
    frames: int
    exact: bool
    live: bool = False

    def geometry(self, nbytes: int) -> ClipGeometry:
        """The clip geometry of this stream (the whole buffer is the data)."""
        return ClipGeometry(
            container=self.container,
            encoding=self.codec,
            rate_hz=self.rate_hz,
            channels=self.channels,
            frames=self.frames,
            duration_us=self.frames * 1_000_000 // self.rate_hz,
            data_offset=0,
            data_length=nbytes,
            exact=self.exact,
        )


def _malformed(container: str, detail: str, clip_index: int) -> DecodeError:
    return DecodeError(
        f"malformed {CONTAINER_LABELS[container]} header: {detail}",
        clip_index=clip_index,
        code="malformed_header",
    )


def _unsupported(container: str, detail: str, clip_index: int) -> DecodeError:
    return DecodeError(
        f"unsupported {CONTAINER_LABELS[container]} stream: {detail}",
        clip_index=clip_index,
        code="unsupported_codec",
    )


# --- AIFF ----------------------------------------------------------------------------

_AIFC_CODECS: Final = {b"NONE", b"sowt", b"fl32", b"FL32", b"fl64", b"FL64", b"ulaw", b"alaw"}


def _extended(raw: bytes) -> float:
    """An 80-bit IEEE 754 extended float (AIFF's sample rate)."""
    exponent = ((raw[0] & 0x7F) << 8) | raw[1]
    mantissa = int.from_bytes(raw[2:10], "big")
    if exponent == 0 and mantissa == 0:
        return 0.0
    if exponent == 0x7FFF:
        return math.inf
    value = math.ldexp(mantissa, exponent - 16383 - 63)
    return -value if raw[0] & 0x80 else value


def _inspect_aiff(view: memoryview, clip_index: int) -> StreamHeader:
    size = view.nbytes
    (form_size,) = struct.unpack_from(">I", view, 4)
    if form_size + 8 != size:
        raise _malformed(
            "aiff", f"FORM size declares {form_size + 8} bytes, the buffer holds {size}", clip_index
        )
    aifc = bytes(view[8:12]) == b"AIFC"
    comm: tuple[int, int] | None = None
    ssnd: tuple[int, int] | None = None
    offset, chunks = 12, 0
    while offset < size:
        chunks += 1
        if chunks > 256 or offset + 8 > size:
            raise _malformed("aiff", f"chunk header at byte {offset} is truncated", clip_index)
        chunk_id, declared = struct.unpack_from(">4sI", view, offset)
        start, end = offset + 8, offset + 8 + declared
        if end > size:
            raise _malformed(
                "aiff", f"chunk {chunk_id!r} at byte {offset} runs past the end", clip_index
            )
        if chunk_id == b"COMM":
            if comm is not None:
                raise _malformed("aiff", "duplicate COMM chunk", clip_index)
            comm = (start, declared)
        elif chunk_id == b"SSND":
            if ssnd is not None:
                raise _malformed("aiff", "duplicate SSND chunk", clip_index)
            ssnd = (start, declared)
        offset = end + (declared & 1)
    if comm is None or ssnd is None:
        raise _malformed("aiff", "a COMM and an SSND chunk are required", clip_index)
    start, declared = comm
    if declared < (22 if aifc else 18):
        raise _malformed("aiff", f"COMM chunk of {declared} bytes is too short", clip_index)
    channels, frames, bits = struct.unpack_from(">hIh", view, start)
    rate = _extended(bytes(view[start + 8 : start + 18]))
    compression = bytes(view[start + 18 : start + 22]) if aifc else b"NONE"
    if compression not in _AIFC_CODECS:
        raise _unsupported("aiff", f"AIFF-C compression {compression!r}", clip_index)
    if compression in (b"ulaw", b"alaw"):
        bits = 8
    elif compression in (b"fl32", b"FL32"):
        bits = 32
    elif compression in (b"fl64", b"FL64"):
        bits = 64
    if channels < 1 or not math.isfinite(rate) or rate < 1 or rate != int(rate):
        raise _malformed("aiff", f"{channels} channel(s) at {rate} Hz", clip_index)
    if not 1 <= bits <= 64:
        raise _malformed("aiff", f"{bits} bits per sample", clip_index)
    if frames == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="the COMM chunk declares 0 frames")
    ssnd_start, ssnd_size = ssnd
    if ssnd_size < 8:
        raise _malformed("aiff", "SSND chunk shorter than its 8-byte header", clip_index)
    (data_offset,) = struct.unpack_from(">I", view, ssnd_start)
    needed = frames * channels * ((bits + 7) // 8)
    if 8 + data_offset + needed > ssnd_size:
        raise _malformed(
            "aiff",
            f"SSND holds {ssnd_size - 8 - data_offset} bytes of samples, {frames} frames of "
            f"{channels} × {bits} bits need {needed}",
            clip_index,
        )
    return StreamHeader("aiff", "pcm", int(rate), channels, frames, True)


# --- Sun AU --------------------------------------------------------------------------

#: Sun AU encodings libsndfile decodes → bits per sample (µ-law, 8/16/24/32-bit linear,
#: float, double, A-law).
_AU_BITS: Final = {1: 8, 2: 8, 3: 16, 4: 24, 5: 32, 6: 32, 7: 64, 27: 8}


def _inspect_au(view: memoryview, clip_index: int) -> StreamHeader:
    """A Sun/NeXT ``.snd`` header: data offset and size, encoding, rate, channels."""
    if view.nbytes < 24:
        raise _malformed("au", "shorter than its 24-byte header", clip_index)
    offset, size, encoding, rate, channels = struct.unpack_from(">5I", view, 4)
    if encoding not in _AU_BITS:
        raise _unsupported(
            "au",
            f"encoding {encoding}; accepted: 1 (µ-law), 2-5 (8 to 32-bit PCM), 6 and 7 "
            f"(float), 27 (A-law); {CONVERT_ADVICE}",
            clip_index,
        )
    if not 24 <= offset <= view.nbytes or rate < 1 or not 1 <= channels <= 255:
        raise _malformed(
            "au", f"data offset {offset}, {channels} channel(s) at {rate} Hz", clip_index
        )
    available = view.nbytes - offset
    if size == 0xFFFFFFFF:  # unknown: to the end of the file
        size = available
    if size > available:
        raise _malformed(
            "au",
            f"the header declares {size} bytes of samples, the file holds {available}",
            clip_index,
        )
    frames = size // (channels * _AU_BITS[encoding] // 8)
    if frames == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="no sample frames")
    return StreamHeader("au", "pcm", rate, channels, frames, True)


# --- CAF -----------------------------------------------------------------------------

#: CAF formats libsndfile decodes (linear PCM, µ-law, A-law, Apple Lossless).
_CAF_FORMATS: Final = (b"lpcm", b"ulaw", b"alaw", b"alac")


def _inspect_caf(view: memoryview, clip_index: int) -> StreamHeader:
    """Apple's Core Audio Format: ``desc`` (rate, format, packet geometry, channels),
    ``data`` and, for ALAC, ``pakt`` (the valid frames)."""
    if view.nbytes < 8 or struct.unpack_from(">H", view, 4)[0] != 1:
        raise _malformed("caf", "not a version-1 'caff' header", clip_index)
    chunks: dict[bytes, tuple[int, int]] = {}
    offset = 8
    while offset + 12 <= view.nbytes and len(chunks) < 256:
        kind, size = struct.unpack_from(">4sq", view, offset)
        start = offset + 12
        end = view.nbytes if size == -1 and kind == b"data" else start + size
        if size < -1 or end > view.nbytes:
            raise _malformed(
                "caf", f"chunk {kind!r} at byte {offset} runs past the end", clip_index
            )
        chunks.setdefault(kind, (start, end))
        offset = end
    if b"desc" not in chunks or b"data" not in chunks:
        raise _malformed("caf", "a desc and a data chunk are required", clip_index)
    start, end = chunks[b"desc"]
    if end - start < 32:
        raise _malformed("caf", "desc chunk shorter than 32 bytes", clip_index)
    rate, kind, _flags, packet_bytes, packet_frames, channels, _bits = struct.unpack_from(
        ">d4s5I", view, start
    )
    if kind not in _CAF_FORMATS:
        raise _unsupported(
            "caf",
            f"format {kind!r}; accepted: lpcm, ulaw, alaw, alac; {CONVERT_ADVICE}",
            clip_index,
        )
    if not math.isfinite(rate) or rate < 1 or rate != int(rate) or not 1 <= channels <= 255:
        raise _malformed("caf", f"{channels} channel(s) at {rate} Hz", clip_index)
    data_start, data_end = chunks[b"data"]
    audio = data_end - data_start - 4  # after the edit count
    if kind == b"alac":
        if b"pakt" not in chunks or chunks[b"pakt"][1] - chunks[b"pakt"][0] < 24:
            raise _malformed("caf", "ALAC without a pakt chunk", clip_index)
        (frames,) = struct.unpack_from(">q", view, chunks[b"pakt"][0] + 8)
    elif packet_bytes and packet_frames:
        frames = max(audio, 0) // packet_bytes * packet_frames
    else:
        raise _malformed("caf", "a constant-bitrate format without a packet size", clip_index)
    if frames <= 0:
        raise EmptyAudioError(clip_index=clip_index, detail="no sample frames")
    return StreamHeader("caf", "pcm", int(rate), channels, frames, True)


# --- RIFF/WAVE with a compressed codec ----------------------------------------------

#: WAV format tags of codecs libsndfile decodes (the core's WAV walker refuses them).
WAV_CODEC_TAGS: Final = {0x0002: "Microsoft ADPCM", 0x0011: "IMA ADPCM", 0x0031: "GSM 6.10"}


def _riff_chunks(view: memoryview) -> dict[bytes, tuple[int, int]]:
    """The first ``(start, size)`` of each chunk of a plain RIFF/WAVE (at most 256)."""
    chunks: dict[bytes, tuple[int, int]] = {}
    offset = 12
    while offset + 8 <= view.nbytes and len(chunks) < 256:
        kind, size = struct.unpack_from("<4sI", view, offset)
        chunks.setdefault(kind, (offset + 8, size))
        offset += 8 + size + (size & 1)
    return chunks


def wav_codec_tag(view: memoryview) -> int | None:
    """The ``fmt `` tag of a RIFF/WAVE whose codec is one of :data:`WAV_CODEC_TAGS`."""
    if bytes(view[:4]) != b"RIFF" or bytes(view[8:12]) != b"WAVE":
        return None
    fmt = _riff_chunks(view).get(b"fmt ")
    if fmt is None or fmt[1] < 16 or fmt[0] + 16 > view.nbytes:
        return None
    (tag,) = struct.unpack_from("<H", view, fmt[0])
    return tag if tag in WAV_CODEC_TAGS else None


def _inspect_wavcodec(view: memoryview, clip_index: int) -> StreamHeader:
    """ADPCM and GSM 6.10 WAV: the rate and channels of ``fmt ``, and a bound of whole
    blocks of the ``data`` chunk (libsndfile decodes whole blocks; ``fact`` is not what
    it gives)."""
    chunks = _riff_chunks(view)
    if b"fmt " not in chunks or b"data" not in chunks:
        raise _malformed("wavcodec", "a fmt and a data chunk are required", clip_index)
    start, _size = chunks[b"fmt "]
    tag, channels, rate, _byte_rate, block, _bits = struct.unpack_from("<HHIIHH", view, start)
    if channels < 1 or rate < 1 or block < 1:
        raise _malformed(
            "wavcodec", f"{channels} channel(s) at {rate} Hz, blocks of {block}", clip_index
        )
    if tag == 0x0011:
        per_block = (block - 4 * channels) * 8 // (4 * channels) + 1
    elif tag == 0x0002:
        per_block = (block - 7 * channels) * 2 // channels + 2
    else:
        per_block = 320 * max(block // 65, 1)
    data_start, data_size = chunks[b"data"]
    data_size = min(data_size, view.nbytes - data_start)
    if per_block < 1 or data_size < 1:
        raise EmptyAudioError(clip_index=clip_index, detail="no sample blocks")
    frames = (data_size // block + 1) * per_block
    return StreamHeader("wavcodec", "pcm", rate, channels, frames, False)


# --- RIFX ----------------------------------------------------------------------------


def _inspect_rifx(view: memoryview, clip_index: int) -> StreamHeader:
    """Big-endian RIFF/WAVE (RIFX) of PCM or IEEE float: ``fmt `` and ``data``, exact."""
    chunks: dict[bytes, tuple[int, int]] = {}
    offset = 12
    while offset + 8 <= view.nbytes and len(chunks) < 256:
        kind, size = struct.unpack_from(">4sI", view, offset)
        chunks.setdefault(kind, (offset + 8, size))
        offset += 8 + size + (size & 1)
    if b"fmt " not in chunks or b"data" not in chunks or chunks[b"fmt "][1] < 16:
        raise _malformed("rifx", "a fmt chunk of 16 bytes or more and a data chunk", clip_index)
    tag, channels, rate, _byte_rate, block, bits = struct.unpack_from(
        ">HHIIHH", view, chunks[b"fmt "][0]
    )
    if (tag, bits) not in ((1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64)):
        raise _unsupported(
            "rifx",
            f"format {tag} at {bits} bits; accepted: PCM, IEEE float; {CONVERT_ADVICE}",
            clip_index,
        )
    if channels < 1 or rate < 1 or block != channels * bits // 8:
        raise _malformed(
            "rifx", f"{channels} channel(s) at {rate} Hz, blocks of {block}", clip_index
        )
    data_start, size = chunks[b"data"]
    if data_start + size > view.nbytes:
        raise _malformed("rifx", f"the data chunk declares {size} bytes past the end", clip_index)
    frames = size // block
    if frames == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="no sample frames")
    return StreamHeader("rifx", "pcm", rate, channels, frames, True)


# --- FLAC ----------------------------------------------------------------------------


_FLAC_SYNC: Final = re.compile(rb"\xff[\xf8\xf9]")


def _crc8(data: bytes) -> int:
    """FLAC's frame header CRC-8 (polynomial 0x07, initial 0)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _flac_frame_span(view: memoryview, offset: int, channels: int, block: int) -> int:
    """One past the last sample of the FLAC frame whose header is at ``offset`` (its
    CRC-8, reserved bits and channel count checked), or -1 where there is none."""
    head = bytes(view[offset : offset + 16])
    if len(head) < 6 or head[3] & 1:
        return -1
    size_code, rate_code = head[2] >> 4, head[2] & 0xF
    assignment = head[3] >> 4
    if size_code == 0 or rate_code == 15 or assignment > 10:
        return -1
    if (assignment + 1 if assignment < 8 else 2) != channels:
        return -1
    first = head[4]  # the frame or sample number, UTF-8 coded
    length = 1 if first < 0x80 else 8 - (first ^ 0xFF).bit_length()
    if not 1 <= length <= 7 or first & 0xC0 == 0x80:
        return -1
    number = first & (0x7F >> length if length > 1 else 0x7F)
    for byte in head[5 : 4 + length]:
        if byte & 0xC0 != 0x80:
            return -1
        number = (number << 6) | (byte & 0x3F)
    position = 4 + length
    if size_code == 6:
        samples, position = head[position] + 1, position + 1
    elif size_code == 7:
        samples, position = int.from_bytes(head[position : position + 2], "big") + 1, position + 2
    elif size_code == 1:
        samples = 192
    elif size_code <= 5:
        samples = 576 << (size_code - 2)
    else:
        samples = 256 << (size_code - 8)
    position += 1 if rate_code == 12 else 2 if rate_code in (13, 14) else 0
    if position >= len(head) or _crc8(head[:position]) != head[position]:
        return -1
    start = number if head[1] & 1 else number * block  # variable: a sample number
    return start + samples


def _flac_last_frame_end(view: memoryview, channels: int, max_block: int, max_frame: int) -> int:
    """Where the last frame of a FLAC stream ends, in samples, from the last valid frame
    header in the file's tail (0 if none is found). Reads at most two of the largest
    frames STREAMINFO declares (64 KiB where it declares none)."""
    window = 2 * max_frame + 64 if max_frame else 65_536
    base = max(0, view.nbytes - window)
    tail = view[base:]
    block = max_block  # a fixed-size stream's blocks (only its last may be shorter)
    found = [m.start() for m in _FLAC_SYNC.finditer(tail)]
    for position in reversed(found):
        end = _flac_frame_span(view, base + position, channels, block)
        if end >= 0:
            return end
    return 0


def _inspect_flac(view: memoryview, clip_index: int) -> StreamHeader:
    base = id3_size(view)  # an ID3v2 tag in front, which the decoders skip
    if view.nbytes < base + 42:
        raise _malformed("flac", "shorter than fLaC + STREAMINFO", clip_index)
    block_type, length = view[base + 4] & 0x7F, int.from_bytes(view[base + 5 : base + 8], "big")
    if block_type != 0 or length != 34:
        raise _malformed("flac", "the first metadata block is not a 34-byte STREAMINFO", clip_index)
    info = int.from_bytes(view[base + 8 : base + 42], "big")  # 272 bits, most significant first
    max_block = (info >> 240) & 0xFFFF
    rate = (info >> 172) & 0xFFFFF
    channels = ((info >> 169) & 0x7) + 1
    total = (info >> 128) & 0xFFFFFFFFF
    if rate == 0:
        raise _malformed("flac", "STREAMINFO sample rate is 0", clip_index)
    if total:
        max_frame = (info >> 192) & 0xFFFFFF
        end = _flac_last_frame_end(view, channels, max_block, max_frame)
        if end <= total:
            return StreamHeader("flac", "flac", rate, channels, total, True)
        # Frames past the total STREAMINFO declares (a header that understates the
        # length): the decoder is told no total, reads to the end, and the clip is planned
        # for where its last frame ends.
        return StreamHeader("flac", "flac", rate, channels, end, False)
    # No total in STREAMINFO (a streamed encode): a constant subframe frame is at least
    # a 6-byte header, 2 bytes per channel and a 2-byte CRC for up to max_block frames.
    frames_per_byte = max(max_block, 16) / (8 + 2 * channels)
    return StreamHeader(
        "flac", "flac", rate, channels, math.ceil(view.nbytes * frames_per_byte), False
    )


def flac_without_total(data: bytes) -> bytes:
    """``data`` with STREAMINFO's total samples cleared (unknown), so a decoder reads
    every frame instead of stopping at a total that understates the stream."""
    base = id3_size(memoryview(data))
    if len(data) < base + 42 or data[base : base + 4] != b"fLaC":
        return data
    info = int.from_bytes(data[base + 8 : base + 42], "big") & ~(0xFFFFFFFFF << 128)
    return data[: base + 8] + info.to_bytes(34, "big") + data[base + 42 :]


# --- MP3 -----------------------------------------------------------------------------

_MP3_RATES: Final = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MP3_KBPS_V1: Final = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MP3_KBPS_V2: Final = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)


@attrs.frozen
class _Mp3Frame:
    version: int  # 3 MPEG-1, 2 MPEG-2, 0 MPEG-2.5
    rate_hz: int
    channels: int
    samples: int
    bytes: int


def _mp3_frame(view: memoryview, offset: int) -> _Mp3Frame | None:
    """The MPEG layer III frame header at ``offset``, or ``None``."""
    if offset + 4 > view.nbytes:
        return None
    (word,) = struct.unpack_from(">I", view, offset)
    if word >> 21 != 0x7FF:
        return None
    version, layer = (word >> 19) & 3, (word >> 17) & 3
    bitrate_index, rate_index = (word >> 12) & 0xF, (word >> 10) & 3
    if version == 1 or layer != 1 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    kbps = (_MP3_KBPS_V1 if version == 3 else _MP3_KBPS_V2)[bitrate_index]
    rate = _MP3_RATES[version][rate_index]
    samples = 1152 if version == 3 else 576
    padding = (word >> 9) & 1
    size = (samples // 8) * kbps * 1000 // rate + padding
    channels = 1 if (word >> 6) & 3 == 3 else 2
    return _Mp3Frame(version, rate, channels, samples, size)


#: MP3 files joined end to end that one clip may hold.
MAX_MP3_PARTS: Final = 64


@attrs.frozen
class _Mp3Part:
    start: int  # the part's first byte (its ID3v2 tag, if any)
    end: int  # one past its last byte
    first: _Mp3Frame
    frames: int  # decoded frames, an upper bound


def _mp3_part(view: memoryview, offset: int, clip_index: int) -> _Mp3Part:
    """One MP3 file at ``offset``: its ID3v2 tag, frames, and where its Xing/Info header
    says it ends (the end of the buffer without one)."""
    start = offset + id3_size(view[offset:])
    if start >= view.nbytes:
        raise EmptyAudioError(clip_index=clip_index, detail="an ID3 tag and no MPEG frames")
    first = _mp3_frame(view, start)
    following = start + first.bytes if first is not None else 0
    if first is None or (following < view.nbytes and _mp3_frame(view, following) is None):
        raise _malformed(
            "mp3", f"no MPEG layer III frame header at byte {start} (after the ID3 tag)", clip_index
        )
    # The Xing/Info tag sits after the side information of the first frame.
    if first.version == 3:
        side = 32 if first.channels == 2 else 17
    else:
        side = 17 if first.channels == 2 else 9
    tag = start + 4 + side
    if bytes(view[tag : tag + 4]) in (b"Xing", b"Info") and tag + 16 <= view.nbytes:
        flags, count, size = struct.unpack_from(">III", view, tag + 4)
        if flags & 1:
            frames = (count + 1) * first.samples + _SLACK["mp3"]
            # The byte count (flag 2) says where this file ends: a file joined after it
            # is another part, which the decoder would otherwise never reach.
            end = start + size if flags & 2 and first.bytes <= size else view.nbytes
            return _Mp3Part(offset, min(end, view.nbytes), first, frames)
    # No frame count: every frame is at least the lowest bitrate's size.
    lowest = (first.samples // 8) * (32 if first.version == 3 else 8) * 1000 // first.rate_hz
    frames = -(-(view.nbytes - start) // lowest) * first.samples
    return _Mp3Part(offset, view.nbytes, first, frames)


def _next_mp3(view: memoryview, offset: int) -> int | None:
    """Where another MP3 file starts at ``offset`` (past an ID3v1 tag), or ``None``."""
    if bytes(view[offset : offset + 3]) == b"TAG":
        offset += 128
    if offset >= view.nbytes:
        return None
    if bytes(view[offset : offset + 3]) == b"ID3" or _mp3_frame(view, offset) is not None:
        return offset
    return None


def _mp3_parts(view: memoryview, clip_index: int) -> list[_Mp3Part]:
    parts = [_mp3_part(view, 0, clip_index)]
    while parts[-1].end < view.nbytes:
        following = _next_mp3(view, parts[-1].end)
        if following is None:
            break  # trailing bytes (a tag), which the decoder skips
        if len(parts) == MAX_MP3_PARTS:
            raise _unsupported(
                "mp3", f"more than {MAX_MP3_PARTS} MP3 files joined end to end", clip_index
            )
        parts.append(_mp3_part(view, following, clip_index))
    return parts


def mp3_parts(data: bytes | memoryview) -> list[tuple[int, int]]:
    """The byte ranges of the MP3 files ``data`` holds, joined end to end (``cat``): each
    part's Xing/Info header counts only its own frames, so a decoder given the whole
    stops after the first; each part is decoded on its own, in order (one range for an
    ordinary file)."""
    with memoryview(data) as view:
        return [(part.start, part.end) for part in _mp3_parts(view, 0)]


def _inspect_mp3(view: memoryview, clip_index: int) -> StreamHeader:
    parts = _mp3_parts(view, clip_index)
    first = parts[0].first
    for part in parts[1:]:
        if (part.first.rate_hz, part.first.channels) != (first.rate_hz, first.channels):
            raise _unsupported(
                "mp3",
                f"MP3 files joined end to end at different rates or channel counts "
                f"({first.rate_hz} Hz × {first.channels}, then {part.first.rate_hz} Hz × "
                f"{part.first.channels} at byte {part.start})",
                clip_index,
            )
    frames = sum(part.frames for part in parts)
    return StreamHeader("mp3", "mp3", first.rate_hz, first.channels, frames, False)


# --- Ogg -----------------------------------------------------------------------------

_OGG_PAGE: Final = struct.Struct("<4sBBqIIIB")


def _ogg_page(view: memoryview, offset: int) -> tuple[int, int, int, int, int] | None:
    """``(header type, granule, serial, body offset, page end)`` of the page at ``offset``."""
    if offset + _OGG_PAGE.size > view.nbytes:
        return None
    magic, version, kind, granule, serial, _seq, _crc, segments = _OGG_PAGE.unpack_from(
        view, offset
    )
    body = offset + _OGG_PAGE.size + segments
    if magic != b"OggS" or version != 0 or body > view.nbytes:
        return None
    end = body + sum(view[offset + _OGG_PAGE.size : body])
    if end > view.nbytes:
        return None
    return kind, granule, serial, body, end


#: Logical streams one after another (a chained Ogg) that one clip may hold.
MAX_OGG_LINKS: Final = 64


def ogg_links(data: bytes | memoryview) -> list[tuple[int, int]]:
    """The byte ranges of a chained Ogg's links (logical streams one after another, each
    ended by its end-of-stream page), in order; one range for an ordinary file. A decoder
    given the whole stops after the first link; each is decoded on its own.

    Walks every page header (the decoder process does, not admission). Bytes that are
    not a page end the walk: they stay in the last range.

    :raises ValueError: more than :data:`MAX_OGG_LINKS` links.
    """
    with memoryview(data) as view:
        links: list[tuple[int, int]] = []
        start = offset = 0
        while (page := _ogg_page(view, offset)) is not None:
            offset = page[4]
            if page[0] & 0x04 and offset < view.nbytes:
                links.append((start, offset))
                start = offset
                if len(links) >= MAX_OGG_LINKS:
                    raise ValueError(f"more than {MAX_OGG_LINKS} chained Ogg streams")
        links.append((start, view.nbytes))
        return links


_BEGINNING: Final = re.compile(rb"OggS\x00[\x02\x06]")


def _later_stream(view: memoryview, offset: int) -> bool:
    """A beginning-of-stream page at or after ``offset`` (a scan at C speed, each match
    checked as a page): the file is a chain of logical streams."""
    for match in _BEGINNING.finditer(view, offset):
        if _ogg_page(view, match.start()) is not None:
            return True
    return False


def _inspect_ogg(view: memoryview, clip_index: int) -> StreamHeader:
    first = _ogg_page(view, 0)
    if first is None or not first[0] & 0x02:
        raise _malformed(
            "ogg", "the first page is truncated or not a beginning-of-stream page", clip_index
        )
    _kind, _granule, serial, body, end = first
    packet = bytes(view[body:end])
    if packet[:8] == b"OpusHead" and len(packet) >= 19:
        channels = packet[9]
        (pre_skip,) = struct.unpack_from("<H", packet, 10)
        codec: Encoding = "opus"
        # Opus decodes at 48 kHz (as FFmpeg does); OpusHead's input rate is metadata.
        rate = granule_rate = 48000
    elif packet[:7] == b"\x01vorbis" and len(packet) >= 16:
        channels, rate = packet[11], struct.unpack_from("<I", packet, 12)[0]
        codec, pre_skip, granule_rate = "vorbis", 0, rate
    else:
        raise _unsupported(
            "ogg", "the first packet is neither OpusHead nor a Vorbis header", clip_index
        )
    if channels < 1 or rate < 1:
        raise _malformed("ogg", f"{channels} channel(s) at {rate} Hz", clip_index)
    second = _ogg_page(view, end)
    if second is not None and second[0] & 0x02:
        raise _unsupported("ogg", "more than one logical stream (multiplexed Ogg)", clip_index)
    # The last page of the stream: search back from the end (a page is < 65,536 bytes).
    last_granule = -1
    if _later_stream(view, end):
        # A chained Ogg: the last granule is the last link's; the links decode in turn.
        window = b""
    else:
        window = bytes(view[max(0, view.nbytes - 65_536 - _OGG_PAGE.size) :])
    position = len(window)
    base = view.nbytes - len(window)
    while (position := window.rfind(b"OggS", 0, position)) >= 0:
        page = _ogg_page(view, base + position)
        if page is not None and page[4] == view.nbytes and page[2] == serial:
            last_granule = page[1]
            break
    if last_granule > 0:
        frames = max(last_granule - pre_skip, 0) * rate // granule_rate + _SLACK[codec]
        return StreamHeader("ogg", codec, rate, channels, frames, False)
    # No usable granule: Opus carries at most 120 ms per packet of at least one byte,
    # Vorbis at most 4096 frames (half its largest block).
    per_byte = 5760 * rate // 48000 if codec == "opus" else 4096
    return StreamHeader("ogg", codec, rate, channels, view.nbytes * per_byte, False)


# --- WebM / Matroska -----------------------------------------------------------------

_EBML: Final = 0x1A45DFA3
_SEGMENT: Final = 0x18538067
_INFO: Final = 0x1549A966
_TRACKS: Final = 0x1654AE6B
_CLUSTER: Final = 0x1F43B675
_TRACK_ENTRY: Final = 0xAE
_UNKNOWN: Final = -1


def _vint(view: memoryview, offset: int, *, keep_marker: bool) -> tuple[int, int]:
    """``(value, length)`` of an EBML variable-length integer; ``_UNKNOWN`` for all ones."""
    if offset >= view.nbytes:
        raise ValueError("truncated element")
    first = view[offset]
    length = 9 - first.bit_length() if first else 9
    if length > 8 or offset + length > view.nbytes:
        raise ValueError(f"bad variable-length integer at byte {offset}")
    value = int.from_bytes(view[offset : offset + length], "big")
    if keep_marker:
        return value, length
    value &= (1 << (7 * length)) - 1
    return (_UNKNOWN if value == (1 << (7 * length)) - 1 else value), length


def _elements(view: memoryview, start: int, end: int) -> list[tuple[int, int, int]]:
    """The ``(id, payload start, payload end)`` children in ``view[start:end]``."""
    children = []
    offset = start
    while offset < end:
        element_id, id_length = _vint(view, offset, keep_marker=True)
        size, size_length = _vint(view, offset + id_length, keep_marker=False)
        payload = offset + id_length + size_length
        stop = end if size == _UNKNOWN else payload + size
        if stop > end:
            stop = end  # the last element of a truncated file; only headers are read
        children.append((element_id, payload, stop))
        if len(children) > 4096:
            raise ValueError("more than 4096 elements")
        offset = stop
    return children


def _uint(view: memoryview, start: int, end: int) -> int:
    return int.from_bytes(view[start:end], "big") if end - start <= 8 else -1


def _float(view: memoryview, start: int, end: int) -> float:
    if end - start == 4:
        return float(struct.unpack_from(">f", view, start)[0])
    if end - start == 8:
        return float(struct.unpack_from(">d", view, start)[0])
    return math.nan


def _inspect_webm(view: memoryview, clip_index: int) -> StreamHeader:
    try:
        top = _elements(view, 0, view.nbytes)
        if not top or top[0][0] != _EBML:
            raise ValueError("no EBML header")
        segment = next(((s, e) for i, s, e in top if i == _SEGMENT), None)
        if segment is None:
            raise ValueError("no Segment")
        scale, duration, tracks = 1_000_000, math.nan, None
        for element_id, start, end in _segment_children(view, *segment):
            if element_id == _INFO:
                for child, s, e in _elements(view, start, end):
                    if child == 0x2AD7B1:
                        scale = _uint(view, s, e)
                    elif child == 0x4489:
                        duration = _float(view, s, e)
            elif element_id == _TRACKS:
                tracks = (start, end)
            elif element_id == _CLUSTER:
                break
        if tracks is None:
            raise ValueError("no Tracks element before the first Cluster")
        audio = []
        for child, s, e in _elements(view, *tracks):
            if child != _TRACK_ENTRY:
                continue
            fields = {i: (a, b) for i, a, b in _elements(view, s, e)}
            if 0x83 in fields and _uint(view, *fields[0x83]) == 2:
                audio.append(fields)
    except ValueError as exc:
        raise _malformed("webm", str(exc), clip_index) from None
    if len(audio) != 1:
        raise _unsupported("webm", f"{len(audio)} audio tracks, expected exactly 1", clip_index)
    fields = audio[0]
    codec_id = bytes(view[slice(*fields[0x86])]).rstrip(b"\0") if 0x86 in fields else b""
    codec: Encoding
    if codec_id == b"A_OPUS":
        codec = "opus"
    elif codec_id == b"A_VORBIS":
        codec = "vorbis"
    else:
        raise _unsupported("webm", f"codec {codec_id!r}; accepted: A_OPUS, A_VORBIS", clip_index)
    rate, channels = 8000.0, 1
    if 0xE1 in fields:
        for child, s, e in _elements(view, *fields[0xE1]):
            if child == 0xB5:
                rate = _float(view, s, e)
            elif child == 0x9F:
                channels = _uint(view, s, e)
    if codec == "opus":
        rate = 48000.0  # Opus always decodes at 48 kHz here (FFmpeg's libopus decoder)
    if not math.isfinite(rate) or rate < 1 or rate != int(rate) or not 1 <= channels <= 255:
        raise _malformed("webm", f"{channels} channel(s) at {rate} Hz", clip_index)
    if math.isfinite(duration) and duration > 0 and scale > 0:
        frames = math.ceil(duration * scale * rate / 1e9) + _SLACK[codec]
        return StreamHeader("webm", codec, int(rate), channels, frames, False)
    frames = view.nbytes * (5760 if codec == "opus" else 4096)
    return StreamHeader("webm", codec, int(rate), channels, frames, False, live=True)


def _segment_children(view: memoryview, start: int, end: int) -> list[tuple[int, int, int]]:
    """The Segment's children up to the first Cluster (a Cluster's blocks are not read)."""
    children = []
    offset = start
    while offset < end:
        element_id, id_length = _vint(view, offset, keep_marker=True)
        size, size_length = _vint(view, offset + id_length, keep_marker=False)
        payload = offset + id_length + size_length
        children.append(
            (element_id, payload, end if size == _UNKNOWN else min(payload + size, end))
        )
        if element_id == _CLUSTER or size == _UNKNOWN or len(children) > 256:
            break
        offset = payload + size
    return children


# --- MP4 -----------------------------------------------------------------------------

_AAC_RATES: Final = (
    96000,
    88200,
    64000,
    48000,
    44100,
    32000,
    24000,
    22050,
    16000,
    12000,
    11025,
    8000,
    7350,
)


def _boxes(view: memoryview, start: int, end: int) -> list[tuple[bytes, int, int]]:
    boxes = []
    offset = start
    while offset + 8 <= end:
        size, kind = struct.unpack_from(">I4s", view, offset)
        header = 8
        if size == 1:
            if offset + 16 > end:
                raise ValueError("truncated 64-bit box size")
            (size,) = struct.unpack_from(">Q", view, offset + 8)
            header = 16
        elif size == 0:
            size = end - offset
        if size < header or offset + size > end:
            raise ValueError(f"box {kind!r} at byte {offset} runs past its parent")
        boxes.append((kind, offset + header, offset + size))
        if len(boxes) > 4096:
            raise ValueError("more than 4096 boxes")
        offset += size
    return boxes


def _find(view: memoryview, start: int, end: int, kind: bytes) -> list[tuple[int, int]]:
    return [(s, e) for k, s, e in _boxes(view, start, end) if k == kind]


def _descriptor(view: memoryview, offset: int, end: int) -> tuple[int, int, int]:
    """``(tag, payload start, payload end)`` of an MPEG-4 descriptor."""
    tag = view[offset]
    size, offset = 0, offset + 1
    for _ in range(4):
        if offset >= end:
            raise ValueError("truncated descriptor")
        byte = view[offset]
        offset += 1
        size = (size << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    if offset + size > end:
        raise ValueError("descriptor runs past its box")
    return tag, offset, offset + size


def _audio_specific_config(view: memoryview, start: int, end: int) -> tuple[int, int, int]:
    """``(object type, rate, channels)`` from an ``esds`` box's AudioSpecificConfig."""
    tag, s, e = _descriptor(view, start + 4, end)  # after version and flags
    if tag != 3:
        raise ValueError("esds holds no ES descriptor")
    flags = view[s + 2]
    # ES_ID, flags, then the optional dependsOn id, URL and OCR stream id.
    url = 1 + view[s + 3 + (2 if flags & 0x80 else 0)] if flags & 0x40 else 0
    s += 3 + (2 if flags & 0x80 else 0) + url + (2 if flags & 0x20 else 0)
    tag, s, e = _descriptor(view, s, e)
    if tag != 4:
        raise ValueError("ES descriptor holds no DecoderConfig")
    if view[s] != 0x40:
        raise LookupError(f"object type 0x{view[s]:02x} is not MPEG-4 audio (AAC)")
    tag, s, e = _descriptor(view, s + 13, e)
    if tag != 5 or e - s < 2:
        raise ValueError("DecoderConfig holds no AudioSpecificConfig")
    bits = int.from_bytes(view[s:e][:8].tobytes().ljust(8, b"\0"), "big")
    object_type, index = bits >> 59, (bits >> 55) & 0xF
    if index == 15:
        rate, channels = (bits >> 31) & 0xFFFFFF, (bits >> 27) & 0xF
    elif index < len(_AAC_RATES):
        rate, channels = _AAC_RATES[index], (bits >> 51) & 0xF
    else:
        raise ValueError(f"AudioSpecificConfig frequency index {index}")
    return object_type, rate, channels


def _track_id(view: memoryview, trak: tuple[int, int]) -> int:
    tkhd = _find(view, *trak, b"tkhd")
    if not tkhd:
        raise ValueError("the sound track has no tkhd box")
    start = tkhd[0][0]
    (track_id,) = struct.unpack_from(">I", view, start + (20 if view[start] == 1 else 12))
    return int(track_id)


def _fragment_samples(view: memoryview, track_id: int) -> int:
    """The samples of track ``track_id`` in every ``moof``'s ``traf``/``trun`` boxes."""
    total = 0
    for moof in _find(view, 0, view.nbytes, b"moof"):
        for traf in _find(view, *moof, b"traf"):
            tfhd = _find(view, *traf, b"tfhd")
            if not tfhd or struct.unpack_from(">I", view, tfhd[0][0] + 4)[0] != track_id:
                continue
            for start, _end in _find(view, *traf, b"trun"):
                total += struct.unpack_from(">I", view, start + 4)[0]
    return total


def _mp4_understated(
    view: memoryview,
    mdia: tuple[int, int],
    stbl: tuple[int, int],
    stsz: tuple[int, int],
    count: int,
    core_rate: int,
) -> str:
    """What says the sound track holds more than its ``stsz`` sample count ("" if
    nothing): more sizes listed than counted, a time-to-sample table or a media duration
    longer than the count (two AAC frames of slack)."""
    start, end = stsz
    (fixed,) = struct.unpack_from(">I", view, start + 4)
    if fixed == 0 and (end - start - 12) // 4 > count:
        return f"stsz declares {count} samples and lists {(end - start - 12) // 4} sizes"
    stts = _find(view, *stbl, b"stts")
    if stts:
        s, e = stts[0]
        (entries,) = struct.unpack_from(">I", view, s + 4)
        if 8 + 8 * entries > e - s:
            raise ValueError("stts lists more entries than its box holds")
        timed = sum(c for c, _delta in struct.iter_unpack(">II", view[s + 8 : s + 8 + 8 * entries]))
        if timed > count:
            return f"stsz declares {count} samples, stts times {timed}"
    mdhd = _find(view, *mdia, b"mdhd")
    if mdhd and core_rate > 0:
        s, _e = mdhd[0]
        if view[s] == 1:
            timescale, duration = struct.unpack_from(">IQ", view, s + 20)
        else:
            timescale, duration = struct.unpack_from(">II", view, s + 12)
        # duration / timescale > (count + 2) AAC frames of 1,024 at the core rate
        if timescale and duration * core_rate > (count + 2) * 1024 * timescale:
            seconds = duration / timescale
            return f"mdhd declares {seconds:.3f} s, stsz {count} AAC frames"
    return ""


def _alac_header(
    view: memoryview,
    moov: tuple[int, int],
    trak: tuple[int, int],
    entry: tuple[bytes, int, int],
    stsz: tuple[int, int],
) -> StreamHeader:
    """Apple Lossless in MP4/M4A (iPhone Voice Memos), decoded by FFmpeg: the rate,
    channels and frames per packet of its ``ALACSpecificConfig``; the length a bound of
    whole packets (the last one may be shorter)."""
    _kind, start, end = entry
    config = _find(view, start + 28, end, b"alac")
    if not config or config[0][1] - config[0][0] < 28:
        raise ValueError("the alac entry has no ALACSpecificConfig")
    at = config[0][0] + 4  # after version and flags
    (frame_length,) = struct.unpack_from(">I", view, at)
    channels = view[at + 9]
    (rate,) = struct.unpack_from(">I", view, at + 20)
    if not 1 <= frame_length <= 1 << 16 or channels < 1 or rate < 1:
        raise ValueError(f"ALAC of {channels} channel(s) at {rate} Hz, {frame_length} per packet")
    (count,) = struct.unpack_from(">I", view, stsz[0] + 8)
    if _find(view, *moov, b"mvex"):
        count += _fragment_samples(view, _track_id(view, trak))
    if count == 0:
        raise ValueError("the sound track holds no samples")
    return StreamHeader("mp4", "alac", rate, channels, count * frame_length, False)


def _inspect_mp4(view: memoryview, clip_index: int) -> StreamHeader:
    try:
        moov = _find(view, 0, view.nbytes, b"moov")
        if len(moov) != 1:
            raise ValueError(f"{len(moov)} moov boxes, expected 1")
        sound = []
        sound_traks = []
        for trak in _find(view, *moov[0], b"trak"):
            for mdia in _find(view, *trak, b"mdia"):
                handler = _find(view, *mdia, b"hdlr")
                if handler and bytes(view[handler[0][0] + 8 : handler[0][0] + 12]) == b"soun":
                    sound.append(mdia)
                    sound_traks.append(trak)
        if len(sound) != 1:
            raise LookupError(f"{len(sound)} sound tracks, expected exactly 1")
        (stbl,) = [
            s for minf in _find(view, *sound[0], b"minf") for s in _find(view, *minf, b"stbl")
        ][:1] or [(0, 0)]
        stsd = _find(view, *stbl, b"stsd")
        stsz = _find(view, *stbl, b"stsz")
        if not stsd or not stsz:
            raise ValueError("the sound track has no stsd or stsz box")
        entries = _boxes(view, stsd[0][0] + 8, stsd[0][1])
        if len(entries) == 1 and entries[0][0] == b"alac":
            return _alac_header(view, moov[0], sound_traks[0], entries[0], stsz[0])
        if len(entries) != 1 or entries[0][0] != b"mp4a":
            kinds = [k for k, _, _ in entries]
            raise LookupError(
                f"sample entries {kinds!r}; accepted: one mp4a (AAC) or alac (Apple "
                f"Lossless); {CONVERT_ADVICE}"
            )
        _kind, entry, entry_end = entries[0]
        # A QuickTime sound description of version 1 or 2 (.mov) is longer, and may hold
        # the esds inside a 'wave' box.
        (version,) = struct.unpack_from(">H", view, entry + 8)
        if version > 2:
            raise ValueError(f"sound description version {version}")
        children = entry + (28, 44, 64)[version]
        esds = _find(view, children, entry_end, b"esds")
        for wave in _find(view, children, entry_end, b"wave") if not esds else ():
            esds = _find(view, *wave, b"esds")
        if not esds:
            raise ValueError("the mp4a entry has no esds box")
        object_type, rate, channels = _audio_specific_config(view, *esds[0])
        (count,) = struct.unpack_from(">I", view, stsz[0][0] + 8)
        fragmented = bool(_find(view, *moov[0], b"mvex"))
        if fragmented:
            # A fragmented MP4 (Safari's MediaRecorder): the samples are in each
            # moof/traf/trun of the sound track, after an empty sample table.
            count += _fragment_samples(view, _track_id(view, sound_traks[0]))
        understated = (
            "" if fragmented else _mp4_understated(view, sound[0], stbl, stsz[0], count, rate)
        )
        if understated:
            raise ValueError(
                f"the header understates the length: {understated} (the decoders stop at "
                f"the declared count); remux the file (ffmpeg -i IN -c copy OUT.m4a)"
            )
    except LookupError as exc:
        raise _unsupported("mp4", str(exc), clip_index) from None
    except (ValueError, struct.error, IndexError) as exc:
        raise _malformed("mp4", str(exc), clip_index) from None
    if object_type not in (2, 5, 29):
        raise _unsupported(
            "mp4", f"AAC object type {object_type}; accepted: LC, HE-AAC (v2)", clip_index
        )
    sbr = object_type in (5, 29)
    if sbr:
        rate *= 2
    if channels == 0:
        channels = 2  # a program config element; FFmpeg reports its channels at decode
    if count == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="the sound track holds no samples")
    frames = count * (2048 if sbr else 1024)
    return StreamHeader("mp4", "aac", rate, 2 if object_type == 29 else channels, frames, False)


_INSPECTORS: Final[dict[str, Callable[[memoryview, int], StreamHeader]]] = {
    "aiff": _inspect_aiff,
    "flac": _inspect_flac,
    "mp3": _inspect_mp3,
    "ogg": _inspect_ogg,
    "webm": _inspect_webm,
    "mp4": _inspect_mp4,
    "au": _inspect_au,
    "caf": _inspect_caf,
    "wavcodec": _inspect_wavcodec,
    "rifx": _inspect_rifx,
}


def inspect_container(view: memoryview, container: Container, *, clip_index: int) -> StreamHeader:
    """The stream geometry of a compressed ``container`` from its headers alone.

    :raises DecodeError: ``malformed_header`` or ``unsupported_codec``.
    :raises EmptyAudioError: the header declares no frames.
    """
    return _INSPECTORS[container](view, clip_index)
