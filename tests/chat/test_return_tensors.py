"""``return_tensors="pt"``: torch tensors the caller owns, and the variant the inputs name."""

from __future__ import annotations

import base64
import warnings
from pathlib import Path

import numpy as np
import pytest

from audiogate.api import AudioGate

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
SPEECH = Path(__file__).resolve().parents[2] / "examples" / "audio" / "speech_16k.wav"
VARIANTS = {
    "phi-4-multimodal-instruct": "remote_code",
    "phi-4-multimodal-instruct-hf": "native",
    "gemma-3n-e4b-it": "default",
    "qwen2-audio-7b-instruct": "default",
}


def messages() -> list[dict]:
    data = base64.b64encode(SPEECH.read_bytes()).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    return [{"role": "user", "content": [part, {"type": "text", "text": "What is said?"}]}]


@pytest.fixture(scope="module")
def gemma() -> AudioGate:
    return AudioGate.from_model_dir(MODELS / "gemma-3n-e4b-it")


def test_pt_gives_writable_tensors_equal_to_the_numpy_result(gemma: AudioGate) -> None:
    reference = gemma.prepare(messages())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy of a read-only array warns
        result = gemma.prepare(messages(), return_tensors="pt")
    assert set(result.model_inputs) == set(reference.model_inputs)
    for name, tensor in result.model_inputs.items():
        assert isinstance(tensor, torch.Tensor), name
        np.testing.assert_array_equal(tensor.numpy(), reference.model_inputs[name])
    assert all(isinstance(f, torch.Tensor) for f in result.features)
    assert result.masks[0] is not None
    assert result.masks[0].dtype == torch.bool
    # The caller owns the copy: writing to it leaves the prepared arrays alone.
    features = result.model_inputs["input_features"]
    features.zero_()
    assert features.sum() == 0
    assert result.features[0].abs().sum() > 0


def test_pt_converts_the_inputs_a_text_only_request_derives_from_its_prompt() -> None:
    gate = AudioGate.from_model_dir(MODELS / "phi-4-multimodal-instruct")
    text_only = [{"role": "user", "content": "Hello"}]
    result = gate.prepare(text_only, return_tensors="pt")
    assert result.batch is None
    assert result.model_inputs["input_mode"].dtype == torch.int64


@pytest.mark.parametrize(("directory", "variant"), sorted(VARIANTS.items()))
def test_the_prepared_request_names_the_checkpoint_variant(directory: str, variant: str) -> None:
    gate = AudioGate.from_model_dir(MODELS / directory)
    result = gate.prepare(messages())
    assert result.variant == variant == gate.policy.variant
    if variant == "native":
        assert "audio_input_features" in result.model_inputs
    if variant == "remote_code":
        assert "input_audio_embeds" in result.model_inputs
