"""An admitted request's body of declared length is collected by the connection guard and
handed to the app whole, as one message (server.protocol, issue #31): sent in many
pieces, a disconnect half-way, a pipelined request after it, a body the app refuses
unread, a slow body (the app sees it as it arrives once the window is over), and the
body budget holding the collected bytes until the app takes them."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
from serverkit import GuardServer, LoopbackTransport
from uvicorn.config import Config
from uvicorn.server import ServerState

from audiogate.budget import ByteBudget
from audiogate.server.protocol import COLLECTED_BODY, guarded_h11
from audiogate.server.requests import LARGE_BODY_BYTES

RENDER = "/v1/chat/completions/render"


@attrs.define
class Admission:
    """Admits every request (as HeadAdmission does when there is room)."""

    server: GuardServer
    inflight: int = 0

    def admit(self, method: bytes, target: bytes, headers: Any, peer: str) -> tuple[str, None]:
        self.inflight += 1
        return peer, None

    def refusal(self, method: bytes, target: bytes, headers: Any, peer: str) -> None:
        return None

    def release(self, client: str) -> None:
        self.inflight -= 1


@attrs.define
class Seen:
    """Each request's body messages (``(bytes, more_body)``, or ``"disconnect"``) and what
    its scope said of the collected body when the app ran."""

    messages: list[list[Any]] = attrs.Factory(list)
    collected: list[int | None] = attrs.Factory(list)


def recording_app(seen: Seen) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        mine: list[Any] = []
        seen.messages.append(mine)
        hold = scope.get(COLLECTED_BODY)
        seen.collected.append(None if hold is None else hold.nbytes)
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                mine.append("disconnect")
                return
            mine.append((message["body"], message["more_body"]))
            total += len(message["body"])
            if not message["more_body"]:
                break
        answer = str(total).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    return app


def head(length: int, path: str = RENDER) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def body(length: int, fill: int = 0x61) -> bytes:
    return bytes((fill + i) % 256 for i in range(256)) * (length // 256) + b"z" * (length % 256)


class Harness:
    """One connection of the guard over a fake transport, on a running loop."""

    def __init__(self, server: GuardServer) -> None:
        self.seen = Seen()
        self.admission = Admission(server)
        config = Config(app=recording_app(self.seen), lifespan="off", access_log=False)
        protocol_class = guarded_h11(
            header_timeout_s=5.0,
            max_connections=16,
            admission=self.admission,  # type: ignore[arg-type]
        )
        self.state = ServerState()
        self.protocol = protocol_class(config=config, server_state=self.state, app_state={})
        self.transport = LoopbackTransport()
        self.protocol.connection_made(self.transport)

    async def feed(self, data: bytes, pieces: int = 1) -> None:
        """``data`` in ``pieces`` reads, the loop turning between them (the app runs)."""
        size = -(-len(data) // pieces)
        for start in range(0, len(data), size):
            self.protocol.data_received(data[start : start + size])
            for _ in range(3):
                await asyncio.sleep(0)

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.gather(*self.state.tasks)


def run(server: GuardServer, scenario: Any) -> Harness:
    async def main() -> Harness:
        harness = Harness(server)
        await scenario(harness)
        await harness.settle()
        return harness

    return asyncio.run(main())


def test_a_body_sent_in_many_pieces_reaches_the_app_as_one_message() -> None:
    payload = body(1_280_000)
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")
    held: list[int] = []

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(payload)) + payload[:1000])
        await h.feed(payload[1000:-5000], pieces=19)
        held.append(budget.held)  # collected so far, held in the body budget
        await h.feed(payload[-5000:])

    h = run(GuardServer(budget), scenario)
    assert h.seen.messages == [[(payload, False)]]
    assert held == [len(payload) - 5000]
    assert budget.held == 0  # the app took nothing over: given back once answered
    assert h.transport.written.endswith(b"\r\n\r\n1280000")
    assert not h.transport.closing


def test_the_app_takes_the_collected_bytes_over() -> None:
    payload = body(300_000)
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(payload)) + payload, pieces=7)

    h = run(GuardServer(budget), scenario)
    # The app ran at the head: the bytes that came with it were held already.
    assert h.seen.collected[0] is not None
    assert h.seen.messages == [[(payload, False)]]
    assert budget.held == 0


def test_a_client_gone_half_way_is_seen_by_the_app_and_its_bytes_given_back() -> None:
    payload = body(500_000)
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(payload)) + payload[:200_000], pieces=4)
        assert budget.held == 200_000
        h.protocol.connection_lost(None)

    h = run(GuardServer(budget), scenario)
    assert h.seen.messages == [["disconnect"]]
    assert budget.held == 0


def test_a_request_pipelined_after_the_body_is_served_next() -> None:
    first, second = body(200_000, 0x41), body(70_000, 0x30)
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")

    async def scenario(h: Harness) -> None:
        # The first body's last piece carries the second request's head and a part of
        # its body.
        await h.feed(head(len(first)) + first[:150_000], pieces=3)
        await h.feed(first[150_000:] + head(len(second)) + second[:10_000])
        await h.feed(second[10_000:], pieces=5)

    h = run(GuardServer(budget), scenario)
    assert h.seen.messages == [[(first, False)], [(second, False)]]
    assert h.transport.written.count(b"HTTP/1.1 200") == 2
    assert h.transport.written.endswith(b"\r\n\r\n70000")
    assert budget.held == 0


def test_a_body_over_the_cap_or_waiting_for_the_lane_is_read_as_uvicorn_reads_it() -> None:
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")
    over = body(300_000)
    large = body(LARGE_BODY_BYTES + 1000)

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(over)) + over, pieces=6)
        await h.settle()
        await h.feed(head(len(large), "/v1/audio/prepare") + large, pieces=20)

    h = run(GuardServer(budget, max_body_bytes=200_000), scenario)
    assert h.seen.collected == [None, None]
    for messages, payload in zip(h.seen.messages, (over, large), strict=True):
        assert len(messages) > 1  # in the pieces it arrived in
        assert b"".join(m[0] for m in messages) == payload
    assert budget.held == 0


def test_a_body_that_does_not_fit_the_budget_is_read_as_uvicorn_reads_it() -> None:
    payload = body(100_000)
    budget = ByteBudget(60_000, limit="inflight_body_bytes")

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(payload)) + payload, pieces=10)

    h = run(GuardServer(budget), scenario)
    messages = h.seen.messages[0]
    assert len(messages) > 1
    assert b"".join(m[0] for m in messages) == payload
    assert budget.held == 0


def test_a_slow_body_goes_on_in_pieces_after_the_window() -> None:
    payload = body(100_000)
    budget = ByteBudget(64 << 20, limit="inflight_body_bytes")

    async def scenario(h: Harness) -> None:
        await h.feed(head(len(payload)) + payload[:40_000], pieces=4)
        await asyncio.sleep(0.15)  # past the window (half the 0.2 s idle timeout)
        await h.feed(payload[40_000:], pieces=3)

    h = run(GuardServer(budget, body_idle_timeout_s=0.2), scenario)
    messages = h.seen.messages[0]
    assert messages[0] == (payload[:40_000], True)  # what was collected, at the window
    assert b"".join(m[0] for m in messages) == payload
    assert budget.held == 0
