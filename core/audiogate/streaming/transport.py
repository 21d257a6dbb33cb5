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
import contextlib
import contextvars
import hashlib
import queue
import struct
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import attrs

from audiogate.budget import ByteBudget
from audiogate.cancel import NEVER, CancelToken, Checkpoint, cancellable
from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.decode.geometry import BYTES_PER_SAMPLE, ClipGeometry, SourceFormat
from audiogate.decode.raw import inspect_raw
from audiogate.errors import DecodeError, EmptyAudioError
from audiogate.host import FamilyHost
from audiogate.pipeline.prepared import PreparedClip
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy
from audiogate.streaming.deadlines import StreamDeadlines, paced
from audiogate.streaming.frontend import ClipStream, StreamedClip, open_clip_stream
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


class _CodecWav(Exception):
    """A WAV stream whose header names a codec the core does not decode in-process
    (ADPCM, GSM 6.10): its ``received`` bytes (all of them so far) go to the
    compressed receiver, which prepares it as a whole clip at the end."""

    def __init__(self, received: bytes) -> None:
        super().__init__("a codec's WAV stream")
        self.received = received


def _chunk_geometry(header: ClipGeometry, frames: int) -> ClipGeometry:
    return attrs.evolve(
        header,
        frames=frames,
        duration_us=frames * MICROS_PER_SECOND // header.rate_hz,
        data_offset=0,
        data_length=frames * header.frame_bytes,
    )


class _Receiver:
    """Bytes in, complete frames decoded and pushed into the clip's frontend.

    :meth:`feed` takes a chunk on the event loop (admission only, O(1)) and says when a
    batch is ready; :meth:`flush` and :meth:`finish` do the CPU work, off the loop
    (:func:`_off_loop`). A lock makes :meth:`close` wait for a batch still in a thread.
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
        self._received = 0
        self._pending = bytearray()
        self._announced = 0  # complete frames in _pending, already admitted
        self._data_seen = 0  # data bytes received (decoded or pending)
        self._frame_bytes = 1
        self._batch = DECODE_BATCH_FRAMES
        self._header: ClipGeometry | None = None
        self._declared: int | None = None
        self._data_bytes = 0
        self.stream: ClipStream | None = None
        self._limits: DecodeLimits | None = None
        self._lock = threading.Lock()
        self._closed = False
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
        return self._received

    def _start(self, header: ClipGeometry) -> None:
        host, policy, budget, cancel, clip_index, incremental = self._open
        self._header = header
        self._frame_bytes = header.frame_bytes
        self._batch = min(DECODE_BATCH_FRAMES, batch_frames(header.rate_hz))
        # The policy's source limits are admission's (on the running length); a chunk's
        # decode checks only its own shape.
        self._limits = DecodeLimits(
            max_rate_hz=max(header.rate_hz, 1), max_channels=header.channels
        )
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
        """Take the next bytes: each chunk's complete frames are admitted at once (the
        chunk that crosses a limit is refused). ``True``: a batch of half a second
        (:func:`~audiogate.streaming.stage.batch_frames`, at most
        :data:`DECODE_BATCH_FRAMES`) is pending; :meth:`flush` decodes and pushes it.
        Per-chunk work is O(1) arithmetic (the bytes are hashed a batch at a time, as
        they are decoded)."""
        self._received += len(chunk)
        if self._header is None:
            buffer = bytes(self._pending) + chunk if self._pending else chunk
            _, _, _, _, clip_index, _ = self._open
            found = _wav_header(buffer, clip_index=clip_index)
            if found is None:
                self._pending = bytearray(buffer)
                return False
            geometry, self._declared = found
            if not geometry.in_process:
                # ADPCM or GSM 6.10: a codec's WAV, decoded as a whole clip at the end.
                raise _CodecWav(bytes(buffer))
            self._digest.update(buffer[: geometry.data_offset])
            self._pending = bytearray(buffer[geometry.data_offset :])
            self._data_seen = len(self._pending)
            self._start(geometry)
        else:
            self._pending += chunk
            self._data_seen += len(chunk)
        header, stream = self._header, self.stream
        assert header is not None
        assert stream is not None
        if self._declared is not None and self._data_seen > self._declared:
            raise DecodeError(
                f"the WAV stream goes on past its declared {self._declared}-byte data "
                "chunk (the data chunk must be the last)",
                clip_index=self._open[4],
                code="riff_size_mismatch",
            )
        frames = len(self._pending) // self._frame_bytes
        if frames > self._announced:
            stream.admit(frames - self._announced)
            self._announced = frames
        return frames >= self._batch

    def flush(self) -> None:
        """Decode and push the complete frames pending (the CPU work of a batch)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream is closed")
            if self._announced:
                self._decode(self._announced)

    def _decode(self, frames: int) -> None:
        """Decode the first ``frames`` pending frames and push them."""
        header, stream, limits = self._header, self.stream, self._limits
        assert header is not None
        assert stream is not None
        assert limits is not None
        nbytes = frames * header.frame_bytes
        with memoryview(self._pending) as pending:
            data = bytes(pending[:nbytes])  # (one copy, not a slice's and then bytes')
        del self._pending[:nbytes]
        self._announced -= frames
        self._data_bytes += nbytes
        # A finished stream has decoded every byte after its header: all are hashed.
        self._digest.update(data)
        samples = decode(
            data,
            _chunk_geometry(header, frames),
            clip_index=self._open[4],
            limits=limits,
            cancel=self._open[3],
        )
        stream.push(samples)

    def finish(self) -> StreamedClip:
        """The last frames decoded and the frontend finished (CPU work: off the loop)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream is closed")
            return self._finish()

    def _finish(self) -> StreamedClip:
        clip_index = self._open[4]
        if self.stream is None:
            if self._received == 0:
                raise EmptyAudioError(clip_index=clip_index, detail="the stream sent no bytes")
            raise DecodeError(
                "the WAV stream ended inside its header", clip_index=clip_index, code="too_short"
            )
        assert self._header is not None
        partial = len(self._pending) - self._announced * self._header.frame_bytes
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
            self._decode(self._announced)
        if self._data_bytes == 0:
            raise EmptyAudioError(clip_index=clip_index, detail="no samples")
        return self.stream.finish()

    def close(self) -> None:
        """Release the frontend's reservation (idempotent; waits for a batch in flight)."""
        with self._lock:
            self._closed = True
            if self.stream is not None:
                self.stream.close()

    @property
    def sha256(self) -> str:
        """The SHA-256 of every byte received (read once :meth:`finish` returned: the
        bytes are hashed as their batches are decoded)."""
        return self._digest.hexdigest()


