"""``/v1/realtime`` (docs/streaming.md, "The server"): the OpenAI Realtime input events
(append, commit, clear, session.update), a commit's digest usable as an ``audio_ref``,
auth by header or subprotocol, errors in OpenAI's shape, limits crossed mid-buffer, the
idle cut on a manual clock, and a client gone: every gauge back at 0."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from serverkit import MODELS, metric_samples, tokenizer, wait_until
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from audiogate import create_host
from audiogate.api import AudioGate
from audiogate.metrics import AudioMetrics
from audiogate.server import ServerLimits, ServerThread, ServerWorker, create_app
from audiogate.server.run import server_registry
from audiogate.store import SourceStore
from audiogate.store.source_record import StoreQuotas
from audiogate.streaming.deadlines import ManualClock, StreamDeadlines
from audiogate.testing.audio import noise

pytest.importorskip("transformers")

MODEL = "qwen2-audio-7b-instruct"
TOKENS = {"tok-alice": "alice"}
ALICE = {"Authorization": "Bearer tok-alice"}
REALTIME = "/v1/realtime"


@attrs.define
class Served:
    client: TestClient
    clock: ManualClock
    app: Any

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return metric_samples(self.client.get("/metrics", headers=ALICE).text)

    def value(self, name: str, **labels: str) -> float:
        return self.scrape().get((name, tuple(sorted(labels.items()))), 0.0)

    def idle(self) -> bool:
        samples = self.scrape()
        return (
            samples[("audiogate_server_inflight_body_bytes", ())] == 0
            and samples[("audiogate_server_streams_inflight", (("transport", "realtime"),))] == 0
        )


def _app(
    tmp_path: Path,
    clock: ManualClock,
    limits: ServerLimits | None = None,
    *,
    stored: bool = True,
    quotas: StoreQuotas | None = None,
) -> Any:
    host = create_host(load_entry_points=True)
    metrics = AudioMetrics(server_registry(), families=host.families)
    store = SourceStore.open(tmp_path / "store", quotas=quotas) if stored else None
    worker = ServerWorker(host, metrics=metrics, feature_cache_bytes=64 << 20, feature_store=store)
    gate = AudioGate.from_model_dir(
        MODELS / MODEL, host=host, tokenizer=tokenizer(MODEL), worker=worker, store=store
    )
    deadlines = StreamDeadlines(idle_timeout_s=15, min_rate=0, clock=clock)
    return create_app(
        gate, limits=limits, served_model=MODEL, owners=TOKENS, stream_deadlines=deadlines
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    clock = ManualClock()
    app = _app(tmp_path, clock)
    with TestClient(app) as client:
        yield Served(client, clock, app)


def _pcm16(seconds: float, rate_hz: int, seed: int = 0) -> bytes:
    samples = noise(samples=int(seconds * rate_hz), amplitude=0.3, seed=seed)
    return (np.asarray(samples) * 32767).astype("<i2").tobytes()


def _append(data: bytes, event_id: str | None = None) -> str:
    event: dict[str, Any] = {
        "type": "input_audio_buffer.append",
        "audio": base64.b64encode(data).decode(),
    }
    if event_id is not None:
        event["event_id"] = event_id
    return json.dumps(event)


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


@contextlib.contextmanager
def _connected(served: Served, url: str = REALTIME, **options: Any) -> Iterator[Any]:
    # A copy: the test client adds the handshake's headers to the dict it is given.
    options.setdefault("headers", dict(ALICE))
    with served.client.websocket_connect(url, **options) as ws:
        created = ws.receive_json()
        assert created["type"] == "session.created"
        yield ws


def test_append_and_commit_give_an_audio_ref_usable_in_a_chat_request(served: Served) -> None:
    pcm = _pcm16(1.0, 24_000)
    with _connected(served) as ws:
        for start in range(0, len(pcm), 960):  # 20 ms of 24 kHz PCM16 per event
            ws.send_text(_append(pcm[start : start + 960]))
        ws.send_text(_event("input_audio_buffer.commit"))
        committed = ws.receive_json()
    assert committed["type"] == "input_audio_buffer.committed", committed
    sha = hashlib.sha256(pcm).hexdigest()
    assert committed["audio_ref"] == {"sha256": sha}
    clip = committed["clip"]
    assert clip["source_rate_hz"] == 24_000
    assert clip["source_samples"] == 24_000
    assert clip["duration_us"] == 1_000_000
    assert clip["tokens"] > 0
    assert committed["source"]["status"] == "ready"
    # The same bytes uploaded as raw PCM: the same source, already there.
    upload = served.client.post(
        "/v1/audio/sources?format=pcm16&rate_hz=24000",
        content=pcm,
        headers={**ALICE, "Content-Type": "application/octet-stream"},
    )
    assert upload.status_code == 200
    assert upload.json()["sha256"] == sha
    hits = served.value("audiogate_feature_cache_hits_total", family="qwen2audio", tier="memory")
    content = [
        {"type": "audio_ref", "audio_ref": {"sha256": sha}},
        {"type": "text", "text": "What is it?"},
    ]
    chat = served.client.post(
        "/v1/audio/prepare",
        json={"messages": [{"role": "user", "content": content}]},
        headers=ALICE,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["clips"][0]["tokens"] == clip["tokens"]
    after = served.value("audiogate_feature_cache_hits_total", family="qwen2audio", tier="memory")
    assert after == hits + 1  # the committed clip, not recomputed
    assert served.idle()
    assert (
        served.value("audiogate_server_streams_total", transport="realtime", outcome="completed")
        == 1
    )


def test_clear_drops_the_buffer_and_an_empty_commit_is_an_error(served: Served) -> None:
    with _connected(served) as ws:
        ws.send_text(_append(_pcm16(0.5, 24_000)))
        ws.send_text(_event("input_audio_buffer.clear"))
        assert ws.receive_json()["type"] == "input_audio_buffer.cleared"
        ws.send_text(_event("input_audio_buffer.commit", event_id="evt-9"))
        error = ws.receive_json()
    assert error["type"] == "error"
    assert error["error"]["code"] == "empty"
    assert error["error"]["event_id"] == "evt-9"
    assert error["error"]["type"] == "invalid_request_error"
    wait_until(served.idle)
    assert served.client.get("/v1/audio/sources", headers=ALICE).json()["data"] == []


def test_session_update_and_the_query_set_the_rate(served: Served) -> None:
    pcm = _pcm16(0.5, 16_000)
    with _connected(served) as ws:
        update = {"input_audio_format": "pcm16", "input_audio_rate_hz": 16_000}
        ws.send_text(_event("session.update", session=update))
        updated = ws.receive_json()
        assert updated["type"] == "session.updated"
        assert updated["session"]["input_audio_rate_hz"] == 16_000
        ws.send_text(_append(pcm))
        ws.send_text(_event("input_audio_buffer.commit"))
        committed = ws.receive_json()
        assert committed["clip"]["source_rate_hz"] == 16_000
        assert committed["clip"]["duration_us"] == 500_000
        ws.send_text(_event("session.update", session={"input_audio_format": "g711_ulaw"}))
        refused = ws.receive_json()
        assert refused["error"]["code"] == "bad_request"
        assert refused["error"]["param"] == "session.input_audio_format"
    with _connected(served, f"{REALTIME}?input_audio_rate_hz=8000") as ws:
        ws.send_text(_append(_pcm16(0.5, 8_000)))
        ws.send_text(_event("input_audio_buffer.commit"))
        assert ws.receive_json()["clip"]["source_rate_hz"] == 8_000


def test_auth_by_header_or_subprotocol_and_refused_without(served: Served) -> None:
    offered = ["realtime", "openai-insecure-api-key.tok-alice", "openai-beta.realtime-v1"]
    with _connected(served, headers={}, subprotocols=offered) as ws:
        assert ws.accepted_subprotocol == "realtime"
    with served.client.websocket_connect(REALTIME) as ws:
        error = ws.receive_json()
        assert error["error"]["code"] == "unauthorized"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 1008
    bad = ["realtime", "openai-insecure-api-key.wrong"]
    with served.client.websocket_connect(REALTIME, subprotocols=bad) as ws:
        assert ws.receive_json()["error"]["code"] == "unauthorized"


def test_malformed_events_answer_errors_and_the_session_goes_on(served: Served) -> None:
    with _connected(served) as ws:
        ws.send_text("{not json")
        assert ws.receive_json()["error"]["param"] == "event"
        ws.send_text(_event("response.create", event_id="e1"))
        unsupported = ws.receive_json()["error"]
        assert unsupported["code"] == "bad_request"
        assert unsupported["param"] == "type"
        assert unsupported["event_id"] == "e1"
        ws.send_text(_event("input_audio_buffer.append", audio="%%%"))
        assert ws.receive_json()["error"]["param"] == "audio"
        ws.send_text(_append(_pcm16(0.5, 24_000)))
        ws.send_text(_event("input_audio_buffer.commit"))
        assert ws.receive_json()["type"] == "input_audio_buffer.committed"


def test_a_limit_crossed_mid_buffer_is_an_error_event_and_releases_it(served: Served) -> None:
    # Qwen2-Audio takes at most 30 s: the append that crosses it is refused.
    second = _pcm16(1.0, 24_000)
    with _connected(served) as ws:
        for n in range(1, 36):  # 35 s: the 31st second crosses the limit
            ws.send_text(_append(second, event_id=f"a{n}"))
        reply = ws.receive_json()  # appends are answered only on a refusal
        assert reply["type"] == "error"
        error = reply["error"]
        # Appends that came after the refusal may have opened a new buffer: clear it.
        ws.send_text(_event("input_audio_buffer.clear"))
        assert ws.receive_json()["type"] == "input_audio_buffer.cleared"
        ws.send_text(_event("input_audio_buffer.commit"))
        assert ws.receive_json()["error"]["code"] == "empty"
        assert error["code"] == "limit"
        assert error["event_id"] == "a31"
        assert error["status"] == 413
    wait_until(served.idle)
    assert (
        served.value("audiogate_server_stream_refusals_total", transport="realtime", code="limit")
        == 1
    )
    assert served.client.get("/v1/audio/sources", headers=ALICE).json()["data"] == []


def test_an_idle_buffer_is_cut_and_a_client_gone_leaves_nothing(served: Served) -> None:
    with _connected(served) as ws:
        ws.send_text(_append(_pcm16(0.2, 24_000), event_id="first"))
        wait_until(lambda: served.clock.waits >= 2)  # waiting for the next append
        served.clock.advance(15)
        error = ws.receive_json()
        assert error["type"] == "error"
        assert error["error"]["code"] == "stream_timeout"
        assert error["error"]["event_id"] == "first"
        assert error["error"]["status"] == 408
        wait_until(served.idle)
        ws.send_text(_append(_pcm16(0.2, 24_000)))  # a new buffer, then gone
        wait_until(
            lambda: served.value("audiogate_server_streams_inflight", transport="realtime") == 1
        )
    wait_until(served.idle)
    wait_until(lambda: served.value("audiogate_server_realtime_sessions") == 0)
    assert (
        served.value("audiogate_server_streams_total", transport="realtime", outcome="cancelled")
        == 1
    )
    assert served.client.get("/v1/audio/sources", headers=ALICE).json()["data"] == []


def test_a_real_server_keeps_the_websocket_past_the_head_timeout(tmp_path: Path) -> None:
    from websockets.sync.client import connect

    clock = ManualClock()
    app = _app(tmp_path, clock, limits=ServerLimits(header_timeout_s=0.2))
    pcm = _pcm16(0.5, 24_000)
    with ServerThread(app) as server:
        url = server.url.replace("http://", "ws://") + REALTIME
        with connect(url, additional_headers=dict(ALICE)) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
            ws.send(_append(pcm))
            # Past the head timeout (a connection that has sent no request head is
            # closed after it): the upgraded connection is not.
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0.6)
            ws.send(_event("input_audio_buffer.commit"))
            committed = json.loads(ws.recv(timeout=30))
            table = server.config.http.connection_table
            assert len(table) == 1  # a connection against the caps while it is open
        assert committed["audio_ref"]["sha256"] == hashlib.sha256(pcm).hexdigest()
        wait_until(lambda: len(table) == 0)  # and out of the table once closed


def test_sessions_at_once_keep_their_own_buffers(served: Served) -> None:
    first, second = _pcm16(0.5, 24_000, seed=1), _pcm16(0.7, 24_000, seed=2)
    with _connected(served) as one, _connected(served) as two:
        for start in range(0, len(second), 4800):  # interleaved appends
            if start < len(first):
                one.send_text(_append(first[start : start + 4800]))
            two.send_text(_append(second[start : start + 4800]))
        two.send_text(_event("input_audio_buffer.commit"))
        one.send_text(_event("input_audio_buffer.commit"))
        assert one.receive_json()["audio_ref"]["sha256"] == hashlib.sha256(first).hexdigest()
        assert two.receive_json()["audio_ref"]["sha256"] == hashlib.sha256(second).hexdigest()
    wait_until(served.idle)


def test_without_a_store_a_commit_answers_its_accounting_only(tmp_path: Path) -> None:
    app = _app(tmp_path, ManualClock(), stored=False)
    pcm = _pcm16(0.5, 24_000)
    with TestClient(app) as client, client.websocket_connect(REALTIME, headers=dict(ALICE)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_text(_append(pcm))
        ws.send_text(_event("input_audio_buffer.commit"))
        committed = ws.receive_json()
    assert committed["clip"]["sha256"] == hashlib.sha256(pcm).hexdigest()
    assert "audio_ref" not in committed


def test_an_append_past_the_owners_byte_quota_is_refused(tmp_path: Path) -> None:
    app = _app(tmp_path, ManualClock(), quotas=StoreQuotas(max_bytes_per_owner=100_000))
    second = _pcm16(1.0, 24_000)  # 48,000 bytes
    with TestClient(app) as client, client.websocket_connect(REALTIME, headers=dict(ALICE)) as ws:
        assert ws.receive_json()["type"] == "session.created"
        for n in (1, 2, 3):
            ws.send_text(_append(second, event_id=f"a{n}"))
        error = ws.receive_json()["error"]
        ws.send_text(_event("input_audio_buffer.commit"))
        assert ws.receive_json()["error"]["code"] == "empty"  # the buffer was dropped
    assert error["code"] == "source_quota"
    assert error["event_id"] == "a3"
    assert error["actual"] == 144_000


def test_a_real_server_reads_no_websocket_message_larger_than_a_body(tmp_path: Path) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from audiogate.server.run import websocket_frame_cap

    app = _app(tmp_path, ManualClock(), limits=ServerLimits(max_body_bytes=64 << 10))
    cap = websocket_frame_cap(app)
    assert cap == -(-(64 << 10) // 3) * 4 + (64 << 10)
    with ServerThread(app) as server:
        url = server.url.replace("http://", "ws://") + REALTIME
        with connect(url, additional_headers=dict(ALICE), max_size=None) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
            ws.send(_append(bytes(cap)))  # its base64 alone is past the cap
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1009  # message too big
