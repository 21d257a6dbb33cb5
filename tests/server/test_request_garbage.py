"""A request leaves no reference cycle behind (issue #33): an answered request, and a
connection refused from its head, are freed by reference counting as they end, so that
under load the garbage collector has nothing to find (its full collections walk the
whole heap: 50-70 ms with a model's tokenizer loaded, the loop stopped meanwhile)."""

from __future__ import annotations

import gc
import socket
from collections import Counter
from collections.abc import Iterator

import pytest
from serverkit import PREPARE, chat, serving, wait_until, wav_b64

from audiogate.server import ServerLimits


def _cyclic_garbage() -> Counter[str]:
    """The types of the objects only the collector would free, now."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return Counter(type(item).__qualname__ for item in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.slow
def test_an_answered_request_leaves_no_cycle(collector_off: None) -> None:
    with serving() as running:
        request = chat(wav_b64(0.5))
        for _ in range(3):  # warm (first-use caches are not garbage)
            assert running.client.post(PREPARE, json=request).status_code == 200
        _cyclic_garbage()
        for _ in range(5):
            assert running.client.post(PREPARE, json=request).status_code == 200
        running.wait_idle()
        found = _cyclic_garbage()
    assert found["_DisconnectWatch"] == 0, found
    assert found["RequestResponseCycle"] == 0, found
    assert found["Task"] == 0, found


def test_a_connection_refused_from_its_head_leaves_no_cycle(collector_off: None) -> None:
    limits = ServerLimits(max_requests_per_client=1, header_timeout_s=60.0, min_body_rate=0)
    held_head = f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{"
    refused = (
        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    with serving(limits=limits) as running:
        address = ("127.0.0.1", running.server.port)
        held = socket.create_connection(address, timeout=10)
        try:
            held.sendall(held_head.encode())
            wait_until(lambda: running.gauges()[2] > 0)
            _cyclic_garbage()
            for _ in range(5):
                with socket.create_connection(address, timeout=10) as sock:
                    sock.sendall(refused.encode())
                    assert sock.recv(100).startswith(b"HTTP/1.1 429")
            found = _cyclic_garbage()
        finally:
            held.close()
    assert not [name for name in found if "Protocol" in name or name == "Connection"], found
