"""prepare_stream's CPU work runs off the event loop (#34): a raw PCM stream's batches
and its ``finish()`` run in a thread, one hop per batch, in order; the loop serves other
coroutines meanwhile; cancelling the task while a batch is in its thread waits for the
thread, then releases the reservation exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16, same_clip, whole_clip

import audiogate.streaming.transport as transport
from audiogate.budget import ByteBudget
from audiogate.cancel import CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import DecodeError, NonFiniteSampleError
from audiogate.streaming.frontend import RESERVE_AHEAD_FRAMES, ClipStream, open_clip_stream
from audiogate.streaming.stage import batch_frames
from audiogate.testing.audio import wav_bytes

RATE = 16_000
CHUNK = RATE // 50  # 20 ms
#: A guard against a deadlock (the behaviour under test failing), not a timing check.
_GUARD_S = 20.0


class _Probe:
    """A clip stream that records where its calls run and can hold them in place."""

    def __init__(self, stream: ClipStream, hold: str | None) -> None:
        self._stream = stream
        self._hold = hold
        self.calls: list[tuple[str, int]] = []
        self.ticked = threading.Event()  # set by the concurrent coroutine
        self.entered = threading.Event()
        self.release = threading.Event()
        self.left = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _call(self, what: str, *args: Any) -> Any:
        self.calls.append((what, threading.get_ident()))
        if what in ("push", "finish"):
            # Only a loop that is free runs the ticker, which sets the event.
            self.ticked.clear()
            assert self.ticked.wait(_GUARD_S), "the event loop was blocked"
        try:
            if what == self._hold:
                self.entered.set()
                assert self.release.wait(_GUARD_S)
            return getattr(self._stream, what)(*args)
        finally:
            if what == self._hold:
                self.left.set()

    def admit(self, frames: int) -> None:
        self._call("admit", frames)

    def push(self, samples: Any) -> None:
        self._call("push", samples)

    def finish(self) -> Any:
        return self._call("finish")

    def close(self) -> None:
        self._stream.close()


def _probing(monkeypatch: pytest.MonkeyPatch, hold: str | None = None) -> list[_Probe]:
    probes: list[_Probe] = []
    opened = open_clip_stream

    def open_probe(*args: Any, **kwargs: Any) -> _Probe:
        probes.append(_Probe(opened(*args, **kwargs), hold))
        return probes[-1]

    monkeypatch.setattr(transport, "open_clip_stream", open_probe)
    return probes


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 2 * CHUNK):
        yield data[start : start + 2 * CHUNK]


async def _ticking(probes: list[_Probe], stop: asyncio.Event) -> int:
    ticks = 0
    while not stop.is_set():
        for probe in probes:
            probe.ticked.set()
        ticks += 1
        await asyncio.sleep(0)
    return ticks


@pytest.mark.parametrize("family", ["gemma3n", "qwen2audio"])
def test_batches_and_finish_run_in_a_thread_while_the_loop_serves_others(
    monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    probes = _probing(monkeypatch)
    policy = policy_of(family)
    frames = RATE * 2 + 123
    data = noise_pcm16(frames, seed=3).tobytes()
    budget = ByteBudget(1 << 30, limit="stream bytes")

    async def main() -> tuple[Any, int]:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticking(probes, stop))
        try:
            clip = await transport.prepare_stream(
                family_host(),
                policy,
                _chunks(data),
                source_format=raw_pcm16(RATE),
                budget=budget,
                inline_tail=False,  # (an idle thread's tail: test_transport_tail.py)
            )
        finally:
            stop.set()
        return clip, await ticker

    loop_thread = threading.get_ident()
    clip, ticks = asyncio.run(main())
    same_clip(clip, whole_clip(policy, data, raw_pcm16(RATE)))  # in order, every byte
    assert budget.held == 0
    (probe,) = probes
    where = {
        what: {ident != loop_thread for w, ident in probe.calls if w == what}
        for what in ("admit", "push", "finish")
    }
    # Admission is on the loop; decoding, pushing and finishing are not.
    assert where == {"admit": {False}, "push": {True}, "finish": {True}}
    # At most one hop per batch, not per chunk (the chunks are 20 ms, the batches half a
    # second; batches handed over before the thread woke are pushed as one, and finish()
    # pushes the rest: test_transport_handover.py).
    per_batch = -(-batch_frames(RATE) // CHUNK) * CHUNK
    pushes = sum(what == "push" for what, _ in probe.calls)
    assert 1 <= pushes <= -(-frames // per_batch)
    # Admission is called for a batch of chunks, not each: at a batch's end and where the
    # chunks go past what is admitted and reserved ahead (and once at the end).
    admits = sum(what == "admit" for what, _ in probe.calls)
    assert admits <= -(-frames // per_batch) + -(-frames // RESERVE_AHEAD_FRAMES) + 2
    assert admits < -(-frames // CHUNK) // 5
    assert ticks > pushes


@pytest.mark.parametrize("hold", ["push", "finish"])
def test_cancelled_while_a_batch_is_in_its_thread(
    monkeypatch: pytest.MonkeyPatch, hold: str
) -> None:
    probes = _probing(monkeypatch, hold)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    token = CancelToken()
    frames = batch_frames(RATE) * 3 if hold == "push" else CHUNK * 5
    data = noise_pcm16(frames, seed=5).tobytes()
    ended: list[tuple[bool, int]] = []

    async def main() -> None:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticking(probes, stop))
        task = asyncio.create_task(
            transport.prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                _chunks(data),
                source_format=raw_pcm16(RATE),
                budget=budget,
                cancel=token,
                inline_tail=False,
            )
        )
        while not (probes and probes[0].entered.is_set()):
            await asyncio.sleep(0)
        probe = probes[0]
        assert budget.held > 0
        task.add_done_callback(lambda _: ended.append((probe.left.is_set(), budget.held)))
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        # The thread still holds the stream: the task waits for it, holding its bytes.
        assert not task.done()
        assert token.cancelled  # so the batch stops at its next checkpoint
        assert budget.held > 0
        probe.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        stop.set()
        await ticker
        for _ in range(5):  # (the chunks generator's finalizer, which asyncio schedules)
            await asyncio.sleep(0)
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())
    # The thread had left the stream before the task ended, and the bytes were back.
    assert ended == [(True, 0)]
    assert budget.held == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("asyncio_")]


def test_a_refused_batch_in_its_thread_is_released_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error raised in the thread (a NaN met while decoding a batch) reaches the caller,
    and the reservation is released once (a second close is a no-op)."""
    probes = _probing(monkeypatch)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    closes: list[int] = []
    data = (np.full(RATE, np.nan, dtype="<f4")).tobytes()

    async def main() -> None:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticking(probes, stop))
        try:
            await transport.prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                _chunks(data),
                source_format=SourceFormat.raw("f32", rate_hz=RATE, channels=1),
                budget=budget,
            )
        finally:
            stop.set()
            await ticker
            closes.append(budget.held)

    with pytest.raises(NonFiniteSampleError):
        asyncio.run(main())
    assert closes == [0]
    assert budget.held == 0


