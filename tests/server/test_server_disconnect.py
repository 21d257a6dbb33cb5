"""A client that goes away cancels acquisition and processing: counted once as
cancelled, every byte gauge back to zero, the worker still serving."""

from __future__ import annotations

import base64
import gc
import json
import re
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from serverkit import (
    PREPARE,
    Blocker,
    chat,
    delta,
    serving,
    trickled_upload,
    wait_until,
    wav_b64,
)

from audiogate.acquire import AcquisitionPolicy
from audiogate.server import ServerLimits
from audiogate.testing.audio import noise, wav_bytes


def open_request(port: int, headers: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {PREPARE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    sock.sendall(head.encode())
    return sock


def test_a_slow_upload_that_stops_is_cancelled_and_freed(gemma) -> None:
    before = gemma.outcomes()
    body = json.dumps(chat(wav_b64(5.0))).encode()
    sock = open_request(gemma.server.port, {"Content-Length": str(len(body))})
    sock.sendall(body[:20_000])
    # The server holds what has arrived (never the declared size on the client's word).
    wait_until(lambda: gemma.gauges()[2] == 20_000)
    sock.close()
    wait_until(lambda: delta(before, gemma.outcomes()) == {"cancelled": 1})
    gemma.wait_idle()
    assert gemma.client.post(PREPARE, json=chat(wav_b64(1.0))).status_code == 200


def test_a_declared_length_alone_holds_nothing(gemma) -> None:
    # Four idle connections each declaring a body near the cap do not exhaust the body
    # budget (four maximal bodies): nothing is reserved before bytes arrive.
    cap = gemma.client.get("/healthz").json()["server"]["max_body_bytes"]
    before = gemma.outcomes()
    socks = [open_request(gemma.server.port, {"Content-Length": str(cap)}) for _ in range(5)]
    try:
        assert gemma.client.post(PREPARE, json=chat(wav_b64(1.0))).status_code == 200
        assert gemma.gauges()[2] == 0
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: delta(before, gemma.outcomes()) == {"completed": 1, "cancelled": 5})
    gemma.wait_idle()


@pytest.mark.slow
def test_a_stalled_body_is_a_408() -> None:
    with serving(limits=ServerLimits(body_idle_timeout_s=0.3)) as running:
        before = running.outcomes()
        sock = open_request(running.server.port, {"Content-Length": "1000"})
        sock.sendall(b'{"messages": ')
        reply = sock.makefile("rb")
        assert reply.readline().startswith(b"HTTP/1.1 408")
        headers = dict(
            line.decode().lower().rstrip().split(": ", 1) for line in iter(reply.readline, b"\r\n")
        )
        assert headers["connection"] == "close"
        error = json.loads(reply.read(int(headers["content-length"])))["error"]
        assert reply.read() == b""  # and the server closed the connection
        reply.close()
        sock.close()
        assert error["type"] == "RequestTimeoutError"
        assert error["reason"] == "waveform"
        assert delta(before, running.outcomes()) == {"waveform": 1}
        running.wait_idle()


def test_a_chunked_upload_that_stops_is_cancelled_and_freed(gemma) -> None:
    before = gemma.outcomes()
    sock = open_request(gemma.server.port, {"Transfer-Encoding": "chunked"})
    piece = b'{"messages": [' + b" " * 30_000
    sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    wait_until(lambda: gemma.gauges()[2] >= len(piece))
    sock.close()
    wait_until(lambda: delta(before, gemma.outcomes()) == {"cancelled": 1})
    gemma.wait_idle()


@pytest.mark.slow
def test_a_client_gone_during_processing_cancels_the_job(caplog) -> None:
    blocker = Blocker()
    with serving(blocker=blocker) as running:
        before = running.outcomes()
        body = json.dumps(chat(wav_b64(2.0), wav_b64(2.0))).encode()
        sock = open_request(running.server.port, {"Content-Length": str(len(body))})
        sock.sendall(body)
        assert blocker.entered.wait(20)
        queued, inflight, held = running.gauges()
        assert queued > 0
        assert inflight > 0
        assert held == len(body)
        sock.close()
        # The blocked feature loop notices the token; the worker counts the cancellation.
        wait_until(lambda: delta(before, running.outcomes()) == {"cancelled": 1})
        running.wait_idle()
        gc.collect()
        assert "never retrieved" not in caplog.text  # a disconnect is not a server error
        blocker.open()
        assert running.client.post(PREPARE, json=chat(wav_b64(1.0))).status_code == 200
        assert delta(before, running.outcomes()) == {"cancelled": 1, "completed": 1}


def long_wav(path: Path, *, seconds: int, rate_hz: int) -> int:
    """A long noise WAV written straight as PCM16 (no float64 copy of the whole clip)."""
    rng = np.random.default_rng(7)
    samples = rng.integers(-8000, 8000, size=seconds * rate_hz, dtype=np.int16)
    header = wav_bytes(np.zeros(0), rate_hz=rate_hz)
    header = header[:4] + (len(header) - 8 + samples.nbytes).to_bytes(4, "little") + header[8:-4]
    data = header + samples.nbytes.to_bytes(4, "little") + samples.tobytes()
    path.write_bytes(data)
    return len(data)


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("media")
    long_wav(root / "lecture.wav", seconds=600, rate_hz=32_000)
    return root


def test_a_long_phi4_clip_is_cancelled_mid_processing(long_clip: Path) -> None:
    acquisition = AcquisitionPolicy(media_root=long_clip)
    with serving("phi-4-multimodal-instruct", acquisition=acquisition) as running:
        before = running.outcomes()
        request = {
            "model": "phi-4",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "audio_url", "audio_url": {"url": "file://lecture.wav"}},
                        {"type": "text", "text": "Summarize the lecture."},
                    ],
                }
            ],
        }
        body = json.dumps(request).encode()
        sock = open_request(running.server.port, {"Content-Length": str(len(body))})
        sock.sendall(body)
        # Admitted: the worker holds the clip's bytes (10 minutes at 32 kHz take seconds).
        wait_until(lambda: running.gauges()[1] > 0)
        sock.close()
        wait_until(lambda: delta(before, running.outcomes()) == {"cancelled": 1})
        running.wait_idle()


