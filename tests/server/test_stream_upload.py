"""Streamed uploads to ``/v1/audio/sources`` (docs/streaming.md, "The server"): a body
sent chunked (or declared raw PCM) is prepared while it is received, so the source is
``ready`` in the answer; the same digest, record and features as a normal upload; limits
crossed mid-stream, a client gone, and the idle and minimum-rate cuts (on a manual clock)
leave every gauge at 0 and nothing stored."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import numpy as np
import pytest
from serverkit import MODELS, audio_part, metric_samples, tokenizer, wait_until

from audiogate import create_host
from audiogate.api import AudioGate
from audiogate.metrics import AudioMetrics
from audiogate.server import ServerLimits, ServerThread, ServerWorker, create_app
from audiogate.server.run import server_registry
from audiogate.store import SourceStore
from audiogate.store.source_record import StoreQuotas
from audiogate.streaming.deadlines import ManualClock, StreamDeadlines
from audiogate.testing.audio import noise, tone, wav_bytes

pytest.importorskip("transformers")

MODEL = "qwen2-audio-7b-instruct"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
SOURCES = "/v1/audio/sources"


@attrs.define
class Served:
    url: str
    port: int
    client: httpx.Client
    gate: AudioGate
    store_dir: Path
    clock: ManualClock

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return metric_samples(self.client.get("/metrics", headers=ALICE).text)

    def value(self, name: str, **labels: str) -> float:
        return self.scrape().get((name, tuple(sorted(labels.items()))), 0.0)

    def idle(self) -> bool:
        samples = self.scrape()
        return (
            samples[("audiogate_server_inflight_body_bytes", ())] == 0
            and samples[("audiogate_server_streams_inflight", (("transport", "upload"),))] == 0
        )


@contextlib.contextmanager
def _serving(
    tmp_path: Path,
    *,
    limits: ServerLimits | None = None,
    deadlines: dict[str, Any] | None = None,
    quotas: StoreQuotas | None = None,
) -> Iterator[Served]:
    host = create_host(load_entry_points=True)
    metrics = AudioMetrics(server_registry(), families=host.families)
    store = SourceStore.open(tmp_path / "store", quotas=quotas)
    worker = ServerWorker(host, metrics=metrics, feature_cache_bytes=64 << 20, feature_store=store)
    gate = AudioGate.from_model_dir(
        MODELS / MODEL, host=host, tokenizer=tokenizer(MODEL), worker=worker, store=store
    )
    clock = ManualClock()
    app = create_app(
        gate,
        limits=limits,
        served_model=MODEL,
        owners=TOKENS,
        stream_deadlines=StreamDeadlines(clock=clock, **(deadlines or {})),
    )
    with (
        ServerThread(app) as server,
        httpx.Client(base_url=server.url, timeout=60.0) as client,
    ):
        yield Served(server.url, server.port, client, gate, tmp_path / "store", clock)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with _serving(tmp_path) as running:
        yield running


def _wav(seed: int, seconds: float = 1.0, rate_hz: int = 16_000) -> bytes:
    samples = noise(samples=int(seconds * rate_hz), amplitude=0.2, seed=seed)
    return wav_bytes(
        samples + tone(seconds=seconds, rate_hz=rate_hz, amplitude=0.2), rate_hz=rate_hz
    )


def _pcm16(seconds: float, rate_hz: int, seed: int = 0) -> bytes:
    samples = noise(samples=int(seconds * rate_hz), amplitude=0.3, seed=seed)
    return (np.asarray(samples) * 32767).astype("<i2").tobytes()


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _chat_ref(sha: str) -> dict[str, Any]:
    content = [
        {"type": "audio_ref", "audio_ref": {"sha256": sha}},
        {"type": "text", "text": "Describe the audio."},
    ]
    return {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "audiogate": {"return_features": True},
    }


def _stored_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_chunked_upload_is_ready_with_the_normal_uploads_digest_and_features(
    served: Served,
) -> None:
    client = served.client
    data = _wav(1, seconds=2.0)
    sha = hashlib.sha256(data).hexdigest()
    hits = served.value("audiogate_feature_cache_hits_total", family="qwen2audio", tier="memory")
    streamed = client.post(
        SOURCES,
        content=_pieces(data, 333),  # chunked: no Content-Length
        headers={**ALICE, "Content-Type": "audio/wav"},
    )
    assert streamed.status_code == 201, streamed.text
    record = streamed.json()
    assert record["sha256"] == sha
    assert record["status"] == "ready"  # prepared while received
    # The same bytes uploaded whole by another owner: the same record but the owner.
    normal = client.post(SOURCES, content=data, headers={**BOB, "Content-Type": "audio/wav"})
    assert normal.status_code == 201, normal.text
    assert {k: v for k, v in normal.json().items() if k not in ("created_at", "status")} == {
        k: v for k, v in record.items() if k not in ("created_at", "status")
    }
    wait_until(lambda: client.get(f"{SOURCES}/{sha}", headers=BOB).json()["status"] == "ready")
    # Alice's reference is answered from the streamed clip (a cache hit), Bob's from the
    # normal upload's warm-up: the same features and tokens, bit for bit.
    by_alice = client.post("/v1/audio/prepare", json=_chat_ref(sha), headers=ALICE)
    after = served.value("audiogate_feature_cache_hits_total", family="qwen2audio", tier="memory")
    assert after == hits + 1
    by_bob = client.post("/v1/audio/prepare", json=_chat_ref(sha), headers=BOB)
    inline = client.post(
        "/v1/audio/prepare",
        json={
            **_chat_ref(sha),
            "messages": [
                {
                    "role": "user",
                    "content": [
                        audio_part(base64.b64encode(data).decode()),
                        {"type": "text", "text": "Describe the audio."},
                    ],
                }
            ],
        },
        headers=ALICE,
    )
    assert by_alice.status_code == by_bob.status_code == inline.status_code == 200
    assert by_alice.content == by_bob.content
    assert by_alice.json()["input_ids"] == inline.json()["input_ids"]
    assert served.idle()
    assert (
        served.value("audiogate_server_streams_total", transport="upload", outcome="completed") == 1
    )


def test_a_raw_pcm_upload_is_declared_in_the_query(served: Served) -> None:
    client = served.client
    pcm = _pcm16(1.5, 24_000)
    reply = client.post(
        f"{SOURCES}?format=pcm16&rate_hz=24000&channels=1",
        content=pcm,  # with Content-Length: raw PCM is streamed too
        headers={**ALICE, "Content-Type": "application/octet-stream"},
    )
    assert reply.status_code == 201, reply.text
    record = reply.json()
    assert record["sha256"] == hashlib.sha256(pcm).hexdigest()
    assert record["status"] == "ready"
    assert record["duration_us"] == 1_500_000
    ref = client.post("/v1/audio/prepare", json=_chat_ref(record["sha256"]), headers=ALICE)
    assert ref.status_code == 200, ref.text
    bad = client.post(
        f"{SOURCES}?format=pcm24&rate_hz=24000",
        content=pcm,
        headers={**ALICE, "Content-Type": "application/octet-stream"},
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "format"
    no_rate = client.post(f"{SOURCES}?format=pcm16", content=pcm, headers=ALICE)
    assert no_rate.status_code == 400
    assert no_rate.json()["error"]["field"] == "rate_hz"
    assert served.idle()


def test_without_a_token_a_streamed_upload_is_401(served: Served) -> None:
    reply = served.client.post(
        SOURCES, content=_pieces(_wav(2), 1000), headers={"Content-Type": "audio/wav"}
    )
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "unauthorized"
    assert served.idle()


def _chunked_head(port: int, target: str, media: str = "application/octet-stream") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-alice\r\n"
        f"Content-Type: {media}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    return sock


def _send_chunk(sock: socket.socket, data: bytes) -> None:
    sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _reply(sock: socket.socket) -> tuple[int, dict[str, Any], bytes]:
    import json

    buffer = b""
    while b"\r\n\r\n" not in buffer:
        part = sock.recv(65536)
        if not part:
            break
        buffer += part
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        part = sock.recv(65536)
        if not part:
            break
        rest += part
    status = int(head.split(b" ")[1])
    return status, json.loads(rest[:length]), head


def _send_until_refused(served: Served, sock: socket.socket, pieces: Iterator[bytes]) -> int:
    """Send ``pieces`` one at a time, each once the server has taken the one before, and
    stop at the refusal: bytes sent after it would reach a closed socket, whose reset
    can discard the answer before the client reads it."""
    sent = 0
    # Uploads before this stream count in the same series (a whole-body upload to the
    # sources route is a stream too): without this base, a piece would read as taken
    # before the server had seen it, and the next would be sent past the refusal.
    received = "audiogate_server_stream_bytes_total"
    base = served.value(received, transport="upload")

    def ended() -> bool:
        refused = ("audiogate_server_streams_total", "upload", "refused")
        return served.value(refused[0], transport=refused[1], outcome=refused[2]) > 0

    def taken(size: int) -> bool:
        return served.value(received, transport="upload") >= base + size

    for piece in pieces:
        _send_chunk(sock, piece)
        sent += len(piece)
        wait_until(lambda size=sent: taken(size) or ended())
        if ended():
            break
    return sent


def test_a_limit_crossed_mid_stream_is_refused_at_that_chunk(served: Served) -> None:
    # Qwen2-Audio takes at most 30 s: the chunk that crosses it is refused at once.
    rate = 8_000
    pcm = _pcm16(40.0, rate)
    sock = _chunked_head(served.port, f"{SOURCES}?format=pcm16&rate_hz={rate}")
    sent = 0
    with sock:
        sock.settimeout(30)
        for piece in _pieces(pcm[: 31 * rate * 2], 16_000):  # 1 s per chunk, to 31 s
            _send_chunk(sock, piece)
            sent += len(piece)
        status, error, head = _reply(sock)  # answered before the body ends
    assert status == 413
    assert error["error"]["code"] == "limit"
    assert b"connection: close" in head.lower()
    assert sent < len(pcm)
    wait_until(served.idle)
    assert (
        served.value("audiogate_server_stream_refusals_total", transport="upload", code="limit")
        == 1
    )
    assert served.client.get(SOURCES, headers=ALICE).json()["data"] == []


def test_a_client_gone_mid_stream_leaves_nothing(served: Served) -> None:
    before = _stored_files(served.store_dir)
    sock = _chunked_head(served.port, f"{SOURCES}?format=pcm16&rate_hz=16000")
    with sock:
        for piece in _pieces(_pcm16(2.0, 16_000), 3_200):
            _send_chunk(sock, piece)
        wait_until(
            lambda: served.value("audiogate_server_stream_bytes_total", transport="upload") > 0
        )
    wait_until(
        lambda: (
            served.value("audiogate_server_streams_total", transport="upload", outcome="cancelled")
            == 1
        )
    )
    wait_until(served.idle)
    assert served.client.get(SOURCES, headers=ALICE).json()["data"] == []
    assert _stored_files(served.store_dir) == before  # no staged blob left behind


@pytest.mark.parametrize(
    ("deadlines", "kind", "advance"),
    [
        ({"idle_timeout_s": 15.0, "min_rate": 0}, "sent nothing for 15 s", 15.0),
        ({"idle_timeout_s": 100.0, "min_rate": 1000, "grace_s": 5.0}, "under the minimum", 9.0),
    ],
)
def test_a_stalled_or_slow_upload_is_cut_with_a_408(
    tmp_path: Path, deadlines: dict[str, Any], kind: str, advance: float
) -> None:
    with _serving(tmp_path, deadlines=deadlines) as served:
        sock = _chunked_head(served.port, f"{SOURCES}?format=pcm16&rate_hz=16000")
        with sock:
            _send_chunk(sock, _pcm16(0.125, 16_000))  # 4,000 bytes
            # The stream waits for its second chunk: 4,000 B at 1,000 B/s after a 5 s
            # grace is due by 9 s; nothing comes for 15 s.
            wait_until(lambda: served.clock.waits >= 2)
            served.clock.advance(advance)
            status, error, _ = _reply(sock)
        assert status == 408
        assert error["error"]["code"] == "stream_timeout"
        assert kind in error["error"]["message"]
        wait_until(served.idle)
        refusals = served.value(
            "audiogate_server_stream_refusals_total", transport="upload", code="stream_timeout"
        )
        assert refusals == 1
        assert served.client.get(SOURCES, headers=ALICE).json()["data"] == []


def test_serve_takes_the_stream_deadlines() -> None:
    import argparse

    from audiogate.server.options import add_serve_arguments, serve_options

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    default = serve_options(parser.parse_args(["--model", "m"]))
    assert default.stream_deadlines == StreamDeadlines()
    given = serve_options(
        parser.parse_args(
            ["--model", "m", "--stream-idle-timeout", "2.5", "--stream-min-rate", "4KiB"]
        )
    )
    assert given.stream_deadlines == StreamDeadlines(idle_timeout_s=2.5, min_rate=4096)
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m", "--stream-idle-timeout", "0"])


def test_a_wav_stream_without_its_length_is_refused_at_its_header(served: Served) -> None:
    # A store keeps what the whole-clip path reads, and that refuses such a header.
    import struct

    data = bytearray(_wav(3, seconds=2.0))
    struct.pack_into("<I", data, 4, 0xFFFFFFFF)
    struct.pack_into("<I", data, data.index(b"data") + 4, 0xFFFFFFFF)
    sock = _chunked_head(served.port, SOURCES, media="audio/wav")
    with sock:
        _send_chunk(sock, bytes(data[:4096]))
        status, error, _ = _reply(sock)
    assert status == 400
    assert error["error"]["code"] == "riff_size_mismatch"
    assert "raw PCM" in error["error"]["message"]
    wait_until(served.idle)


def test_a_chunked_webm_opus_upload_matches_the_normal_upload(served: Served) -> None:
    pytest.importorskip("soundfile")
    data = (
        Path(__file__).resolve().parents[1]
        / "data/audio/mediarecorder-chromium-opus-mono-48000.webm"
    ).read_bytes()
    streamed = served.client.post(
        SOURCES, content=_pieces(data, 1500), headers={**ALICE, "Content-Type": "audio/webm"}
    )
    assert streamed.status_code == 201, streamed.text
    assert streamed.json()["status"] == "ready"
    normal = served.client.post(
        SOURCES, content=data, headers={**BOB, "Content-Type": "audio/webm"}
    )
    assert normal.status_code == 201, normal.text
    same = ("sha256", "bytes", "duration_us", "format")
    assert {k: normal.json().get(k) for k in same} == {k: streamed.json().get(k) for k in same}
    wait_until(served.idle)


def test_a_stream_past_the_body_budget_is_refused_mid_stream(tmp_path: Path) -> None:
    with _serving(tmp_path, limits=ServerLimits(max_inflight_body_bytes=256 * 1024)) as served:
        sock = _chunked_head(served.port, f"{SOURCES}?format=pcm16&rate_hz=16000")
        with sock:
            sock.settimeout(30)
            _send_until_refused(served, sock, _pieces(_pcm16(20.0, 16_000), 32_000))
            status, error, _ = _reply(sock)
        assert status == 413
        assert error["error"]["code"] == "memory_limit"
        assert error["error"]["limit"] == "in-flight request body bytes"
        wait_until(served.idle)
        assert served.client.get(SOURCES, headers=ALICE).json()["data"] == []


def test_build_app_gives_the_streams_the_served_deadlines(tmp_path: Path) -> None:
    from audiogate.server import ServeOptions, build_app

    deadlines = StreamDeadlines(idle_timeout_s=3.0, min_rate=100)
    options = ServeOptions(
        model_dir=MODELS / MODEL, store_dir=tmp_path / "store", stream_deadlines=deadlines
    )
    app = build_app(options)
    server = app.state.audiogate
    try:
        assert server.sources.streamed.deadlines == deadlines
    finally:
        server.worker.close()
        server.gate.store.close()


def test_a_stream_past_the_owners_byte_quota_is_refused_at_that_chunk(tmp_path: Path) -> None:
    with _serving(tmp_path, quotas=StoreQuotas(max_bytes_per_owner=100_000)) as served:
        first = served.client.post(
            f"{SOURCES}?format=pcm16&rate_hz=16000",
            content=_pcm16(1.0, 16_000),  # 32,000 bytes of the 100,000
            headers={**ALICE, "Content-Type": "application/octet-stream"},
        )
        assert first.status_code == 201, first.text
        sock = _chunked_head(served.port, f"{SOURCES}?format=pcm16&rate_hz=16000")
        with sock:
            sock.settimeout(30)
            sent = _send_until_refused(served, sock, _pieces(_pcm16(10.0, 16_000), 16_000))
            status, error, _ = _reply(sock)
        assert status == 413
        assert error["error"]["code"] == "source_quota"
        assert error["error"]["limit"] == "source bytes per owner"
        assert error["error"]["actual"] == 32_000 + 80_000  # the fifth 16,000-byte chunk
        assert sent == 80_000
        wait_until(served.idle)
        assert len(served.client.get(SOURCES, headers=ALICE).json()["data"]) == 1
