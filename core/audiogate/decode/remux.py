"""WebM/Matroska Opus rewritten as Ogg Opus, so libsndfile (``audiogate[codecs]``) decodes it.

Runs in the decoder process (:mod:`audiogate.decode.child`): the Matroska bytes are
untrusted, and this walk is pure Python, but it stays beside the codec that reads its
output. The walk finds the one Opus track (``CodecID`` ``A_OPUS``; ``CodecPrivate`` is its
``OpusHead``), collects that track's frames from ``SimpleBlock`` and ``BlockGroup/Block``
elements (no lacing, Xiph, EBML and fixed-size lacing), and writes one Ogg Opus stream
(RFC 7845): the ``OpusHead`` page, an ``OpusTags`` page, then the audio pages, whose
granule positions count 48 kHz samples from the first packet (pre-skip included), the
last one marked end-of-stream.

Trimming is FFmpeg's (the corpus references are its decode): the pre-skip of ``OpusHead``
at the start (``CodecDelay`` says the same in every muxer seen, and FFmpeg's decoder
reads ``OpusHead``), and a last block's ``DiscardPadding`` at the end, written as the
end-of-stream page's granule position. Each packet's length in samples comes from its
TOC byte (RFC 6716, 3.1).

Memory is bounded before it is spent: the stream written is at most
:func:`remux_bound` bytes of an ``nbytes`` input (the payload is a subset of the input;
the Ogg framing adds at most a lacing byte per 255 payload bytes and per packet, and 27
bytes per 255 lacing bytes), checked page by page. Every refusal is a
:class:`~audiogate.errors.DecodeError` (``malformed_header``, ``unsupported_codec`` or
``decoder_error``); no other exception leaves :func:`remux_webm_opus` for any input.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Final

import attrs

from audiogate.errors import DecodeError

__all__ = [
    "OggOpus",
    "element_budget",
    "measure_webm_opus",
    "ogg_crc",
    "remux_bound",
    "remux_webm_opus",
]

# Matroska element ids (the EBML specification and the Matroska element registry).
_EBML: Final = 0x1A45DFA3
_SEGMENT: Final = 0x18538067
_TRACKS: Final = 0x1654AE6B
_CLUSTER: Final = 0x1F43B675
_TRACK_ENTRY: Final = 0xAE
_TRACK_NUMBER: Final = 0xD7
_TRACK_TYPE: Final = 0x83
_CODEC_ID: Final = 0x86
_CODEC_PRIVATE: Final = 0x63A2
_CONTENT_ENCODINGS: Final = 0x6D80
_SIMPLE_BLOCK: Final = 0xA3
_BLOCK_GROUP: Final = 0xA0
_BLOCK: Final = 0xA1
_DISCARD_PADDING: Final = 0x75A2
_AUDIO_TRACK: Final = 2
_UNKNOWN: Final = -1

#: Children read from one element (Tracks, a TrackEntry, a BlockGroup); more is refused.
_MAX_CHILDREN: Final = 4096
#: Opus decodes at 48 kHz; a packet holds at most 120 ms.
_OPUS_RATE_HZ: Final = 48_000
_MAX_PACKET_SAMPLES: Final = 5760
#: Samples per Opus frame by TOC configuration (RFC 6716, table 2): SILK 0-11, hybrid
#: 12-15, CELT 16-31.
_FRAME_SAMPLES: Final = (480, 960, 1920, 2880) * 3 + (480, 960) * 2 + (120, 240, 480, 960) * 4

_OPUS_TAGS: Final = b"OpusTags" + struct.pack("<I", 9) + b"audiogate" + struct.pack("<I", 0)
_PAGE: Final = struct.Struct("<4sBBqIII")  # capture, version, type, granule, serial, seq, crc
_PAGE_HEADER_BYTES: Final = _PAGE.size + 1  # + the segment count
_SERIAL: Final = 0x61756467  # "audg"
_CONTINUED, _FIRST, _LAST = 0x01, 0x02, 0x04
#: Each byte with its bits reversed: the Ogg CRC is zlib's CRC-32 unreflected.
_REVERSED: Final = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


@attrs.frozen
class OggOpus:
    """An Ogg Opus stream remuxed from Matroska.

    :param data: the whole Ogg stream (headers and audio pages).
    :param packets: Opus packets in it (0: the track held no frames).
    :param samples: 48 kHz samples it decodes to (pre-skip and end trimming applied;
        ``stopped``: no end trimming).
    :param stopped: the walk stopped at ``stop_after`` before the end of the file.
    :param elements: Matroska elements read (the walk's work, for the tests' bounds).
    """

    data: bytes
    packets: int
    samples: int
    stopped: bool = False
    elements: int = 0


def ogg_crc(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 of an Ogg page (polynomial 0x04C11DB7, unreflected, initial 0, no xor).

    zlib's CRC-32 is the same polynomial reflected: on bit-reversed bytes, with the
    initial and final inversions cancelled, it gives the Ogg CRC bit-reversed.
    """
    reflected = zlib.crc32(bytes(data).translate(_REVERSED), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)


