"""WebM/Matroska Opus rewritten as Ogg Opus while its bytes arrive (a streamed clip).

The incremental twin of :func:`~audiogate.decode.remux.remux_webm_opus`, run in the
decoder process (:mod:`audiogate.decode.child`) for :func:`~audiogate.streaming.
transport.prepare_stream`: :meth:`WebmOpusRemuxer.feed` takes the next bytes of the
file and returns the Ogg bytes they complete, :meth:`WebmOpusRemuxer.finish` the last
page. The walk, the checks and the Ogg stream's meaning are the whole-file remux's (its
helpers do the reading): the same packets with the same granule positions, the pre-skip
of ``OpusHead`` and a last block's ``DiscardPadding`` as the end-of-stream granule, so
libsndfile decodes the same samples from either. Only the pagination differs: a page
ends with each chunk here (so the decoder sees the audio as it arrives), where the
whole-file remux fills pages; libsndfile's output does not depend on it.

One packet is held back until the next arrives or the stream ends: the last one carries
the end trimming. An element (``Tracks``, a block) is parsed once it is complete; an
element of no interest is skipped without being kept; parsed bytes are dropped, so the
remuxer holds at most one element and the unparsed tail.
"""

from __future__ import annotations

import io
from typing import Final

from audiogate.decode.remux import (
    _BLOCK,
    _BLOCK_GROUP,
    _CLUSTER,
    _DISCARD_PADDING,
    _EBML,
    _FIRST,
    _LAST,
    _OPUS_RATE_HZ,
    _OPUS_TAGS,
    _SEGMENT,
    _SIMPLE_BLOCK,
    _TRACKS,
    _UNKNOWN,
    _laced_sizes,
    _OggWriter,
    _opus_track,
    _packet_samples,
    _refuse,
    _Track,
    _Walk,
)
from audiogate.errors import DecodeError

__all__ = ["WebmOpusRemuxer"]

_INFINITE: Final = 1 << 62
#: Parsed bytes are dropped from the buffer once this many have accumulated.
_COMPACT_BYTES: Final = 64 << 10
_EBML_STATE, _TOP, _BODY = 0, 1, 2