def _unread_requests(port: int, body: bytes, count: int) -> socket.socket:
    """A connection that sends ``count`` pipelined requests and never reads an answer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    head = f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    sock.sendall((head.encode() + body) * count)
    return sock


@pytest.mark.slow
def test_a_client_that_never_reads_its_answer_gives_its_budget_back() -> None:
    # Its answers stall in the socket: after the stall timeout the answer is abandoned and
    # the connection closed, instead of holding the body budget while it stays connected.
    with serving(limits=ServerLimits(body_idle_timeout_s=0.5)) as running:
        body = json.dumps(chat(wav_b64(30.0))).encode()
        sock = _unread_requests(running.server.port, body, 3)
        try:
            wait_until(lambda: running.gauges()[2] > 0)
            wait_until(lambda: running.gauges()[2] == 0, timeout_s=15)
            assert running.client.post(PREPARE, json=chat(wav_b64(1.0))).status_code == 200
        finally:
            sock.close()
        running.wait_idle()


@pytest.mark.slow
def test_answers_stay_within_the_body_budget() -> None:
    # Small bodies with large answers (30 s at 1 kHz: an 80 kB body, a 2 MB answer) from
    # clients that never read: an answer waits for room in the budget, or is refused,
    # instead of being forced past it.
    clip = base64.b64encode(wav_bytes(noise(samples=30_000, amplitude=0.1), rate_hz=1_000))
    body = json.dumps(chat(clip.decode())).encode()
    budget = 1 << 20
    limits = ServerLimits(body_idle_timeout_s=3.0, max_inflight_body_bytes=budget)
    with serving(limits=limits) as running:
        answer = len(running.client.post(PREPARE, content=body).content)
        assert answer > 20 * len(body)
        socks = [_unread_requests(running.server.port, body, 3) for _ in range(12)]
        peak = 0.0
        try:
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                peak = max(peak, running.gauges()[2])
                time.sleep(0.01)
        finally:
            for sock in socks:
                sock.close()
        running.wait_idle()
        # Past the maximum only for a request that holds everything held, alone.
        assert peak <= max(budget, answer + len(body))


@pytest.mark.slow
def test_a_client_gone_while_its_answer_waits_for_room_is_let_go_at_once() -> None:
    # One connection's unread answers fill the budget; a second client's answer waits for
    # room, and that client leaves: its request ends (499) at once, not after the wait.
    clip = base64.b64encode(wav_bytes(noise(samples=30_000, amplitude=0.1), rate_hz=1_000))
    body = json.dumps(chat(clip.decode())).encode()
    # Room for a stuck answer (2 MB) and a body, not for a second answer.
    limits = ServerLimits(body_idle_timeout_s=20.0, max_inflight_body_bytes=3 << 20)
    with serving(limits=limits) as running:
        stuck = _unread_requests(running.server.port, body, 3)
        try:
            wait_until(lambda: running.gauges()[2] > 2_000_000)  # one answer is stuck
            gone_before = running.value("audiogate_server_prepare_responses_total", status="499")
            leaving = _unread_requests(running.server.port, body, 1)
            time.sleep(1.0)  # its job runs; its answer waits for room
            leaving.close()
            started = time.monotonic()
            wait_until(
                lambda: (
                    running.value("audiogate_server_prepare_responses_total", status="499")
                    > gone_before
                ),
                timeout_s=10,
            )
            assert time.monotonic() - started < 5  # not the 20 s wait
        finally:
            stuck.close()
        running.wait_idle(timeout_s=30)


@pytest.mark.slow
def test_a_client_gone_while_its_answer_waits_for_room_counts_as_cancelled() -> None:
    # Its request was prepared (the worker is done with it), but its answer waits for room
    # in the body budget when the client leaves: 499, counted once as cancelled (not as
    # completed, and nothing more once the upload holding the budget leaves too).
    clip = base64.b64encode(wav_bytes(noise(samples=30_000, amplitude=0.1), rate_hz=1_000))
    body = json.dumps(chat(clip.decode())).encode()
    limits = ServerLimits(body_idle_timeout_s=30.0, max_inflight_body_bytes=1 << 20)
    with serving(limits=limits) as running:
        before = running.outcomes()
        samples = "audiogate_audio_source_samples_total"
        samples_before = running.value(samples, family="gemma3n")
        gone_before = running.value("audiogate_server_prepare_responses_total", status="499")
        with trickled_upload(running.server.port, 900_000):
            wait_until(lambda: running.gauges()[2] >= 900_000)
            leaving = open_request(running.server.port, {"Content-Length": str(len(body))})
            leaving.sendall(body)
            # Prepared and handed off by the worker: its answer now waits for room.
            wait_until(
                lambda: (
                    running.value(samples, family="gemma3n") - samples_before == 30_000
                    and running.gauges()[:2] == (0.0, 0.0)
                )
            )
            time.sleep(0.2)
            leaving.close()
            wait_until(
                lambda: (
                    running.value("audiogate_server_prepare_responses_total", status="499")
                    == gone_before + 1
                ),
                timeout_s=10,
            )
            assert delta(before, running.outcomes()) == {"cancelled": 1}
        wait_until(lambda: delta(before, running.outcomes()) == {"cancelled": 2})
        running.wait_idle()


def _slow_reader(port: int, body: bytes) -> socket.socket:
    """A connection with a small receive buffer that sent one request."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    head = f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def _content_length(sock: socket.socket) -> int:
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200 ")
    found = re.search(rb"\r\ncontent-length: (\d+)\r\n", head.lower())
    assert found is not None
    return int(found.group(1))