def remux_bound(nbytes: int) -> int:
    """The most bytes :func:`remux_webm_opus` writes for an ``nbytes`` input.

    Payload (OpusHead and frames, disjoint slices of the input) ≤ ``nbytes``; lacing
    values ≤ payload / 255 + one per packet, and a packet is at least a byte; an Ogg page
    header (27 bytes + the count) per 255 lacing values, plus the two header pages, the
    last partial page and ``OpusTags``. Ordinary streams (packets of 20 to 400 bytes in
    unlaced blocks) come out smaller than their input; fixed-size lacing of one-byte
    frames reaches about 2.1 times it.
    """
    payload = nbytes
    lacing = payload + payload // 255 + 3
    pages = lacing // 255 + 3
    return payload + lacing + pages * _PAGE_HEADER_BYTES + len(_OPUS_TAGS)


def _refuse(code: str, detail: str, clip_index: int) -> DecodeError:
    return DecodeError(f"WebM/Matroska Opus: {detail}", clip_index=clip_index, code=code)


class _Walk:
    """The EBML reads over one buffer; every failure is a ``DecodeError``."""

    def __init__(self, view: memoryview, clip_index: int) -> None:
        self.view = view
        self.clip_index = clip_index

    def malformed(self, detail: str) -> DecodeError:
        return _refuse("decoder_error", detail, self.clip_index)

    def vint(self, offset: int, end: int) -> tuple[int, int]:
        """``(value without the marker, length)``; ``_UNKNOWN`` for all value bits set."""
        if offset >= end:
            raise self.malformed(f"an element is truncated at byte {offset}")
        first = self.view[offset]
        length = 9 - first.bit_length()
        if length > 8 or offset + length > end:
            raise self.malformed(f"bad variable-length integer at byte {offset}")
        value = int.from_bytes(self.view[offset : offset + length], "big")
        value &= (1 << (7 * length)) - 1
        return (_UNKNOWN if value == (1 << (7 * length)) - 1 else value), length

    def header(self, offset: int, end: int) -> tuple[int, int, int]:
        """``(id, payload start, size or _UNKNOWN)`` of the element at ``offset``."""
        if offset >= end:
            raise self.malformed(f"an element is truncated at byte {offset}")
        first = self.view[offset]
        id_length = 9 - first.bit_length()
        if id_length > 4 or offset + id_length > end:
            raise self.malformed(f"bad element id at byte {offset}")
        element_id = int.from_bytes(self.view[offset : offset + id_length], "big")
        size, size_length = self.vint(offset + id_length, end)
        return element_id, offset + id_length + size_length, size

    def sized(self, offset: int, end: int) -> tuple[int, int, int]:
        """``(id, payload start, payload end)``; the size must be known and fit ``end``."""
        element_id, payload, size = self.header(offset, end)
        if size == _UNKNOWN:
            raise self.malformed(f"element 0x{element_id:X} at byte {offset} has an unknown size")
        if payload + size > end:
            raise self.malformed(
                f"element 0x{element_id:X} at byte {offset} declares {size} bytes, past the "
                f"end of its parent at byte {end} (truncated, or a lying size)"
            )
        return element_id, payload, payload + size

    def children(self, start: int, end: int) -> list[tuple[int, int, int]]:
        found = []
        offset = start
        while offset < end:
            element = self.sized(offset, end)
            found.append(element)
            if len(found) > _MAX_CHILDREN:
                raise self.malformed(f"more than {_MAX_CHILDREN} elements at byte {start}")
            offset = element[2]
        return found

    def uint(self, start: int, end: int) -> int:
        if end - start > 8:
            raise self.malformed(f"an integer of {end - start} bytes at byte {start}")
        return int.from_bytes(self.view[start:end], "big")

    def sint(self, start: int, end: int) -> int:
        if end - start > 8:
            raise self.malformed(f"an integer of {end - start} bytes at byte {start}")
        return int.from_bytes(self.view[start:end], "big", signed=True)


