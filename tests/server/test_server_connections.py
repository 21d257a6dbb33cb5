"""The connection guard (audiogate.server.protocol): request heads time out, connections
are capped below the file limit (the oldest waiting head makes room past it), bodies keep
a minimum rate, and malformed HTTP is the JSON error shape with no traceback. Eviction
order, per-address caps and the 503 are in test_server_overload_connections.py."""

from __future__ import annotations

import contextlib
import json
import logging
import resource
import socket
import time
from collections.abc import Iterator

import pytest
from serverkit import PREPARE, Running, raw_error, serving

from audiogate.server import ServerLimits
from audiogate.server.protocol import FD_RESERVE, OVERFLOW_CONNECTIONS, connection_cap

HEAD_TIMEOUT_S = 0.3
MAX_CONNECTIONS = 6


@pytest.fixture(scope="module")
def guarded() -> Iterator[Running]:
    limits = ServerLimits(
        header_timeout_s=HEAD_TIMEOUT_S,
        max_connections=MAX_CONNECTIONS,
        body_idle_timeout_s=0.3,
        min_body_rate=20_000,
    )
    with serving(limits=limits) as running:
        yield running


def _connect(running: Running) -> socket.socket:
    return socket.create_connection(("127.0.0.1", running.server.port), timeout=5)


def _read_all(sock: socket.socket) -> bytes:
    reply = b""
    while chunk := sock.recv(65536):  # the server closes: b"" at the end
        reply += chunk
    return reply


# --- point 3: smuggling-shaped requests --------------------------------------------------


def test_both_lengths_with_broken_chunks_is_the_json_400_without_a_traceback(
    guarded: Running, caplog: pytest.LogCaptureFixture
) -> None:
    before = guarded.outcomes()
    with caplog.at_level(logging.WARNING):
        for body in (b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\nab", b""):
            with _connect(guarded) as sock:
                sock.sendall(
                    f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                    + body
                )
                error = raw_error(_read_all(sock), 400)
            assert error["type"] == "BadRequestError"
            assert "Content-Length and Transfer-Encoding" in error["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert guarded.outcomes() == before  # refused before the app: not a prepare request


def test_malformed_http_is_the_json_400(guarded: Running) -> None:
    with _connect(guarded) as sock:
        sock.sendall(f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".encode())
        error = raw_error(_read_all(sock), 400)
    assert error["type"] == "BadRequestError"
    assert error["message"].startswith("malformed HTTP request")


# --- point 2: heads, connections, body rate ----------------------------------------------


@pytest.mark.slow
def test_a_half_sent_head_is_answered_408_and_closed(guarded: Running) -> None:
    with _connect(guarded) as sock:
        sock.sendall(f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Le".encode())
        error = raw_error(_read_all(sock), 408)
    assert error["type"] == "RequestTimeoutError"


@pytest.mark.slow
def test_a_silent_connection_and_a_stalled_second_head_are_closed(guarded: Running) -> None:
    with _connect(guarded) as sock:
        assert _read_all(sock) == b""  # nothing sent: closed without an answer
    with _connect(guarded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while b'"status"' not in reply:
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # the next head stops half-way
        assert raw_error(_read_all(sock), 408)["type"] == "RequestTimeoutError"


@pytest.mark.slow
def test_past_the_cap_the_oldest_waiting_head_is_closed_for_a_new_connection(
    guarded: Running,
) -> None:
    time.sleep(HEAD_TIMEOUT_S + 0.1)  # the test client's kept-alive connection has closed
    held = [_connect(guarded) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # half-sent heads, inside their timeout
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        with _connect(guarded) as extra:  # the one over the cap: the oldest head makes room
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(extra).startswith(b"HTTP/1.1 200")
        with contextlib.suppress(ConnectionResetError):
            assert _read_all(held[0]) == b""  # closed, unanswered
    finally:
        for sock in held:
            sock.close()
    time.sleep(HEAD_TIMEOUT_S)
    assert guarded.client.get("/healthz").status_code == 200


@pytest.mark.slow
def test_a_body_slower_than_the_minimum_rate_is_a_408(guarded: Running) -> None:
    before = guarded.outcomes()
    with _connect(guarded) as sock:
        sock.sendall(
            f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
        )
        started = time.monotonic()
        sock.settimeout(0.02)
        reply = b""
        # 100 bytes every 20 ms (5,000 bytes/s): it never stalls for the idle timeout.
        while not reply and time.monotonic() - started < 5:
            try:
                sock.sendall(b" " * 100)
                reply = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            reply += _read_all(sock)
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply
    assert "slower than 20000 bytes/s" in json.loads(payload)["error"]["message"]
    assert guarded.outcomes()["waveform"] == before["waveform"] + 1


def test_the_cap_fits_under_the_file_limit_and_a_low_limit_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    with caplog.at_level(logging.WARNING, logger="audiogate.server"):
        assert connection_cap(1024) == 1024 - FD_RESERVE - OVERFLOW_CONNECTIONS
    assert "open-file limit" in caplog.text
    assert "4096" in caplog.text
    monkeypatch.setattr(resource, "getrlimit", lambda which: (65536, 65536))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="audiogate.server"):
        assert connection_cap(1024) == 1024
    assert caplog.text == ""
