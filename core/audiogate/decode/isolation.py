"""Compressed clips decode in a small pool of separate processes (docs/formats.md).

Each process (:mod:`audiogate.decode.child`) runs one clip at a time under an address
space cap (``RLIMIT_AS``) and a CPU-time cap per clip (``RLIMIT_CPU``); the parent adds a
wall-clock deadline. The parent sends the encoded bytes, reads interleaved float32
blocks back, and downmixes each block straight into the preallocated clip with the same
arithmetic as WAV (:func:`~audiogate.decode.samples.downmix_f32`), counting frames
against the plan: a stream longer than planned stops there with a ``LimitError``.

A decoder that dies, hangs or runs out of memory is a :class:`DecoderFailedError` for its
clip (``decoder_crashed``, ``decoder_timeout``, ``decoder_memory_limit``); its process is killed
and reaped, and the next clip starts a fresh one. Cancellation is polled between blocks
(and while waiting); a cancelled or refused clip's process is killed too, so no process,
pipe or buffer outlives the call on any path.

:class:`~audiogate.worker.AudioWorker` owns one pool; without a worker,
:func:`default_pool` makes one on first use and closes it at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.child import (
    ABORT,
    BLOCK,
    CHUNK,
    DONE,
    END,
    ERROR,
    FORMAT,
    FRAME,
    NEED,
    OVER_PLAN,
    clean_detail,
    encode_request,
)
from audiogate.decode.decoder import DECODE_ERROR_CODES
from audiogate.decode.geometry import ClipGeometry
from audiogate.decode.samples import BLOCK_FRAMES, downmix_f32
from audiogate.errors import (
    CodecsUnavailableError,
    DecodeError,
    EmptyAudioError,
    LimitError,
    NonFiniteSampleError,
)
from audiogate.extras import installed

__all__ = [
    "DEFAULT_ADDRESS_SPACE_BYTES",
    "DEFAULT_CPU_SECONDS",
    "DecoderFailedError",
    "DecoderPool",
    "DecoderStream",
    "default_pool",
    "missing_codecs",
]

#: Address space of one decoder process: the interpreter, numpy and the codec libraries
#: take about 0.5 GiB of it; the rest is for the decoder's own buffers.
DEFAULT_ADDRESS_SPACE_BYTES: Final = 2 << 30
#: CPU seconds one clip may take (a 30-minute MP3 decodes in about 2 s).
DEFAULT_CPU_SECONDS: Final = 30

_POLL_S: Final = 0.05
#: Codes only the parent gives (a decoder's answer cannot claim them).
_PARENT_CODES: Final = frozenset(
    {"decoder_crashed", "decoder_timeout", "geometry_mismatch", "codecs_unavailable"}
)
_MAX_ERROR_BYTES: Final = 4096


#: The extra that brings each compressed container's codec, and the module it installs.
_EXTRAS: Final = {
    "aiff": ("codecs", "soundfile"),
    "au": ("codecs", "soundfile"),
    "caf": ("codecs", "soundfile"),
    "wavcodec": ("codecs", "soundfile"),
    "rifx": ("codecs", "soundfile"),
    "flac": ("codecs", "soundfile"),
    "mp3": ("codecs", "soundfile"),
    "ogg": ("codecs", "soundfile"),
    "webm": ("codecs-ffmpeg", "av"),
    "mp4": ("codecs-ffmpeg", "av"),
}
#: Codecs of a container that another extra decodes: WebM Opus is remuxed to Ogg Opus
#: for libsndfile (:mod:`audiogate.decode.remux`).
_CODEC_EXTRAS: Final = {("webm", "opus"): ("codecs", "soundfile")}


def missing_codecs(
    container: str, *, clip_index: int, codec: str = ""
) -> CodecsUnavailableError | None:
    """The refusal for a container (and codec) whose decoder is not installed, else ``None``.

    Looks the module up without importing it (the codecs load only in the decoders).
    """
    extra, module = _CODEC_EXTRAS.get((container, codec), _EXTRAS[container])
    if installed(module):
        return None
    note = (
        "PyAV's wheels bundle FFmpeg with the GPL x264 and x265 libraries; see docs/formats.md"
        if module == "av"
        else ""
    )
    what = f"{container} {codec}" if codec else container
    return CodecsUnavailableError(
        what, module=module, extra=extra, clip_index=clip_index, hint=note
    )


class DecoderFailedError(DecodeError):
    """The decoder process of a clip crashed, ran out of time or ran out of memory.

    ``code`` is ``decoder_crashed``, ``decoder_timeout`` or ``decoder_memory_limit``.
    """


class _Child:
    """One decoder process and its pipes."""

    def __init__(self, address_space_bytes: int) -> None:
        env = dict(os.environ)
        # One thread per decoder: the cap is per process, and a BLAS pool would spend it.
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "audiogate.decode.child",
                "--address-space",
                str(address_space_bytes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )

    def kill(self) -> None:
        """Kill, reap and close (idempotent)."""
        process = self.process
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


class DecoderPool:
    """At most ``processes`` decoder processes, started on demand and reused.

    :param processes: the most clips decoding at once (more wait for a free process).
    :param address_space_bytes: ``RLIMIT_AS`` of each process (0: none).
    :param cpu_seconds: ``RLIMIT_CPU`` per clip; the wall-clock deadline is twice it
        plus 5 s.
    :param test_hook: makes every decode misbehave (``"abort"``, ``"hang"``, ``"spin"``,
        ``"allocate"``); for the isolation tests only.
    """

    def __init__(
        self,
        *,
        processes: int = 2,
        address_space_bytes: int = DEFAULT_ADDRESS_SPACE_BYTES,
        cpu_seconds: int = DEFAULT_CPU_SECONDS,
        test_hook: str | None = None,
    ) -> None:
        if processes < 1 or cpu_seconds < 1 or address_space_bytes < 0:
            raise ValueError(
                f"DecoderPool needs processes >= 1, cpu_seconds >= 1 and "
                f"address_space_bytes >= 0 (got {processes}, {cpu_seconds}, "
                f"{address_space_bytes})"
            )
        self.processes = processes
        self.address_space_bytes = address_space_bytes
        self.cpu_seconds = cpu_seconds
        self.wall_seconds = 2 * cpu_seconds + 5
        self._test_hook = test_hook
        self._lock = threading.Condition()
        self._idle: list[_Child] = []
        self._busy = 0
        self._closed = False

    @property
    def live_processes(self) -> int:
        """Processes started and not yet reaped (idle or decoding)."""
        with self._lock:
            return len(self._idle) + self._busy

    def close(self) -> None:
        """Kill every idle process; busy ones are killed when their clip ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._lock.notify_all()
        for child in idle:
            child.kill()

    def _acquire(self, cancel: CancelToken, clip_index: int) -> _Child:
        with self._lock:
            while True:
                cancel.check(Checkpoint.DECODE, clip_index)
                if self._closed:
                    raise DecoderFailedError(
                        "the decoder pool is closed",
                        clip_index=clip_index,
                        code="decoder_crashed",
                    )
                if self._idle:
                    self._busy += 1
                    return self._idle.pop()
                if self._busy < self.processes:
                    self._busy += 1
                    break
                self._lock.wait(_POLL_S)
        try:
            return _Child(self.address_space_bytes)
        except BaseException:
            with self._lock:
                self._busy -= 1
                self._lock.notify()
            raise

    def _release(self, child: _Child, *, healthy: bool) -> None:
        with self._lock:
            self._busy -= 1
            keep = healthy and not self._closed and child.process.poll() is None
            if keep:
                self._idle.append(child)
            self._lock.notify()
        if not keep:
            child.kill()

    def decode(
        self,
        data: bytes | memoryview,
        geometry: ClipGeometry,
        *,
        clip_index: int,
        cancel: CancelToken = NEVER,
    ) -> tuple[npt.NDArray[np.float32], int]:
        """Decode a compressed clip into a preallocated ``[shape=(geometry.frames,)]`` array.

        :returns: the array and the frames decoded (at most ``geometry.frames``; the rest
            of the array is unwritten).
        :raises LimitError: the stream holds more frames than planned (not a prefix).
        :raises DecoderFailedError: the process crashed, timed out or ran out of memory.
        :raises DecodeError: the codec refused the stream, or its rate or channel count
            changed (``stream_changed``).
        :raises NonFiniteSampleError: a decoded sample is NaN or infinite.
        :raises PreprocessCancelled: ``cancel`` was cancelled.
        """
        out = np.empty(geometry.frames, dtype=np.float32)
        child = self._acquire(cancel, clip_index)
        healthy = False
        try:
            written = self._run(child, bytes(data), geometry, out, clip_index, cancel)
            healthy = True
        except _ChildRefused as refused:
            # The process answered with its refusal and waits for the next clip: keep it
            # (restarting it costs 0.1-0.2 s, which a stream of broken files would burn).
            healthy = True
            raise refused.error from None
        finally:
            self._release(child, healthy=healthy)
        return out, written

    def open_stream(
        self, container: str, *, clip_index: int, cancel: CancelToken = NEVER
    ) -> DecoderStream:
        """A decoder process for one streamed Ogg or WebM Opus clip, fed as it arrives.

        The session holds one of the pool's processes until it ends (waiting, as a
        clip does, while all are busy), under the same address-space and CPU caps; the
        wall-clock deadline applies to each answer.

        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        :raises DecoderFailedError: the process could not start.
        """
        child = self._acquire(cancel, clip_index)
        stream = DecoderStream(self, child, clip_index=clip_index)
        try:
            stream._start(container)
        except BaseException:
            stream.close()
            raise
        return stream

    def _run(
        self,
        child: _Child,
        data: bytes,
        geometry: ClipGeometry,
        out: npt.NDArray[np.float32],
        clip_index: int,
        cancel: CancelToken,
    ) -> int:
        header: dict[str, Any] = {
            "container": geometry.container,
            "codec": geometry.encoding,
            "rate_hz": geometry.rate_hz,
            "channels": geometry.channels,
            "max_frames": geometry.frames,
            "exact": geometry.exact,
            "prefix": geometry.prefix,
            "padding_frames": geometry.padding_frames,
            "block_frames": BLOCK_FRAMES,
            "cpu_seconds": self.cpu_seconds,
            "hook": self._test_hook or "",
        }
        deadline = time.monotonic() + self.wall_seconds
        stdin = child.process.stdin
        assert stdin is not None
        try:
            for piece in encode_request(header, data):
                stdin.write(piece)
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(child, clip_index) from None
        channels = geometry.channels
        max_block_bytes = BLOCK_FRAMES * channels * 4
        written = 0
        for tag, payload in self._frames(child, deadline, max_block_bytes, clip_index, cancel):
            if tag == BLOCK:
                if len(payload) % (channels * 4):
                    raise DecoderFailedError(
                        f"the decoder sent a block of {len(payload)} bytes, not whole "
                        f"{channels}-channel float32 frames",
                        clip_index=clip_index,
                        code="decoder_crashed",
                    )
                samples = np.frombuffer(payload, dtype=np.float32)
                frames = samples.shape[0] // channels
                if frames > geometry.frames - written:
                    # The decoder stops at the plan itself; one that sends more is not
                    # trusted with another clip.
                    raise DecoderFailedError(
                        f"the decoder sent {written + frames} frames of a clip planned "
                        f"for {geometry.frames}",
                        clip_index=clip_index,
                        code="decoder_crashed",
                    )
                bad = downmix_f32(
                    samples,
                    out[written : written + frames],
                    channels=channels,
                    clip_index=clip_index,
                    cancel=NEVER,
                )
                if bad is not None:
                    raise NonFiniteSampleError(clip_index=clip_index, frame=written + bad)
                written += frames
            elif tag == DONE:
                return written
            else:
                error = json.loads(payload)
                code = str(error.get("code", "decoder_error"))
                detail = clean_detail(str(error.get("detail", "")))
                if code == OVER_PLAN:
                    # The decoder stopped there itself and waits for the next clip.
                    raise _ChildRefused(
                        LimitError(
                            "decoded frames per clip (the header understated the length)",
                            actual=max(_frames_in(detail), geometry.frames + 1),
                            maximum=geometry.frames,
                            clip_index=clip_index,
                        )
                    )
                if code not in DECODE_ERROR_CODES or code in _PARENT_CODES:
                    code = "decoder_error"
                if code == "decoder_memory_limit":
                    raise DecoderFailedError(
                        f"the decoder ran out of memory (address space cap "
                        f"{self.address_space_bytes} bytes): {detail}",
                        clip_index=clip_index,
                        code="decoder_memory_limit",
                    )
                raise _ChildRefused(DecodeError(detail, clip_index=clip_index, code=code))
        raise AssertionError("unreachable")  # pragma: no cover

    def _frames(
        self,
        child: _Child,
        deadline: float,
        max_block_bytes: int,
        clip_index: int,
        cancel: CancelToken,
    ) -> Iterator[tuple[bytes, bytes]]:
        stdout = child.process.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while True:
            head = self._read(fd, FRAME.size, child, deadline, clip_index, cancel)
            tag, length = FRAME.unpack(head)
            limit = max_block_bytes if tag == BLOCK else _MAX_ERROR_BYTES
            if tag not in (BLOCK, DONE, ERROR) or length > limit:
                raise DecoderFailedError(
                    f"the decoder sent a malformed frame ({tag!r}, {length} bytes)",
                    clip_index=clip_index,
                    code="decoder_crashed",
                )
            yield tag, self._read(fd, length, child, deadline, clip_index, cancel)

    def _read(
        self,
        fd: int,
        count: int,
        child: _Child,
        deadline: float,
        clip_index: int,
        cancel: CancelToken,
    ) -> bytes:
        chunks: list[bytes] = []
        while count:
            cancel.check(Checkpoint.DECODE, clip_index)
            if time.monotonic() > deadline:
                raise DecoderFailedError(
                    f"the decoder took longer than {self.wall_seconds} s",
                    clip_index=clip_index,
                    code="decoder_timeout",
                )
            ready, _, _ = select.select([fd], [], [], _POLL_S)
            if not ready:
                continue
            chunk = os.read(fd, min(count, 1 << 20))
            if not chunk:
                raise self._died(child, clip_index)
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _died(self, child: _Child, clip_index: int) -> DecoderFailedError:
        process = child.process
        try:
            status = process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            status = process.returncode
        if status == -signal.SIGXCPU:
            return DecoderFailedError(
                f"the decoder used more than {self.cpu_seconds} s of CPU time",
                clip_index=clip_index,
                code="decoder_timeout",
            )
        if status == -signal.SIGKILL:
            return DecoderFailedError(
                "the decoder was killed (out of memory?)",
                clip_index=clip_index,
                code="decoder_memory_limit",
            )
        return DecoderFailedError(
            f"the decoder process exited with status {status}",
            clip_index=clip_index,
            code="decoder_crashed",
        )