@attrs.frozen
class _Track:
    number: int
    head: bytes
    pre_skip: int


def _opus_track(walk: _Walk, start: int, end: int) -> _Track:
    """The one audio track of ``Tracks``, which must be Opus with an ``OpusHead``."""
    audio = []
    for element_id, s, e in walk.children(start, end):
        if element_id != _TRACK_ENTRY:
            continue
        fields = {i: (a, b) for i, a, b in walk.children(s, e)}
        if _TRACK_TYPE in fields and walk.uint(*fields[_TRACK_TYPE]) == _AUDIO_TRACK:
            audio.append(fields)
    if len(audio) != 1:
        raise _refuse(
            "unsupported_codec", f"{len(audio)} audio tracks, expected exactly 1", walk.clip_index
        )
    fields = audio[0]
    view = walk.view
    codec = bytes(view[slice(*fields[_CODEC_ID])]).rstrip(b"\0") if _CODEC_ID in fields else b""
    if codec != b"A_OPUS":
        raise _refuse("unsupported_codec", f"codec {codec!r}; remuxed: A_OPUS", walk.clip_index)
    if _CONTENT_ENCODINGS in fields:
        raise _refuse(
            "unsupported_codec",
            "the track's blocks are compressed or encrypted (ContentEncodings)",
            walk.clip_index,
        )
    if _TRACK_NUMBER not in fields or not 1 <= walk.uint(*fields[_TRACK_NUMBER]) < 1 << 56:
        raise _refuse("malformed_header", "the audio track has no TrackNumber", walk.clip_index)
    head = bytes(view[slice(*fields[_CODEC_PRIVATE])]) if _CODEC_PRIVATE in fields else b""
    if len(head) < 19 or head[:8] != b"OpusHead" or head[8] >> 4 != 0 or head[9] == 0:
        raise _refuse(
            "malformed_header",
            f"CodecPrivate is not an OpusHead (version 0.x, at least 1 channel): {head[:20]!r}",
            walk.clip_index,
        )
    family, channels = head[18], head[9]
    if (family == 0 and channels > 2) or (family != 0 and len(head) < 21 + channels):
        raise _refuse(
            "malformed_header",
            f"OpusHead of {len(head)} bytes with mapping family {family} and {channels} channel(s)",
            walk.clip_index,
        )
    (pre_skip,) = struct.unpack_from("<H", head, 10)
    return _Track(walk.uint(*fields[_TRACK_NUMBER]), head, pre_skip)


def _packet_samples(view: memoryview, start: int, end: int, walk: _Walk) -> int:
    """48 kHz samples in the Opus packet ``view[start:end]``, from its TOC byte."""
    toc = view[start]
    code = toc & 3
    if code == 0:
        count = 1
    elif code in (1, 2):
        count = 2
    elif end - start < 2:
        raise walk.malformed(f"a code-3 Opus packet of 1 byte at byte {start}")
    else:
        count = view[start + 1] & 0x3F
    samples = count * _FRAME_SAMPLES[toc >> 3]
    if not 0 < samples <= _MAX_PACKET_SAMPLES:
        raise walk.malformed(
            f"an Opus packet at byte {start} of {samples} samples (allowed 1 to "
            f"{_MAX_PACKET_SAMPLES}, 120 ms)"
        )
    return samples


