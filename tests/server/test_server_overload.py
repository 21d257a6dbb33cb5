"""Overload: while the worker's queue is full, a request is refused (429) at the door,
before its body is read, so refused requests cost no parsing, rendering or decoding and
admitted ones do not wait behind them."""

from __future__ import annotations

import concurrent.futures
import json
import socket

import pytest
from serverkit import PREPARE, Blocker, chat, delta, serving, wait_until, wav_b64

from audiogate.worker import WorkerLimits


@pytest.mark.slow
def test_a_full_queue_refuses_before_the_body_is_read() -> None:
    blocker = Blocker()
    with serving(blocker=blocker, worker=WorkerLimits(queue_depth=1)) as running:
        request = chat(wav_b64(1.0))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            try:
                first = pool.submit(running.client.post, PREPARE, json=request)
                assert blocker.entered.wait(20)  # the one thread holds job 1
                second = pool.submit(running.client.post, PREPARE, json=request)
                wait_until(lambda: running.worker.queued_jobs == 1)  # job 2 fills the queue
                before, held = running.outcomes(), running.gauges()[2]
                with socket.create_connection(("127.0.0.1", running.server.port), 5) as sock:
                    # 50 MB announced, none of it sent: the answer cannot wait for it.
                    sock.sendall(
                        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                        "\r\nContent-Length: 50000000\r\n\r\n".encode()
                    )
                    reply = b""
                    while b'"queue_full"' not in reply:
                        reply += sock.recv(65536)
                head, _, payload = reply.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 429")
                assert b"retry-after: 1" in head.lower()
                # Not closed: the rest of the body is read and dropped by the server.
                assert b"connection: close" not in head.lower()
                error = json.loads(payload)["error"]
                assert (error["type"], error["reason"]) == ("QueueFullError", "queue_full")
                assert delta(before, running.outcomes()) == {"queue_full": 1}
                assert running.gauges()[2] == held  # none of its body was held
            finally:
                blocker.open()
            assert first.result().status_code == 200
            assert second.result().status_code == 200
        running.wait_idle()
        assert json.loads(running.client.get("/healthz").text)["status"] == "ok"
