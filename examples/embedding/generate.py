"""From a :class:`~audiogate.api.PreparedRequest` to ``generate()`` on a transformers model.

``prepare(..., return_tensors="pt")`` gives the feature inputs as torch tensors named
as the model's forward names them; :func:`generate` adds the prompt's ids and runs
``model.generate``. Each checkpoint variant feeds one model class
(:data:`MODEL_CLASSES`): the inputs of Phi-4 MM's remote-code checkpoint, given to
transformers' native ``Phi4MultimodalForCausalLM``, would be silently ignored by its
forward pass (it takes any keyword), so :func:`generate` checks the pairing first.

Run it on the bundled checkpoints with tiny randomly initialised models (torch and
transformers; no weights are downloaded, the output is random tokens)::

    python examples/embedding/generate.py

``tests/docs/test_embedding.py`` runs it. See ``docs/embedding.md``.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from audiogate.api import AudioGate, PreparedRequest

__all__ = ["CHECKPOINTS", "MODEL_CLASSES", "generate", "main", "prepare_speech"]

ROOT: Final = Path(__file__).resolve().parents[2]

#: ``(family, variant)`` → the model class its inputs are named for.
MODEL_CLASSES: Final = {
    # modeling_phi4mm.py of the checkpoint (AutoModelForCausalLM, trust_remote_code=True)
    ("phi4mm", "remote_code"): "Phi4MMForCausalLM",
    ("phi4mm", "native"): "Phi4MultimodalForCausalLM",
    ("gemma3n", "default"): "Gemma3nForConditionalGeneration",
    ("qwen2audio", "default"): "Qwen2AudioForConditionalGeneration",
    ("voxtral", "default"): "VoxtralForConditionalGeneration",
    ("granitespeech", "default"): "GraniteSpeechForConditionalGeneration",
    ("audioflamingo3", "default"): "AudioFlamingo3ForConditionalGeneration",
    ("glmasr", "default"): "GlmAsrForConditionalGeneration",
    # The Omni checkpoints' text-generating part (the talker and token2wav are not fed).
    ("qwen25omni", "default"): "Qwen2_5OmniThinkerForConditionalGeneration",
    ("qwen3omni", "default"): "Qwen3OmniMoeThinkerForConditionalGeneration",
}

#: The bundled checkpoints this script runs, by family (Phi-4 MM's native one).
CHECKPOINTS: Final = {
    "phi4mm": ROOT / "examples/models/phi-4-multimodal-instruct-hf",
    "gemma3n": ROOT / "examples/models/gemma-3n-e4b-it",
    "qwen2audio": ROOT / "examples/models/qwen2-audio-7b-instruct",
    "voxtral": ROOT / "examples/models/voxtral-mini-3b-2507",
    "granitespeech": ROOT / "examples/models/granite-speech-3.3-2b",
    "audioflamingo3": ROOT / "examples/models/audio-flamingo-3-hf",
    "glmasr": ROOT / "examples/models/glm-asr-nano-2512",
    "qwen25omni": ROOT / "examples/models/qwen2.5-omni-7b",
    "qwen3omni": ROOT / "examples/models/qwen3-omni-30b-a3b-instruct",
}


def prepare_speech(gate: AudioGate, question: str = "What is said?") -> PreparedRequest:
    """The bundled 16 kHz speech clip and ``question``, as torch tensors."""
    data = base64.b64encode((ROOT / "examples/audio/speech_16k.wav").read_bytes()).decode()
    audio = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    messages = [{"role": "user", "content": [audio, {"type": "text", "text": question}]}]
    return gate.prepare(messages, return_tensors="pt")


def generate(model: Any, prepared: PreparedRequest, *, max_new_tokens: int = 8) -> list[int]:
    """Greedy ``model.generate`` on one prepared request; returns the new token ids.

    :param model: a transformers model of the class :data:`MODEL_CLASSES` names for the
        request's family and variant.
    :param prepared: a request prepared with ``return_tensors="pt"``.
    :raises TypeError: the model is not the class the inputs are named for.
    """
    import torch

    expected = MODEL_CLASSES[(prepared.family, prepared.variant)]
    if type(model).__name__ != expected:
        raise TypeError(
            f"{prepared.family} ({prepared.variant}) inputs are named for {expected}, not "
            f"{type(model).__name__}: another class may ignore them without an error"
        )
    input_ids = torch.tensor([prepared.input_ids], dtype=torch.long)
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            **prepared.model_inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
        )
    return [int(i) for i in output[0, input_ids.shape[1] :]]


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare the speech clip for each family and generate a few tokens."""
    from audiogate.testing.tiny_models import build_tiny_model

    for family, checkpoint in CHECKPOINTS.items():
        gate = AudioGate.from_model_dir(checkpoint)
        prepared = prepare_speech(gate)
        model = build_tiny_model(family)  # random weights: the tokens mean nothing
        new = generate(model, prepared, max_new_tokens=4)
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in prepared.model_inputs.items())
        print(f"{family} ({prepared.variant}) → {type(model).__name__}: {shapes}; new ids {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
