"""A PCM stream's tail and its ends (#34): when the stream's thread is idle at the last
chunk and little is left, the last batch and ``finish()`` run on the event loop (no
thread woken, none waited for), with the whole clip's result; otherwise, or with
``inline_tail=False``, in the thread. A task cancelled while a batch is in its thread
cancels the stream's token, waits for the thread, and ends cancelled (the cancellation
is not swallowed by the wait), with the reservation released once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16, same_clip, whole_clip

import audiogate.streaming.transport as transport
from audiogate.budget import ByteBudget
from audiogate.cancel import CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import NonFiniteSampleError
from audiogate.pipeline.prepared import PreparedClip
from audiogate.policy import AudioPolicy
from audiogate.streaming.frontend import AccumulatingClipStream, IncrementalClipStream
from audiogate.streaming.stage import batch_frames

RATE = 16_000
CHUNK_BYTES = RATE // 50 * 2  # 20 ms of mono PCM16
BATCH = batch_frames(RATE)
#: A guard against a deadlock (the behaviour under test failing), not a timing check.
_GUARD_S = 20.0


class _Where:
    """Records the thread of every ``push`` and ``finish`` of a frontend class, and can
    hold the first push until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, *, hold: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._hold = hold
        for name in ("push", "finish"):
            monkeypatch.setattr(cls, name, self._wrap(name, getattr(cls, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(stream: Any, *args: Any) -> Any:
            self.calls.append((name, threading.get_ident()))
            if name == "push" and self._hold and not self.entered.is_set():
                self.entered.set()
                assert self.release.wait(_GUARD_S)
            return method(stream, *args)

        return wrapped

    def threads(self, name: str) -> set[int]:
        return {ident for what, ident in self.calls if what == name}


def _lanes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    lanes: list[Any] = []
    init = transport._Lane.__init__

    def recording(lane: Any, *args: Any, **kwargs: Any) -> None:
        init(lane, *args, **kwargs)
        lanes.append(lane)

    monkeypatch.setattr(transport._Lane, "__init__", recording)
    return lanes


def _caught_up(data: bytes, lanes: list[Any]) -> AsyncIterator[bytes]:
    """``data`` in 20 ms chunks; before the last one, the producer waits until the
    stream's thread has taken every batch and let the lane go (as a real-time stream's
    thread has, 20 ms after the chunk before)."""

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            if start + CHUNK_BYTES >= len(data):
                for _ in range(int(_GUARD_S * 1000)):
                    await asyncio.sleep(0.001)
                    if not (lanes[0]._scheduled or lanes[0]._queue):
                        break
            yield data[start : start + CHUNK_BYTES]

    return chunks()


def _prepare_caught_up(
    policy: AudioPolicy, data: bytes, lanes: list[Any], **options: Any
) -> PreparedClip:
    """``prepare_stream`` of ``data`` as 16 kHz PCM16 from :func:`_caught_up`'s producer."""
    return asyncio.run(
        transport.prepare_stream(
            family_host(), policy, _caught_up(data, lanes), source_format=raw_pcm16(RATE), **options
        )
    )


@pytest.mark.parametrize("family", ["qwen2audio", "gemma3n", "granitespeech"])
@pytest.mark.parametrize("extra", [0, 123, BATCH - 1])
def test_an_idle_threads_tail_runs_on_the_loop(
    monkeypatch: pytest.MonkeyPatch, family: str, extra: int
) -> None:
    where = _Where(monkeypatch, IncrementalClipStream)
    lanes = _lanes(monkeypatch)
    policy = policy_of(family)
    data = noise_pcm16(BATCH * 3 + extra, seed=31).tobytes()
    budget = ByteBudget(1 << 30, limit="stream bytes")
    loop_thread = threading.get_ident()
    clip = _prepare_caught_up(policy, data, lanes, budget=budget)
    same_clip(clip, whole_clip(policy, data, raw_pcm16(RATE)))
    assert budget.held == 0
    assert where.threads("finish") == {loop_thread}
    # The earlier batches were pushed in the thread, the last one on the loop.
    assert where.calls[-2:] == [("push", loop_thread), ("finish", loop_thread)]
    assert where.threads("push") - {loop_thread}
    assert not lanes[0]._scheduled


def test_inline_tail_false_keeps_the_tail_in_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    where = _Where(monkeypatch, IncrementalClipStream)
    lanes = _lanes(monkeypatch)
    data = noise_pcm16(BATCH * 3 + 77, seed=32).tobytes()
    loop_thread = threading.get_ident()
    _prepare_caught_up(policy_of("qwen2audio"), data, lanes, inline_tail=False)
    assert where.threads("finish")
    assert loop_thread not in where.threads("finish")
    assert loop_thread not in where.threads("push")


def test_an_accumulating_streams_finish_stays_in_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An accumulating frontend runs the whole clip's stages in ``finish()``: never on
    the loop, idle thread or not."""
    where = _Where(monkeypatch, AccumulatingClipStream)
    lanes = _lanes(monkeypatch)
    policy = policy_of("qwen2audio")
    data = noise_pcm16(BATCH * 2 + 5, seed=33).tobytes()
    loop_thread = threading.get_ident()
    clip = _prepare_caught_up(policy, data, lanes, incremental=False)
    same_clip(clip, whole_clip(policy, data, raw_pcm16(RATE)))
    assert where.threads("finish")
    assert loop_thread not in where.threads("finish")


def test_a_long_tail_stays_in_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer ahead of the DSP (more than INLINE_TAIL_BATCHES batches not yet
    decoded at the end) does not hold the loop for them."""
    where = _Where(monkeypatch, IncrementalClipStream)
    frames = BATCH * (transport.INLINE_TAIL_BATCHES + 2)
    data = noise_pcm16(frames, seed=34).tobytes()
    assert len(data) < transport.MAX_BACKLOG_BYTES  # (the producer never waits)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]

    loop_thread = threading.get_ident()
    asyncio.run(
        transport.prepare_stream(
            family_host(), policy_of("qwen2audio"), chunks(), source_format=raw_pcm16(RATE)
        )
    )
    assert where.threads("finish")
    assert loop_thread not in where.threads("finish")


async def _until(event: threading.Event) -> None:
    for _ in range(int(_GUARD_S * 1000)):
        if event.is_set():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the thread never started the batch")


def _held_stream(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[_Where], Any]
) -> tuple[_Where, Callable[[CancelToken, ByteBudget], Any]]:
    """A stream whose first push is held in its thread; after handing over two batches
    the producer waits for the thread to enter it, then awaits ``then(where)``."""
    where = _Where(monkeypatch, IncrementalClipStream, hold=True)
    data = noise_pcm16(BATCH * 2 + 10, seed=35).tobytes()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]
        await _until(where.entered)
        await then(where)

    def stream(token: CancelToken, budget: ByteBudget) -> Any:
        return transport.prepare_stream(
            family_host(),
            policy_of("qwen2audio"),
            chunks(),
            source_format=raw_pcm16(RATE),
            budget=budget,
            cancel=token,
        )

    return where, stream


def test_cancelled_while_the_producer_waits_and_a_batch_is_in_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task is cancelled at the producer's await (a socket's read), not at a call to
    the thread: the stream's token is cancelled all the same (the batch stops at its
    next checkpoint), the task waits for the thread, and the bytes come back once."""

    async def forever(_: _Where) -> None:
        await asyncio.Event().wait()

    where, stream = _held_stream(monkeypatch, forever)
    token = CancelToken()
    budget = ByteBudget(1 << 30, limit="stream bytes")

    async def main() -> None:
        task = asyncio.create_task(stream(token, budget))
        await _until(where.entered)
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert token.cancelled
        assert not task.done()  # the thread still holds the stream
        assert budget.held > 0
        where.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert budget.held == 0


def test_a_cancellation_while_settling_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream fails (the client's error) while a batch is in its thread; the task,
    waiting for that thread before it releases the bytes, is cancelled twice meanwhile:
    it keeps waiting, cancels the token, and then ends cancelled, not with the error as
    if no cancellation had come."""

    async def gone(_: _Where) -> None:
        raise ConnectionResetError("the client went away")

    where, stream = _held_stream(monkeypatch, gone)
    token = CancelToken()
    budget = ByteBudget(1 << 30, limit="stream bytes")

    async def main() -> None:
        task = asyncio.create_task(stream(token, budget))
        await _until(where.entered)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()  # settling: the thread holds the stream
        assert not token.cancelled
        for _ in range(2):
            task.cancel()
            for _ in range(10):
                await asyncio.sleep(0)
            assert not task.done()
            assert budget.held > 0
        assert token.cancelled
        where.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert budget.held == 0


def test_a_batch_that_failed_in_the_thread_is_the_inline_tails_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread's last batch fails (a NaN) after the last chunk was taken: the tail,
    run on the loop because the thread is idle, raises that error (once), not one of
    the closed stream's."""
    lanes = _lanes(monkeypatch)
    samples = np.zeros(BATCH * 2, dtype="<f4")
    samples[BATCH + 7] = np.nan
    data = samples.tobytes()
    chunk = RATE // 50 * 4  # 20 ms of mono f32
    budget = ByteBudget(1 << 30, limit="stream bytes")

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), chunk):
            yield data[start : start + chunk]
        # The last batch was handed over with the last chunk: the thread takes it once
        # the producer waits, fails, and lets the lane go.
        for _ in range(int(_GUARD_S * 1000)):
            await asyncio.sleep(0.001)
            if lanes[0].error is not None and not lanes[0]._scheduled:
                return
        raise AssertionError("the thread never failed")

    with pytest.raises(NonFiniteSampleError) as raised:
        asyncio.run(
            transport.prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                chunks(),
                source_format=SourceFormat.raw("f32", rate_hz=RATE, channels=1),
                budget=budget,
            )
        )
    assert raised.value is lanes[0].error
    assert budget.held == 0
