"""Every error status with its JSON shape, counted exactly once; the body cap; garbage
bodies are never a 500."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import gc
import json
import re
import socket

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from serverkit import (
    PREPARE,
    Blocker,
    audio_part,
    chat,
    delta,
    raw_error,
    serving,
    wait_until,
    wav_b64,
)

from audiogate.acquire import AcquisitionPolicy
from audiogate.server import ServerLimits
from audiogate.server.errors import ServerConfigError
from audiogate.testing.audio import tone, wav_bytes
from audiogate.worker import WorkerLimits

MIB = 1 << 20


def error_of(response: httpx.Response, status: int, error_type: str, reason: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == error_type
    assert error["reason"] == reason
    assert isinstance(error["message"], str)
    assert error["message"]
    assert "clip_index" in error
    return error


# --- 400 -----------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


NAN_WAV = wav_bytes(np.array([0.0, np.nan, 0.0] * 800), rate_hz=16_000, encoding="f32")
PCM24_WAV = bytearray(wav_bytes(tone(seconds=0.1), rate_hz=16_000))
PCM24_WAV[34] = 24  # bits per sample: an encoding the strict decoder refuses

# A lone surrogate escape, in a text-only request and in one with audio.
LONE_SURROGATE = '{"messages": [{"role": "user", "content": "hi \\ud800"}]}'
LONE_SURROGATE_AUDIO = json.dumps(chat(wav_b64(0.5), text="X")).replace('"X"', '"hi \\ud800"')

BAD_INPUT = [
    # (name, request body (bytes) or request JSON, error type, clip_index)
    ("not JSON", b"{not json", "BadRequestError", None),
    ("not UTF-8", b'{"messages": "\xff"}', "BadRequestError", None),
    ("UTF-16", json.dumps(chat(wav_b64())).encode("utf-16"), "BadRequestError", None),
    ("UTF-32", json.dumps(chat(wav_b64())).encode("utf-32"), "BadRequestError", None),
    ("lone surrogate", LONE_SURROGATE.encode(), "BadRequestError", None),
    ("lone surrogate, audio", LONE_SURROGATE_AUDIO.encode(), "BadRequestError", None),
    ("lone surrogate, UTF-16", LONE_SURROGATE.encode("utf-16"), "BadRequestError", None),
    (
        "lone surrogate, audio, UTF-16",
        LONE_SURROGATE_AUDIO.encode("utf-16"),
        "BadRequestError",
        None,
    ),
    (
        "lone surrogate, audio, UTF-32",
        LONE_SURROGATE_AUDIO.encode("utf-32"),
        "BadRequestError",
        None,
    ),
    (
        "surrogate encoded in UTF-8 bytes",
        LONE_SURROGATE.replace("\\ud800", "\ud800").encode("utf-8", "surrogatepass"),
        "BadRequestError",
        None,
    ),
    ("not an object", b"[1, 2]", "BadRequestError", None),
    (
        "key twice at the top",
        b'{"messages": [{"role": "user", "content": "a"}], "messages": []}',
        "BadRequestError",
        None,
    ),
    (
        "key twice in a part",
        (
            b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", '
            b'"type": "input_audio"}]}]}'
        ),
        "BadRequestError",
        None,
    ),
    (
        "key twice in options",
        json.dumps(chat(wav_b64(), audiogate={"feature_format": "npy"}))
        .replace('"feature_format": "npy"', '"feature_format": "npy", "feature_format": "npy"')
        .encode(),
        "BadRequestError",
        None,
    ),
    ("no messages", {"model": "m"}, "BadRequestError", None),
    ("empty messages", {"model": "m", "messages": []}, "BadRequestError", None),
    ("model not a string", {"model": 3, "messages": [{"role": "user"}]}, "BadRequestError", None),
    ("unknown option", chat(wav_b64(), audiogate={"fromat": "npy"}), "BadRequestError", None),
    ("bad format", chat(wav_b64(), audiogate={"feature_format": "pt"}), "BadRequestError", None),
    ("options not object", chat(wav_b64(), audiogate=[]), "BadRequestError", None),
    ("message not object", {"messages": ["hi"]}, "ChatRequestError", None),
    (
        "unknown part type",
        {"messages": [{"role": "user", "content": [{"type": "input_video"}]}]},
        "ChatRequestError",
        None,
    ),
    ("bad base64", chat(wav_b64(), "!!!notbase64"), "AcquisitionError", 1),
    ("not a WAV", chat(b64(b"RIFX" + bytes(100))), "AcquisitionError", 0),
    ("24-bit WAV", chat(wav_b64(), b64(bytes(PCM24_WAV))), "DecodeError", 1),
    (
        "truncated WAV",
        chat(b64(wav_bytes(tone(seconds=0.1), rate_hz=16_000)[:60])),
        "DecodeError",
        0,
    ),
    ("empty WAV", chat(b64(wav_bytes(np.zeros(0), rate_hz=16_000))), "EmptyAudioError", 0),
    ("NaN sample", chat(wav_b64(), b64(NAN_WAV)), "NonFiniteSampleError", 1),
    (
        "roles do not alternate",
        {
            "messages": [
                {"role": "user", "content": [audio_part(wav_b64())]},
                {"role": "user", "content": "again"},
            ]
        },
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("body", "error_type", "clip_index"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_is_a_400_counted_once(gemma, body, error_type, clip_index) -> None:
    before = gemma.outcomes()
    if isinstance(body, bytes):
        response = gemma.client.post(
            PREPARE, content=body, headers={"content-type": "application/json"}
        )
    else:
        response = gemma.client.post(PREPARE, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if error_type is not None:
        assert error["type"] == error_type
        assert error["clip_index"] == clip_index
    assert error["reason"] in {"waveform", "feature"}
    assert sum(delta(before, gemma.outcomes()).values()) == 1
    gemma.wait_idle()


def test_a_missing_media_root_refuses_the_app_and_requests_never_see_its_path(
    tmp_path,
) -> None:
    root = tmp_path / "media-root-not-for-clients"
    refused = pytest.raises(ServerConfigError, match=re.escape(f"'{root}' is not a directory"))
    with refused, serving(acquisition=AcquisitionPolicy(media_root=root)):
        pass
    root.mkdir()
    with serving(acquisition=AcquisitionPolicy(media_root=root)) as running:
        root.rmdir()  # removed while serving
        request = chat(text="hi")
        request["messages"][0]["content"].insert(
            0, {"type": "audio_url", "audio_url": {"url": "file://a.wav"}}
        )
        response = running.client.post(PREPARE, json=request)
        error = error_of(response, 400, "AcquisitionError", "waveform")
        assert "the media root is not available" in error["message"]
        assert str(tmp_path) not in response.text
        assert root.name not in response.text


@pytest.mark.slow
def test_media_files_share_the_in_flight_acquisition_budget(tmp_path) -> None:
    # Files are read outside the body budget; all requests' reads share one bound.
    root = tmp_path / "media"
    root.mkdir()
    clip = wav_bytes(tone(seconds=2.0, rate_hz=16_000), rate_hz=16_000)
    (root / "a.wav").write_bytes(clip)
    limits = ServerLimits(max_inflight_acquired_bytes=len(clip) - 1)
    with serving(acquisition=AcquisitionPolicy(media_root=root), limits=limits) as running:
        request = chat(text="hi")
        request["messages"][0]["content"].insert(
            0, {"type": "audio_url", "audio_url": {"url": "file://a.wav"}}
        )
        response = running.client.post(PREPARE, json=request)
        error = error_of(response, 413, "MemoryLimitError", "memory_limit")
        assert error["limit"] == "in-flight acquired bytes"
        assert error["clip_index"] == 0
        health = running.client.get("/healthz").json()["server"]
        assert health["max_inflight_acquired_bytes"] == len(clip) - 1
        running.wait_idle()
    with serving(acquisition=AcquisitionPolicy(media_root=root)) as running:
        response = running.client.post(PREPARE, json=request)
        assert response.status_code == 200, response.text
        running.wait_idle()
        assert running.gate.acquisition.shared_bytes is not None
        assert running.client.get("/healthz").json()["server"]["inflight_acquired_bytes"] == 0


def test_a_body_must_be_utf8_and_a_leading_bom_is_dropped(gemma) -> None:
    text = json.dumps(chat(wav_b64(0.5)))
    headers = {"content-type": "application/json"}
    for encoding in ("utf-16", "utf-32", "utf-16-be"):
        response = gemma.client.post(PREPARE, content=text.encode(encoding), headers=headers)
        error_of(response, 400, "BadRequestError", "waveform")
    response = gemma.client.post(PREPARE, content=text.encode("utf-16"), headers=headers)
    assert "not UTF-8" in response.json()["error"]["message"]
    response = gemma.client.post(PREPARE, content=text.encode("utf-8-sig"), headers=headers)
    assert response.status_code == 200, response.text
    gemma.wait_idle()


# --- 413 -----------------------------------------------------------------------------


def test_a_clip_over_the_policy_duration_is_a_413(gemma) -> None:
    before = gemma.outcomes()
    response = gemma.client.post(PREPARE, json=chat(wav_b64(31.0)))
    error = error_of(response, 413, "LimitError", "waveform")
    assert error["clip_index"] == 0
    assert {"limit", "actual", "maximum"} <= set(error)
    assert error["actual"] > error["maximum"]
    assert delta(before, gemma.outcomes()) == {"waveform": 1}


def test_the_prefill_budget_is_a_413_context_limit() -> None:
    with serving(max_prefill_tokens=50) as running:
        before = running.outcomes()
        error = error_of(
            running.client.post(PREPARE, json=chat(wav_b64(1.0))),
            413,
            "ContextLimitError",
            "context_limit",
        )
        assert error["maximum"] == 50
        assert delta(before, running.outcomes()) == {"context_limit": 1}
        running.wait_idle()


def test_the_worker_host_budget_is_a_413_memory_limit() -> None:
    with serving(worker=WorkerLimits(max_inflight_host_bytes=1 * MIB)) as running:
        before = running.outcomes()
        error_of(
            running.client.post(PREPARE, json=chat(wav_b64(5.0))),
            413,
            "MemoryLimitError",
            "memory_limit",
        )
        assert delta(before, running.outcomes()) == {"memory_limit": 1}
        running.wait_idle()


@pytest.fixture(scope="module")
def capped():
    with serving(limits=ServerLimits(max_body_bytes=64_000)) as running:
        yield running


def test_the_body_cap_is_checked_on_content_length(capped) -> None:
    before = capped.outcomes()
    body = json.dumps(chat(wav_b64(2.0))).encode()  # ~85 kB
    assert len(body) > 64_000
    response = capped.client.post(
        PREPARE, content=body, headers={"content-type": "application/json"}
    )
    error = error_of(response, 413, "LimitError", "waveform")
    assert response.headers["connection"] == "close"  # the body was never read
    assert error["actual"] == len(body)
    assert error["maximum"] == 64_000
    assert delta(before, capped.outcomes()) == {"waveform": 1}
    capped.wait_idle()


def test_the_body_cap_is_checked_while_streaming_without_content_length(capped) -> None:
    before = capped.outcomes()
    body = json.dumps(chat(wav_b64(2.0))).encode()

    def chunks():
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    response = capped.client.post(PREPARE, content=chunks())
    assert "content-length" not in response.request.headers
    error = error_of(response, 413, "LimitError", "waveform")
    # Counted per message the HTTP layer hands over (its chunks, not the client's).
    assert error["actual"] > 64_000
    assert delta(before, capped.outcomes()) == {"waveform": 1}
    capped.wait_idle()


def test_a_body_under_the_cap_passes_both_ways(capped) -> None:
    body = json.dumps(chat(wav_b64(0.5))).encode()
    assert len(body) < 64_000
    sized = capped.client.post(PREPARE, content=body)
    streamed = capped.client.post(PREPARE, content=iter([body[:1000], body[1000:]]))
    assert sized.status_code == streamed.status_code == 200
    assert sized.json()["input_ids"] == streamed.json()["input_ids"]


def test_the_server_wide_body_budget_is_a_413_memory_limit() -> None:
    limits = ServerLimits(max_body_bytes=200_000, max_inflight_body_bytes=100_000)
    with serving(limits=limits) as running:
        before = running.outcomes()
        body = json.dumps(chat(wav_b64(3.0))).encode()  # ~128 kB: under the cap, over the budget
        response = running.client.post(PREPARE, content=body)
        error = error_of(response, 413, "MemoryLimitError", "memory_limit")
        assert error["limit"] == "in-flight request body bytes"
        assert delta(before, running.outcomes()) == {"memory_limit": 1}
        running.wait_idle()


# --- 429, 503, 500 -------------------------------------------------------------------


def test_a_full_queue_is_a_429_with_retry_after() -> None:
    blocker = Blocker()
    with serving(blocker=blocker, worker=WorkerLimits(queue_depth=1)) as running:
        request = chat(wav_b64(1.0))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            try:
                running_job = pool.submit(running.client.post, PREPARE, json=request)
                assert blocker.entered.wait(20)  # the thread holds job 1
                queued_job = pool.submit(running.client.post, PREPARE, json=request)
                # Job 2 waits in the queue (depth 1): its bytes are reserved.
                queued_bytes = len(wav_bytes(tone(seconds=1.0), rate_hz=16_000))
                wait_until(lambda: running.worker.queued_encoded_bytes == 2 * queued_bytes)
                before = running.outcomes()
                response = running.client.post(PREPARE, json=request)
                error = error_of(response, 429, "QueueFullError", "queue_full")
                assert error["clip_index"] is None
                assert response.headers["retry-after"] == "1"
                assert delta(before, running.outcomes()) == {"queue_full": 1}
            finally:
                blocker.open()
            assert running_job.result().status_code == 200
            assert queued_job.result().status_code == 200
        running.wait_idle()


def test_a_closed_worker_is_a_503_and_healthz_says_so() -> None:
    with serving() as running:
        assert running.client.get("/healthz").status_code == 200
        running.worker.close()
        before = running.outcomes()
        error_of(
            running.client.post(PREPARE, json=chat(wav_b64(1.0))),
            503,
            "WorkerUnavailableError",
            "worker_unavailable",
        )
        assert delta(before, running.outcomes()) == {"worker_unavailable": 1}
        health = running.client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "unavailable"
        assert health.json()["worker"]["state"] == "closed"


def test_a_plugin_bug_is_the_only_audio_500() -> None:
    blocker = Blocker(blocking=False, fail=RuntimeError("boom in the frontend"))
    with serving(blocker=blocker) as running:
        before = running.outcomes()
        error = error_of(
            running.client.post(PREPARE, json=chat(wav_b64(1.0))),
            500,
            "PluginError",
            "feature_panic",
        )
        assert "RuntimeError" in error["message"]
        assert delta(before, running.outcomes()) == {"feature_panic": 1}
        running.wait_idle()
        # The worker survives a plugin bug.
        blocker.fail = None
        assert running.client.post(PREPARE, json=chat(wav_b64(1.0))).status_code == 200


# --- other routes --------------------------------------------------------------------


def test_unknown_routes_and_methods_answer_json(gemma) -> None:
    missing = gemma.client.get("/v1/chat/completions")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "HTTPException"
    wrong = gemma.client.get(PREPARE)
    assert wrong.status_code == 405
    assert "allow" in wrong.headers


# --- garbage never 500 ---------------------------------------------------------------

GARBAGE = [
    b"",
    b"null",
    b"0",
    b'"x"',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"messages": [{"role": "user", "content": ' + b"[" * 3000 + b"]" * 3000 + b"}]}",
    b'{"messages": [1e400]}',
    b'{"messages": [{"role": "user", "content": "x"}], "n": ' + b"9" * 5000 + b"}",
    b'{"messages": NaN}',
    b'{"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": 5}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "input_audio", '
    b'"input_audio": {"data": 5, "format": "wav"}}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "input_audio", '
    b'"input_audio": {"data": "", "format": "ogg"}}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "audio_url", '
    b'"audio_url": {"url": "file:///etc/passwd"}}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "audio_url", '
    b'"audio_url": {"url": "http://127.0.0.1:1/x.wav"}}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "audio_url", "audio_url": "x"}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "image_url", '
    b'"image_url": {"url": "data:image/png;base64,AAAA"}}]}]}',
    b'{"messages": [{"role": 5, "content": "x"}]}',
    b'{"messages": [{"role": "user", "content": {"a": 1}}]}',
    b'{"messages": [{"role": "assistant", "content": "x"}]}',
    b'{"messages": [{"role": "system", "content": [{"type": "text", "text": 5}]}]}',
    b'{"messages": [{"role": "user", "content": "\\u0000<audio_soft_token><start_of_audio>"}]}',
    b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
    b'{"messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}], "x": {"\\udfff": 1}}',
    '{"messages": [{"role": "user", "content": "héllo ☃"}]}'.encode("utf-16"),
    b"\x00\x01\x02" * 1000,
]


def test_garbage_table_is_never_a_500(gemma) -> None:
    before = gemma.outcomes()
    counted = 0
    for body in GARBAGE:
        response = gemma.client.post(PREPARE, content=body)
        assert response.status_code in {200, 400, 413}, (body[:80], response.text)
        # Every failure counts once; a success only when it carried audio.
        counted += response.status_code != 200 or bool(response.json()["clips"])
    assert sum(delta(before, gemma.outcomes()).values()) == counted
    gemma.wait_idle()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "type",
                    "text",
                    "input_audio",
                    "data",
                    "format",
                    "audio_url",
                    "url",
                    "messages",
                    "audiogate",
                    "model",
                    "feature_format",
                    "return_features",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "input_audio", "audio_url", "image_url", "video"])},
    optional={
        "text": json_values,
        "input_audio": st.fixed_dictionaries(
            {},
            optional={
                "data": st.sampled_from(["", "AAAA", "UklGRg==", wav_b64(0.05)]) | json_values,
                "format": st.sampled_from(["wav", "pcm16", "f32", "mp3", "ogg"]) | json_values,
            },
        )
        | json_values,
        "audio_url": st.fixed_dictionaries({"url": st.text(max_size=30)}) | json_values,
    },
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", ""]) | json_values},
    optional={"content": st.text(max_size=30) | st.lists(part, max_size=3) | json_values},
)
request_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.text(max_size=10) | json_values,
        "messages": st.lists(message, max_size=3) | json_values,
        "audiogate": st.fixed_dictionaries(
            {},
            optional={
                "feature_format": st.sampled_from(["npy", "safetensors", "x"]) | json_values,
                "return_features": json_values,
            },
        )
        | json_values,
    },
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=request_bodies | json_values)
@example(body={"messages": [{"role": {"type": []}}]})  # an unhashable "type": was a 500
@pytest.mark.slow
def test_generated_requests_are_never_a_500(gemma, body) -> None:
    response = gemma.client.post(PREPARE, content=json.dumps(body).encode())
    assert response.status_code in {200, 400, 413}, (body, response.text)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=300))
def test_random_bytes_are_never_a_500(gemma, body) -> None:
    response = gemma.client.post(PREPARE, content=body)
    assert response.status_code in {200, 400, 413}, (body, response.text)


def test_a_malformed_http_request_does_not_reach_the_app(gemma) -> None:
    # The HTTP layer refuses it; the app counts nothing.
    before = gemma.outcomes()
    with socket.create_connection(("127.0.0.1", gemma.server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/audio/prepare HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400")
    assert delta(before, gemma.outcomes()) == {}


def test_content_length_with_transfer_encoding_is_refused_and_closed(gemma) -> None:
    # RFC 9112 §6.1: a message with both may be request smuggling; answered, then closed.
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    before = gemma.outcomes()
    with socket.create_connection(("127.0.0.1", gemma.server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/audio/prepare HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
        reply = b""
        while chunk := sock.recv(65536):  # the server closes: recv returns b"" at the end
            reply += chunk
    error = raw_error(reply, 400)
    assert error["type"] == "BadRequestError"
    assert "Content-Length and Transfer-Encoding" in error["message"]
    # Refused by the connection guard before the app runs, like other malformed HTTP.
    assert delta(before, gemma.outcomes()) == {}


# --- nothing waits for the cyclic GC ---------------------------------------------------


@contextlib.contextmanager
def cyclic_garbage():
    """Collect what only the cyclic GC would free (the GC is off meanwhile)."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found += sorted({type(o).__name__ for o in gc.garbage} & REQUEST_TYPES)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