def _laced_sizes(walk: _Walk, lacing: int, offset: int, end: int) -> tuple[list[int], int]:
    """The frame sizes of a laced block's data at ``offset`` and where the frames start."""
    view = walk.view
    if offset >= end:
        raise walk.malformed(f"a laced block without its frame count at byte {offset}")
    count = view[offset] + 1
    offset += 1
    sizes: list[int] = []
    if lacing == 1:  # Xiph: each size a run of 255s and a final byte below 255
        for _ in range(count - 1):
            size = 0
            while True:
                if offset >= end:
                    raise walk.malformed(f"Xiph lacing runs past its block at byte {offset}")
                byte = view[offset]
                offset += 1
                size += byte
                if byte != 255:
                    break
            sizes.append(size)
    elif lacing == 3 and count > 1:  # EBML: the first size, then signed differences
        size, length = walk.vint(offset, end)
        offset += length
        sizes.append(size)
        for _ in range(count - 2):
            raw, length = walk.vint(offset, end)
            if raw == _UNKNOWN:
                raise walk.malformed(f"an EBML lace difference is all ones at byte {offset}")
            offset += length
            size += raw - ((1 << (7 * length - 1)) - 1)
            sizes.append(size)
        if any(s < 0 for s in sizes):
            raise walk.malformed(f"EBML lacing gives a negative frame size near byte {offset}")
    elif lacing == 2:  # fixed: equal sizes
        total = end - offset
        if total % count:
            raise walk.malformed(
                f"fixed-size lacing of {count} frames over {total} bytes at byte {offset}"
            )
        return [total // count] * count, offset
    last = end - offset - sum(sizes)
    if last < 0:
        raise walk.malformed(f"lacing declares more bytes than its block holds at byte {offset}")
    return [*sizes, last], offset


class _OggWriter:
    """Ogg pages of one logical stream, written as packets arrive, within a byte bound."""

    def __init__(self, *, bound: int, clip_index: int, serial: int = _SERIAL) -> None:
        self.out = io.BytesIO()
        self.bound = bound
        self.clip_index = clip_index
        self.serial = serial
        self.sequence = 0
        self.lacing = bytearray()
        self.body: list[memoryview | bytes] = []
        self.granule = -1  # of the last packet completed on the current page
        self.continued = False  # the current page starts inside a packet

    def packet(self, data: memoryview | bytes, granule: int) -> None:
        """Append one packet that ends at ``granule``; a packet longer than the page's
        room continues on the next page."""
        done, size = 0, len(data)
        while True:
            if len(self.lacing) == 255:
                self.page(0)
                self.continued = done > 0
            room = 255 - len(self.lacing)
            left = size - done
            if left // 255 + 1 <= room:
                self.lacing += b"\xff" * (left // 255) + bytes((left % 255,))
                self.body.append(data[done:])
                self.granule = granule
                return
            self.lacing += b"\xff" * room
            self.body.append(data[done : done + 255 * room])
            done += 255 * room

    def page(self, flags: int) -> None:
        """Write the current page (``flags`` adds first- or last-page marks)."""
        kind = flags | (_CONTINUED if self.continued else 0)
        header = _PAGE.pack(b"OggS", 0, kind, self.granule, self.serial, self.sequence, 0)
        page = b"".join((header, bytes((len(self.lacing),)), self.lacing, *self.body))
        if self.out.tell() + len(page) > self.bound:
            raise _refuse(
                "decoder_error",
                f"the Ogg stream would pass its bound of {self.bound} bytes",
                self.clip_index,
            )
        crc = ogg_crc(page)
        self.out.write(page[:22])
        self.out.write(struct.pack("<I", crc))
        self.out.write(page[26:])
        self.sequence += 1
        self.lacing = bytearray()
        self.body = []
        self.granule = -1
        self.continued = False


def remux_webm_opus(
    data: bytes | memoryview, *, clip_index: int = 0, stop_after: int | None = None
) -> OggOpus:
    """The Ogg Opus stream of a WebM/Matroska file's one Opus track.

    :param data: the whole WebM/Matroska file.
    :param clip_index: named in every error.
    :param stop_after: the most 48 kHz samples (after pre-skip) the caller will keep:
        the walk stops once the packets read decode to more than that plus one packet
        (``OggOpus.stopped``), so a file far past a clip's cap costs the walk up to the
        cap, not the file. It then also refuses a file that spends more than
        :func:`element_budget` elements before reaching it.
    :returns: the Ogg stream, at most :func:`remux_bound` ``(len(data))`` bytes.
    :raises DecodeError: ``malformed_header`` (no EBML header, Segment or OpusHead),
        ``unsupported_codec`` (not exactly one audio track, not Opus, encoded blocks) or
        ``decoder_error`` (a malformed element, block, lacing or Opus TOC; trimming the
        stream cannot express).
    """
    with memoryview(data) as outer:
        view = outer.cast("B") if outer.format != "B" or outer.ndim != 1 else outer
        return _remux(view, clip_index, stop_after)


def element_budget(stop_after: int) -> int:
    """The Matroska elements a walk may read before its packets pass ``stop_after``
    samples: four per packet of the shortest Opus frame (2.5 ms, 120 samples) needed to
    get there, as many again for a video track's blocks, and the headers' elements."""
    return 8 * (stop_after // 120 + 2) + 4 * _MAX_CHILDREN


class _Counter(_OggWriter):
    """A writer that writes nothing (a measurement: :func:`measure_webm_opus`)."""

    def __init__(self, clip_index: int) -> None:
        super().__init__(bound=0, clip_index=clip_index)

    def packet(self, data: memoryview | bytes, granule: int) -> None:
        pass

    def page(self, flags: int) -> None:
        pass


def measure_webm_opus(
    data: bytes | memoryview, *, clip_index: int = 0, stop_after: int | None, max_elements: int
) -> OggOpus:
    """The 48 kHz length a WebM/Matroska Opus file decodes to, from its packets' TOC bytes
    and trimming (what :func:`remux_webm_opus` would give), writing nothing. Admission
    measures a file without a duration (MediaRecorder's) so; the walk ends at
    ``stop_after`` samples or ``max_elements`` elements (``stopped``: the length is
    more than ``stop_after`` or was not reached), whichever comes first.

    :raises DecodeError: as :func:`remux_webm_opus`.
    """
    with memoryview(data) as outer:
        view = outer.cast("B") if outer.format != "B" or outer.ndim != 1 else outer
        return _remux(view, clip_index, stop_after, count_only=True, max_elements=max_elements)


def _remux(
    view: memoryview,
    clip_index: int,
    stop_after: int | None,
    *,
    count_only: bool = False,
    max_elements: int | None = None,
) -> OggOpus:
    walk = _Walk(view, clip_index)
    end = view.nbytes
    element_id, payload, size = walk.header(0, end) if end else (0, 0, 0)
    if element_id != _EBML or size == _UNKNOWN or payload + size > end:
        raise _refuse("malformed_header", "no EBML header at byte 0", clip_index)
    offset = payload + size
    while True:  # the Segment, after any other top-level elements (Void, CRC-32)
        if offset >= end:
            raise _refuse("malformed_header", "no Segment", clip_index)
        element_id, payload, size = walk.header(offset, end)
        if element_id == _SEGMENT:
            break
        offset = walk.sized(offset, end)[2]
    segment_end = end if size == _UNKNOWN else payload + size
    if segment_end > end:
        raise walk.malformed(
            f"the Segment declares {size} bytes, the file holds {end - payload} after its header"
        )

    writer: _OggWriter = (
        _Counter(clip_index)
        if count_only
        else _OggWriter(bound=remux_bound(end), clip_index=clip_index)
    )
    track: _Track | None = None
    samples = packets = 0
    # One packet is held back: the last one ends the stream, with the end trimming.
    held: tuple[int, int] | None = None
    trim_end = 0  # samples the held packet's block discards at its end
    offset, cluster_end = payload, segment_end
    # Past this many 48 kHz samples the caller has what it needs (or a proof of overrun).
    enough = None if stop_after is None else stop_after + _MAX_PACKET_SAMPLES
    budget = None if stop_after is None else element_budget(stop_after)
    elements = 0
    stopped = False
    while offset < segment_end and not stopped:
        elements += 1
        if max_elements is not None and elements > max_elements:
            stopped = True
            break
        if budget is not None and elements > budget:
            raise walk.malformed(
                f"{elements} elements read by byte {offset} with {samples} samples of audio "
                f"(at most {budget} before {stop_after} samples)"
            )
        if offset >= cluster_end:
            cluster_end = segment_end
        element_id, payload, size = walk.header(offset, cluster_end)
        if element_id == _CLUSTER:
            # Clusters are walked flat: a live recording (MediaRecorder) writes them with
            # an unknown size, ended by the next Cluster or the end of the Segment.
            cluster_end = segment_end if size == _UNKNOWN else payload + size
            if cluster_end > segment_end:
                raise walk.malformed(f"the Cluster at byte {offset} runs past the Segment")
            offset = payload
            continue
        element_id, payload, stop = walk.sized(offset, cluster_end)
        offset = stop
        if element_id == _TRACKS:
            if track is not None:
                raise walk.malformed("a second Tracks element")
            track = _opus_track(walk, payload, stop)
            writer.packet(track.head, 0)
            writer.page(_FIRST)
            writer.packet(_OPUS_TAGS, 0)
            writer.page(0)
            continue
        if element_id == _SIMPLE_BLOCK:
            block, discard_ns = (payload, stop), 0
        elif element_id == _BLOCK_GROUP:
            blocks = []
            discard_ns = 0
            for child, s, e in walk.children(payload, stop):
                if child == _BLOCK:
                    blocks.append((s, e))
                elif child == _DISCARD_PADDING:
                    discard_ns = walk.sint(s, e)
            if len(blocks) != 1:
                raise walk.malformed(f"a BlockGroup with {len(blocks)} Blocks at byte {payload}")
            block = blocks[0]
        else:
            continue
        start, block_end = block
        number, length = walk.vint(start, block_end)
        if track is None:
            raise walk.malformed(f"a block at byte {start} before the Tracks element")
        if number != track.number:
            continue  # another track's (video) block
        start += length
        if start + 3 > block_end:
            raise walk.malformed(f"a block header is truncated at byte {start}")
        lacing = (view[start + 2] >> 1) & 3
        start += 3
        if lacing:
            sizes, start = _laced_sizes(walk, lacing, start, block_end)
        else:
            sizes = [block_end - start]
        for frame_size in sizes:
            if frame_size < 1:
                raise walk.malformed(f"an empty Opus frame at byte {start}")
            if held is not None:
                if trim_end:
                    raise _refuse(
                        "decoder_error",
                        "DiscardPadding on a block that is not the last (Ogg trims only "
                        "the end of a stream)",
                        clip_index,
                    )
                writer.packet(view[held[0] : held[1]], samples)
            samples += _packet_samples(view, start, start + frame_size, walk)
            packets += 1
            held = (start, start + frame_size)
            start += frame_size
            if enough is not None and samples - track.pre_skip > enough:
                stopped = True
                break
        if stopped:
            break
        if discard_ns > 0:
            # FFmpeg rounds DiscardPadding to the nearest sample (av_rescale_q).
            trim_end = (discard_ns * _OPUS_RATE_HZ + 500_000_000) // 1_000_000_000
    if track is None:
        raise _refuse("malformed_header", "no Tracks element", clip_index)
    if held is None:
        return OggOpus(
            data=writer.out.getvalue(), packets=0, samples=0, stopped=stopped, elements=elements
        )
    last_samples = _packet_samples(view, held[0], held[1], walk)
    if stopped:
        trim_end = 0  # not the stream's end: nothing to trim
    if trim_end > last_samples:
        raise walk.malformed(
            f"DiscardPadding of {trim_end} samples on a last packet of {last_samples}"
        )
    granule = samples - trim_end
    writer.packet(view[held[0] : held[1]], granule)
    writer.page(_LAST)
    decoded = max(granule - track.pre_skip, 0)
    return OggOpus(
        data=writer.out.getvalue(),
        packets=packets,
        samples=decoded,
        stopped=stopped,
        elements=elements,
    )
