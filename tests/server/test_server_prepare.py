"""POST /v1/audio/prepare succeeds for every shipped family on its example model directory,
and answers exactly what the library gives in-process (path against path)."""

from __future__ import annotations

import numpy as np
import pytest
from serverkit import MODELS, PREPARE, chat, delta, serving, tokenizer, wav_b64

from audiogate import create_host
from audiogate.api import AudioGate
from audiogate.server import decode_features

EXAMPLE_MODELS = [
    "gemma-3n-e4b-it",
    "phi-4-multimodal-instruct",
    "phi-4-multimodal-instruct-hf",
    "qwen2-audio-7b-instruct",
]


def in_process(model: str, request: dict) -> object:
    gate = AudioGate.from_model_dir(MODELS / model, host=create_host(), tokenizer=tokenizer(model))
    return gate.prepare(request["messages"])


@pytest.mark.parametrize("model", EXAMPLE_MODELS)
def test_each_family_answers_what_the_library_prepares(model: str) -> None:
    request = chat(wav_b64(2.0), wav_b64(1.5, rate_hz=48_000, freq_hz=220.0))
    with serving(model) as running:
        before = running.outcomes()
        response = running.client.post(PREPARE, json=request)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert delta(before, running.outcomes()) == {"completed": 1}
        running.wait_idle()
    expected = in_process(model, request)

    assert body["object"] == "audiogate.prepared"
    assert body["model"] == "test-model"
    assert body["family"] == expected.family
    assert body["input_ids"] == list(expected.input_ids)
    assert body["prefill_positions"] == len(expected.input_ids)
    assert body["text"] == expected.text
    assert body["audio_spans"] == [list(span) for span in expected.audio_spans]
    assert [clip["ordinal"] for clip in body["clips"]] == [1, 2]
    assert [clip["source_rate"] for clip in body["clips"]] == [16_000, 48_000]
    assert body["totals"]["clips"] == 2
    assert body["totals"]["tokens"] == sum(clip["tokens"] for clip in body["clips"])
    assert body["totals"]["prefill_positions"] == len(expected.input_ids)

    arrays = decode_features(body["features"])
    assert body["features"]["format"] == "npy"
    assert set(arrays) == set(expected.model_inputs)
    for name, array in expected.model_inputs.items():
        assert arrays[name].dtype == array.dtype
        assert arrays[name].shape == array.shape
        assert body["features"]["shapes"][name] == list(array.shape)
        assert body["features"]["dtypes"][name] == str(array.dtype)
        np.testing.assert_array_equal(arrays[name], array)


def test_safetensors_carries_the_same_arrays_as_npy(gemma) -> None:
    pytest.importorskip("safetensors")
    request = chat(wav_b64(1.0))
    npy = gemma.client.post(PREPARE, json=request).json()
    request["audiogate"] = {"feature_format": "safetensors"}
    st = gemma.client.post(PREPARE, json=request).json()
    assert st["features"]["format"] == "safetensors"
    assert st["input_ids"] == npy["input_ids"]
    a, b = decode_features(npy["features"]), decode_features(st["features"])
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
        assert a[name].dtype == b[name].dtype


def test_features_can_be_left_out(gemma) -> None:
    body = gemma.client.post(
        PREPARE, json=chat(wav_b64(1.0), audiogate={"return_features": False})
    ).json()
    assert body["features"] is None
    assert body["totals"]["clips"] == 1
    assert body["input_ids"]


def test_other_openai_fields_are_ignored_and_model_is_optional(gemma) -> None:
    request = chat(wav_b64(1.0), temperature=0.2, max_tokens=5, stream=False, tools=[])
    del request["model"]
    body = gemma.client.post(PREPARE, json=request).json()
    assert body["model"] == "gemma-3n-e4b-it"


def test_a_request_without_audio_is_prepared_and_not_counted(gemma) -> None:
    before = gemma.outcomes()
    response = gemma.client.post(
        PREPARE, json={"model": "m", "messages": [{"role": "user", "content": "Hello"}]}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["clips"] == []
    assert body["features"] is None
    assert body["input_ids"]
    assert body["prefill_positions"] == len(body["input_ids"])
    assert delta(before, gemma.outcomes()) == {}


def test_concurrent_requests_all_complete_and_release_everything(gemma) -> None:
    import concurrent.futures

    before = gemma.outcomes()
    request = chat(wav_b64(3.0))

    def one(_: int) -> int:
        return gemma.client.post(PREPARE, json=request).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(24)))
    # queue_depth 8 with one thread: some may be refused with 429, none may fail otherwise.
    assert set(statuses) <= {200, 429}
    changes = delta(before, gemma.outcomes())
    assert changes.get("completed", 0) == statuses.count(200)
    assert changes.get("queue_full", 0) == statuses.count(429)
    gemma.wait_idle()
