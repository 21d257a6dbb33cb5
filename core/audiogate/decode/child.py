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

__all__ = ["BLOCK", "DONE", "ERROR", "FRAME", "OVER_PLAN", "clean_detail", "encode_request", "main"]

#: Answer frame header: tag, payload length.
FRAME: Final = struct.Struct("<cQ")
BLOCK: Final = b"B"
DONE: Final = b"D"
ERROR: Final = b"E"
#: The error code of a stream longer than its plan (the parent's ``LimitError``).
OVER_PLAN: Final = "over_plan"

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