class DecoderStream:
    """One streamed clip's session in a decoder process (:meth:`DecoderPool.open_stream`).

    :meth:`feed` sends the next bytes and returns the mono samples they completed;
    :meth:`finish` ends the stream and returns the rest; :meth:`close` drops it. The
    process decodes with libsndfile, as a whole clip (WebM remuxed to Ogg on the way,
    :mod:`audiogate.decode.stream_remux`), so the samples are the whole clip's, bit for
    bit. A refusal, a finish or a close leaves the process for the next clip; only a
    crash, a timeout or a broken protocol kills it. Thread-safe: a :meth:`close` from
    another thread waits for a :meth:`feed` in flight.
    """

    def __init__(self, pool: DecoderPool, child: _Child, *, clip_index: int) -> None:
        self._pool = pool
        self._child: _Child | None = child
        self._clip_index = clip_index
        self._lock = threading.Lock()
        self._waiting = False  # the process asked for the next frame
        #: The stream's rate and channels, once the codec is open (else 0).
        self.rate_hz = 0
        self.channels = 0
        #: Mono frames returned so far.
        self.frames = 0

    @property
    def done(self) -> bool:
        """The session is over (finished, refused, dropped, or the decoder stopped)."""
        return self._child is None

    def _start(self, container: str) -> None:
        header: dict[str, Any] = {
            "container": container,
            "codec": "opus",
            "stream": True,
            "block_frames": BLOCK_FRAMES,
            "cpu_seconds": self._pool.cpu_seconds,
            "hook": self._pool._test_hook or "",
        }
        with self._lock:
            self._send(encode_request(header, b""))
            self._answers()

    def feed(self, data: bytes) -> list[npt.NDArray[np.float32]]:
        """Send the stream's next bytes; the mono float32 blocks they completed.

        :raises DecodeError: the codec refused the stream (its code), or it was
            ``empty``.
        :raises NonFiniteSampleError: a decoded sample is NaN or infinite.
        :raises DecoderFailedError: the process crashed, timed out or broke protocol.
        """
        with self._lock:
            if self._child is None or not data:
                return []
            self._send([FRAME.pack(CHUNK, len(data)), data])
            return self._answers()

    def finish(self) -> list[npt.NDArray[np.float32]]:
        """End the stream: the last blocks (the end trimming applied)."""
        with self._lock:
            if self._child is None:
                return []
            self._send([FRAME.pack(END, 0)])
            return self._answers()

    def close(self) -> None:
        """Drop the stream (idempotent): the process stops decoding it and is kept."""
        with self._lock:
            child = self._child
            if child is None:
                return
            healthy = False
            try:
                if self._waiting:
                    self._send([FRAME.pack(ABORT, 0)])
                    self._answers()
                    healthy = self._child is None
            except Exception:  # a process that fails its abort is killed below
                healthy = False
            finally:
                if self._child is not None:
                    self._child = None
                    self._pool._release(child, healthy=healthy)

    def _send(self, pieces: list[bytes]) -> None:
        child = self._child
        assert child is not None
        stdin = child.process.stdin
        assert stdin is not None
        self._waiting = False
        try:
            for piece in pieces:
                stdin.write(piece)
            stdin.flush()
        except (BrokenPipeError, OSError):
            self._end(healthy=False)
            raise self._pool._died(child, self._clip_index) from None

    def _end(self, *, healthy: bool) -> None:
        child, self._child = self._child, None
        if child is not None:
            self._pool._release(child, healthy=healthy)

    def _answers(self) -> list[npt.NDArray[np.float32]]:
        """Read the process's frames up to its next ``NEED``, ``DONE`` or ``ERROR``."""
        child = self._child
        assert child is not None
        stdout = child.process.stdout
        assert stdout is not None
        fd, pool, index = stdout.fileno(), self._pool, self._clip_index
        deadline = time.monotonic() + pool.wall_seconds
        blocks: list[npt.NDArray[np.float32]] = []
        healthy = False
        try:
            while True:
                # Not cancelled mid-answer: the caller polls between chunks, and a
                # dropped stream is told so (ABORT) instead of killed.
                head = pool._read(fd, FRAME.size, child, deadline, index, NEVER)
                tag, length = FRAME.unpack(head)
                limit = BLOCK_FRAMES * self.channels * 4 if tag == BLOCK else _MAX_ERROR_BYTES
                if tag not in (BLOCK, DONE, ERROR, NEED, FORMAT) or length > limit:
                    raise DecoderFailedError(
                        f"the decoder sent a malformed frame ({tag!r}, {length} bytes)",
                        clip_index=index,
                        code="decoder_crashed",
                    )
                payload = pool._read(fd, length, child, deadline, index, NEVER)
                if tag == NEED:
                    self._waiting = True
                    healthy = True
                    return blocks
                if tag == DONE:
                    healthy = True
                    self._end(healthy=True)
                    return blocks
                if tag == FORMAT:
                    self._format(payload)
                elif tag == BLOCK:
                    blocks.append(self._downmix(payload))
                else:
                    healthy = True
                    self._end(healthy=True)
                    raise self._refusal(payload)
        except BaseException:
            if not healthy:
                self._end(healthy=False)
            raise

    def _format(self, payload: bytes) -> None:
        found = json.loads(payload)
        rate, channels = found.get("rate_hz"), found.get("channels")
        if (
            self.channels
            or rate != 48_000
            or not isinstance(channels, int)
            or not 0 < channels < 256
        ):
            raise DecoderFailedError(
                f"the decoder announced a stream of {channels!r} channel(s) at {rate!r} Hz",
                clip_index=self._clip_index,
                code="decoder_crashed",
            )
        self.rate_hz, self.channels = rate, channels

    def _downmix(self, payload: bytes) -> npt.NDArray[np.float32]:
        channels = self.channels
        if not channels or len(payload) % (channels * 4):
            raise DecoderFailedError(
                f"the decoder sent a block of {len(payload)} bytes, not whole "
                f"{channels}-channel float32 frames",
                clip_index=self._clip_index,
                code="decoder_crashed",
            )
        samples = np.frombuffer(payload, dtype=np.float32)
        out = np.empty(samples.shape[0] // channels, dtype=np.float32)
        bad = downmix_f32(
            samples, out, channels=channels, clip_index=self._clip_index, cancel=NEVER
        )
        if bad is not None:
            raise NonFiniteSampleError(clip_index=self._clip_index, frame=self.frames + bad)
        self.frames += out.shape[0]
        return out

    def _refusal(self, payload: bytes) -> DecodeError:
        error = json.loads(payload)
        code = str(error.get("code", "decoder_error"))
        detail = clean_detail(str(error.get("detail", "")))
        if code == "empty":
            return EmptyAudioError(clip_index=self._clip_index, detail=detail)
        if code not in DECODE_ERROR_CODES or code in _PARENT_CODES:
            code = "decoder_error"
        if code == "decoder_memory_limit":
            return DecoderFailedError(
                f"the decoder ran out of memory: {detail}",
                clip_index=self._clip_index,
                code="decoder_memory_limit",
            )
        return DecodeError(detail, clip_index=self._clip_index, code=code)


def _frames_in(detail: str) -> int:
    """The frame count the decoder's over-plan message names (0 if none)."""
    digits = "".join(c if c.isdigit() else " " for c in detail).split()
    return int(digits[0]) if digits else 0


_default: DecoderPool | None = None
_default_lock = threading.Lock()


class _ChildRefused(Exception):
    """The decoder refused the stream and finished its request cleanly."""

    def __init__(self, error: DecodeError | LimitError) -> None:
        super().__init__(str(error))
        self.error = error


def default_pool() -> DecoderPool:
    """The process-wide pool used without a worker (made on first use, closed at exit)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = DecoderPool()
            atexit.register(_default.close)
        return _default
