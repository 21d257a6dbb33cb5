"""The worked example of ``docs/embedding.md`` (``examples/embedding/chat_server.py``) works.

A Starlette app embeds the core (AudioGate on a bounded worker) and runs its own model
loop; the tests drive it in-process through Starlette's test client.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import attrs
import pytest

pytest.importorskip("transformers")

from starlette.testclient import TestClient

from audiogate.api import AudioGate

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "models" / "qwen2-audio-7b-instruct"
AUDIO = ROOT / "examples" / "audio"


@pytest.fixture(scope="module")
def chat_server() -> ModuleType:
    path = ROOT / "examples" / "embedding" / "chat_server.py"
    spec = importlib.util.spec_from_file_location("chat_server", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_server"] = module
    spec.loader.exec_module(module)
    return module


def audio_part(name: str) -> dict:
    data = base64.b64encode((AUDIO / name).read_bytes()).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def chat(*parts: dict, text: str = "What is said?") -> dict:
    return {
        "model": "demo",
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}],
    }


def test_a_chat_request_reaches_the_model_with_matching_positions(chat_server) -> None:
    request = chat(audio_part("speech_16k.wav"), audio_part("speech_44k1_stereo.wav"))
    with TestClient(chat_server.create_app(MODEL)) as client:
        response = client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200, response.text
    body = response.json()
    # The same request prepared directly: the server fed the model exactly this.
    expected = AudioGate.from_model_dir(MODEL).prepare(request["messages"])
    assert body["usage"]["prompt_tokens"] == len(expected.input_ids)
    assert body["audio"]["audio_positions"] == expected.batch.totals.tokens
    assert [c["source_rate"] for c in body["audio"]["clips"]] == [16_000, 44_100]
    assert "I heard 2 clip(s)" in body["choices"][0]["message"]["content"]
    assert "input_features [2, 128, 3000]" in body["choices"][0]["message"]["content"]


def test_bad_audio_is_a_typed_400_and_counted(chat_server) -> None:
    broken = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(b"RIFF....WAVEjunk").decode(), "format": "wav"},
    }
    with TestClient(chat_server.create_app(MODEL)) as client:
        response = client.post("/v1/chat/completions", json=chat(broken))
        metrics = client.get("/metrics").text
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "DecodeError"
    assert error["clip_index"] == 0
    assert (
        'audiogate_audio_preprocess_rejections_total{family="qwen2audio",reason="waveform"} 1.0'
        in metrics
    )


def test_a_prompt_beyond_the_context_is_413(chat_server) -> None:
    with TestClient(chat_server.create_app(MODEL, max_prefill_tokens=64)) as client:
        response = client.post("/v1/chat/completions", json=chat(audio_part("speech_16k.wav")))
        metrics = client.get("/metrics").text
    assert response.status_code == 413
    assert response.json()["error"]["reason"] == "context_limit"
    assert 'reason="context_limit"} 1.0' in metrics


def test_a_request_without_messages_is_400(chat_server) -> None:
    with TestClient(chat_server.create_app(MODEL)) as client:
        response = client.post("/v1/chat/completions", json={"model": "demo"})
    assert response.status_code == 400


def test_the_model_loop_batches_waiting_requests(chat_server) -> None:
    gate = AudioGate.from_model_dir(MODEL)
    messages = chat(audio_part("speech_16k.wav"))["messages"]
    prepared = [gate.prepare(messages) for _ in range(3)]
    model = chat_server.EchoAudioModel()
    loop = chat_server.ModelLoop(model, max_batch=8)

    async def scenario() -> list:
        runner = asyncio.create_task(loop.run())
        try:
            return await asyncio.gather(*(loop.generate(p) for p in prepared))
        finally:
            runner.cancel()

    outputs = asyncio.run(scenario())
    assert [o.audio_positions for o in outputs] == [p.batch.totals.tokens for p in prepared]
    assert sum(model.batch_sizes) == 3
    assert max(model.batch_sizes) > 1


def test_the_model_refuses_misaligned_inputs(chat_server) -> None:
    gate = AudioGate.from_model_dir(MODEL)
    prepared = gate.prepare(chat(audio_part("speech_16k.wav"))["messages"])
    start, stop = prepared.audio_spans[0]
    broken = attrs.evolve(prepared, audio_spans=((start, stop - 1),))
    with pytest.raises(RuntimeError, match="audio positions"):
        chat_server.EchoAudioModel().generate([broken])
