"""The decoder process: compressed clips in, interleaved float32 blocks out.

Run as ``python -m audiogate.decode.child --address-space BYTES`` by
:class:`~audiogate.decode.isolation.DecoderPool`; never imported by the serving process
except for :data:`FRAME` and the tags. The codecs (libsndfile through ``soundfile``, which
also decodes WebM/Matroska Opus remuxed here to Ogg Opus by :mod:`audiogate.decode.remux`;
FFmpeg through PyAV for MP4 and other WebM codecs) are untrusted C code: this process caps its own
address space (``RLIMIT_AS``) before importing them, caps its CPU time per clip
(``RLIMIT_CPU``: ``SIGXCPU`` ends it), writes no core files, and talks to its parent
only through its standard input and output.

Protocol (all integers little-endian): a request is ``u32`` header length, a JSON header,
``u64`` data length and the encoded bytes; every answer is a frame, one tag byte and a
``u64`` payload length: :data:`BLOCK` (interleaved float32 samples), then :data:`DONE`
(empty), or :data:`ERROR` (JSON ``{"code", "detail"}``).

A streaming session (header ``"stream": true``, no data: a streamed Ogg or WebM Opus
clip, :class:`~audiogate.decode.isolation.DecoderStream`) decodes while the bytes
arrive: libsndfile reads a file (:class:`_PullFile`) that, when it has used every byte
sent, answers :data:`NEED` and waits for the parent's next frame, :data:`CHUNK` (more
bytes), :data:`END` (the stream ended) or :data:`ABORT` (the stream was dropped). The
answers are :data:`FORMAT` (JSON ``{"rate_hz", "channels"}``, once the codec is open),
blocks as they decode, and :data:`DONE` or :data:`ERROR`; the parent sends a frame only
after a :data:`NEED`, so nothing is left in the pipe when a session ends.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Final

__all__ = [
    "ABORT",
    "BLOCK",
    "CHUNK",
    "DONE",
    "END",
    "ERROR",
    "FORMAT",
    "FRAME",
    "NEED",
    "OVER_PLAN",
    "clean_detail",
    "encode_request",
    "main",
]

#: Answer frame header: tag, payload length.
FRAME: Final = struct.Struct("<cQ")
BLOCK: Final = b"B"
DONE: Final = b"D"
ERROR: Final = b"E"
#: The error code of a stream longer than its plan (the parent's ``LimitError``).
OVER_PLAN: Final = "over_plan"
#: Streaming session answers: every byte sent is used (send the next frame); the codec
#: is open (JSON ``{"rate_hz", "channels"}``).
NEED: Final = b"N"
FORMAT: Final = b"H"
#: Streaming session frames of the parent: more bytes, the end, the stream dropped.
CHUNK: Final = b"C"
END: Final = b"F"
ABORT: Final = b"X"

_REQUEST: Final = struct.Struct("<I")
_DATA: Final = struct.Struct("<Q")


class _Refused(Exception):
    """A stream this process will not decode: ``code`` and a message for the parent."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _read_exact(stream: BinaryIO, count: int) -> bytes | None:
    chunks = []
    while count:
        chunk = stream.read(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _send(out: BinaryIO, tag: bytes, payload: bytes | memoryview = b"") -> None:
    out.write(FRAME.pack(tag, len(payload)))
    out.write(payload)
    if tag != BLOCK:
        out.flush()


def _limit_cpu(seconds: int) -> None:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(used) + 1 + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _soundfile_blocks(data: bytes, header: dict[str, Any]) -> Iterator[Any]:
    import numpy as np
    import soundfile

    try:
        handle = soundfile.SoundFile(io.BytesIO(data))
    except soundfile.LibsndfileError as exc:
        raise _Refused("decoder_error", f"libsndfile refused the stream: {exc}") from None
    snd, ffi = soundfile._snd, soundfile._ffi
    with handle:
        rate = handle.samplerate
        if header["codec"] == "opus":
            # Opus decodes at 48 kHz, as FFmpeg does (libsndfile's default is the rate
            # the encoder was given, from OpusHead).
            value = ffi.new("int*", 48_000)
            snd.sf_command(handle._file, _SET_ORIGINAL_SAMPLERATE, value, ffi.sizeof("int"))
            info = ffi.new("SF_INFO*")
            snd.sf_command(handle._file, _GET_CURRENT_SF_INFO, info, ffi.sizeof("SF_INFO"))
            rate = info.samplerate
        if rate != header["rate_hz"] or handle.channels != header["channels"]:
            raise _Refused(
                "stream_changed",
                f"the decoder opened {handle.channels} channel(s) at {rate} Hz, "
                f"the header said {header['channels']} at {header['rate_hz']} Hz",
            )
        frames = header["block_frames"]
        buffer = np.empty((frames, handle.channels), dtype=np.float32)
        pointer = ffi.cast("float*", buffer.ctypes.data)
        while True:
            # sf_readf_float directly: soundfile's cached length predates the rate change.
            count = snd.sf_readf_float(handle._file, pointer, frames)
            if count <= 0:
                return
            yield buffer[:count]


_SET_ORIGINAL_SAMPLERATE: Final = 0x1500  # libsndfile's SFC_ codes (sndfile.h)
_GET_CURRENT_SF_INFO: Final = 0x1002

_SCALES: Final = {"s16": 32768.0, "s32": 2147483648.0, "u8": 128.0}


def _pyav_blocks(data: bytes, header: dict[str, Any]) -> Iterator[Any]:
    import av
    import numpy as np

    try:
        container = av.open(io.BytesIO(data), mode="r")
    except av.FFmpegError as exc:
        raise _Refused("decoder_error", f"FFmpeg refused the stream: {exc}") from None
    rate, channels = header["rate_hz"], header["channels"]
    block = np.empty((header["block_frames"], channels), dtype=np.float32)
    filled = 0
    with container:
        if not container.streams.audio:
            raise _Refused("decoder_error", "FFmpeg found no audio stream")
        try:
            for frame in container.decode(audio=0):
                if frame.sample_rate != rate or frame.layout.nb_channels != channels:
                    raise _Refused(
                        "stream_changed",
                        f"a frame of {frame.layout.nb_channels} channel(s) at "
                        f"{frame.sample_rate} Hz in a stream planned as {channels} at {rate} Hz",
                    )
                array = frame.to_ndarray()
                name = frame.format.name
                array = array.T if frame.format.is_planar else array.reshape(-1, channels)
                base = name.rstrip("p")
                if base in _SCALES:
                    offset = 128.0 if base == "u8" else 0.0
                    array = (array.astype(np.float64) - offset) / _SCALES[base]
                samples = array.astype(np.float32, copy=False)
                start = 0
                while start < samples.shape[0]:
                    take = min(samples.shape[0] - start, block.shape[0] - filled)
                    block[filled : filled + take] = samples[start : start + take]
                    filled += take
                    start += take
                    if filled == block.shape[0]:
                        yield block
                        filled = 0
        except av.FFmpegError as exc:
            raise _Refused("decoder_error", f"FFmpeg failed while decoding: {exc}") from None
    if filled:
        yield block[:filled]


def _remuxed_blocks(data: bytes, header: dict[str, Any]) -> Iterator[Any]:
    """WebM/Matroska Opus through libsndfile: remuxed to Ogg Opus first (no PyAV).

    The remux stops at the plan (plus the padding a capped plan trims): a file longer
    than that is refused from the walk, before a sample is decoded.
    """
    from audiogate.decode.remux import remux_webm_opus
    from audiogate.errors import DecodeError

    limit = header.get("max_frames")
    stop_after = None
    if limit is not None:
        stop_after = limit if header.get("prefix") else limit + header.get("padding_frames", 0)
    try:
        ogg = remux_webm_opus(data, stop_after=stop_after)
    except DecodeError as exc:
        raise _Refused(exc.code, exc.detail) from None
    if ogg.stopped and not header.get("prefix"):
        raise _OverPlan(ogg.samples)
    if ogg.packets:
        yield from _soundfile_blocks(ogg.data, header)


Backend = Callable[[bytes, dict[str, Any]], Iterator[Any]]


def _joined_blocks(data: bytes, header: dict[str, Any]) -> Iterator[Any]:
    """MP3 files joined end to end and chained Ogg streams, each part through libsndfile
    in turn (given the whole, it stops after the first part's own length)."""
    from audiogate.decode.containers import mp3_parts, ogg_links

    try:
        parts = mp3_parts(data) if header["container"] == "mp3" else ogg_links(data)
    except Exception:
        parts = [(0, len(data))]  # not what admission read: the codec says what it is
    if len(parts) == 1:
        yield from _soundfile_blocks(data, header)
        return
    for start, end in parts:
        yield from _soundfile_blocks(data[start:end], header)


def _backend(header: dict[str, Any]) -> Backend:
    """The decoder of a clip: libsndfile, through the Opus remux for WebM Opus; PyAV for
    MP4 and any other WebM codec (docs/formats.md)."""
    if header["container"] == "webm" and header["codec"] == "opus":
        return _remuxed_blocks
    if header["container"] in ("webm", "mp4"):
        return _pyav_blocks
    if header["container"] in ("mp3", "ogg"):
        return _joined_blocks
    return _soundfile_blocks


def _test_hook(name: str) -> None:
    """What the isolation tests make a decoder do (the parent sends it, never a client)."""
    if name == "abort":
        os.abort()
    if name == "hang":
        import time

        time.sleep(3600)
    if name == "spin":
        while True:
            pass
    if name == "allocate":
        _hold = bytearray(1 << 40)  # past any address-space cap
        del _hold


class _OverPlan(Exception):
    """The stream holds more than the plan (and its padding): at least ``frames``."""

    def __init__(self, frames: int) -> None:
        super().__init__(frames)
        self.frames = frames


def _decode(data: bytes, header: dict[str, Any], out: BinaryIO) -> int:
    """Decode one clip to ``out``; returns the frames the codec produced (read).

    Stops as soon as the plan is settled: a prefix at its last frame; any other stream
    once it has produced more than the plan and its padding (``_OverPlan``). Frames
    past the plan are never sent; padding within ``padding_frames`` is dropped.
    """
    _limit_cpu(header["cpu_seconds"])
    if header.get("hook"):
        _test_hook(header["hook"])
    if header["container"] == "flac" and not header.get("exact", True):
        from audiogate.decode.containers import flac_without_total

        # Frames past STREAMINFO's total: the header understated the length.
        data = flac_without_total(data)
    backend = _backend(header)
    limit = header["max_frames"]
    prefix = bool(header.get("prefix"))
    allowed = limit + header.get("padding_frames", 0)
    sent = read = 0
    blocks = backend(data, header)
    try:
        for block in blocks:
            read += block.shape[0]
            take = min(block.shape[0], limit - sent)
            if take > 0:
                _send(out, BLOCK, memoryview(block[:take]).cast("B"))
                sent += take
            if prefix and sent == limit:
                break
            if read > allowed:
                raise _OverPlan(read)
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()  # the codec's handles, now, not at the next collection
    _send(out, DONE)
    return read


#: Where a streamed file's end seems to be. libsndfile looks for an Ogg Opus file's last
#: page when it opens it (for the length, which it then reads up to): the pull file
#: answers from a zone of zeros ending in :func:`_probe_page`, far past any real byte,
#: so the length is unbounded and the real bytes are read only in order.
_PROBE_END: Final = 1 << 40
_PROBE_ZONE: Final = 1 << 17
_PROBE_GRANULE: Final = 1 << 62


def _probe_page(serial: bytes) -> bytes:
    """An empty end-of-stream Ogg page of stream ``serial`` at a huge granule position."""
    from audiogate.decode.remux import ogg_crc

    page = bytearray(
        struct.pack("<4sBBq4sII", b"OggS", 0, 0x04, _PROBE_GRANULE, serial, 1 << 30, 0) + b"\0"
    )
    struct.pack_into("<I", page, 22, ogg_crc(page))
    return bytes(page)


#: Frames per libsndfile read in a streaming session (100 ms at 48 kHz): what a read
#: has decoded when it waits for bytes goes out with the next answer (fewer calls; a
#: smaller read sends sooner).
_READ_FRAMES: Final = 4800


class _Aborted(Exception):
    """The parent dropped the stream."""


class _PullFile:
    """A streamed clip's Ogg bytes as a file libsndfile reads while they arrive.

    ``read`` at the end of the bytes received asks the parent for more (:data:`NEED`);
    while libsndfile opens the file (``full``) it waits for every byte it asks for (its
    header reads expect them), after that it returns what has arrived. WebM is remuxed
    to Ogg on the way in (:class:`~audiogate.decode.stream_remux.WebmOpusRemuxer`).
    """

    def __init__(self, header: dict[str, Any], stdin: BinaryIO, out: BinaryIO) -> None:
        self._stdin = stdin
        self._out = out
        self._data = bytearray()
        self._position = 0
        self.full = True
        self.ended = False
        self.aborted = False
        self.received = 0
        self.remuxer: Any = None
        self.block_frames: int = header["block_frames"]
        self._queued: list[Any] = []
        self._queued_frames = 0
        if header["container"] == "webm":
            from audiogate.decode.stream_remux import WebmOpusRemuxer

            self.remuxer = WebmOpusRemuxer()
        self.error: _Refused | None = None

    def _pull(self) -> None:
        """One frame from the parent (after telling it every byte is used)."""
        self.flush()
        _send(self._out, NEED)
        head = _read_exact(self._stdin, FRAME.size)
        if head is None:
            raise SystemExit(0)  # the parent is gone
        tag, length = FRAME.unpack(head)
        payload = _read_exact(self._stdin, length) if length else b""
        if payload is None:
            raise SystemExit(0)
        if tag == CHUNK:
            self.received += len(payload)
            self._data += self._remux(payload, end=False)
        elif tag == END:
            self.ended = True
            self._data += self._remux(b"", end=True)
        else:
            self.ended = self.aborted = True

    def _remux(self, payload: bytes, *, end: bool) -> bytes:
        if self.remuxer is None:
            return payload
        from audiogate.errors import DecodeError

        try:
            ogg: bytes = self.remuxer.finish() if end else self.remuxer.feed(payload)
            return ogg
        except DecodeError as exc:
            # Raised here, it would be lost in libsndfile's callback: kept, and the
            # file ends.
            self.error = _Refused(exc.code, exc.detail)
            self.ended = True
            return b""

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._position = offset
        elif whence == io.SEEK_CUR:
            self._position += offset
        else:
            self._position = _PROBE_END + offset
        return self._position

    def send(self, samples: Any) -> None:
        """Queue decoded frames (``[shape=(k, channels)]``); full blocks go out now."""
        if self._queued_frames + samples.shape[0] > self.block_frames:
            self.flush()
        self._queued.append(samples.copy())
        self._queued_frames += samples.shape[0]

    def flush(self) -> None:
        """Send the queued frames (before waiting for bytes, and at the end)."""
        import numpy as np

        if self._queued:
            block = np.concatenate(self._queued) if len(self._queued) > 1 else self._queued[0]
            _send(self._out, BLOCK, block.data.cast("B"))
            self._out.flush()
        self._queued = []
        self._queued_frames = 0

    def tell(self) -> int:
        return self._position

    def read(self, count: int) -> bytes:
        start = self._position
        if start > len(self._data):
            # Only the open's look for the last page reads past the bytes received.
            out = _probe_read(bytes(self._data[14:18]), start, count)
        else:
            wanted = count if self.full else 1
            while start + wanted > len(self._data) and not self.ended:
                self._pull()
            out = bytes(self._data[start : start + count])
        self._position += len(out)
        return out


def _probe_read(serial: bytes, start: int, count: int) -> bytes:
    """Bytes ``start .. start + count`` of the probe zone: zeros, then the probe page at
    :data:`_PROBE_END` (nothing before the zone, nothing after the page)."""
    page = _probe_page(serial)
    page_start = _PROBE_END - len(page)
    if start < _PROBE_END - _PROBE_ZONE or start >= _PROBE_END:
        return b""
    stop = min(start + count, _PROBE_END)
    zeros = max(0, min(stop, page_start) - start)
    return bytes(zeros) + page[max(0, start - page_start) : stop - page_start]


def _stream(header: dict[str, Any], stdin: BinaryIO, out: BinaryIO) -> None:
    """One streaming session: decode while the parent sends the bytes."""
    import numpy as np
    import soundfile

    _limit_cpu(header["cpu_seconds"])
    if header.get("hook"):
        _test_hook(header["hook"])
    source = _PullFile(header, stdin, out)
    try:
        try:
            handle = soundfile.SoundFile(source)
        except soundfile.LibsndfileError as exc:
            if source.error is not None:
                raise source.error from None
            if source.aborted:
                raise _Aborted from None
            if source.remuxer is not None and source.remuxer.packets == 0:
                raise _Refused("empty", "the stream holds no Opus packet") from None
            raise _Refused("decoder_error", f"libsndfile refused the stream: {exc}") from None
        snd, ffi = soundfile._snd, soundfile._ffi
        with handle:
            source.full = False
            value = ffi.new("int*", 48_000)  # Opus at 48 kHz, as the whole clip
            snd.sf_command(handle._file, _SET_ORIGINAL_SAMPLERATE, value, ffi.sizeof("int"))
            info = ffi.new("SF_INFO*")
            snd.sf_command(handle._file, _GET_CURRENT_SF_INFO, info, ffi.sizeof("SF_INFO"))
            channels = handle.channels
            _send(
                out, FORMAT, json.dumps({"rate_hz": info.samplerate, "channels": channels}).encode()
            )
            # A read returns once it has this many frames (or the end), and waits for
            # bytes only when the packet it decodes needs them: every frame decoded
            # before goes out first (``flush``), at most one read's worth waits.
            buffer = np.empty((_READ_FRAMES, channels), dtype=np.float32)
            pointer = ffi.cast("float*", buffer.ctypes.data)
            while True:
                count = snd.sf_readf_float(handle._file, pointer, _READ_FRAMES)
                if source.aborted:
                    raise _Aborted
                if count <= 0:
                    break
                source.send(buffer[:count])
            source.flush()
        if source.error is not None:
            raise source.error
    except _Aborted:
        pass
    # An error or the end; the parent sends nothing more until the next request (it
    # sends a frame only after a NEED), so no frame is left unread.
    _send(out, DONE)


#: Python object reprs in a codec's message (``<_io.BytesIO object at 0x7f...>``).
_REPR: Final = re.compile(r"<[^<>]{0,200}? at 0x[0-9a-fA-F]+>")


def clean_detail(text: str) -> str:
    """A codec's message fit for a client: object reprs named as "the stream", at most
    500 characters."""
    return _REPR.sub("the stream", text)[:500]


def main(argv: list[str] | None = None) -> int:
    """Serve decode requests on standard input until it closes."""
    import resource

    args = sys.argv[1:] if argv is None else argv
    address_space = int(args[args.index("--address-space") + 1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if address_space > 0:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        raw = _read_exact(stdin, _REQUEST.size)
        if raw is None:
            return 0
        (header_length,) = _REQUEST.unpack(raw)
        header = json.loads(_read_exact(stdin, header_length) or b"{}")
        (data_length,) = _DATA.unpack(_read_exact(stdin, _DATA.size) or b"\0" * 8)
        data = _read_exact(stdin, data_length) or b""
        try:
            if header.get("stream"):
                _stream(header, stdin, stdout)
            else:
                _decode(data, header, stdout)
        except _Refused as exc:
            _error(stdout, exc.code, exc.detail)
        except _OverPlan as exc:
            # Refused here, the process stays for the next clip (no restart).
            _error(stdout, OVER_PLAN, f"the stream holds at least {exc.frames} frames")
        except MemoryError:
            _error(stdout, "decoder_memory_limit", "out of memory")
        except Exception as exc:
            _error(stdout, "decoder_error", f"{type(exc).__name__}: {exc}")
        del data


def _error(out: BinaryIO, code: str, detail: str) -> None:
    _send(out, ERROR, json.dumps({"code": code, "detail": clean_detail(detail)}).encode())


def encode_request(header: dict[str, Any], data: bytes) -> list[bytes]:
    """The frames of one request (for the parent)."""
    raw = json.dumps(header).encode()
    return [_REQUEST.pack(len(raw)), raw, _DATA.pack(len(data)), data]


if __name__ == "__main__":
    sys.exit(main())
