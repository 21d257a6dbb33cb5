"""The library transport: a clip prepared from an async iterator of byte chunks.

:func:`prepare_stream` takes the bytes as they arrive (a client's upload, a WebSocket's
audio events, a microphone), decodes every complete frame of each chunk at once,
downmixes it and pushes it into the clip's streaming frontend
(:func:`~audiogate.streaming.frontend.open_clip_stream`), so that when the last chunk
comes only the frontend's ``finish()`` remains. Two framings:

* raw PCM with a declared format: ``SourceFormat.raw("pcm16" | "f32", rate_hz=...,
  channels=...)``, as in a whole clip's raw declaration;
* a WAV stream (``SourceFormat("wav")``): the RIFF header comes first, up to and
  including the ``data`` chunk's header; its ``fmt`` chunk is validated by the strict
  WAV parser (so every encoding it accepts streams, with the same errors), and the
  ``data`` chunk must be the last chunk (as streaming writers put it). A declared data
  size of 0 or ``0xFFFFFFFF`` (a writer that did not know the length) means "until the
  stream ends"; otherwise the stream must deliver exactly that many bytes.

Compressed streams (:mod:`audiogate.streaming.compressed`): Ogg Opus and WebM Opus
(``SourceFormat("ogg" | "webm" | "opus")``, or ``"auto"``) decode incrementally in a
decoder process; every other container the whole-clip path takes is accumulated (within
the byte budget) and prepared by the whole-clip path when the stream ends.

The result is the :class:`~audiogate.pipeline.prepared.PreparedClip` the whole-clip path
makes of the same bytes (same samples, plan, features and accounting; the digest is the
SHA-256 of every byte received), except that a WAV stream of unknown length is accounted
with the length it turned out to have.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import hashlib
import os
import queue
import struct
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import attrs
import numpy as np

from audiogate.budget import ByteBudget
from audiogate.cancel import NEVER, CancelToken, Checkpoint, cancellable
from audiogate.decode import inspect
from audiogate.decode.geometry import BYTES_PER_SAMPLE, ClipGeometry, SourceFormat
from audiogate.decode.raw import inspect_raw
from audiogate.decode.samples import downmix_encoded, downmix_f32, downmix_pcm16
from audiogate.errors import DecodeError, EmptyAudioError, NonFiniteSampleError
from audiogate.host import FamilyHost
from audiogate.pipeline.prepared import PreparedClip
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy
from audiogate.streaming.deadlines import StreamDeadlines, paced
from audiogate.streaming.frontend import (
    AccumulatingClipStream,
    ClipStream,
    StreamedClip,
    open_clip_stream,
)
from audiogate.streaming.stage import batch_frames

if TYPE_CHECKING:
    from audiogate.decode.isolation import DecoderPool
    from audiogate.metrics import AudioMetrics

__all__ = [
    "MAX_WAV_HEADER_BYTES",
    "prepare_stream",
    "record_stream_waveforms",
    "streamed_prepared_clip",
]

_T = TypeVar("_T")
_Done_co = TypeVar("_Done_co", covariant=True)

#: A WAV stream's chunks before its samples (``fmt``, ``LIST``, ...) may take this much.
MAX_WAV_HEADER_BYTES: Final = 64 << 10
_UNKNOWN_SIZES: Final = (0, 0xFFFFFFFF)
#: PCM16's scale to [-1, 1) (:func:`~audiogate.decode.samples.downmix_pcm16`'s).
_PCM16_SCALE: Final = np.float32(1.0 / 32768)


def _wav_header(buffer: bytes, *, clip_index: int) -> tuple[ClipGeometry, int | None] | None:
    """``(geometry of the header, declared data bytes or None)`` once ``buffer`` holds
    the header up to the ``data`` chunk's, else ``None``.

    :raises DecodeError: the header is invalid (the strict parser's codes), or longer than
        :data:`MAX_WAV_HEADER_BYTES` without a ``data`` chunk.
    """
    position = 12
    block_align = 1
    while position + 8 <= min(len(buffer), MAX_WAV_HEADER_BYTES):
        name = buffer[position : position + 4]
        (size,) = struct.unpack_from("<I", buffer, position + 4)
        if name == b"fmt " and size >= 14 and position + 22 <= len(buffer):
            (block_align,) = struct.unpack_from("<H", buffer, position + 20)
        if name == b"data":
            declared = None if size in _UNKNOWN_SIZES else size
            # The strict parser validates RIFF, fmt and friends on a copy holding one
            # zero frame (sizes patched): any header it refuses is refused here, alike.
            frame = max(1, block_align)
            # (An odd frame, GSM 6.10's 65 bytes, takes its pad byte.)
            probe = bytearray(buffer[: position + 8]) + bytes(frame + (frame & 1))
            struct.pack_into("<I", probe, 4, len(probe) - 8)
            struct.pack_into("<I", probe, position + 4, frame)
            geometry = inspect(
                bytes(probe), clip_index=clip_index, source_format=SourceFormat("wav")
            )
            return geometry, declared
        position += 8 + size + (size & 1)
    if len(buffer) >= MAX_WAV_HEADER_BYTES or position >= MAX_WAV_HEADER_BYTES:
        raise DecodeError(
            f"no data chunk in the first {MAX_WAV_HEADER_BYTES} bytes of the WAV stream",
            clip_index=clip_index,
            code="missing_data",
        )
    return None


#: The most source frames decoded and pushed at once (683 ms at 48 kHz; half a second
#: at most rates, :func:`~audiogate.streaming.stage.batch_frames`): a 20 ms chunk is only
#: admitted when it comes (O(1)); its samples wait at most this long for the frontend.
DECODE_BATCH_FRAMES: Final = 32768
#: Batches handed over together that one push takes, at most (2 s at most rates): fewer
#: pushes spread the frontends' per-call costs, but a push of many seconds costs more
#: than its parts (its temporaries fault in fresh pages, and evict the caches finish()
#: then reads).
MAX_MERGED_BATCHES: Final = 4
#: A stream's tail runs on the event loop itself (no thread woken, none waited for) when
#: its thread is idle at the end and at most this many batches are not yet decoded (a
#: real-time stream's: the last one, and the chunk that began another). The loop is then
#: held for that batch's DSP and ``finish()``: 1 to 2.2 ms after a pause on a shared
#: 2-vCPU VM (0.1 to 1 ms warm), where a thread running them delays the loop's other
#: coroutines by 0.1 to 0.8 ms (the GIL's share) but costs 0.2 to 0.5 ms more CPU and
#: wall time in the tail (docs/streaming.md, "Latency"); ``inline_tail=False`` chooses
#: the thread.
INLINE_TAIL_BATCHES: Final = 2


class _CodecWav(Exception):
    """A WAV stream whose header names a codec the core does not decode in-process
    (ADPCM, GSM 6.10): its ``received`` bytes (all of them so far) go to the
    compressed receiver, which prepares it as a whole clip at the end."""

    def __init__(self, received: bytes) -> None:
        super().__init__("a codec's WAV stream")
        self.received = received


class _Receiver:
    """Bytes in, complete frames decoded and pushed into the clip's frontend.

    :meth:`feed` takes a chunk on the event loop (admission only, O(1)) and says when a
    batch is ready; :meth:`hand_over` gives it to the stream's thread, whose
    :meth:`drain`, :meth:`flush` and :meth:`finish` do the CPU work. A lock makes
    :meth:`close` wait for a batch still in a thread.
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
    ) -> None:
        if source_format.container not in ("raw", "wav"):
            raise ValueError(
                f"this receiver takes raw PCM or WAV, not {source_format.container!r} "
                "(compressed streams: audiogate.streaming.compressed)"
            )
        self._open = (host, policy, budget, cancel, clip_index, incremental)
        self._format = source_format
        self._digest = hashlib.sha256()
        #: The bytes received and not yet handed over or decoded (one buffer for the
        #: stream's life: :meth:`feed`'s fast path, inlined by the transport, appends to it).
        self.pending = bytearray()
        self._announced = 0  # complete frames in pending, already admitted
        self._header_bytes = 0  # a WAV stream's bytes before its samples
        #: :meth:`feed` only appends while :attr:`pending` is shorter than this many bytes
        #: (:meth:`_quiet_bytes`): no frame to admit past the reservation, no batch ready.
        self.quiet_until = 0
        self._frame_bytes = 1
        self._batch = DECODE_BATCH_FRAMES
        self._header: ClipGeometry | None = None
        self._declared: int | None = None
        self._data_bytes = 0
        self.stream: ClipStream | None = None
        self._decoded = 0  # frames decoded and pushed (in the stream's thread)
        self._lock = threading.Lock()
        self._closed = False
        # Batches handed to the stream's thread (:meth:`hand_over`) and not yet taken by
        # its next :meth:`drain`, which decodes and pushes them as one.
        self._handover = threading.Lock()
        self._ready: list[bytes] = []
        self._ready_bytes = 0
        self._drain_due = False  # a drain is posted and has not yet taken _ready
        if source_format.container == "raw":
            assert source_format.encoding is not None
            assert source_format.channels is not None
            self._start(
                inspect_raw(
                    BYTES_PER_SAMPLE[source_format.encoding] * source_format.channels,
                    source_format,
                    clip_index=clip_index,
                )
            )

    @property
    def received(self) -> int:
        """Bytes received so far."""
        return self._header_bytes + self._data_bytes + len(self.pending)

    @property
    def _data_seen(self) -> int:
        """Data bytes received (decoded or pending)."""
        return self._data_bytes + len(self.pending)

    def _start(self, header: ClipGeometry) -> None:
        host, policy, budget, cancel, clip_index, incremental = self._open
        self._header = header
        self._frame_bytes = header.frame_bytes
        self._batch = min(DECODE_BATCH_FRAMES, batch_frames(header.rate_hz))
        self.stream = open_clip_stream(
            host,
            policy,
            header,
            budget=budget,
            cancel=cancel,
            clip_index=clip_index,
            incremental=incremental,
        )

    def feed(self, chunk: bytes) -> bool:
        """Take the next bytes (any bytes-like object): each chunk's complete frames are
        admitted at once (the chunk that crosses a limit is refused). ``True``: a batch of
        half a second (:func:`~audiogate.streaming.stage.batch_frames`, at most
        :data:`DECODE_BATCH_FRAMES`) is pending; :meth:`take_batch` or :meth:`flush`
        takes it. Per chunk, O(1): the bytes are appended, and only a chunk that
        completes a batch or goes past the frames the frontend admitted and reserved
        ahead (:attr:`~audiogate.streaming.frontend.ClipStream.admitted_ahead`) calls
        admission (the bytes are hashed a batch at a time, as they are decoded)."""
        pending = self.pending
        pending += chunk
        if len(pending) < self.quiet_until:
            return False
        return self.arrived()

    def arrived(self) -> bool:
        """:meth:`feed`'s slow path, once the chunk is appended to :attr:`pending` and
        that reached :attr:`quiet_until`: the header, the WAV's declared size, admission of
        the complete frames pending, and whether a batch is ready."""
        if self._header is None:
            buffer = bytes(self.pending)
            _, _, _, _, clip_index, _ = self._open
            found = _wav_header(buffer, clip_index=clip_index)
            if found is None:
                self.quiet_until = len(buffer) + 1
                return False
            geometry, self._declared = found
            if not geometry.in_process:
                # ADPCM or GSM 6.10: a codec's WAV, decoded as a whole clip at the end.
                raise _CodecWav(buffer)
            self._header_bytes = geometry.data_offset
            self._digest.update(buffer[: geometry.data_offset])
            del self.pending[: geometry.data_offset]
            self._start(geometry)
        if self._declared is not None and self._data_seen > self._declared:
            raise DecodeError(
                f"the WAV stream goes on past its declared {self._declared}-byte data "
                "chunk (the data chunk must be the last)",
                clip_index=self._open[4],
                code="riff_size_mismatch",
            )
        self._announce()
        return self._announced >= self._batch

    def _announce(self) -> None:
        """Admit the complete frames pending not yet admitted, and set the next
        threshold of :meth:`feed`'s fast path."""
        stream = self.stream
        assert stream is not None
        frames = len(self.pending) // self._frame_bytes
        if frames > self._announced:
            stream.admit(frames - self._announced)
            self._announced = frames
        self.quiet_until = self._quiet_bytes(stream)

    def admit_pending(self) -> None:
        """On the loop at the stream's end: admit the complete frames not yet admitted
        (within the reservation: no check can refuse them), so ``finish()`` admits none."""
        if self.stream is not None and not self._closed:
            self._announce()

    def _quiet_bytes(self, stream: ClipStream) -> int:
        """The length ``pending`` may grow to (exclusive) with nothing to do: the
        frames up to it are admitted and reserved already, no batch is complete, and a
        WAV's declared data is not exceeded."""
        frames = min(self._batch, self._announced + stream.admitted_ahead + 1)
        until = frames * self._frame_bytes
        if self._declared is not None:
            until = min(until, self._declared - self._data_bytes + 1)
        return until

    def flush(self) -> None:
        """Decode and push the complete frames pending (the CPU work of a batch)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream is closed")
            self._drain()
            if self.stream is not None:
                self._announce()
            if self._announced:
                self._decode(*self._cut())

    def hand_over(self) -> bool:
        """On the loop: hand the complete frames pending to the stream's thread.
        ``True``: no :meth:`drain` is due to take them: post one.

        Batches handed over while the thread is busy, or not yet woken (a producer
        ahead of the DSP), wait for one drain, which decodes and pushes them as one
        batch: the faster the chunks come, the larger the batches."""
        data, _ = self._cut()
        with self._handover:
            self._ready.append(data)
            self._ready_bytes += len(data)
            if self._drain_due:
                return False
            self._drain_due = True
            return True

    def tail_inline_ok(self) -> bool:
        """On the loop at the stream's end: whether its tail (the frames not yet
        decoded, and ``finish()``) is short enough to run on the loop itself: an
        incremental frontend (an accumulating one runs the whole clip's stages in
        ``finish()``) and at most :data:`INLINE_TAIL_BATCHES` batches not yet decoded."""
        stream = self.stream
        if stream is None or isinstance(stream, AccumulatingClipStream) or self._closed:
            return False
        frames = (self._ready_bytes + len(self.pending)) // self._frame_bytes
        return frames <= INLINE_TAIL_BATCHES * self._batch

    @property
    def handed_bytes(self) -> int:
        """Bytes handed over and not yet taken by a :meth:`drain`."""
        return self._ready_bytes

    def drain(self) -> None:
        """In the stream's thread: decode and push every batch handed over, as one."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream is closed")
            self._drain()

    def _drain(self) -> None:
        with self._handover:
            ready, self._ready = self._ready, []
            self._ready_bytes = 0
            self._drain_due = False
        most = MAX_MERGED_BATCHES * self._batch * self._frame_bytes
        group: list[bytes] = []
        size = 0
        for data in ready:
            if group and size + len(data) > most:
                self._decode_group(group, size)
                group, size = [], 0
            group.append(data)
            size += len(data)
        if group:
            self._decode_group(group, size)

    def _decode_group(self, group: list[bytes], size: int) -> None:
        data = group[0] if len(group) == 1 else b"".join(group)
        self._decode(data, size // self._frame_bytes)

    def _cut(self) -> tuple[bytes, int]:
        """``(bytes, frames)`` of the complete frames pending, taken out of the buffer."""
        frames = self._announced
        nbytes = frames * self._frame_bytes
        with memoryview(self.pending) as pending:
            data = bytes(pending[:nbytes])  # (one copy, not a slice's and then bytes')
        del self.pending[:nbytes]
        self._announced = 0
        self._data_bytes += nbytes
        assert self.stream is not None
        self.quiet_until = self._quiet_bytes(self.stream)
        return data, frames

    def _decode(self, data: bytes | bytearray, frames: int) -> None:
        """Decode ``frames`` frames of ``data`` and push them.

        The whole clip's decoder's sample functions (:mod:`audiogate.decode.samples`),
        called directly: the batch's shape is the transport's own (admission checked
        the running length), so :func:`~audiogate.decode.decode`'s checks of a clip's
        geometry would only add Python work (a tenth of it hot, ten times that on a
        thread woken cold, as the last batch's is)."""
        header, stream = self._header, self.stream
        assert header is not None
        assert stream is not None
        # A finished stream has decoded every byte after its header: all are hashed.
        self._digest.update(data)
        clip_index, cancel = self._open[4], self._open[3]
        channels, encoding = header.channels, header.encoding
        bad: int | None = None
        if encoding == "pcm16" and channels == 1:
            # Mono PCM16, the common stream: one ufunc that allocates its output (the
            # decoder's loop, :func:`~audiogate.decode.samples.downmix_pcm16`, makes the
            # same float32 values: int16 -> float32 and a power-of-two scale are exact;
            # 4 NumPy calls fewer, 35 to 45 µs of a cold tail's last batch).
            cancel.check(Checkpoint.DECODE, clip_index)
            pcm = np.frombuffer(data, dtype="<i2", count=frames)
            out = np.multiply(pcm, _PCM16_SCALE, dtype=np.float32)
        elif encoding == "pcm16":
            out = np.empty(frames, dtype=np.float32)
            pcm = np.frombuffer(data, dtype="<i2", count=frames * channels)
            downmix_pcm16(pcm, out, channels=channels, clip_index=clip_index, cancel=cancel)
        elif encoding == "f32":
            out = np.empty(frames, dtype=np.float32)
            flt = np.frombuffer(data, dtype="<f4", count=frames * channels)
            bad = downmix_f32(flt, out, channels=channels, clip_index=clip_index, cancel=cancel)
        else:
            out = np.empty(frames, dtype=np.float32)
            bad = downmix_encoded(
                memoryview(data),
                out,
                encoding=encoding,
                data_offset=0,
                channels=channels,
                clip_index=clip_index,
                cancel=cancel,
            )
        if bad is not None:
            # (The frame's index in the clip, as the whole clip's decode names it.)
            raise NonFiniteSampleError(clip_index=clip_index, frame=self._decoded + bad)
        self._decoded += frames
        out.flags.writeable = False
        stream.push(out)

    def finish(self) -> StreamedClip:
        """The last frames decoded and the frontend finished (CPU work: off the loop)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream is closed")
            return self._finish()

    def prepared(self, origin: str) -> PreparedClip:
        """:meth:`finish`, and the clip made of it (in the stream's thread, which has
        just run ``finish()``: the loop, woken cold after its wait, has less to do)."""
        return streamed_prepared_clip(
            self.finish(), sha256=self.sha256, encoded_bytes=self.received, origin=origin
        )

    def _finish(self) -> StreamedClip:
        clip_index = self._open[4]
        if self.stream is None:
            if self.received == 0:
                raise EmptyAudioError(clip_index=clip_index, detail="the stream sent no bytes")
            raise DecodeError(
                "the WAV stream ended inside its header", clip_index=clip_index, code="too_short"
            )
        assert self._header is not None
        self._drain()
        self._announce()  # (frames within the reservation: admitted without a check)
        partial = len(self.pending) - self._announced * self._header.frame_bytes
        if partial:
            raise DecodeError(
                f"the stream ended inside a frame ({partial} trailing bytes)",
                clip_index=clip_index,
                code="partial_frame",
            )
        if self._declared is not None and self._data_seen != self._declared:
            raise DecodeError(
                f"the WAV stream ended after {self._data_seen} of its declared "
                f"{self._declared} data bytes",
                clip_index=clip_index,
                code="chunk_past_end",
            )
        if self._announced:
            # Every byte pending is a whole frame now: decoded where it lies (a batch
            # handed over is cut out of the buffer, a copy, as more bytes come after it).
            nbytes = len(self.pending)
            self._decode(self.pending, self._announced)
            self._data_bytes += nbytes
            self._announced = 0
            self.pending.clear()
        if self._data_bytes == 0:
            raise EmptyAudioError(clip_index=clip_index, detail="no samples")
        return self.stream.finish()

    def close(self) -> None:
        """Release the frontend's reservation (idempotent; waits for a batch in flight)."""
        with self._lock:
            self._closed = True
            with self._handover:
                self._ready.clear()
                self._ready_bytes = 0
            if self.stream is not None:
                self.stream.close()

    @property
    def sha256(self) -> str:
        """The SHA-256 of every byte received (read once :meth:`finish` returned: the
        bytes are hashed as their batches are decoded)."""
        return self._digest.hexdigest()


class _Call(Generic[_T]):
    """One awaited piece of work for a :class:`_Lane`, and the loop's future of it."""

    def __init__(self, work: Callable[[], _T], loop: asyncio.AbstractEventLoop) -> None:
        self._work = work
        self._loop = loop
        # As asyncio.to_thread: the work sees the awaiting task's context variables.
        self._context = contextvars.copy_context()
        self.future: asyncio.Future[_T] = loop.create_future()
        self.finished = False  # (read and written on the loop only)

    def run(self, lane: _Lane) -> Callable[[], None]:
        """In a stream thread: the work (not after an earlier work of the lane failed:
        that error is the outcome); returns what hands its outcome to the loop (called
        by :meth:`_Lane.drain` once it let the lane go, if this was its last piece)."""
        result: Any = None
        error = lane.error
        if error is None:
            try:
                result = self._context.run(self._work)
            except BaseException as exc:
                error = exc
        return functools.partial(self._hand, result, error)

    def _hand(self, result: Any, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._resolve, result, error)

    def _resolve(self, result: Any, error: BaseException | None) -> None:
        self.finished = True
        if self.future.done():  # cancelled with the awaiting task
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


class _Posted:
    """One piece of work handed to a :class:`_Lane` without waiting: its error, if any,
    is kept on the lane (and the lane's later work is skipped)."""

    __slots__ = ("_context", "_work")

    def __init__(self, work: Callable[[], object]) -> None:
        self._work = work
        self._context = contextvars.copy_context()

    def run(self, lane: _Lane) -> None:
        if lane.error is None:
            try:
                self._context.run(self._work)
            except BaseException as exc:
                lane.error = exc
                lane.stopped = True
        return None


#: Bytes handed to a stream's thread and not yet taken, at most, before the loop waits
#: for them (a producer faster than the DSP: 32 s of 16 kHz mono PCM16). A real-time
#: stream never has more than one batch pending.
MAX_BACKLOG_BYTES: Final = 1 << 20


class _Lane:
    """One stream's work, run in order on the process's stream threads
    (:class:`_StreamWorkers`).

    The loop posts work (:meth:`post`) without waiting for it (no wake-up of the loop
    per batch; an error is raised on the loop at its next chunk) and without waking a
    thread until the posting task yields to the loop; it calls (:meth:`call`) what it
    needs the result of (``finish()``). A thread that takes the lane runs every piece
    queued by then. :meth:`settle` drops what has not started and waits, without
    blocking the loop, for what has.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, blocking: bool = False) -> None:
        self._loop = loop
        #: Its work may block on another resource (a compressed stream's decoder process):
        #: it runs on the uncapped pool (:func:`_workers`).
        self._blocking = blocking
        self._lock = threading.Lock()
        self._queue: collections.deque[_Call[Any] | _Posted] = collections.deque()
        self._scheduled = False  # a thread has (or will take) the lane
        self._kicking = False  # a _kick is due on the loop (read and written there only)
        self.error: BaseException | None = None  # the first posted work's error
        #: A posted work failed or the stream's token was cancelled (:meth:`stop`): what
        #: the loop reads at every chunk, one attribute, before it checks which.
        self.stopped = False

    def stop(self) -> None:
        """Set :attr:`stopped` (from any thread: the token's ``on_cancel``)."""
        self.stopped = True

    def _put(self, item: _Call[Any] | _Posted, *, later: bool = False) -> None:
        """Queue ``item``; wake a thread for the lane now, or with ``later`` once the
        task that posted it yields to the loop (:meth:`_kick`)."""
        with self._lock:
            self._queue.append(item)
            if self._scheduled or (later and self._kicking):
                return
            if not later:
                self._scheduled = True
        if later:
            self._kicking = True
            self._loop.call_soon(self._kick)
            return
        _workers(blocking=self._blocking).schedule(self)

    def _kick(self) -> None:
        """On the loop, once the task that posted yielded: wake a thread for the lane."""
        self._kicking = False
        with self._lock:
            if self._scheduled or not self._queue:
                return
            self._scheduled = True
        _workers(blocking=self._blocking).schedule(self)

    def drain(self) -> None:
        """In a stream thread: run the queued pieces in order until none is left.

        A call's outcome is handed to the loop after the lane is let go when it was the
        last piece, so the loop, woken by it, finds the lane idle (:meth:`settle` then
        returns at once instead of waiting for one more round trip)."""
        while True:
            with self._lock:
                if not self._queue:
                    self._scheduled = False
                    return
                item = self._queue.popleft()
            hand = item.run(self)
            if hand is not None:
                with self._lock:
                    last = not self._queue
                    if last:
                        self._scheduled = False
                hand()  # (the lane's work is done: only the loop's future is touched)
                if last:
                    return

    def claim(self) -> bool:
        """On the loop: take the lane for work run inline, if no thread has it (the
        posted pieces not yet taken are dropped: the inline work must do theirs)."""
        with self._lock:
            if self._scheduled:
                return False
            self._queue.clear()
            self._scheduled = True
            return True

    def release(self) -> None:
        """Let the lane go after :meth:`claim`."""
        with self._lock:
            self._scheduled = False

    def check(self) -> None:
        """Raise the error of a posted piece, if one failed."""
        if self.error is not None:
            raise self.error

    def post(self, work: Callable[[], object]) -> None:
        """On the loop: hand ``work`` to the stream's thread, not waiting for it.

        The thread is woken once the awaiting task yields to the loop (the producer has
        nothing more in hand), not at once: a producer that has many chunks ready runs
        ahead alone and the thread then takes every batch posted meanwhile in one wake
        (the two running at once, the GIL passing between them, cost a quarter more CPU
        than the same work one after the other). A thread already on the lane takes it
        as it comes."""
        self._put(_Posted(work), later=True)

    async def call(self, work: Callable[[], _T], cancel: CancelToken) -> _T:
        """``work()`` in the stream's thread after every piece before it.

        A thread cannot be interrupted: when the awaiting task is cancelled, ``cancel``
        is (so the work stops at its next checkpoint); :meth:`settle` then waits for it.
        """
        call = _Call(work, self._loop)
        self._put(call)
        try:
            return await call.future
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                cancel.cancel()
            first = call.future
            if first.done() and not first.cancelled():
                first.exception()  # retrieved: the thread's error is the cancellation's
            raise

    async def settle(self, cancel: CancelToken = NEVER) -> None:
        """Drop the pieces not started and wait until the one running (if any) is done,
        so the caller releases the stream's reservation only once no thread uses it.

        Cancelled meanwhile (the awaiting task, any number of times), it cancels
        ``cancel`` (the piece stops at its next checkpoint), still waits, and then
        raises the cancellation."""
        with self._lock:
            self._queue.clear()
            if not self._scheduled:
                return
        call = _Call(_nothing, self._loop)
        self._put(call)
        cancelled: asyncio.CancelledError | None = None
        while not call.finished:
            try:
                await call.future
            except asyncio.CancelledError as exc:
                cancelled = exc
                with contextlib.suppress(BaseException):
                    cancel.cancel()
                if not call.finished:
                    call.future = self._loop.create_future()  # (the first went with it)
            except BaseException:
                pass  # (a posted piece's error: the caller had it, or has another)
        if cancelled is not None:
            raise cancelled


def _nothing() -> None:
    return None


#: The most threads at once of the pool that PCM streams share (started as streams need
#: them). Their work is CPU only: a lane waiting for a thread waits only for other
#: streams' batches. Compressed streams, whose flush may wait for one of the decoder
#: pool's processes (held by another stream until it ends), run on a pool of their own
#: without a cap: in a capped pool, streams waiting for a decoder could hold every thread
#: while the streams holding the decoders waited for one.
MAX_STREAM_THREADS: Final = 64


class _StreamWorkers:
    """The process's stream threads: daemons that take lanes with work, started as
    needed and kept, so their per-thread DSP scratch
    (:func:`~audiogate.dsp.scratch.thread_scratch`) serves stream after stream (a fresh
    thread per stream paid its page faults, a third of a 30 s clip's DSP)."""

    def __init__(self, max_threads: int | None) -> None:
        self._max_threads = max_threads
        self._lanes: queue.SimpleQueue[_Lane] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0

    def schedule(self, lane: _Lane) -> None:
        self._lanes.put(lane)
        if self._idle.acquire(blocking=False):
            return  # a thread waiting on the queue takes it
        with self._lock:
            if self._max_threads is not None and self._threads >= self._max_threads:
                return  # the next thread done with its lane takes it
            self._threads += 1
            name = f"audiogate-stream-{self._threads}"
        # A daemon: the interpreter's exit never waits for a stream abandoned mid-batch.
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._lanes.get().drain()
            self._idle.release()


#: The process's two pools, by ``blocking`` (made at first use).
_WORKERS: dict[bool, _StreamWorkers] = {}
_WORKERS_LOCK = threading.Lock()


def _workers(*, blocking: bool = False) -> _StreamWorkers:
    """The pool of PCM streams (capped at :data:`MAX_STREAM_THREADS`), or with
    ``blocking`` the compressed streams' (uncapped)."""
    workers = _WORKERS.get(blocking)
    if workers is None:
        with _WORKERS_LOCK:
            workers = _WORKERS.get(blocking)
            if workers is None:
                workers = _WORKERS[blocking] = _StreamWorkers(
                    None if blocking else MAX_STREAM_THREADS
                )
    return workers


def _forget_workers_after_fork() -> None:
    # A forked child inherits the pool objects but not their threads.
    global _WORKERS_LOCK
    _WORKERS.clear()
    _WORKERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers_after_fork)


def streamed_prepared_clip(
    streamed: StreamedClip, *, sha256: str, encoded_bytes: int, origin: str = "stream"
) -> PreparedClip:
    """The :class:`PreparedClip` of a finished stream, as the whole-clip path makes it."""
    clip_plan = streamed.clip_plan
    geometry, features = clip_plan.geometry, streamed.features
    rate = clip_plan.resample.output_rate_hz
    return PreparedClip(
        index=clip_plan.index,
        ordinal=clip_plan.index + 1,
        origin=origin,
        sha256=sha256,
        encoded_bytes=encoded_bytes,
        source_rate_hz=geometry.rate_hz,
        channels=geometry.channels,
        source_samples=geometry.frames,
        duration_us=geometry.duration_us,
        normalized_samples=clip_plan.normalized_samples,
        effective_rate_hz=rate,
        frames=features.frames,
        tokens=features.tokens,
        received_duration_us=geometry.duration_us,
        processed_duration_us=(
            clip_plan.normalized_samples * MICROS_PER_SECOND // rate
            if clip_plan.truncated
            else geometry.duration_us
        ),
        truncated=clip_plan.truncated,
        waveform=streamed.waveform,
        features=features,
        detail=clip_plan.features.detail,
    )


def record_stream_waveforms(metrics: AudioMetrics, family: str, clip: PreparedClip) -> None:
    """Count a prepared stream's waveform and feature accounting (source seconds and
    samples, normalized samples, frames, tokens) as a whole-clip request's are counted
    once its stages ran (``AudioMetrics.record_waveforms``)."""
    metrics.record_waveforms(
        family,
        source_duration_us=clip.duration_us,
        source_samples=clip.source_samples,
        normalized_samples=clip.normalized_samples,
        frames=clip.frames,
        tokens=clip.tokens,
    )


async def prepare_stream(
    host: FamilyHost,
    policy: AudioPolicy,
    chunks: AsyncIterable[bytes],
    *,
    source_format: SourceFormat,
    budget: ByteBudget | None = None,
    cancel: CancelToken = NEVER,
    clip_index: int = 0,
    incremental: bool = True,
    origin: str = "stream",
    decoders: DecoderPool | None = None,
    deadlines: StreamDeadlines | None = None,
    inline_tail: bool = True,
) -> PreparedClip:
    """Prepare one clip from byte chunks as they arrive.

    :param host: the plugin host (``AudioGate.host``).
    :param policy: the loaded model's policy (``AudioGate.policy``).
    :param chunks: the clip's bytes, in order, in chunks of any size.
    :param source_format: ``SourceFormat.raw(...)``, ``SourceFormat("wav")``, or a
        compressed container (``"ogg"``, ``"webm"``, ``"opus"``: decoded as they arrive;
        the others, and ``"auto"``: see :mod:`audiogate.streaming.compressed`).
    :param budget: where the stream's bytes are held while it runs; released exactly
        once, however the stream ends.
    :param cancel: polled at every chunk; cancelling the awaiting task cancels it (and
        closes the stream once a batch running in a thread has stopped).
    :param incremental: ``False``: accumulate and run the whole-clip stages at the end.
    :param decoders: the process pool of compressed streams (default: the process-wide
        one, :func:`audiogate.decode.isolation.default_pool`).
    :param deadlines: cut a stream that stalls or is too slow
        (:func:`~audiogate.streaming.deadlines.paced`; ``StreamTimeoutError``).
    :param inline_tail: a raw PCM or WAV stream whose thread is idle at the end (it
        caught up) runs its last batch and ``finish()`` on the event loop, not in the
        thread (:data:`INLINE_TAIL_BATCHES`; docs/streaming.md, "Latency"); ``False``:
        always in the thread.
    :returns: the clip, as the whole-clip path prepares the same bytes.
    :raises LimitError: at the chunk that crosses a limit (the whole clip's error).
    :raises MemoryLimitError: the stream's bytes do not fit ``budget``.
    :raises DecodeError: malformed bytes (the whole clip's codes).
    :raises CodecsUnavailableError: the container's decoder extra is not installed.
    :raises PreprocessCancelled: ``cancel`` was cancelled.
    :raises StreamTimeoutError: ``deadlines`` cut the stream.
    """
    if deadlines is not None:
        chunks = paced(chunks, deadlines)
    call = _StreamCall(
        host=host,
        policy=policy,
        source_format=source_format,
        budget=budget,
        # The token the batches in threads are stopped with when the awaiting task is
        # cancelled (NEVER cannot be).
        cancel=cancellable(cancel),
        clip_index=clip_index,
        incremental=incremental,
        origin=origin,
        decoders=decoders,
        inline_tail=inline_tail,
    )
    iterator = aiter(chunks)
    try:
        if source_format.container in ("raw", "wav"):
            return await _prepare_pcm(call, iterator)
        return await _prepare_compressed(call, iterator)
    finally:
        # The caller's generator ends here, on every path (not when it is collected).
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


@attrs.frozen(kw_only=True)
class _StreamCall:
    """What :func:`prepare_stream` was asked, handed to the path its container takes."""

    host: FamilyHost
    policy: AudioPolicy
    source_format: SourceFormat
    budget: ByteBudget | None
    cancel: CancelToken
    clip_index: int
    incremental: bool
    origin: str
    decoders: DecoderPool | None
    inline_tail: bool


class _Feeding(Protocol[_Done_co]):
    """A receiver: fed on the loop, flushed and finished off it."""

    def feed(self, chunk: bytes) -> bool: ...
    def flush(self) -> None: ...
    def finish(self) -> _Done_co: ...


async def _receive(
    receiver: _Feeding[_Done_co],
    chunks: AsyncIterator[bytes],
    call: _StreamCall,
    received: bytes = b"",
) -> _Done_co:
    """Feed ``received`` then every chunk to ``receiver`` on the loop, flush each batch it
    asks for and finish it in the stream's thread (a compressed stream's: one awaited hop
    per flush, as each reads the receiver's pending bytes; the flush may wait for a decoder
    process, so the lane is a blocking one)."""
    cancel, clip_index = call.cancel, call.clip_index
    lane = _Lane(asyncio.get_running_loop(), blocking=True)
    try:
        if received and receiver.feed(received):
            await lane.call(receiver.flush, cancel)
        async for chunk in chunks:
            cancel.check(Checkpoint.DECODE, clip_index)
            if receiver.feed(bytes(chunk)):
                await lane.call(receiver.flush, cancel)
        cancel.check(Checkpoint.DECODE, clip_index)
        return await lane.call(receiver.finish, cancel)
    finally:
        await lane.settle(cancel)


async def _receive_pcm(
    receiver: _Receiver, chunks: AsyncIterator[bytes], call: _StreamCall
) -> PreparedClip:
    """Feed every chunk to ``receiver`` on the loop, hand each batch to the stream's
    thread without waiting for it (:meth:`_Receiver.hand_over`, :meth:`_Lane.post`: the
    loop pays no wake-up per batch, the thread is woken when the producer makes the task
    wait, and takes every batch handed over by then; a batch's error is raised at the
    next chunk) and await ``finish()`` there, or run it on the loop when the thread is
    idle and little is left (:meth:`_Receiver.tail_inline_ok`: no thread to wake)."""
    cancel, clip_index = call.cancel, call.clip_index
    lane = _Lane(asyncio.get_running_loop())
    # :meth:`_Receiver.feed` inlined: per chunk, the bytes appended and one comparison
    # (a call per chunk was a tenth of the transport's CPU: ~0.15 ms of a 30 s stream).
    pending = receiver.pending
    forget = cancel.on_cancel(lane.stop)
    try:
        async for chunk in chunks:
            if lane.stopped:  # (one attribute per chunk; the token's poll is a call)
                cancel.check(Checkpoint.DECODE, clip_index)
                lane.check()
            pending += chunk
            if len(pending) >= receiver.quiet_until and receiver.arrived():
                if receiver.hand_over():
                    lane.post(receiver.drain)
                if receiver.handed_bytes > MAX_BACKLOG_BYTES:
                    await lane.call(_nothing, cancel)  # a producer faster than the DSP
        cancel.check(Checkpoint.DECODE, clip_index)
        receiver.admit_pending()
        if call.inline_tail and receiver.tail_inline_ok() and lane.claim():
            try:
                lane.check()
                return receiver.prepared(call.origin)
            finally:
                lane.release()
        return await lane.call(functools.partial(receiver.prepared, call.origin), cancel)
    except asyncio.CancelledError:
        # As an awaited call's (_Lane.call): a batch in a thread stops at its next
        # checkpoint, so settle() below waits for less.
        with contextlib.suppress(BaseException):
            cancel.cancel()
        raise
    finally:
        forget()
        await lane.settle(cancel)


async def _prepare_compressed(
    call: _StreamCall, chunks: AsyncIterator[bytes], received: bytes = b""
) -> PreparedClip:
    """A compressed stream (:mod:`audiogate.streaming.compressed`; the decoder process's
    answers are waited for off the event loop); ``received``: bytes that came before
    ``chunks`` (a codec's WAV handed over)."""
    from audiogate.streaming.compressed import CompressedReceiver

    receiver = CompressedReceiver(
        call.host,
        call.policy,
        call.source_format,
        budget=call.budget,
        cancel=call.cancel,
        clip_index=call.clip_index,
        incremental=call.incremental,
        origin=call.origin,
        decoders=call.decoders,
    )
    try:
        return await _receive(receiver, chunks, call, received)
    finally:
        receiver.close()


async def _prepare_pcm(call: _StreamCall, chunks: AsyncIterator[bytes]) -> PreparedClip:
    """A raw PCM or WAV stream: admitted chunk by chunk on the loop, decoded and pushed
    a batch at a time, and finished, in a thread; a codec's WAV is handed to the
    compressed receiver."""
    receiver = _Receiver(
        call.host,
        call.policy,
        call.source_format,
        budget=call.budget,
        cancel=call.cancel,
        clip_index=call.clip_index,
        incremental=call.incremental,
    )
    try:
        return await _receive_pcm(receiver, chunks, call)
    except _CodecWav as codec:
        receiver.close()
        return await _prepare_compressed(call, chunks, codec.received)
    finally:
        receiver.close()