REQUEST_TYPES = {"AudioJob", "EncodedClip", "PreparedRequest", "PreparedBatch", "_PrepareCall"}


@pytest.mark.slow
def test_answered_requests_leave_no_reference_cycles() -> None:
    # An error's traceback holds the request's frames and the task or job holding the
    # error: refused requests would otherwise keep their JSON and clips past the budgets.
    blocker = Blocker()
    with serving(blocker=blocker, worker=WorkerLimits(queue_depth=1)) as running:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            try:
                held = [pool.submit(running.client.post, PREPARE, json=chat(wav_b64(1.0)))]
                assert blocker.entered.wait(20)
                held.append(pool.submit(running.client.post, PREPARE, json=chat(wav_b64(1.0))))
                wait_until(lambda: running.worker.queued_encoded_bytes > 2 * 32_000)
                with cyclic_garbage() as found:
                    response = running.client.post(PREPARE, json=chat(wav_b64(1.0)))
                    assert response.status_code == 429
                assert found == []
            finally:
                blocker.open()
            assert [f.result().status_code for f in held] == [200, 200]
        requests = [
            (chat(wav_b64(31.0)), 413),
            (chat(wav_b64(0.5), b64(bytes(PCM24_WAV))), 400),
            (chat("!!!notbase64"), 400),
            (chat(wav_b64(0.5)), 200),
        ]
        for request, status in requests:
            with cyclic_garbage() as found:
                assert running.client.post(PREPARE, json=request).status_code == status
                running.wait_idle()
            assert found == [], status


def test_a_long_key_given_twice_is_quoted_short(gemma) -> None:
    key = "k" * 100_000
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], key: 1})
    body = body.removesuffix("}") + f', "{key}": 2}}'
    response = gemma.client.post(
        PREPARE, content=body.encode(), headers={"content-type": "application/json"}
    )
    error = error_of(response, 400, "BadRequestError", "waveform")
    assert "twice" in error["message"]
    assert len(error["message"]) < 400
