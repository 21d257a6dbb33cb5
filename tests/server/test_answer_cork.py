"""An answer in pieces is written to a corked TCP socket (server.responses.cork, issue
#31): corked before its head, uncorked after its last piece, also when the answer is
abandoned; a transport without a TCP socket is left alone."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from audiogate.server.responses import SEND_PIECE_BYTES, FragmentsResponse

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="Linux TCP_CORK")


class Sock:
    family = socket.AF_INET

    def __init__(self, log: list[Any], *, closed_after: int | None = None) -> None:
        self.log = log
        self.closed_after = closed_after

    def setsockopt(self, level: int, option: int, value: int) -> None:
        assert (level, option) == (socket.IPPROTO_TCP, socket.TCP_CORK)
        if self.closed_after is not None and len(self.log) >= self.closed_after:
            raise ValueError("negative file descriptor")  # uvloop's, once closed
        self.log.append(("cork", value))


class Transport:
    def __init__(self, sock: Sock | None) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


class Cycle:
    """Stands for uvicorn's request cycle, whose bound ``send`` the app is given."""

    def __init__(self, log: list[Any], sock: Sock | None, stall_after: int | None = None) -> None:
        self.log = log
        self.transport = Transport(sock)
        self.stall_after = stall_after

    async def send(self, message: dict[str, Any]) -> None:
        sent = sum(1 for entry in self.log if entry[0] == "send")
        if self.stall_after is not None and sent >= self.stall_after:
            await asyncio.sleep(10)
        self.log.append(("send", message["type"], len(message.get("body", b""))))


def _answer(log: list[Any], stall_timeout_s: float = 5.0) -> FragmentsResponse:
    fragments = [b"{", b"x" * (3 * SEND_PIECE_BYTES), b"}"]
    return FragmentsResponse(
        fragments, on_sent=lambda: log.append(("sent",)), stall_timeout_s=stall_timeout_s
    )


def test_the_answer_is_corked_from_its_head_to_its_last_piece() -> None:
    log: list[Any] = []
    cycle = Cycle(log, Sock(log))
    asyncio.run(_answer(log)(scope={}, receive=None, send=cycle.send))  # type: ignore[arg-type]
    assert log[0] == ("cork", 1)
    assert log[1] == ("send", "http.response.start", 0)
    assert [entry[0] for entry in log[2:]] == ["send"] * 4 + ["cork", "sent"]
    assert log[-2] == ("cork", 0)


def test_an_abandoned_answer_is_uncorked() -> None:
    log: list[Any] = []
    cycle = Cycle(log, Sock(log), stall_after=2)
    answer = _answer(log, stall_timeout_s=0.05)
    asyncio.run(answer(scope={}, receive=None, send=cycle.send))  # type: ignore[arg-type]
    assert log[0] == ("cork", 1)
    assert log[-2:] == [("cork", 0), ("sent",)]


def test_an_answer_to_a_closed_connection_still_gives_its_budget_back() -> None:
    log: list[Any] = []
    cycle = Cycle(log, Sock(log, closed_after=2), stall_after=2)
    answer = _answer(log, stall_timeout_s=0.05)
    asyncio.run(answer(scope={}, receive=None, send=cycle.send))  # type: ignore[arg-type]
    assert log[0] == ("cork", 1)
    assert log[-1] == ("sent",)


def test_without_a_tcp_socket_nothing_is_corked() -> None:
    log: list[Any] = []
    cycle = Cycle(log, None)
    asyncio.run(_answer(log)(scope={}, receive=None, send=cycle.send))  # type: ignore[arg-type]
    assert not [entry for entry in log if entry[0] == "cork"]


def test_a_connection_closed_before_its_answer_still_gives_its_bytes_back() -> None:
    # The client left while its request was prepared: uvloop's socket stand-in raises at
    # the cork. The answer is not corked, and on_sent (the request's budget) still runs
    # (make soak: the body budget was left held by every such request).
    log: list[Any] = []
    cycle = Cycle(log, Sock(log, closed_after=0))
    asyncio.run(_answer(log)({"type": "http"}, None, cycle.send))  # type: ignore[arg-type]
    assert ("sent",) in log
    assert not any(entry[0] == "cork" for entry in log)
