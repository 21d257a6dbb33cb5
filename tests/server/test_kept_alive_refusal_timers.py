"""A kept-alive connection's timers and reads under refusals (server.protocol, issue #33):
its head timer is set once and moved, not set anew per request; a refused request's
connection reads on while its 429 is due (nothing usually comes: no pause and resume of
reading per refusal), and pauses only when bytes do come, read once it is answered."""

from __future__ import annotations

import asyncio
from typing import Any

from serverkit import (
    REFUSED_REQUEST,
    LoopbackTransport,
    RefusingAdmission,
    never_app,
)
from uvicorn.config import Config
from uvicorn.server import ServerState

from audiogate.server.protocol import REFUSED_READ_PAUSE_S, guarded_h11


async def _connection() -> tuple[Any, LoopbackTransport, list[str]]:
    """A guarded connection refusing every request, and the names of the callbacks its
    loop was asked to time."""
    loop = asyncio.get_running_loop()
    timed: list[str] = []
    call_at = loop.call_at

    def at(when: float, callback: Any, *args: Any, **kw: Any) -> asyncio.TimerHandle:
        timed.append(callback.__name__)
        return call_at(when, callback, *args, **kw)

    loop.call_at = at  # type: ignore[method-assign]  # asyncio's call_later calls it too
    config = Config(app=never_app, lifespan="off", access_log=False)
    protocol_class = guarded_h11(
        header_timeout_s=5.0,
        max_connections=16,
        admission=RefusingAdmission(),  # type: ignore[arg-type]
    )
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = LoopbackTransport()
    protocol.connection_made(transport)
    return protocol, transport, timed


async def _answered(transport: LoopbackTransport, count: int) -> None:
    while transport.written.count(b"HTTP/1.1 429") < count:
        await asyncio.sleep(REFUSED_READ_PAUSE_S / 4)


def test_refusals_on_a_kept_alive_connection_set_one_head_timer_and_never_pause() -> None:
    async def main() -> tuple[LoopbackTransport, list[str]]:
        protocol, transport, timed = await _connection()
        for count in range(1, 4):
            protocol.data_received(REFUSED_REQUEST)
            await _answered(transport, count)
        assert not transport.closing  # kept alive
        protocol.connection_lost(None)
        return transport, timed

    transport, timed = asyncio.run(main())
    assert transport.written.count(b"HTTP/1.1 429") == 3
    assert timed.count("_head_timed_out") == 1  # set at the connection, then moved
    assert timed.count("_answer_refusal") == 3
    assert (transport.pauses, transport.resumes) == (0, 0)


def test_bytes_before_the_answer_pause_reading_and_are_read_after_it() -> None:
    async def main() -> LoopbackTransport:
        protocol, transport, _ = await _connection()
        protocol.data_received(REFUSED_REQUEST)
        protocol.data_received(REFUSED_REQUEST)  # sent again before the 429: kept, reading paused
        assert (transport.pauses, transport.resumes) == (1, 0)
        assert not transport.written
        await _answered(transport, 2)  # the second, read once the first was answered
        protocol.connection_lost(None)
        return transport

    transport = asyncio.run(main())
    assert (transport.pauses, transport.resumes) == (1, 1)
    assert transport.written.count(b"HTTP/1.1 429") == 2


def test_the_head_timer_moves_with_the_head_awaited_and_closes_once_it_is_due() -> None:
    async def main() -> tuple[list[str], list[bool]]:
        protocol, transport, timed = await _connection()
        loop = asyncio.get_running_loop()
        closed = []
        protocol._head_due = loop.time() + 60  # a head awaited later than the timer set
        protocol._head_timed_out()  # the timer fires: set again for what is left
        closed.append(transport.closing)
        protocol._head_due = None  # no head awaited (a request is being served)
        protocol._head_timed_out()
        closed.append(transport.closing)
        protocol._head_due = loop.time() - 1  # due: the connection closes
        protocol._head_timed_out()
        closed.append(transport.closing)
        protocol.connection_lost(None)
        return timed, closed

    timed, closed = asyncio.run(main())
    assert closed == [False, False, True]
    assert timed.count("_head_timed_out") == 2