def _read_answer(sock: socket.socket, *, bytes_per_s: float) -> tuple[int, int]:
    """Read an answer at about ``bytes_per_s`` in small reads (catching up after a late
    wake-up): its Content-Length and the body bytes received before it ended or EOF."""
    length = _content_length(sock)
    received = 0
    started = time.monotonic()
    while received < length:
        time.sleep(0.005)
        allowed = int(bytes_per_s * (time.monotonic() - started)) - received
        if allowed <= 0:
            continue
        chunk = sock.recv(min(allowed, 4096, length - received))
        if not chunk:
            break
        received += len(chunk)
    return length, received


@pytest.mark.slow
def test_a_slow_but_steady_reader_gets_its_whole_answer() -> None:
    # A 4 MB answer read at 600 KiB/s with a 1 s body timeout. The stall timer runs per
    # 64 KiB piece, and the kernel keeps at most 128 KiB unsent, so the reader's progress
    # shows every few hundred KiB; it used to show only in steps of a third of the send
    # buffer (about 1.4 MB), and such a reader was cut off as if it read nothing.
    body = json.dumps(chat(wav_b64(100.0, rate_hz=8_000))).encode()
    limits = ServerLimits(body_idle_timeout_s=1.0)
    with serving("phi-4-multimodal-instruct", limits=limits) as running:
        sock = _slow_reader(running.server.port, body)
        try:
            length, received = _read_answer(sock, bytes_per_s=600 * 1024)
        finally:
            sock.close()
        assert length > 4_000_000
        assert received == length
        running.wait_idle()


@pytest.mark.slow
def test_a_reader_that_stops_is_dropped_and_its_connection_closed() -> None:
    # It reads the first 100 kB of a 4 MB answer, then nothing: after the body timeout the
    # answer is abandoned (the budget given back) and the connection closed, so what it
    # reads afterwards ends early, at EOF.
    body = json.dumps(chat(wav_b64(100.0, rate_hz=8_000))).encode()
    limits = ServerLimits(body_idle_timeout_s=1.0)
    with serving("phi-4-multimodal-instruct", limits=limits) as running:
        sock = _slow_reader(running.server.port, body)
        try:
            length = _content_length(sock)
            received = 0
            while received < 100_000:
                received += len(sock.recv(4096))
            wait_until(lambda: running.gauges()[2] == 0, timeout_s=15)
            while chunk := sock.recv(65536):
                received += len(chunk)
        finally:
            sock.close()
        assert length > 4_000_000
        assert 100_000 <= received < length
        running.wait_idle()


@pytest.mark.skipif(not hasattr(socket, "TCP_NOTSENT_LOWAT"), reason="Linux and macOS only")
@pytest.mark.parametrize("wrapped", [False, True], ids=["bound", "wrapped"])
def test_the_unsent_limit_is_set_through_send_wrappers(wrapped: bool) -> None:
    # uvicorn's send is its request cycle's bound method; at --log-level trace its message
    # logger wraps it in a closure, which must not switch the limit off.
    from audiogate.server.responses import UNSENT_LOWAT_BYTES as _UNSENT_LOWAT_BYTES
    from audiogate.server.responses import limit_unsent as _limit_unsent

    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as sock:

        class Transport:
            def get_extra_info(self, name: str):
                return sock if name == "socket" else None

        class Cycle:
            transport = Transport()

            async def send(self, message) -> None:
                pass

        send = Cycle().send
        if wrapped:
            inner = send

            async def logged(message) -> None:
                await inner(message)

            send = logged
        _limit_unsent(send)
        level = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT)
    assert level == _UNSENT_LOWAT_BYTES
