"""The body budget's room for answers: waiting, refusal, and one request alone past it."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Gauge

from audiogate.budget import ByteBudget
from audiogate.errors import MemoryLimitError
from audiogate.server.budgets import BODY_BYTES_LIMIT


def budget(maximum: int) -> ByteBudget:
    gauge = Gauge("held", "bytes held", registry=CollectorRegistry())
    return ByteBudget(maximum, limit=BODY_BYTES_LIMIT, on_change=gauge.set)


def test_an_answer_waits_for_room_given_back() -> None:
    async def main() -> None:
        bodies = budget(100)
        sending, waiting = bodies.hold(), bodies.hold()
        sending.take(80)
        waiting.take(10)
        room = asyncio.ensure_future(bodies.make_room(waiting, 50, timeout_s=5))
        await asyncio.sleep(0.05)
        assert not room.done()  # 80 + 10 + 50 > 100
        sending.release()  # the other answer is out
        await asyncio.wait_for(room, 1)
        assert (waiting.nbytes, bodies.held) == (60, 60)

    asyncio.run(main())


def test_an_answer_with_no_room_in_time_is_refused() -> None:
    async def main() -> None:
        bodies = budget(100)
        bodies.hold().take(90)
        waiting = bodies.hold()
        with pytest.raises(MemoryLimitError, match="in-flight request body bytes"):
            await bodies.make_room(waiting, 20, timeout_s=0.05)
        assert (waiting.nbytes, bodies.held) == (0, 90)

    asyncio.run(main())


def test_a_request_holding_everything_may_go_past_the_maximum_alone() -> None:
    async def main() -> None:
        bodies = budget(100)
        alone = bodies.hold()
        alone.take(30)
        await asyncio.wait_for(bodies.make_room(alone, 500, timeout_s=5), 1)
        assert bodies.held == 530
        alone.shrink(200)
        assert (alone.nbytes, bodies.held) == (330, 330)
        alone.release()
        assert bodies.held == 0

    asyncio.run(main())