@pytest.mark.parametrize("declared", ["raw", "wav", "auto"])
def test_one_piece_of_thread_work_per_batch_not_per_chunk(
    monkeypatch: pytest.MonkeyPatch, declared: str
) -> None:
    """Raw PCM, a declared WAV and an ``auto`` stream found to be WAV (the compressed
    receiver's PCM path) hand their thread one piece of work per quarter-second batch
    and one to finish, however small the chunks; raw PCM and WAV do not wait for the
    batches (posted), only for ``finish()``."""
    pieces: list[tuple[str, str]] = []
    put = transport._Lane._put

    def counting(lane: Any, item: Any, **kwargs: Any) -> None:
        work = getattr(item, "_work", None)
        work = getattr(work, "func", work)  # a batch's functools.partial
        pieces.append((type(item).__name__, getattr(work, "__qualname__", "")))
        put(lane, item, **kwargs)

    monkeypatch.setattr(transport._Lane, "_put", counting)
    frames = RATE * 3
    pcm = noise_pcm16(frames, seed=11)
    data = pcm.tobytes() if declared == "raw" else wav_bytes(pcm / 32768, rate_hz=RATE)
    source_format = raw_pcm16(RATE) if declared == "raw" else SourceFormat(declared)
    policy = policy_of("qwen2audio")
    clip = asyncio.run(
        transport.prepare_stream(family_host(), policy, _chunks(data), source_format=source_format)
    )
    same_clip(clip, whole_clip(policy, data, source_format))
    chunks = -(-len(data) // (2 * CHUNK))
    assert chunks > 100
    # (A producer faster than the thread waits for its backlog now and then: _nothing.)
    work = [piece for piece in pieces if piece[1] != "_nothing"]
    assert len(work) <= frames // batch_frames(RATE) + 2
    assert work[-1][0] == "_Call"
    assert work[-1][1].endswith(("finish", "prepared"))  # (prepared: finish and the clip)
    if declared != "auto":
        assert {kind for kind, _ in work[:-1]} == {"_Posted"}


def test_the_stream_threads_are_kept_and_its_generator_closed() -> None:
    """Streams reuse the process's stream threads (their DSP scratch with them), and
    prepare_stream closes the caller's generator when it returns or fails."""
    closed: list[bool] = []
    data = noise_pcm16(batch_frames(RATE) * 3, seed=17).tobytes()

    async def chunks(fail: bool) -> AsyncIterator[bytes]:
        try:
            async for chunk in _chunks(data):
                yield chunk
            if fail:
                yield b"\x00"  # a partial frame: the stream fails at finish
            yield b""
        finally:
            closed.append(True)

    def stream_threads() -> set[int]:
        return {
            t.ident or 0 for t in threading.enumerate() if t.name.startswith("audiogate-stream")
        }

    policy = policy_of("qwen2audio")
    for fail in (False, True, False):
        run = transport.prepare_stream(
            family_host(), policy, chunks(fail), source_format=raw_pcm16(RATE)
        )
        if fail:
            with pytest.raises(DecodeError):
                asyncio.run(run)
        else:
            asyncio.run(run)
        if not fail and len(closed) == 1:
            first = stream_threads()
        # A thread is idle again only after the loop got its last result: wait for one, so
        # the next stream finds it idle (else a busy pool rightly starts another thread).
        workers = transport._workers()
        deadline = time.monotonic() + _GUARD_S
        while workers._idle._value < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    assert closed == [True, True, True]
    assert stream_threads() == first


def test_a_client_gone_after_batches_in_threads_leaves_nothing_held() -> None:
    """The chunks end with the client's error (a disconnect) after some batches ran in
    threads: the error reaches the caller and the reservation is back to 0."""
    budget = ByteBudget(1 << 30, limit="stream bytes")
    pcm = noise_pcm16(batch_frames(RATE) * 3, seed=13).tobytes()

    async def gone() -> AsyncIterator[bytes]:
        async for chunk in _chunks(pcm):
            yield chunk
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        asyncio.run(
            transport.prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                gone(),
                source_format=raw_pcm16(RATE),
                budget=budget,
            )
        )
    assert budget.held == 0


def test_compressed_streams_waiting_for_a_decoder_cannot_starve_its_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compressed stream's flush may wait for a decoder process that another stream
    holds until its own next flush: on a capped pool, waiters could take every thread and
    the holder never get one. Blocking lanes run on a pool without a cap (PCM lanes keep
    theirs), so more waiters than the PCM cap still let the holder run."""
    monkeypatch.setattr(transport, "MAX_STREAM_THREADS", 2)
    monkeypatch.setattr(transport, "_WORKERS", {})
    released = threading.Event()

    def wait_for_the_holder() -> bool:
        return released.wait(_GUARD_S)

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        never = CancelToken()
        waiters = [transport._Lane(loop, blocking=True) for _ in range(3)]
        waiting = [asyncio.ensure_future(w.call(wait_for_the_holder, never)) for w in waiters]
        await asyncio.sleep(0)
        holder = transport._Lane(loop, blocking=True)
        await holder.call(released.set, never)
        return list(await asyncio.gather(*waiting))

    assert asyncio.run(main()) == [True, True, True]
    assert transport._workers(blocking=True)._max_threads is None
    assert transport._workers()._max_threads == 2
