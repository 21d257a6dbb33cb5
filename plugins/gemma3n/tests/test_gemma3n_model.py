"""A tiny random ``Gemma3nForConditionalGeneration`` consumes our features and token ids.

Built from a small config (``audiogate.testing.tiny_models``) with the real special-token ids; the
timm vision tower cannot be imported against the CPU torch, so the shared builder
(``audiogate.testing.tiny_models``) stubs it during construction only. Everything
that touches audio is the real model code, including its placeholder-count check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gemma3n_helpers import mix, noise, segments_from_rendered

from audiogate.cancel import NEVER
from audiogate.records import ClipSlot, readonly

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model() -> Any:
    from audiogate.testing.tiny_models import build_tiny_model

    built = build_tiny_model("gemma3n")
    config = built.config
    assert (config.boa_token_id, config.audio_token_id, config.eoa_token_id) == (
        256_000, 262_273, 262_272,
    )  # fmt: skip
    assert config.audio_soft_tokens_per_image == 188
    return built


def prepare(host, policy, tokenizer, clips: list[np.ndarray]):
    extracted = []
    for index, x in enumerate(clips):
        plan = host.plan_features(policy, rate_hz=16_000, samples=len(x), clip_index=index)
        extracted.append(
            host.extract_features(
                policy, plan, readonly(x), rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
    batch = host.collate_features(policy, extracted)
    content = [{"type": "audio"} for _ in clips] + [{"type": "text", "text": "Transcribe."}]
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    slots = [
        ClipSlot(ordinal=i + 1, tokens=c.tokens, frames=c.frames, sha256=f"{i:064x}")
        for i, c in enumerate(extracted)
    ]
    expanded = host.expand_prompt(policy, segments_from_rendered(rendered), slots, tokenizer)
    return batch, expanded


def forward(model, batch, input_ids) -> Any:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([input_ids]),
            input_features=torch.from_numpy(np.array(batch.inputs["input_features"])),
            input_features_mask=torch.from_numpy(np.array(batch.inputs["input_features_mask"])),
            logits_to_keep=1,
        )


@pytest.mark.parametrize("lengths", [[16_000], [16_000, 7_300]], ids=["1 clip", "2 clips"])
def test_model_accepts_our_features_and_ids(host, policy, tokenizer, model, lengths):
    clips = [mix(n) if i == 0 else noise(n) for i, n in enumerate(lengths)]
    batch, expanded = prepare(host, policy, tokenizer, clips)
    assert batch.inputs["input_features"].shape[0] == len(clips)
    assert sum(b - a for a, b in expanded.audio_spans) == 188 * len(clips)
    out = forward(model, batch, list(expanded.input_ids))
    assert out.logits.shape == (1, 1, 262_400)
    assert torch.isfinite(out.logits).all()


def test_the_model_sees_the_audio(host, policy, tokenizer, model):
    batch, expanded = prepare(host, policy, tokenizer, [mix(16_000)])
    quiet, _ = prepare(host, policy, tokenizer, [noise(16_000, amplitude=0.01)])
    first = forward(model, batch, list(expanded.input_ids)).logits
    second = forward(model, quiet, list(expanded.input_ids)).logits
    assert not torch.allclose(first, second)


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_off_by_one_total_is_rejected_by_the_model(host, policy, tokenizer, model, delta):
    batch, expanded = prepare(host, policy, tokenizer, [mix(16_000), noise(8_000)])
    ids = list(expanded.input_ids)
    _, stop = expanded.audio_spans[1]
    ids = ids[:stop] + [262_273] * delta + ids[stop:] if delta > 0 else ids[: stop - 1] + ids[stop:]
    with pytest.raises((ValueError, RuntimeError), match=r"do not match|mismatch"):
        forward(model, batch, ids)
