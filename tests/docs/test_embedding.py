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
from shipped import shipped_families

pytest.importorskip("transformers")

from starlette.testclient import TestClient

from audiogate.api import AudioGate

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "models" / "qwen2-audio-7b-instruct"
AUDIO = ROOT / "examples" / "audio"
#: The shipped families in families.toml's order, which the generate example follows.
FAMILIES = [family.name for family in shipped_families()]


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


def test_every_quoted_excerpt_is_verbatim_in_the_examples(run_tutorial) -> None:
    text = (ROOT / "docs" / "embedding.md").read_text("utf-8")
    assert len(run_tutorial.excerpts(text)) >= 5
    assert run_tutorial.stale_excerpts(text) == []


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


# --- examples/embedding/generate.py: generate() on a tiny model of each family -----------


@pytest.fixture(scope="module")
def generate_example() -> ModuleType:
    path = ROOT / "examples" / "embedding" / "generate.py"
    spec = importlib.util.spec_from_file_location("generate_example", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_example"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_models() -> dict:
    pytest.importorskip("torch")
    from audiogate.testing.tiny_models import build_tiny_model

    return {family: build_tiny_model(family) for family in FAMILIES}


def test_the_example_runs_every_shipped_family(generate_example) -> None:
    assert list(generate_example.CHECKPOINTS) == FAMILIES


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_runs_on_a_tiny_model_of_each_family(
    generate_example, tiny_models, family: str
) -> None:
    gate = AudioGate.from_model_dir(generate_example.CHECKPOINTS[family])
    prepared = generate_example.prepare_speech(gate)
    model = tiny_models[family]
    assert type(model).__name__ == generate_example.MODEL_CLASSES[(family, prepared.variant)]
    new = generate_example.generate(model, prepared, max_new_tokens=3)
    assert len(new) == 3
    assert all(0 <= i < model.config.get_text_config().vocab_size for i in new)
    # The model's own placeholder check sees our ids: one audio position more is refused.
    start, _ = prepared.audio_spans[0]
    ids = prepared.input_ids
    extra = attrs.evolve(prepared, input_ids=(*ids[:start], ids[start], *ids[start:]))
    with pytest.raises((ValueError, RuntimeError)):
        generate_example.generate(model, extra, max_new_tokens=1)


@pytest.mark.slow
def test_remote_code_phi4mm_inputs_are_refused_for_the_native_class(
    generate_example, tiny_models
) -> None:
    torch = pytest.importorskip("torch")
    gate = AudioGate.from_model_dir(ROOT / "examples" / "models" / "phi-4-multimodal-instruct")
    prepared = generate_example.prepare_speech(gate)
    assert prepared.variant == "remote_code"
    native = tiny_models["phi4mm"]
    with pytest.raises(TypeError, match="Phi4MMForCausalLM"):
        generate_example.generate(native, prepared)
    # Why: generate() happens to refuse the unknown names, but the native forward pass
    # ignores them without an error: its logits are those of no audio input at all.
    with pytest.raises(ValueError, match="not used by the model"):
        native.generate(input_ids=torch.tensor([prepared.input_ids]), **prepared.model_inputs)
    ids = torch.tensor([prepared.input_ids])
    with torch.no_grad():
        ignored = native(input_ids=ids, **prepared.model_inputs, logits_to_keep=1).logits
        without = native(input_ids=ids, logits_to_keep=1).logits
    assert torch.equal(ignored, without)


@pytest.mark.slow
def test_the_generate_example_runs_as_a_script(generate_example, capsys) -> None:
    assert generate_example.main([]) == 0
    out = capsys.readouterr().out
    assert "phi4mm (native) → Phi4MultimodalForCausalLM" in out
    assert "qwen2audio (default) → Qwen2AudioForConditionalGeneration" in out
    assert "qwen3omni (default) → Qwen3OmniMoeThinkerForConditionalGeneration" in out
