"""A plain head refused before h11 parses it (issue #33) is answered exactly as the h11
path answers it: the same bytes (status, headers, JSON error), the same metrics, the
same connection afterwards (closed, or its body skipped and the next request served),
and the app never reads its body."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from serverkit import PREPARE, Running, serving, wait_until

from audiogate.server import ServerLimits, drain, fast_refusal, protocol
from audiogate.server.routes import AudioServer

HELD = "127.0.0.2"


def _head(length: int, extra: str = "") -> bytes:
    return (
        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {length}\r\n\r\n"
    ).encode()


def _connect(running: Running) -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", running.server.port), timeout=10, source_address=(HELD, 0)
    )


def _read_all(sock: socket.socket) -> bytes:
    reply = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def _one_answer(sock: socket.socket) -> bytes:
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(65536)
        assert chunk, reply
        reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(payload) < length:
        payload += sock.recv(65536)
    return head + b"\r\n\r\n" + payload


def _counts(running: Running) -> dict[str, float]:
    samples = running.scrape()
    wanted = (
        "audiogate_server_head_refusals_total",
        "audiogate_audio_preprocess_rejections_total",
        "audiogate_server_prepare_responses_total",
    )
    return {
        f"{name}{dict(labels)}": value
        for (name, labels), value in samples.items()
        if name in wanted and value
    }


@pytest.fixture
def server(paths: dict[str, int]) -> Iterator[Running]:
    """A server holding each client to one request in flight, and one upload from
    :data:`HELD` in flight: every request from there is refused from its head."""
    limits = ServerLimits(
        max_requests_per_client=1, header_timeout_s=60.0, body_idle_timeout_s=60.0, min_body_rate=0
    )
    with serving(limits=limits) as running:
        held = _connect(running)
        try:
            held.sendall(_head(100_000) + b"{")
            wait_until(lambda: paths["reads"] == 1)
            yield running
        finally:
            held.close()
        running.wait_idle()


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Which path read each head: ``plain`` (before h11) or ``h11``; ``reads``: the
    app's body reads."""
    seen = {"plain": 0, "h11": 0, "reads": 0, "force_h11": 0}
    real = fast_refusal.plain_head

    def spy(*args: object) -> fast_refusal.PlainHead | None:
        head = None if seen["force_h11"] else real(*args)  # type: ignore[arg-type]
        seen["plain" if head is not None else "h11"] += 1
        return head

    monkeypatch.setattr(protocol, "plain_head", spy)
    read_body = AudioServer._read_body

    def reads(self: AudioServer, *args: object) -> object:
        seen["reads"] += 1
        return read_body(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(AudioServer, "_read_body", reads)
    return seen


@pytest.fixture
def skips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes left to each :class:`~audiogate.server.drain.BodySkip` the server made."""
    made: list[int] = []

    class Recorded(drain.BodySkip):
        def __init__(self, transport: Any, owner: Any, left: int) -> None:
            made.append(left)
            super().__init__(transport, owner, left)

    monkeypatch.setattr(protocol, "BodySkip", Recorded)
    return made


def _both_paths(
    running: Running, paths: dict[str, int], exchange: Callable[[Running], Any]
) -> dict[str, tuple[Any, dict[str, float]]]:
    """``exchange(running)`` once through each path: its result and the metrics' change."""
    out = {}
    for name in ("plain", "h11"):
        paths["force_h11"] = name == "h11"
        before = paths[name]
        counts = _counts(running)
        result = exchange(running)
        after = _counts(running)
        assert paths[name] > before, name
        change = {key: after[key] - counts.get(key, 0) for key in after}
        out[name] = (result, {key: value for key, value in change.items() if value})
    return out


@pytest.mark.slow
def test_a_refusal_with_close_is_the_same_bytes_and_metrics(
    server: Running, paths: dict[str, int]
) -> None:
    def exchange(running: Running) -> bytes:
        with _connect(running) as sock:
            # The head of a 10 MB body alone: answered without any body byte.
            sock.sendall(_head(10_000_000, "Connection: close\r\n"))
            return _read_all(sock)

    results = _both_paths(server, paths, exchange)
    assert results["plain"] == results["h11"]
    reply, change = results["plain"]
    assert isinstance(reply, bytes)
    assert reply.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert b"retry-after: 1\r\n" in reply
    assert b"connection: close\r\n" in reply
    assert b'"reason":"queue_full"' in reply
    assert change == {
        "audiogate_server_head_refusals_total{'reason': 'queue_full'}": 1,
        "audiogate_audio_preprocess_rejections_total"
        "{'family': 'gemma3n', 'reason': 'queue_full'}": 1,
        "audiogate_server_prepare_responses_total{'status': '429'}": 1,
    }
    assert paths["reads"] == 1  # the held upload's only


@pytest.mark.slow
# The body's rest after the first read under, then over, the shared buffer's threshold.
@pytest.mark.parametrize("size", [12_000, 200_000])
def test_a_kept_alive_refusal_skips_the_body_and_serves_the_next_request(
    server: Running, paths: dict[str, int], skips: list[int], size: int
) -> None:
    body = b"{" * size  # not JSON: parsed, it would be a 400

    def exchange(running: Running) -> tuple[bytes, bytes]:
        with _connect(running) as sock:
            # The head and part of its body, the rest after the answer with the next
            # request right behind it (a skip in the shared buffer reads none of it).
            sock.sendall(_head(len(body)) + body[:1000])
            refused = _one_answer(sock)
            sock.sendall(body[1000:] + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            served = _one_answer(sock)
            return refused, served.partition(b"\r\n")[0]

    results = _both_paths(server, paths, exchange)
    assert results["plain"] == results["h11"]
    (refused, served), change = results["plain"]
    assert refused.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert b"retry-after: 1\r\n" in refused
    assert b"connection: close" not in refused
    assert served == b"HTTP/1.1 200 OK"
    assert change["audiogate_server_head_refusals_total{'reason': 'queue_full'}"] == 1
    assert paths["reads"] == 1
    # Past the first read, a rest of 16 KiB or more is read by a BodySkip (each path).
    rest = size - 1000
    assert skips == ([rest] * 2 if rest >= protocol.SKIP_BUFFERED_BYTES else [])


@pytest.mark.slow
def test_an_admitted_plain_head_is_parsed_by_h11_and_counted_once(
    server: Running, paths: dict[str, int]
) -> None:
    # From another address, one at a time: each is admitted (nothing is counted in
    # flight for the plain head's question), read by the app, and its place given back.
    for _ in range(3):
        response = server.client.post(PREPARE, content=b"{}")
        assert response.status_code != 429, response.text
    assert paths["reads"] == 1 + 3
    assert paths["plain"] >= 3


@pytest.mark.slow
def test_a_request_pipelined_after_a_refused_body_is_answered_after_the_refusal(
    server: Running, paths: dict[str, int]
) -> None:
    # Head, body and the next request in one write: left to h11 (pipelined); the 429 is
    # written after the refusal's pause, then the next request is read and answered.
    body = b"{" * 3000
    with _connect(server) as sock:
        sock.sendall(_head(len(body)) + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while reply.count(b"HTTP/1.1 ") < 2 or not reply.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert reply.index(b"HTTP/1.1 200 OK\r\n") > 0
    assert paths["reads"] == 1


@pytest.mark.slow
def test_a_client_gone_while_its_refused_body_is_skipped_leaves_nothing_held(
    server: Running, paths: dict[str, int], skips: list[int]
) -> None:
    with _connect(server) as sock:
        sock.sendall(_head(200_000) + b"{" * 1000)
        assert _one_answer(sock).startswith(b"HTTP/1.1 429 ")
        sock.sendall(b"{" * 50_000)  # and it leaves mid-body
    assert skips == [199_000]
    # Its connection is gone from the table (the skip handed the loss back): a new one
    # from the same address is served.
    wait_until(lambda: server.client.get("/healthz").status_code == 200)
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _one_answer(sock).startswith(b"HTTP/1.1 200 OK\r\n")
