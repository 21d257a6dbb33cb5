"""``audiogate.streaming.deadlines``: the idle and minimum-rate cuts, on a manual clock
(no sleeps, no wall time), and through ``prepare_stream`` (its budget back at 0)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16

from audiogate.budget import ByteBudget
from audiogate.errors import StreamTimeoutError
from audiogate.streaming.deadlines import (
    LoopClock,
    ManualClock,
    StreamDeadlines,
    paced,
)
from audiogate.streaming.transport import prepare_stream


class _Feed:
    """Chunks a test hands over one by one; records whether it was closed."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while (chunk := await self.queue.get()) is not None:
                yield chunk
        finally:
            self.closed = True


async def _until_waiting(clock: ManualClock, waits: int) -> None:
    """Until the consumer has begun its ``waits``-th wait (for its ``waits``-th chunk)."""
    while clock.waits < waits:
        await asyncio.sleep(0)


async def _collect(stream: AsyncIterator[bytes], out: list[bytes]) -> None:
    async for chunk in stream:
        out.append(chunk)


def test_chunks_pass_through_and_the_end_ends() -> None:
    async def main() -> list[bytes]:
        feed = _Feed()
        clock = ManualClock()
        out: list[bytes] = []
        task = asyncio.create_task(
            _collect(paced(feed.chunks(), StreamDeadlines(idle_timeout_s=5), clock=clock), out)
        )
        for n, chunk in enumerate((b"ab", b"", b"cde"), 1):
            await _until_waiting(clock, n)
            clock.advance(4.9)  # under the idle timeout each time
            feed.queue.put_nowait(chunk)
        await _until_waiting(clock, 4)
        feed.queue.put_nowait(None)
        await task
        assert feed.closed
        return out

    assert asyncio.run(main()) == [b"ab", b"", b"cde"]


@pytest.mark.parametrize("idle", [0.5, 15.0])
def test_a_stalled_stream_is_cut_at_the_idle_timeout(idle: float) -> None:
    async def main() -> StreamTimeoutError:
        feed = _Feed()
        clock = ManualClock(start=100.0)
        deadlines = StreamDeadlines(idle_timeout_s=idle, min_rate=0)
        task = asyncio.create_task(_collect(paced(feed.chunks(), deadlines, clock=clock), []))
        await _until_waiting(clock, 1)
        feed.queue.put_nowait(b"x" * 10)
        await _until_waiting(clock, 2)
        clock.advance(idle * 0.999)
        await asyncio.sleep(0)
        assert not task.done()
        clock.advance(idle * 0.001)
        with pytest.raises(StreamTimeoutError) as caught:
            await task
        assert feed.closed  # the source is closed at once
        return caught.value

    error = asyncio.run(main())
    assert error.kind == "idle"
    assert error.code == "stream_timeout"
    assert "sent nothing" in str(error)


def test_a_slow_stream_is_cut_at_the_minimum_rate_after_the_grace() -> None:
    async def main() -> StreamTimeoutError:
        feed = _Feed()
        clock = ManualClock()
        # 100 B/s after a 10 s grace; the idle timeout never triggers here.
        deadlines = StreamDeadlines(idle_timeout_s=1_000, min_rate=100, grace_s=10)
        out: list[bytes] = []
        task = asyncio.create_task(_collect(paced(feed.chunks(), deadlines, clock=clock), out))
        for n in range(1, 4):  # 50 B every 1 s: over the grace, then too slow
            await _until_waiting(clock, n)
            clock.advance(1)
            feed.queue.put_nowait(b"y" * 50)
        await _until_waiting(clock, 4)
        # 150 B received: the deadline is 10 + 150 / 100 = 11.5 s after the start.
        clock.advance(11.49 - clock.now())
        await asyncio.sleep(0)
        assert not task.done()
        clock.advance(0.01)
        with pytest.raises(StreamTimeoutError) as caught:
            await task
        assert len(out) == 3
        return caught.value

    error = asyncio.run(main())
    assert error.kind == "min_rate"
    assert "150 bytes" in str(error)


def test_a_stream_at_the_minimum_rate_is_never_cut() -> None:
    async def main() -> int:
        feed = _Feed()
        clock = ManualClock()
        deadlines = StreamDeadlines(idle_timeout_s=2, min_rate=100, grace_s=1)
        out: list[bytes] = []
        task = asyncio.create_task(_collect(paced(feed.chunks(), deadlines, clock=clock), out))
        for n in range(1, 51):
            await _until_waiting(clock, n)
            clock.advance(1)
            feed.queue.put_nowait(b"z" * 100)
        await _until_waiting(clock, 51)
        feed.queue.put_nowait(None)
        await task
        return len(out)

    assert asyncio.run(main()) == 50


def test_cancelling_the_consumer_is_not_a_timeout() -> None:
    async def main() -> None:
        feed = _Feed()
        clock = ManualClock()
        task = asyncio.create_task(
            _collect(paced(feed.chunks(), StreamDeadlines(), clock=clock), [])
        )
        await _until_waiting(clock, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert feed.closed
        assert clock.waiting == 0

    asyncio.run(main())


def test_the_loop_clock_passes_chunks_without_a_deadline() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (b"a", b"b"):
            yield chunk

    async def main() -> list[bytes]:
        out: list[bytes] = []
        deadlines = StreamDeadlines(idle_timeout_s=60, min_rate=0)
        await _collect(paced(chunks(), deadlines, clock=LoopClock()), out)
        return out

    assert asyncio.run(main()) == [b"a", b"b"]


def test_deadlines_validate() -> None:
    with pytest.raises(ValueError, match="idle_timeout_s"):
        StreamDeadlines(idle_timeout_s=0)
    with pytest.raises(ValueError, match="min_rate"):
        StreamDeadlines(min_rate=-1)
    assert StreamDeadlines(idle_timeout_s=3).grace == 3
    assert StreamDeadlines(idle_timeout_s=3, grace_s=0).grace == 0
    with pytest.raises(ValueError, match="only moves forward"):
        ManualClock().advance(-1)


def test_prepare_stream_cut_by_the_idle_timeout_releases_its_budget() -> None:
    policy = policy_of("qwen2audio")
    pcm = noise_pcm16(16_000).tobytes()
    budget = ByteBudget(64 << 20, limit="stream bytes")

    async def main() -> None:
        feed = _Feed()
        clock = ManualClock()
        deadlines = StreamDeadlines(idle_timeout_s=15, min_rate=0, clock=clock)
        task = asyncio.create_task(
            prepare_stream(
                family_host(),
                policy,
                feed.chunks(),
                source_format=raw_pcm16(16_000),
                budget=budget,
                deadlines=deadlines,
            )
        )
        starts = range(0, len(pcm), 640)
        for n, start in enumerate(starts, 1):
            await _until_waiting(clock, n)
            feed.queue.put_nowait(pcm[start : start + 640])
        await _until_waiting(clock, len(starts) + 1)
        assert budget.held > 0  # the stream holds its buffers while it waits
        clock.advance(15)
        with pytest.raises(StreamTimeoutError):
            await task
        assert feed.closed

    asyncio.run(main())
    assert budget.held == 0
