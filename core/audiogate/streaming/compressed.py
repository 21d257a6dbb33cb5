"""Compressed streams: Ogg and WebM Opus decoded as they arrive, the rest at the end.

:func:`~audiogate.streaming.transport.prepare_stream` hands a compressed stream (any
declared container but raw and WAV, or ``"auto"``) to a :class:`CompressedReceiver`:

* **Ogg Opus and WebM Opus stream.** The bytes go to a decoder process as they arrive
  (:meth:`~audiogate.decode.isolation.DecoderPool.open_stream`: the whole clip's pool,
  isolation and limits); it decodes them with libsndfile, the whole clip's decoder (WebM
  remuxed to Ogg on the way, :mod:`audiogate.decode.stream_remux`), and each block of
  samples is downmixed and pushed into the clip's frontend at once. The samples are the
  whole clip's, bit for bit (the pre-skip, the Ogg end-of-stream granule and WebM's
  ``DiscardPadding`` trimmed alike), so the prepared clip is too. The bytes are sent
  in batches of at least :data:`FORWARD_BYTES` (a chunk is a few dozen bytes of Opus),
  so after the last chunk only that much, the end trimming and the frontend's
  ``finish()`` remain.
* **Every other container** (MP3, FLAC, Ogg Vorbis and FLAC, WebM and MP4 of other
  codecs, AIFF, AU, CAF, RIFX, ADPCM WAV) is accumulated, held in the byte budget, and
  prepared by the whole-clip path (preflight, decode, stages) when the stream ends: the
  same result by construction, with the work at the end.

Admission as the bytes arrive: the per-clip and per-request encoded-byte limits on the
bytes received, at the chunk that crosses them; for an Opus stream the frontend's
admission on the frames decoded so far (the duration cap and every other limit, with
the whole clip's errors), at the block that crosses it. A refusal, an error, a finish or
a close ends the decoder session without restarting its process.
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from audiogate.budget import BudgetHold, ByteBudget
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.decode.geometry import ClipGeometry, SourceFormat, sniff_container
from audiogate.errors import DecodeError, EmptyAudioError, LimitError
from audiogate.host import FamilyHost
from audiogate.pipeline.prepared import PreparedClip
from audiogate.policy import AudioPolicy
from audiogate.streaming.frontend import ClipStream, open_clip_stream
from audiogate.streaming.transport import _CodecWav

if TYPE_CHECKING:
    from audiogate.decode.isolation import DecoderPool, DecoderStream
    from audiogate.streaming.transport import _Receiver

__all__ = ["FORWARD_BYTES", "STREAMED_CONTAINERS", "CompressedReceiver"]

#: Bytes gathered before they go to the decoder process (one round trip each).
#: 8 KiB (about 1 s of 64 kbit/s Opus): each round trip is a thread hop and a pipe
#: exchange (about 0.1 ms of CPU each besides the decoding), 29 per 30 s clip instead of
#: 115 at 2 KiB; after the last chunk at most this much is left to decode.
FORWARD_BYTES: Final = 8192
#: Containers whose Opus streams decode as they arrive (``"opus"`` declares either).
STREAMED_CONTAINERS: Final = frozenset({"ogg", "webm"})
#: Bytes read to recognise the container of an ``"auto"`` stream.
_SNIFF_BYTES: Final = 12
#: An Ogg stream's first page must come within this many bytes.
_MAX_FIRST_PAGE: Final = 27 + 255 + 255 * 255

#: Containers whose decoder is an optional extra (checked when the stream starts).
_EXTRA_CONTAINERS: Final = frozenset(
    {"aiff", "au", "caf", "flac", "mp3", "mp4", "ogg", "rifx", "webm"}
)

_SNIFFING, _STREAMING, _ACCUMULATING, _PCM = "sniffing", "streaming", "accumulating", "pcm"


def _first_ogg_page(buffer: bytes | bytearray) -> bytes | None:
    """The body of the Ogg page ``buffer`` starts with, ``None`` until it is complete."""
    if len(buffer) < 27:
        return None
    segments = buffer[26]
    if len(buffer) < 27 + segments:
        return None
    size = sum(buffer[27 : 27 + segments])
    end = 27 + segments + size
    return bytes(buffer[27 + segments : end]) if len(buffer) >= end else None


class _OggPages:
    """Walks an Ogg stream's page headers as the bytes arrive, to see a second link."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip = 0  # bytes of the current page's body still to come
        self._serial: bytes | None = None
        self._lost = False  # not at a page boundary any more: libsndfile resyncs alone

    def chained(self, data: bytes) -> bool:
        """``True`` once a page starts a second logical stream (or another serial)."""
        if self._lost:
            return False
        if self._skip >= len(data):
            self._skip -= len(data)
            return False
        self._buffer += data[self._skip :]
        self._skip = 0
        while len(self._buffer) >= 27:
            buffer = self._buffer
            if buffer[:4] != b"OggS":
                self._lost = True
                self._buffer = bytearray()
                return False
            segments = buffer[26]
            if len(buffer) < 27 + segments:
                break
            serial = bytes(buffer[14:18])
            if self._serial is None:
                self._serial = serial
            elif serial != self._serial or buffer[5] & 0x02:
                return True
            size = 27 + segments + sum(buffer[27 : 27 + segments])
            if size > len(buffer):
                self._skip = size - len(buffer)
                self._buffer = bytearray()
                break
            del self._buffer[:size]
        return False


