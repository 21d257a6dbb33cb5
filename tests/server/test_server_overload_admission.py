"""Refusals decided from the request head (issue #33): while the worker's queue is full, or
a declared body does not fit the body budget now, or a client holds more than its share
of a saturated worker, a request is answered 429 with ``Retry-After`` from its head alone:
the app never runs, its body is never read into the server nor parsed, and the
connection closes."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
from collections.abc import Iterator

import pytest
from serverkit import (
    PREPARE,
    Blocker,
    Running,
    chat,
    delta,
    serving,
    trickled_upload,
    wait_until,
    wav_b64,
)

from audiogate.server import ServerLimits
from audiogate.server.protocol import DRAIN_BYTES
from audiogate.server.routes import AudioServer
from audiogate.worker import WorkerLimits

SLOW = {"header_timeout_s": 60.0, "body_idle_timeout_s": 60.0, "min_body_rate": 0}


@pytest.fixture
def app_never_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The app's body readers, spied on: a request refused from its head reaches none."""
    calls: list[str] = []
    for name in ("_read_body", "_refuse_at_the_door"):
        original = getattr(AudioServer, name)

        def spy(self: AudioServer, *args: object, _name: str = name, _f: object = original):
            calls.append(_name)
            return _f(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(AudioServer, name, spy)
    return calls


def _connect(running: Running, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", running.server.port), timeout=10, source_address=(source, 0)
    )


def _read_all(sock: socket.socket) -> bytes:
    reply = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def _head(length: int, *, close: bool = False) -> bytes:
    closing = "Connection: close\r\n" if close else ""
    return (
        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{closing}Content-Length: {length}\r\n\r\n"
    ).encode()


def _refusal(reply: bytes) -> dict:
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429"), reply
    lowered = head.lower()
    assert b"retry-after: 1" in lowered
    assert b"connection: close" in lowered
    return json.loads(payload)["error"]


@contextlib.contextmanager
def _full_queue(running: Running) -> Iterator[None]:
    """The one worker thread blocked and the one queue slot taken."""
    assert running.blocker is not None
    request = chat(wav_b64(0.5))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(running.client.post, PREPARE, json=request)
            assert running.blocker.entered.wait(20)
            second = pool.submit(running.client.post, PREPARE, json=request)
            wait_until(lambda: running.worker.queued_jobs == 1)
            yield
        finally:
            running.blocker.open()
        assert first.result().status_code == second.result().status_code == 200


@pytest.mark.slow
def test_a_full_queue_refuses_from_the_head_before_any_body_byte(
    app_never_reads: list[str],
) -> None:
    with serving(blocker=Blocker(), worker=WorkerLimits(queue_depth=1)) as running:
        with _full_queue(running):
            before, reads = running.outcomes(), len(app_never_reads)
            held = running.gauges()[2]
            with _connect(running) as sock:
                # The head alone, announcing 10 MB: the answer comes without any body.
                sock.sendall(_head(10_000_000))
                error = _refusal(_read_all(sock))
            assert (error["type"], error["reason"]) == ("QueueFullError", "queue_full")
            assert delta(before, running.outcomes()) == {"queue_full": 1}
            assert running.gauges()[2] == held
            assert app_never_reads[reads:] == []  # the app never ran for it
            responses = running.value("audiogate_server_prepare_responses_total", status="429")
            assert responses == 1
        running.wait_idle()


def _one_answer(sock: socket.socket) -> bytes:
    """One answer off a kept-alive connection (its head and ``content-length`` bytes)."""
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(65536)
    head, _, payload = reply.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(payload) < length:
        payload += sock.recv(65536)
    return head + b"\r\n\r\n" + payload


@pytest.mark.slow
def test_a_small_refused_body_is_skipped_unparsed_and_the_connection_serves_on(
    app_never_reads: list[str],
) -> None:
    with (
        serving(blocker=Blocker(), worker=WorkerLimits(queue_depth=1)) as running,
        _full_queue(running),
        _connect(running) as sock,
    ):
        reads = len(app_never_reads)
        body = b"{" * 100_000  # not JSON: parsed, it would be a 400
        # Its body in two parts, the second after the answer; then the next request.
        sock.sendall(_head(len(body)) + body[:1000])
        head, _, _ = _one_answer(sock).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429"), head
        assert b"retry-after: 1" in head.lower()
        assert b"connection: close" not in head.lower()
        sock.sendall(body[1000:] + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _one_answer(sock).startswith(b"HTTP/1.1 200")
        assert app_never_reads[reads:] == []


@pytest.mark.slow
def test_a_refused_body_past_the_drain_bound_or_with_close_closes_the_connection() -> None:
    with (
        serving(blocker=Blocker(), worker=WorkerLimits(queue_depth=1)) as running,
        _full_queue(running),
    ):
        for extra, size in ((b"", DRAIN_BYTES + 1), (b"Connection: close\r\n", 1000)):
            with _connect(running) as sock:
                head = _head(size).replace(b"\r\n\r\n", b"\r\n" + extra + b"\r\n")
                sock.sendall(head + b"{" * min(size, 64_000))
                assert _refusal(_read_all(sock))["reason"] == "queue_full"


@pytest.mark.slow
def test_a_body_that_does_not_fit_the_budget_now_is_a_429_from_its_head(
    app_never_reads: list[str],
) -> None:
    limits = ServerLimits(max_inflight_body_bytes=1 << 20, **SLOW)
    with serving(limits=limits) as running:
        with trickled_upload(running.server.port, 900_000):
            wait_until(lambda: running.gauges()[2] >= 900_000)
            before, reads = running.outcomes(), len(app_never_reads)
            with _connect(running) as sock:
                # It fits the budget, not beside the upload.
                sock.sendall(_head(200_000, close=True))
                error = _refusal(_read_all(sock))
            assert (error["type"], error["limit"]) == (
                "MemoryLimitError",
                "in-flight request body bytes",
            )
            assert delta(before, running.outcomes()) == {"memory_limit": 1}
            assert app_never_reads[reads:] == []
        running.wait_idle()


def _upload(running: Running, source: str) -> socket.socket:
    sock = _connect(running, source)
    sock.sendall(_head(100_000) + b"{")
    return sock


@pytest.mark.slow
def test_a_client_is_held_to_its_share_of_a_saturated_worker_however_it_connects(
    app_never_reads: list[str],
) -> None:
    # One thread and a queue of 3: a capacity of 4 requests in flight.
    worker = WorkerLimits(queue_depth=3)
    with serving(worker=worker, limits=ServerLimits(**SLOW)) as running:
        held: list[socket.socket] = []
        try:
            # Alone, a client may fill the worker: 4 uploads on 4 connections.
            held += [_upload(running, "127.0.0.2") for _ in range(4)]
            wait_until(lambda: app_never_reads.count("_read_body") == 4)
            # Another client arrives: it is under its share (4 / 2), so it is served.
            held.append(_upload(running, "127.0.0.3"))
            wait_until(lambda: app_never_reads.count("_read_body") == 5)
            # The first, on a fresh connection, is past its share: refused from the head.
            with _connect(running, "127.0.0.2") as sock:
                sock.sendall(_head(100_000, close=True))
                error = _refusal(_read_all(sock))
            assert error["reason"] == "queue_full"
            assert "share" in error["message"]
            assert app_never_reads.count("_read_body") == 5
            # The second still has room in its share.
            held.append(_upload(running, "127.0.0.3"))
            wait_until(lambda: app_never_reads.count("_read_body") == 6)
        finally:
            for sock in held:
                sock.close()
        running.wait_idle()


@pytest.mark.slow
def test_a_fixed_cap_per_client_refuses_past_it() -> None:
    limits = ServerLimits(max_requests_per_client=1, **SLOW)
    with serving(limits=limits) as running:
        with _upload(running, "127.0.0.2"):
            wait_until(lambda: running.gauges()[2] > 0)
            with _connect(running, "127.0.0.2") as sock:
                sock.sendall(_head(100_000, close=True))
                error = _refusal(_read_all(sock))
            assert "at most 1" in error["message"]
            # Another address is not held to the first's count.
            response = running.client.post(PREPARE, json=chat(wav_b64(0.2)))
            assert response.status_code == 200
        running.wait_idle()