class WebmOpusRemuxer:
    """Matroska bytes in, Ogg Opus bytes out, as they arrive (see the module docstring).

    :param clip_index: named in every error.
    :raises DecodeError: from :meth:`feed` or :meth:`finish`, as
        :func:`~audiogate.decode.remux.remux_webm_opus` refuses the same file.
    """

    def __init__(self, *, clip_index: int = 0) -> None:
        self._clip_index = clip_index
        self._buffer = bytearray()
        self._base = 0  # absolute offset of _buffer[0]
        self._offset = 0  # absolute offset of the next element
        self._state = _EBML_STATE
        self._segment_end = _INFINITE
        self._segment_known = False
        self._cluster_end = _INFINITE
        self._track: _Track | None = None
        self._writer = _OggWriter(bound=_INFINITE, clip_index=clip_index)
        self._held: bytes | None = None
        self._trim_end = 0
        self._pending_page = False
        #: Opus packets seen so far (0 at the end: the track held no frames).
        self.packets = 0
        #: 48 kHz samples of every packet so far (pre-skip included, no end trim).
        self.samples = 0

    @property
    def pre_skip(self) -> int:
        """The ``OpusHead`` pre-skip (0 before the ``Tracks`` element)."""
        return 0 if self._track is None else self._track.pre_skip

    def feed(self, data: bytes) -> bytes:
        """The Ogg bytes that ``data`` (the file's next bytes) completes."""
        self._buffer += data
        self._walk(ended=False)
        if self._pending_page:
            self._writer.page(0)
            self._pending_page = False
        return self._take()

    def finish(self) -> bytes:
        """The rest of the Ogg stream: the held packet on the end-of-stream page.

        :raises DecodeError: the file ends inside an element or before its Segment's
            declared end, or has no ``Tracks``.
        """
        self._walk(ended=True)
        end = self._base + len(self._buffer)
        if self._state != _BODY:
            raise _refuse(
                "malformed_header",
                "no EBML header at byte 0" if self._state == _EBML_STATE else "no Segment",
                self._clip_index,
            )
        if self._segment_known and self._segment_end > end:
            raise self._malformed("the Segment declares more bytes than the file holds")
        if self._offset != end and self._offset < self._segment_end:
            raise self._malformed(f"an element at byte {self._offset} is truncated")
        if self._track is None:
            raise _refuse("malformed_header", "no Tracks element", self._clip_index)
        if self._held is not None:
            view = memoryview(self._held)
            last = _packet_samples(view, 0, len(view), _Walk(view, self._clip_index))
            if self._trim_end > last:
                raise self._malformed(
                    f"DiscardPadding of {self._trim_end} samples on a last packet of {last}"
                )
            self._writer.packet(self._held, self.samples - self._trim_end)
            self._writer.page(_LAST)
        return self._take()

    def _take(self) -> bytes:
        out = self._writer.out.getvalue()
        self._writer.out = io.BytesIO()
        return out

    def _malformed(self, detail: str) -> DecodeError:
        return _refuse("decoder_error", detail, self._clip_index)

    def _header(self, ended: bool) -> tuple[int, int, int] | None:
        """``(id, absolute payload start, size)`` of the element at the offset, or
        ``None`` while its header has not all arrived."""
        start = self._offset - self._base
        available = len(self._buffer) - start
        view = memoryview(self._buffer)
        try:
            if not ended and available < 12:
                if available < 1:
                    return None
                id_length = 9 - view[start].bit_length()
                if id_length <= 4 and available < id_length + 1:
                    return None
                if id_length <= 4:
                    size_length = 9 - view[start + id_length].bit_length()
                    if size_length <= 8 and available < id_length + size_length:
                        return None
            walk = _Walk(view, self._clip_index)
            element_id, payload, size = walk.header(start, len(self._buffer))
        finally:
            view.release()
        return element_id, payload + self._base, size

    def _walk(self, *, ended: bool) -> None:
        while True:
            end = self._base + len(self._buffer)
            if self._state == _BODY and self._offset >= self._segment_end:
                return  # past the Segment: ignored, as the whole-file walk ignores it
            if self._offset >= end:
                break
            found = self._header(ended)
            if found is None:
                break
            element_id, payload, size = found
            if self._state == _EBML_STATE:
                if element_id != _EBML or size == _UNKNOWN:
                    raise _refuse("malformed_header", "no EBML header at byte 0", self._clip_index)
                self._offset = payload + size
                self._state = _TOP
                continue
            if self._state == _TOP:
                if element_id == _SEGMENT:
                    self._state = _BODY
                    self._segment_known = size != _UNKNOWN
                    self._segment_end = payload + size if self._segment_known else _INFINITE
                    self._offset = payload
                    continue
                if size == _UNKNOWN:
                    raise self._malformed(
                        f"element 0x{element_id:X} at byte {self._offset} has an unknown size"
                    )
                self._offset = payload + size
                continue
            if self._offset >= self._cluster_end:
                self._cluster_end = self._segment_end
            if element_id == _CLUSTER:
                self._cluster_end = self._segment_end if size == _UNKNOWN else payload + size
                if self._cluster_end > self._segment_end:
                    raise self._malformed(
                        f"the Cluster at byte {self._offset} runs past the Segment"
                    )
                self._offset = payload
                continue
            if size == _UNKNOWN:
                raise self._malformed(
                    f"element 0x{element_id:X} at byte {self._offset} has an unknown size"
                )
            stop = payload + size
            if stop > self._cluster_end:
                raise self._malformed(
                    f"element 0x{element_id:X} at byte {self._offset} declares {size} bytes, "
                    f"past the end of its parent at byte {self._cluster_end} (truncated, or a "
                    "lying size)"
                )
            if element_id in (_TRACKS, _SIMPLE_BLOCK, _BLOCK_GROUP):
                if stop > end:
                    break  # parsed once complete
                self._element(element_id, payload - self._base, stop - self._base)
            self._offset = stop
        self._compact()

    def _compact(self) -> None:
        used = min(self._offset, self._base + len(self._buffer)) - self._base
        if used >= _COMPACT_BYTES or used == len(self._buffer):
            del self._buffer[:used]
            self._base += used

    def _element(self, element_id: int, payload: int, stop: int) -> None:
        """One complete ``Tracks``, ``SimpleBlock`` or ``BlockGroup`` (buffer offsets)."""
        view = memoryview(self._buffer)
        try:
            self._parse(_Walk(view, self._clip_index), element_id, payload, stop)
        finally:
            view.release()

    def _parse(self, walk: _Walk, element_id: int, payload: int, stop: int) -> None:
        view = walk.view
        if element_id == _TRACKS:
            if self._track is not None:
                raise walk.malformed("a second Tracks element")
            self._track = _opus_track(walk, payload, stop)
            self._writer.packet(self._track.head, 0)
            self._writer.page(_FIRST)
            self._writer.packet(_OPUS_TAGS, 0)
            self._writer.page(0)
            return
        discard_ns = 0
        if element_id == _SIMPLE_BLOCK:
            start, block_end = payload, stop
        else:
            blocks = []
            for child, s, e in walk.children(payload, stop):
                if child == _BLOCK:
                    blocks.append((s, e))
                elif child == _DISCARD_PADDING:
                    discard_ns = walk.sint(s, e)
            if len(blocks) != 1:
                raise walk.malformed(f"a BlockGroup with {len(blocks)} Blocks")
            start, block_end = blocks[0]
        number, length = walk.vint(start, block_end)
        if self._track is None:
            raise walk.malformed("a block before the Tracks element")
        if number != self._track.number:
            return  # another track's (video) block
        start += length
        if start + 3 > block_end:
            raise walk.malformed("a block header is truncated")
        lacing = (view[start + 2] >> 1) & 3
        start += 3
        if lacing:
            sizes, start = _laced_sizes(walk, lacing, start, block_end)
        else:
            sizes = [block_end - start]
        for frame_size in sizes:
            if frame_size < 1:
                raise walk.malformed("an empty Opus frame")
            if self._held is not None:
                if self._trim_end:
                    raise _refuse(
                        "decoder_error",
                        "DiscardPadding on a block that is not the last (Ogg trims only "
                        "the end of a stream)",
                        self._clip_index,
                    )
                self._writer.packet(self._held, self.samples)
                self._pending_page = True
            self.samples += _packet_samples(view, start, start + frame_size, walk)
            self.packets += 1
            self._held = bytes(view[start : start + frame_size])
            start += frame_size
        if discard_ns > 0:
            # FFmpeg rounds DiscardPadding to the nearest sample (av_rescale_q).
            self._trim_end = (discard_ns * _OPUS_RATE_HZ + 500_000_000) // 1_000_000_000
