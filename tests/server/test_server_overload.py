"""Overload: while the worker's queue is full, a request is refused (429) from its head:
what its client still sends is dropped, never parsed, rendered or decoded, so refused
requests cost little and admitted ones do not wait behind them
(test_server_overload_admission.py has the mechanisms)."""

from __future__ import annotations

import concurrent.futures
import json
import socket

import pytest
from serverkit import PREPARE, Blocker, chat, delta, serving, wait_until, wav_b64

from audiogate.worker import WorkerLimits


@pytest.mark.slow
def test_a_full_queue_refuses_at_the_door_without_parsing_the_body() -> None:
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
                # Not JSON: refused at the door, it is never parsed (else: a 400).
                body = b"{" * 200_000
                with socket.create_connection(("127.0.0.1", running.server.port), 5) as sock:
                    sock.sendall(
                        f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                        f"\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    reply = b""
                    while chunk := sock.recv(65536):  # a 429, not a reset
                        reply += chunk
                head, _, payload = reply.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 429"), reply
                assert b"retry-after: 1" in head.lower()
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
