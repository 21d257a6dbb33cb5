"""The overload sweep's goodput window (benchmarks/loadtest_server.py, issue #33): a point
counts the answers that came within its duration, not those a refused client still waits
for after it (a 429 is written the refusal delay after its head), over which the server
idles and which, counted in the wall time, took goodput off every point past saturation."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import ModuleType

import pytest


def test_window_rates_count_the_answers_within_the_window(loadtest: ModuleType) -> None:
    window = Counter({200: 800, 429: 300, 503: 100})
    goodput, refusals = loadtest.window_rates(window, 4.0)
    assert goodput == pytest.approx(200.0)
    assert refusals == pytest.approx(100.0)
    assert loadtest.window_rates(Counter(), 2.0) == (0.0, 0.0)


def _answer(status: int, reason: bytes) -> bytes:
    return b"HTTP/1.1 %d %s\r\nContent-Length: 2\r\n\r\n{}" % (status, reason)


def test_a_refusal_answered_after_the_duration_is_outside_the_window(loadtest: ModuleType) -> None:
    # The first request is answered 200 at once; the second 429 only once the client's
    # duration is over (as the server's refusal delay does to a head refused just
    # before the end). Both are counted, only the 200 within the window.
    duration_s = 2.0

    async def main() -> tuple[Counter[int], Counter[int]]:
        first: list[float] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if not first:
                    first.append(time.perf_counter())
                    writer.write(_answer(200, b"OK"))
                else:
                    # The client's duration began before its first request was sent.
                    await asyncio.sleep(max(first[0] + duration_s + 0.2 - time.perf_counter(), 0))
                    writer.write(_answer(429, b"Too Many Requests"))
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            _, statuses, errors, window = await loadtest.drive_raw(
                f"http://127.0.0.1:{port}", [b"{}"], concurrency=1, duration_s=duration_s
            )
        assert errors == 0
        return statuses, window

    statuses, window = asyncio.run(main())
    assert statuses == Counter({200: 1, 429: 1})
    assert window == Counter({200: 1})
