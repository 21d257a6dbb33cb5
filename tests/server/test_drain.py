"""The drain of a refused connection (issue #33, :mod:`audiogate.server.drain`): once the
answer is written, what the client still sends lands in one shared buffer and is
dropped, up to the cap (then the connection is aborted); the client reads the answer,
not a reset, even when it sends its whole body before reading; the connection closes
when the client does, and its protocol is freed without the garbage collector."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
import weakref
from collections.abc import Callable, Iterator

import pytest
import uvloop
from serverkit import PREPARE, Running, serving, wait_until

from audiogate.server import ServerLimits, drain, protocol
from audiogate.server.drain import Drain


class _Transport:
    """What a drain calls on its transport, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


def _drain(loop: asyncio.AbstractEventLoop, lost: list[Exception | None], **kw: float) -> Drain:
    transport = _Transport()
    args = {"limit": 1000, "linger_s": 60.0} | kw
    return Drain(
        transport,  # type: ignore[arg-type]
        limit=int(args["limit"]),
        linger_s=args["linger_s"],
        loop=loop,
        lost=lost.append,
    )


def test_every_read_lands_in_one_shared_buffer_and_past_the_cap_aborts() -> None:
    loop = asyncio.new_event_loop()
    try:
        lost: list[Exception | None] = []
        first, second = _drain(loop, lost), _drain(loop, lost)
        buffer = first.get_buffer(-1)
        assert len(buffer) == drain.SCRATCH_BYTES
        assert second.get_buffer(65536) is buffer  # no buffer per drain or per read
        first.buffer_updated(600)
        first.buffer_updated(400)  # the cap exactly: still read
        assert first._transport.calls == []  # type: ignore[attr-defined]
        first.buffer_updated(1)
        assert first._transport.calls == ["abort"]  # type: ignore[attr-defined]
        assert not first.eof_received()  # the client closed: the transport closes
    finally:
        loop.close()


def test_the_loss_cancels_the_linger_and_goes_to_the_owner_once() -> None:
    loop = asyncio.new_event_loop()
    try:
        lost: list[Exception | None] = []
        kept = _drain(loop, lost, linger_s=0.0)
        gone = _drain(loop, lost, linger_s=0.0)
        error = ConnectionResetError()
        gone.connection_lost(error)
        assert lost == [error]
        loop.run_until_complete(asyncio.sleep(0.01))
        assert gone._transport.calls == []  # type: ignore[attr-defined]
        assert kept._transport.calls == ["close"]  # type: ignore[attr-defined]
    finally:
        loop.close()


class _Refuser(asyncio.Protocol):
    """Answers on the first bytes and hands the connection to a drain."""

    def __init__(self, answer: bytes, lost: list[Exception | None]) -> None:
        self.answer = answer
        self.lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(self.answer)
        self.transport.write_eof()
        loop = asyncio.get_running_loop()
        drained = Drain(
            self.transport, limit=256 * 1024, linger_s=30.0, loop=loop, lost=self.lost.append
        )
        self.transport.set_protocol(drained)


@contextlib.contextmanager
def _refusing(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> Iterator[tuple[int, list]]:
    loop = new_loop()
    lost: list[Exception | None] = []
    ready = threading.Event()
    holder: dict[str, asyncio.Server] = {}

    async def start() -> None:
        holder["server"] = await loop.create_server(
            lambda: _Refuser(b"refused", lost), "127.0.0.1", 0
        )
        ready.set()

    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        assert ready.wait(10)
        yield holder["server"].sockets[0].getsockname()[1], lost
    finally:
        loop.call_soon_threadsafe(holder["server"].close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_a_client_that_sends_its_whole_body_first_reads_the_answer(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    # 200 kB, more than the socket buffers take unread: it is sent whole only if the
    # drain reads it after the switch from the protocol that answered.
    with _refusing(new_loop) as (port, lost), socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"x" * 200_000)
        reply = b""
        while chunk := sock.recv(65536):  # a reset would raise here
            reply += chunk
        assert reply == b"refused"
        sock.close()
        wait_until(lambda: lost == [None])


HELD = "127.0.0.2"


@pytest.fixture
def refusing_server() -> Iterator[Running]:
    """A server holding each client to one request in flight, with one upload from
    :data:`HELD` in flight: every request from there is refused from its head."""
    limits = ServerLimits(
        max_requests_per_client=1, header_timeout_s=60.0, body_idle_timeout_s=60.0, min_body_rate=0
    )
    with serving(limits=limits) as running:
        held = socket.create_connection(
            ("127.0.0.1", running.server.port), timeout=10, source_address=(HELD, 0)
        )
        try:
            held.sendall(
                f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{".encode()
            )
            wait_until(lambda: running.gauges()[2] > 0)
            yield running
        finally:
            held.close()
        running.wait_idle()


@pytest.mark.slow
def test_a_refused_connection_is_drained_and_its_protocol_freed_without_the_collector(
    refusing_server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    drained: list[int] = []
    owners: list[weakref.ref] = []
    made = Drain.__init__

    def spy_init(self: Drain, *args: object, **kw: object) -> None:
        owners.append(weakref.ref(kw["lost"].__self__))  # type: ignore[attr-defined]
        made(self, *args, **kw)  # type: ignore[arg-type]

    updated = Drain.buffer_updated
    monkeypatch.setattr(Drain, "__init__", spy_init)
    monkeypatch.setattr(
        Drain, "buffer_updated", lambda self, n: (drained.append(n), updated(self, n))[1]
    )
    body = b"{" * 200_000
    head = (
        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    gc.disable()
    try:
        with socket.create_connection(
            ("127.0.0.1", refusing_server.server.port), timeout=10, source_address=(HELD, 0)
        ) as sock:
            sock.sendall(head + body[:1000])
            reply = b""
            while chunk := sock.recv(65536):  # the answer, then the server's half-close
                reply += chunk
            sock.sendall(body[1000:])  # still read (into the drain's buffer), not reset
            wait_until(lambda: sum(drained) == len(body) - 1000)
        assert reply.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
        assert b"retry-after: 1\r\n" in reply
        assert len(owners) == 1
        # Freed once the client closed, by reference counting alone.
        wait_until(lambda: owners[0]() is None)
    finally:
        gc.enable()
    assert len(body) <= protocol.DRAIN_BYTES  # drained, not aborted
