"""``/v1/audio/sources`` on a server with a source store (docs/sources.md): uploads,
ownership through bearer tokens, retirement, references in prepare requests, and the
404s and 400 of a server without a store."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import pytest
from serverkit import audio_part, serving, wav_b64

from audiogate.store import SourceStore
from audiogate.testing.audio import noise, tone, wav_bytes

pytest.importorskip("transformers")

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


def _wav(seed: int, seconds: float = 1.0) -> bytes:
    samples = noise(samples=int(seconds * 16_000), amplitude=0.2, seed=seed)
    return wav_bytes(samples + tone(seconds=seconds, amplitude=0.2), rate_hz=16_000)


def _ref(sha: str) -> dict:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


def _chat(*parts: dict) -> dict:
    content = [*parts, {"type": "text", "text": "Describe the audio."}]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def _ready(client, sha: str, headers: dict) -> dict:
    for _ in range(200):
        record = client.get(f"/v1/audio/sources/{sha}", headers=headers).json()
        if record["status"] == "ready":
            return record
        time.sleep(0.02)
    raise AssertionError(f"{sha} never became ready: {record}")


@pytest.fixture
def running(tmp_path: Path):
    store = SourceStore.open(tmp_path / "store")
    with serving("qwen2-audio-7b-instruct", store=store, owners=TOKENS) as running:
        yield running


def test_upload_raw_bytes_then_reference_them(running) -> None:
    client = running.client
    data = _wav(1)
    sha = hashlib.sha256(data).hexdigest()
    reply = client.post(
        "/v1/audio/sources", content=data, headers={**ALICE, "Content-Type": "audio/wav"}
    )
    assert reply.status_code == 201, reply.text
    body = reply.json()
    assert body["sha256"] == sha
    assert body["bytes"] == len(data)
    assert body["duration_us"] == 1_000_000
    assert body["scope"] == "private"
    assert body["status"] in ("processing", "ready")
    _ready(client, sha, ALICE)
    again = client.post(
        "/v1/audio/sources", content=data, headers={**ALICE, "Content-Type": "audio/wav"}
    )
    assert again.status_code == 200
    assert again.json()["sha256"] == sha

    by_ref = client.post("/v1/audio/prepare", json=_chat(_ref(sha)), headers=ALICE)
    inline = client.post(
        "/v1/audio/prepare",
        json=_chat(audio_part(base64.b64encode(data).decode())),
        headers=ALICE,
    )
    assert by_ref.status_code == inline.status_code == 200, by_ref.text
    assert by_ref.json()["input_ids"] == inline.json()["input_ids"]
    text = client.post(
        "/v1/audio/prepare",
        json={"messages": [{"role": "user", "content": f"[audio:{sha}] What is it?"}]},
        headers=ALICE,
    )
    assert text.status_code == 200, text.text
    listing = client.get("/v1/audio/sources", headers=ALICE).json()
    assert [r["sha256"] for r in listing["data"]] == [sha]


def test_json_uploads_and_shared_scope(running) -> None:
    client = running.client
    payload = {"input_audio": {"data": wav_b64(0.5, freq_hz=300.0), "format": "wav"}}
    reply = client.post("/v1/audio/sources?scope=shared", json=payload, headers=ALICE)
    assert reply.status_code == 201, reply.text
    sha = reply.json()["sha256"]
    assert reply.json()["scope"] == "shared"
    _ready(client, sha, ALICE)
    assert client.get(f"/v1/audio/sources/{sha}", headers=BOB).status_code == 200
    bob = client.post("/v1/audio/prepare", json=_chat(_ref(sha)), headers=BOB)
    assert bob.status_code == 200, bob.text
    assert client.delete(f"/v1/audio/sources/{sha}", headers=BOB).status_code == 404
    url = {"audio_url": {"url": "data:audio/wav;base64," + wav_b64(0.5, freq_hz=200.0)}}
    assert client.post("/v1/audio/sources", json=url, headers=ALICE).status_code == 201


def test_another_owners_private_source_answers_exactly_like_a_missing_one(running) -> None:
    client = running.client
    data = _wav(2)
    sha = client.post(
        "/v1/audio/sources", content=data, headers={**ALICE, "Content-Type": "audio/wav"}
    ).json()["sha256"]
    missing = "c" * 64
    for method in ("get", "delete"):
        theirs = getattr(client, method)(f"/v1/audio/sources/{sha}", headers=BOB)
        absent = getattr(client, method)(f"/v1/audio/sources/{missing}", headers=BOB)
        assert theirs.status_code == absent.status_code == 404
        assert theirs.text.replace(sha, "X") == absent.text.replace(missing, "X")
    theirs = client.post("/v1/audio/prepare", json=_chat(_ref(sha)), headers=BOB)
    absent = client.post("/v1/audio/prepare", json=_chat(_ref(missing)), headers=BOB)
    assert theirs.status_code == absent.status_code == 404
    assert theirs.json()["error"]["code"] == "source_not_found"
    assert theirs.text.replace(sha, "X") == absent.text.replace(missing, "X")


def test_retiring_a_held_source_waits_for_its_leases_up_to_the_timeout(tmp_path) -> None:
    from audiogate.server.budgets import ServerLimits

    store = SourceStore.open(tmp_path / "store")
    limits = ServerLimits(retire_timeout_s=0.3)
    with serving("qwen2-audio-7b-instruct", store=store, owners=TOKENS, limits=limits) as running:
        client = running.client
        data = _wav(7)
        headers = {**ALICE, "Content-Type": "audio/wav"}
        sha = client.post("/v1/audio/sources", content=data, headers=headers).json()["sha256"]
        _ready(client, sha, ALICE)
        lease = store.lease(sha, owner="alice")  # a request still holding it
        started = time.monotonic()
        busy = client.delete(f"/v1/audio/sources/{sha}", headers=ALICE)
        assert busy.status_code == 409, busy.text
        assert time.monotonic() - started >= 0.3
        assert client.get(f"/v1/audio/sources/{sha}", headers=ALICE).json()["status"] == "ready"
        lease.release()
        retired = client.delete(f"/v1/audio/sources/{sha}", headers=ALICE)
        assert retired.status_code == 200
        assert retired.json()["status"] == "retired"


def test_retire_refuses_new_references_and_keeps_history(running) -> None:
    client = running.client
    data = _wav(3)
    sha = client.post(
        "/v1/audio/sources", content=data, headers={**ALICE, "Content-Type": "audio/wav"}
    ).json()["sha256"]
    _ready(client, sha, ALICE)
    retired = client.delete(f"/v1/audio/sources/{sha}", headers=ALICE)
    assert retired.status_code == 200
    assert retired.json()["status"] == "retired"
    gone = client.post("/v1/audio/prepare", json=_chat(_ref(sha)), headers=ALICE)
    assert gone.status_code == 410
    assert gone.json()["error"]["code"] == "source_retired"
    assert client.get("/v1/audio/sources", headers=ALICE).json()["data"] == []
    history = client.get("/v1/audio/sources?include_retired=true", headers=ALICE).json()
    assert [r["status"] for r in history["data"]] == ["retired"]


def test_uploads_are_refused_with_typed_errors(running) -> None:
    client = running.client
    wav = {**ALICE, "Content-Type": "audio/wav"}
    assert client.post("/v1/audio/sources", content=_wav(4)).status_code == 401
    bad_token = {"Authorization": "Bearer nope", "Content-Type": "audio/wav"}
    assert client.post("/v1/audio/sources", content=_wav(4), headers=bad_token).status_code == 401
    assert client.post("/v1/audio/prepare", json=_chat()).status_code == 401
    assert client.post("/v1/audio/sources", content=b"", headers=wav).status_code == 400
    long = client.post("/v1/audio/sources", content=_wav(5, 31.0), headers=wav)
    assert long.status_code == 413
    assert "duration" in long.json()["error"]["message"]
    odd = client.post(
        "/v1/audio/sources", content=_wav(6), headers={**ALICE, "Content-Type": "text/plain"}
    )
    assert odd.status_code == 400
    assert client.post("/v1/audio/sources?scope=x", content=_wav(6), headers=wav).status_code == 400
    assert client.get("/v1/audio/sources/ABC", headers=ALICE).status_code == 400
    junk = client.post(
        "/v1/audio/sources",
        content=b'{"x": 1}',
        headers={**ALICE, "Content-Type": "application/json"},
    )
    assert junk.status_code == 400


def test_without_a_store_the_endpoints_are_404_and_references_400() -> None:
    with serving("qwen2-audio-7b-instruct") as running:
        client = running.client
        assert client.post("/v1/audio/sources", content=_wav(7)).status_code == 404
        assert client.get("/v1/audio/sources").status_code == 404
        assert client.get(f"/v1/audio/sources/{'a' * 64}").status_code == 404
        assert client.delete(f"/v1/audio/sources/{'a' * 64}").status_code == 404
        reply = client.post("/v1/audio/prepare", json=_chat(_ref("a" * 64)))
        assert reply.status_code == 400
        assert "--store DIR" in json.loads(reply.text)["error"]["message"]
