"""audiogate prepares, vLLM generates, in one process, with no processor run by vLLM.

Builds a tiny random-weight Qwen2-Audio from the bundled checkpoint's config (no weights
are downloaded), prepares a chat request with audiogate, hands vLLM's engine the result
(``audiogate.vllm.engine.engine_input``: token ids, msgpack-exact features, hashes,
placeholder ranges) to the engine's ``add_request`` and compares the greedy tokens with
those of vLLM's own processing of the same audio. Run it in an environment with vLLM
and audiogate (docs/vllm.md)::

    HF_HUB_OFFLINE=1 python examples/vllm/generate_in_process.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import base64
import io
import shutil
import tempfile
import wave
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "examples" / "models" / "qwen2-audio-7b-instruct"


def tiny_model(out: Path) -> Path:
    """A random Qwen2-Audio with the real audio frontend and token ids, tiny layers."""
    import torch
    from transformers import AutoConfig, Qwen2AudioForConditionalGeneration

    config = AutoConfig.from_pretrained(CHECKPOINT)
    small = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
    for key, value in {**small, "hidden_size": 64, "num_key_value_heads": 1}.items():
        setattr(config.text_config, key, value)
    config.text_config.max_position_embeddings = 4096
    if getattr(config.text_config, "layer_types", None):
        config.text_config.layer_types = config.text_config.layer_types[:2]
    audio = {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 128}
    for key, value in {**audio, "d_model": 64}.items():
        setattr(config.audio_config, key, value)
    torch.manual_seed(0)
    model = Qwen2AudioForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    _published_names(out / "model.safetensors")
    for name in ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CHECKPOINT / name, out / name)
    shutil.copy(CHECKPOINT / "chat_template.jinja", out / "chat_template.jinja")
    return out


def _published_names(path: Path) -> None:
    """Rename the weights as the published checkpoint names them (what vLLM loads):
    this transformers writes the text model one ``model.`` deeper."""
    from safetensors.torch import load_file, save_file

    weights = load_file(path)
    renamed = {
        name.replace("language_model.model.model.", "language_model.model.", 1): tensor
        for name, tensor in weights.items()
    }
    save_file(renamed, path, metadata={"format": "pt"})


def tone_wav(seconds: float = 2.0, rate: int = 16_000) -> tuple[bytes, np.ndarray]:
    t = np.arange(int(seconds * rate)) / rate
    samples = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 2500 * t)
    pcm = np.round(samples * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return buffer.getvalue(), pcm.astype(np.float32) / 32768


def generate_processed(llm: Any, prompt: Any, params: Any, request_id: str = "ag-0") -> Any:
    """Generate from an already-processed engine input. ``LLM.generate`` renders its
    prompts and would take an ``mm_input`` for a plain token prompt, dropping its
    multimodal kwargs; the engine's ``add_request`` takes it as it is."""
    engine = llm.llm_engine
    engine.add_request(request_id, prompt, params)
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.request_id == request_id and output.finished:
                return output
    raise RuntimeError("the engine finished without the request's output")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", type=Path, help="build the tiny model here and keep it")
    args = parser.parse_args()
    from vllm import LLM, SamplingParams

    from audiogate import AudioGate
    from audiogate.vllm.engine import engine_input

    work = args.keep or Path(tempfile.mkdtemp(prefix="audiogate-vllm-"))
    model_dir = tiny_model(work) if not (work / "config.json").exists() else work
    wav, waveform = tone_wav()
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "input_audio",
                    "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"},
                },
                {"type": "text", "text": "What is this sound?"},
            ],
        }
    ]
    gate = AudioGate.from_model_dir(model_dir)
    prepared = gate.prepare(messages)
    llm = LLM(
        model=str(model_dir),
        dtype="float32",
        max_model_len=2048,
        enforce_eager=True,
        seed=0,
        # On the CPU backend this is the share of host memory vLLM reserves.
        gpu_memory_utilization=0.15,
    )
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    ours = generate_processed(llm, engine_input(prepared, gate.host, dtype="float32"), greedy)
    # vLLM's own path: the template's unexpanded prompt and the raw waveform.
    template = [
        {
            "role": "user",
            "content": [{"type": "audio", "audio_url": "clip"}, messages[0]["content"][1]],
        }
    ]
    text = gate.tokenizer.apply_chat_template(template, tokenize=False, add_generation_prompt=True)
    theirs = llm.generate(
        {"prompt": text, "multi_modal_data": {"audio": (waveform, 16_000)}}, greedy
    )
    ours_ids = list(ours.outputs[0].token_ids)
    theirs_ids = list(theirs[0].outputs[0].token_ids)
    same_prompt = list(prepared.input_ids) == list(theirs[0].prompt_token_ids)
    print("prompt tokens:", len(prepared.input_ids), "identical to vLLM's own:", same_prompt)
    print("audiogate-prepared greedy tokens:", ours_ids)
    print("vLLM-processed greedy tokens:    ", theirs_ids)
    print("same:", ours_ids == theirs_ids)
    return 0 if same_prompt and ours_ids == theirs_ids else 1


if __name__ == "__main__":
    raise SystemExit(main())