class _Call(Generic[_T]):
    """One piece of work for a :class:`_StreamThread`, and the loop's future of it."""

    def __init__(self, work: Callable[[], _T], loop: asyncio.AbstractEventLoop) -> None:
        self._work = work
        self._loop = loop
        # As asyncio.to_thread: the work sees the awaiting task's context variables.
        self._context = contextvars.copy_context()
        self.future: asyncio.Future[_T] = loop.create_future()
        self.finished = False  # (read and written on the loop only)

    def run(self) -> None:
        """In the stream's thread: the work, then its outcome handed to the loop."""
        result: Any = None
        error: BaseException | None = None
        try:
            result = self._context.run(self._work)
        except BaseException as exc:
            error = exc
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


class _StreamThread:
    """One worker thread per stream, fed through a queue, started at its first hop.

    A hop through it costs a queue put and one ``call_soon_threadsafe`` (about 30 µs of
    CPU here), half of an ``asyncio.to_thread`` round trip (its task, the executor's
    future and the future chained to it); a stream makes one per batch. The stream's
    work is in order: every hop is awaited before the next is made.
    """

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[_Call[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, call: _Call[Any]) -> None:
        if self._thread is None:
            # A daemon: the interpreter's exit never waits for a stream abandoned mid-batch.
            self._thread = threading.Thread(
                target=self._serve, name="audiogate-stream", daemon=True
            )
            self._thread.start()
        self._calls.put(call)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            call.run()

    def close(self) -> None:
        """Let the thread end once its work in flight (if any) is done; not waited for:
        every hop is awaited (or its stream's lock waited on) before the stream closes."""
        if self._thread is not None:
            self._calls.put(None)
            self._thread = None


#: The worker thread of the stream the current task prepares (:func:`prepare_stream`
#: sets it); ``None``: :func:`_off_loop` hops through ``asyncio.to_thread``.
_STREAM_THREAD: contextvars.ContextVar[_StreamThread | None] = contextvars.ContextVar(
    "audiogate_stream_thread", default=None
)


async def _off_loop(work: Callable[[], _T], cancel: CancelToken) -> _T:
    """``work()`` in a thread (the stream's :class:`_StreamThread`, else
    ``asyncio.to_thread``, as a request without a worker is computed), so the event loop
    serves other connections meanwhile.

    A thread cannot be interrupted: when the awaiting task is cancelled, ``cancel`` is
    (so the work stops at its next checkpoint) and the thread is waited for before the
    cancellation goes on, so the caller releases the stream's reservation only once no
    thread uses it.
    """
    thread = _STREAM_THREAD.get()
    if thread is None:
        return await _to_thread(work, cancel)
    loop = asyncio.get_running_loop()
    call = _Call(work, loop)
    thread.submit(call)
    try:
        return await call.future
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            cancel.cancel()
        first = call.future
        if first.done() and not first.cancelled():
            first.exception()  # retrieved: the thread's error is the cancellation's
        if not call.finished:
            call.future = loop.create_future()  # (the first went with the task)
            with contextlib.suppress(BaseException):
                # (Cancelled again meanwhile: the receiver's close() waits on its lock.)
                await call.future
        raise


async def _to_thread(work: Callable[[], _T], cancel: CancelToken) -> _T:
    """:func:`_off_loop` through ``asyncio.to_thread`` (no stream thread set)."""
    future = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            cancel.cancel()
        with contextlib.suppress(BaseException):
            # (Cancelled again meanwhile: the receiver's close() waits on its lock.)
            await asyncio.wait([future])
        if future.done() and not future.cancelled():
            future.exception()  # retrieved: the thread's error is the cancellation's
        raise


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
    )
    thread = _StreamThread()
    token = _STREAM_THREAD.set(thread)
    try:
        if source_format.container in ("raw", "wav"):
            return await _prepare_pcm(call, aiter(chunks))
        return await _prepare_compressed(call, aiter(chunks))
    finally:
        _STREAM_THREAD.reset(token)
        thread.close()


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
    asks for and finish it in the stream's thread (:func:`_off_loop`: one hop per batch,
    in order, as each is awaited before the next chunk is read)."""
    cancel, clip_index = call.cancel, call.clip_index
    if received and receiver.feed(received):
        await _off_loop(receiver.flush, cancel)
    async for chunk in chunks:
        cancel.check(Checkpoint.DECODE, clip_index)
        if receiver.feed(bytes(chunk)):
            await _off_loop(receiver.flush, cancel)
    cancel.check(Checkpoint.DECODE, clip_index)
    return await _off_loop(receiver.finish, cancel)


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
        streamed = await _receive(receiver, chunks, call)
    except _CodecWav as codec:
        receiver.close()
        return await _prepare_compressed(call, chunks, codec.received)
    finally:
        receiver.close()
    return streamed_prepared_clip(
        streamed, sha256=receiver.sha256, encoded_bytes=receiver.received, origin=call.origin
    )
