"""audiogate's render endpoints against vLLM's documented protocol (vLLM 0.32): ids,
placeholders, features under vLLM's names, sampling resolution, errors, hashes."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np
import pytest
from vllmkit import CHAT_RENDER, COMPLETION_RENDER, PROTOCOL_FAMILIES, RenderApp

from audiogate.vllm import decode_tensor, mm_hash, vllm_family
from audiogate.vllm.fixtures import RENDER_REQUESTS, RenderCase, request_body
from audiogate.vllm.msgpack import unpackb

CASES = {case.name: case for case in RENDER_REQUESTS}


@pytest.fixture(scope="module", params=PROTOCOL_FAMILIES)
def app(request: pytest.FixtureRequest) -> Iterator[RenderApp]:
    """The families whose layouts these tests spell out; the fixture tests cover all."""
    served = RenderApp(request.param)
    with served.client:
        yield served


def _items(answer: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    items = []
    for encoded in answer["features"]["kwargs_data"]["audio"]:
        item = unpackb(base64.b64decode(encoded))
        for elem in item.values():
            assert elem["field"] == ["batched", {"keep_on_cpu": False}]
        items.append({key: decode_tensor(elem["data"]) for key, elem in item.items()})
    return items


def _prepared(app: RenderApp, case: RenderCase) -> Any:
    return app.gate.prepare(request_body(case, app.served)["messages"])


@pytest.mark.parametrize("name", ["mono16k_1s", "stereo48k_5s", "two_clips", "text_between"])
def test_ids_placeholders_and_features_are_the_gates(app: RenderApp, name: str) -> None:
    case = CASES[name]
    if app.family == "gemma3n" and name == "two_clips":
        pytest.skip("adjacent Gemma 3n clips are refused (test_adjacent_gemma3n_clips_are_refused)")
    response = app.render(request_body(case, app.served))
    assert response.status_code == 200, response.text
    answer = response.json()
    prepared = _prepared(app, case)
    assert answer["token_ids"] == list(prepared.input_ids)
    assert answer["request_id"].startswith("chatcmpl-")
    assert answer["model"] == app.served
    features = answer["features"]
    ranges = features["mm_placeholders"]["audio"]
    assert len(ranges) == len(features["mm_hashes"]["audio"]) == len(prepared.audio_spans)
    ids = answer["token_ids"]
    for (start, stop), placeholder in zip(prepared.audio_spans, ranges, strict=True):
        offset, length = placeholder["offset"], placeholder["length"]
        if app.family == "qwen2audio":
            assert (offset, offset + length) == (start, stop)  # the run of <|AUDIO|>
        else:
            # The whole block: newline token, <start_of_audio>, 188 soft tokens,
            # <end_of_audio>, newline token.
            assert (offset, length) == (start - 2, stop - start + 4)
            assert length == 192
            assert ids[offset] in (107, 108, 109, 110)
            assert ids[offset + length - 1] in (108, 109)
    for index, item in enumerate(_items(answer)):
        features_ = np.asarray(prepared.features[index])
        mask = np.asarray(prepared.masks[index])
        if app.family == "qwen2audio":
            assert list(item) == ["feature_attention_mask", "input_features"]
            assert item["input_features"].shape == (128, 3000)
            assert item["feature_attention_mask"].dtype == np.int32
            got, want_mask = item["input_features"], item["feature_attention_mask"]
        else:
            assert list(item) == ["input_features_mask", "input_features_padded"]
            assert item["input_features_padded"].shape == features_.shape
            assert item["input_features_mask"].dtype == np.bool_
            got, want_mask = item["input_features_padded"], item["input_features_mask"]
        assert np.array_equal(want_mask.astype(bool), mask.astype(bool))
        # bf16 keeps 8 significant bits.
        np.testing.assert_allclose(got, features_, rtol=2**-8, atol=1e-6)


def test_adjacent_gemma3n_clips_are_refused(app: RenderApp) -> None:
    # Their ranges would share the newline token between them; vLLM 400s as well.
    response = app.render(request_body(CASES["two_clips"], app.served))
    if app.family != "gemma3n":
        assert response.status_code == 200
        return
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages"
    assert "adjacent" in error["message"]


def test_text_only_has_no_features(app: RenderApp) -> None:
    answer = app.render(request_body(CASES["text_only"], app.served)).json()
    assert answer["features"] is None
    assert answer["sampling_params"]["max_tokens"] == 32_768 - len(answer["token_ids"])


def test_mm_payload_none_sends_hashes_and_placeholders_only(app: RenderApp) -> None:
    body = {**request_body(CASES["mono16k_1s"], app.served), "mm_payload": "none"}
    features = app.render(body).json()["features"]
    assert features["kwargs_data"] is None
    assert len(features["mm_hashes"]["audio"]) == len(features["mm_placeholders"]["audio"]) == 1


def test_sampling_params_are_resolved(app: RenderApp) -> None:
    answer = app.render(request_body(CASES["sampling"], app.served)).json()
    params = answer["sampling_params"]
    assert params["temperature"] == 0.2
    assert params["top_p"] == 0.9
    assert params["seed"] == 7
    assert params["max_tokens"] == 64
    assert params["stop"] == ["\n\n"]
    # msgspec's omit_defaults drops what *is* the default (small ints, None, booleans).
    assert "top_k" not in params
    assert "n" not in params
    assert params["repetition_penalty"] == 1.0
    assert params["output_text_buffer_length"] == 1
    assert params["output_kind"] == 2
    body = {**request_body(CASES["text_only"], app.served), "max_completion_tokens": 10**9}
    answer = app.render(body).json()
    assert answer["sampling_params"]["max_tokens"] == 32_768 - len(answer["token_ids"])
    greedy = {**request_body(CASES["text_only"], app.served), "temperature": 0, "top_k": 5}
    params = app.render(greedy).json()["sampling_params"]
    assert params["temperature"] == 0.0
    assert "top_k" not in params
    assert params["top_p"] == 1.0


def test_streaming_fields_are_echoed(app: RenderApp) -> None:
    body = {
        **request_body(CASES["text_only"], app.served),
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_salt": "salt",
        "priority": 3,
        "request_id": "abc",
    }
    answer = app.render(body).json()
    assert answer["stream"] is True
    assert answer["stream_options"] == {"include_usage": True}
    assert answer["cache_salt"] == "salt"
    assert answer["priority"] == 3
    assert answer["request_id"] == "chatcmpl-abc"


def test_an_unknown_model_is_vllms_404(app: RenderApp) -> None:
    body = {**request_body(CASES["text_only"], app.served), "model": "other"}
    response = app.render(body)
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "The model `other` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("response_format", {"type": "json_object"}),
        ("use_beam_search", True),
        ("logit_bias", {"1": 2.0}),
        ("chat_template", "{{ messages }}"),
        ("temperature", "hot"),
        ("temperature", -1),
        ("top_p", 0),
        ("max_tokens", 0),
        ("n", True),
        ("stop", [1]),
        ("mm_payload", "pickles"),
        ("no_such_field", 1),
    ],
)
def test_unresolved_or_invalid_fields_are_refused(app: RenderApp, field: str, value: Any) -> None:
    body = {**request_body(CASES["text_only"], app.served), field: value}
    response = app.render(body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"], error["type"]) == (field, 400, "BadRequestError")


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b'{"messages": []}', b'{"messages": "hi"}', "\ufeff{".encode()],
)
def test_malformed_bodies_are_400s(app: RenderApp, body: bytes) -> None:
    response = app.client.post(CHAT_RENDER, content=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


def test_bad_audio_is_a_400_in_vllms_shape(app: RenderApp) -> None:
    body = request_body(CASES["mono16k_1s"], app.served)
    part = body["messages"][0]["content"][0]["input_audio"]
    part["data"] = base64.b64encode(base64.b64decode(part["data"])[:1000]).decode()
    response = app.render(body)
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_completions_render_text(app: RenderApp) -> None:
    response = app.render({"model": app.served, "prompt": "Hello there"}, COMPLETION_RENDER)
    assert response.status_code == 200
    answer = response.json()
    assert answer["request_id"].startswith("cmpl-")
    assert answer["features"] is None
    expected = app.gate.tokenizer("Hello there", add_special_tokens=True)["input_ids"]
    assert answer["token_ids"] == list(expected)
    # OpenAI's completions default, 16, is SamplingParams' own: omitted as vLLM omits it.
    assert "max_tokens" not in answer["sampling_params"]
    audio_token = "<|AUDIO|>" if app.family == "qwen2audio" else "<audio_soft_token>"
    refused = app.render({"model": app.served, "prompt": f"a {audio_token}"}, COMPLETION_RENDER)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "prompt"


def test_hashes_cover_source_policy_and_dtype(app: RenderApp) -> None:
    adapter = vllm_family(app.family)
    assert adapter is not None
    prepared = _prepared(app, CASES["two_clips"])
    assert prepared.batch is not None
    first, second = prepared.batch.clips
    host, policy = app.gate.host, app.gate.policy
    base = mm_hash(host, policy, first, adapter, "bfloat16")
    assert base == mm_hash(host, policy, first, adapter, "bfloat16")
    assert len(base) == 64
    assert base != mm_hash(host, policy, second, adapter, "bfloat16")
    assert base != mm_hash(host, policy, first, adapter, "float32")
    other = attrs.evolve(policy, resampling=policy.resampling + "-other")
    assert base != mm_hash(host, other, first, adapter, "bfloat16")
    assert base != mm_hash(host, policy, first, attrs.evolve(adapter, wire="2"), "bfloat16")
    assert base != mm_hash(host, policy, attrs.evolve(first, sha256="0" * 64), adapter, "bfloat16")
    # The same bytes in another request hash alike, so vLLM's encoder cache reuses them.
    answer = app.render(request_body(CASES["mono16k_1s"], app.served)).json()
    assert answer["features"]["mm_hashes"]["audio"] == [base]