class CompressedReceiver:
    """One compressed stream's bytes in, its :class:`PreparedClip` out (see the module).

    :meth:`feed` takes a chunk in the event loop and says whether the decoder has work
    (then :meth:`flush` runs, off the loop); :meth:`finish` returns the clip;
    :meth:`close` ends everything, exactly once, on every path. A lock makes
    :meth:`close` wait for a :meth:`flush` in flight (a cancelled task's thread).
    """

    def __init__(
        self,
        host: FamilyHost,
        policy: AudioPolicy,
        source_format: SourceFormat,
        *,
        budget: ByteBudget | None,
        cancel: CancelToken,
        clip_index: int,
        incremental: bool,
        origin: str,
        decoders: DecoderPool | None,
    ) -> None:
        self._host = host
        self._policy = policy
        self._format = source_format
        self._budget = budget
        self._cancel = cancel
        self._clip_index = clip_index
        self._incremental = incremental
        self._origin = origin
        self._decoders = decoders
        self._digest = hashlib.sha256()
        self._lock = threading.Lock()
        self._state = _SNIFFING
        self._pending = bytearray()  # received, not yet sent on
        self._kept = bytearray()  # every byte, while the stream may still fall back
        self._hold: BudgetHold | None = None
        self._decoder: DecoderStream | None = None
        self._stream: ClipStream | None = None
        self._pcm: _Receiver | None = None
        self._closed = False
        self._container = ""
        self._pages = _OggPages()
        self.received = 0

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk; ``True``: call :meth:`flush` (the decoder has work).

        :raises LimitError: the bytes received pass an encoded-byte limit.
        """
        self._digest.update(chunk)
        self.received += len(chunk)
        self._check_bytes()
        if self._state == _ACCUMULATING:
            self._keep(chunk)
            return False
        if self._state == _PCM:
            return self._feed_pcm(chunk)
        self._pending += chunk
        if self._state == _SNIFFING:
            if not self._sniffable(ended=False):
                return False
            if self._state == _PCM:
                data, self._pending = bytes(self._pending), bytearray()
                return self._feed_pcm(data)
            return True
        return len(self._pending) >= FORWARD_BYTES

    def flush(self) -> None:
        """Send what was gathered to the decoder; push what it decoded."""
        with self._lock:
            self._flush(ended=False)

    def finish(self) -> PreparedClip:
        """The clip: the last bytes decoded and the frontend finished, or the whole-clip
        path run on the accumulated bytes."""
        with self._lock:
            if self.received == 0:
                raise EmptyAudioError(
                    clip_index=self._clip_index, detail="the stream sent no bytes"
                )
            self._flush(ended=True)
            if self._state == _ACCUMULATING:
                return self._whole_clip()
            if self._state == _PCM:
                return self._pcm_clip()
            return self._finish_stream()

    def close(self) -> None:
        """Release the decoder session, the frontend and the held bytes (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            decoder, self._decoder = self._decoder, None
            try:
                if decoder is not None:
                    decoder.close()
            finally:
                if self._stream is not None:
                    self._stream.close()
                if self._pcm is not None:
                    self._pcm.close()
                if self._hold is not None:
                    self._hold.release()
                self._kept = bytearray()
                self._pending = bytearray()

    # -- admission of the bytes --------------------------------------------------------

    def _check_bytes(self) -> None:
        for maximum, limit in (
            (self._policy.max_encoded_bytes_per_clip, "encoded bytes per clip"),
            (self._policy.max_encoded_bytes_per_request, "encoded bytes per request"),
        ):
            if self.received > maximum:
                raise LimitError(
                    limit, actual=self.received, maximum=maximum, clip_index=self._clip_index
                )

    def _keep(self, chunk: bytes | bytearray) -> None:
        """Hold and keep ``chunk`` (a stream that may be prepared as a whole clip)."""
        if self._budget is not None:
            if self._hold is None:
                self._hold = self._budget.hold()
            self._hold.take(len(chunk))
        self._kept += chunk

    # -- what the stream is ------------------------------------------------------------

    def _sniffable(self, *, ended: bool) -> bool:
        """Decide the path once the first bytes tell it; ``True``: :meth:`flush`."""
        declared = self._format.container
        if len(self._pending) < _SNIFF_BYTES and not ended:
            return False
        container = sniff_container(memoryview(bytes(self._pending[:64])))
        if container == "wav" and declared == "auto":
            self._open_pcm()
            return True
        if container == "ogg" and declared in ("ogg", "opus", "auto"):
            body = _first_ogg_page(self._pending)
            if body is None and not ended and len(self._pending) < _MAX_FIRST_PAGE:
                return False
            if body is not None and body.startswith(b"OpusHead"):
                return self._choose(_STREAMING, container)
        if container == "webm" and declared in ("webm", "opus", "auto"):
            # The codec is known once the decoder has read Tracks: a refusal of another
            # codec falls back (the bytes are kept until then).
            return self._choose(_STREAMING, container)
        # Not Opus, or not what was declared: the whole-clip path decides (and refuses
        # with its own error).
        return self._choose(_ACCUMULATING, container or "")

    def _choose(self, state: str, container: str) -> bool:
        self._container = container
        if state == _STREAMING:
            from audiogate.decode.isolation import missing_codecs

            missing = missing_codecs(container, clip_index=self._clip_index, codec="opus")
            if missing is not None:
                raise missing
        elif container in _EXTRA_CONTAINERS:
            from audiogate.decode.isolation import missing_codecs

            missing = missing_codecs(container, clip_index=self._clip_index)
            if missing is not None and container != "webm":
                raise missing  # (WebM of any codec but Opus needs PyAV: known at the end)
        self._state = state
        if state == _ACCUMULATING:
            pending, self._pending = self._pending, bytearray()
            self._keep(pending)
            return False
        return True

    # -- the decoder session -----------------------------------------------------------

    def _flush(self, *, ended: bool) -> None:
        if self._closed:
            raise RuntimeError("the stream is closed")
        if self._state == _SNIFFING:
            self._sniffable(ended=ended)
        if self._state == _PCM:
            data, self._pending = bytes(self._pending), bytearray()
            if data:
                self._feed_pcm(data)
            if self._pcm is not None:
                self._pcm.flush()
            return
        if self._state != _STREAMING:
            return
        data, self._pending = bytes(self._pending), bytearray()
        if self._decoder is None:
            from audiogate.decode.isolation import default_pool

            pool = self._decoders if self._decoders is not None else default_pool()
            self._decoder = pool.open_stream(
                self._container, clip_index=self._clip_index, cancel=self._cancel
            )
        decoder = self._decoder
        if decoder.channels == 0 or self._container == "ogg":
            # Until the codec opens (a WebM of another codec), and for the whole of an
            # Ogg stream (a chained one), the stream may fall back.
            self._keep(data)
        if self._container == "ogg" and self._pages.chained(data):
            self._fall_back()
            return
        try:
            blocks = decoder.feed(data)
            if ended:
                blocks += decoder.finish()
        except DecodeError as refused:
            if refused.code == "unsupported_codec" and decoder.channels == 0:
                # WebM of another codec: the whole-clip path decodes it (PyAV).
                self._decoder = None
                self._state = _ACCUMULATING
                return
            raise
        if decoder.channels and self._kept and self._container == "webm":
            self._drop_kept()
        self._push(blocks)

    def _fall_back(self) -> None:
        """A chained Ogg stream: libsndfile reads one link of a stream; the whole-clip
        path decodes each in turn. The decoder and the frontend are dropped, and the
        kept bytes are prepared at the end."""
        decoder, self._decoder = self._decoder, None
        stream, self._stream = self._stream, None
        try:
            if decoder is not None:
                decoder.close()
        finally:
            if stream is not None:
                stream.close()
        self._state = _ACCUMULATING

    def _drop_kept(self) -> None:
        """The codec is open: the bytes need not be kept for a fallback any more."""
        self._kept = bytearray()
        if self._hold is not None:
            self._hold.shrink(self._hold.nbytes)

    def _push(self, blocks: list[npt.NDArray[np.float32]]) -> None:
        decoder = self._decoder
        if not blocks or decoder is None:
            return
        if self._stream is None:
            header = ClipGeometry(
                container=self._container,  # type: ignore[arg-type]
                encoding="opus",
                rate_hz=decoder.rate_hz,
                channels=decoder.channels,
                frames=0,
                duration_us=0,
                # Admission counts a header's bytes as data_offset + data_length (0 per
                # compressed frame); the bytes received are checked here instead
                # (_check_bytes), so it sees one byte, never "no encoded bytes".
                data_offset=1,
                data_length=0,
            )
            self._stream = open_clip_stream(
                self._host,
                self._policy,
                header,
                budget=self._budget,
                cancel=self._cancel,
                clip_index=self._clip_index,
                incremental=self._incremental,
            )
        for block in blocks:
            self._cancel.check(Checkpoint.DECODE, self._clip_index)
            self._stream.push(block)

    # -- the end -----------------------------------------------------------------------

    def _finish_stream(self) -> PreparedClip:
        from audiogate.streaming.transport import streamed_prepared_clip

        if self._stream is None:
            raise EmptyAudioError(
                clip_index=self._clip_index, detail="the stream decoded to no frames"
            )
        streamed = self._stream.finish()
        return streamed_prepared_clip(
            streamed, sha256=self.sha256, encoded_bytes=self.received, origin=self._origin
        )

    def _whole_clip(self) -> PreparedClip:
        from audiogate.acquire.clip import EncodedClip
        from audiogate.pipeline.preflight import preflight
        from audiogate.pipeline.process import process_request

        clip = EncodedClip(
            data=bytes(self._kept), source_format=self._format, ordinal=1, origin=self._origin
        )
        self._kept = bytearray()
        plan = preflight(self._host, self._policy, [clip], cancel=self._cancel)
        batch = process_request(
            self._host, plan, [clip], cancel=self._cancel, decoders=self._decoders
        )
        return batch.clips[0]

    def _open_pcm(self) -> None:
        from audiogate.streaming.transport import _Receiver

        self._state = _PCM
        self._pcm = _Receiver(
            self._host,
            self._policy,
            SourceFormat("wav"),
            budget=self._budget,
            cancel=self._cancel,
            clip_index=self._clip_index,
            incremental=self._incremental,
        )

    def _feed_pcm(self, data: bytes) -> bool:
        """A WAV stream's bytes to its receiver (admitted at once, O(1)); ``True``: a
        batch is ready for :meth:`flush`."""
        assert self._pcm is not None
        try:
            return self._pcm.feed(data)
        except _CodecWav as codec:
            # ADPCM or GSM 6.10 WAV: a whole clip at the end.
            self._pcm.close()
            self._pcm = None
            self._state = _ACCUMULATING
            self._keep(codec.received)
            return False

    def _pcm_clip(self) -> PreparedClip:
        from audiogate.streaming.transport import streamed_prepared_clip

        assert self._pcm is not None
        streamed = self._pcm.finish()
        return streamed_prepared_clip(
            streamed, sha256=self.sha256, encoded_bytes=self.received, origin=self._origin
        )
