"""The real ``Phi4MultimodalForCausalLM`` code consumes our collated features and ids.

The remote-code model is not in transformers; its native port is the same network, so
remote-code batches go to it under the port's names
(:func:`audiogate.testing.tiny_models.native_phi4mm_inputs`).

A tiny randomly initialised model (``audiogate.testing.tiny_models``: real vocabulary and
token ids, 32-wide audio tower, a tiny vision tower) runs a forward pass on 1, 2 and 3
clips: the model's own check (``index_put`` in ``modeling_phi4_multimodal.py``) raises when the
number of 200011 positions differs from the sum of ``audio_embed_sizes``.
"""

from __future__ import annotations

import numpy as np
import pytest
from phi4mm_helpers import signal

from audiogate.cancel import NEVER
from audiogate.host import FamilyHost
from audiogate.records import ClipSlot, TextSegment, readonly

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

AUDIO = 200_011
# (source rate, seconds): every clip has more than 8 frames, so more than one token
# (a clip of ≤ 8 frames is one embedding that index_put would broadcast).
CLIPS = [(16_000, 0.61), (48_000, 1.0), (8_000, 1.37)]


@pytest.fixture(scope="module")
def model():
    from audiogate.testing.tiny_models import build_tiny_model

    built = build_tiny_model("phi4mm")
    assert built.config.audio_config.audio_token_id == AUDIO
    return built


def _prepare(host: FamilyHost, policy, count: int, tokenizer):
    features = []
    for index, (rate, seconds) in enumerate(CLIPS[:count]):
        x = readonly(signal(int(rate * seconds), rate, seed=index)[:, 0].astype(np.float32))
        plan = host.plan_resample(policy, source_rate_hz=rate, source_samples=x.size, clip_index=0)
        wave = host.resample(policy, plan, x, clip_index=index, cancel=NEVER)
        feature_plan = host.plan_features(
            policy, rate_hz=plan.output_rate_hz, samples=wave.size, clip_index=index
        )
        features.append(
            host.extract_features(
                policy,
                feature_plan,
                wave,
                rate_hz=plan.output_rate_hz,
                clip_index=index,
                cancel=NEVER,
            )
        )
    batch = host.collate_features(policy, features)
    slots = [
        ClipSlot(ordinal=i + 1, tokens=c.tokens, frames=c.frames, sha256=f"{i:064x}")
        for i, c in enumerate(features)
    ]
    prompt = "<|user|>" + "".join(f"<|audio_{i + 1}|>" for i in range(count))
    expanded = host.expand_prompt(
        policy, [TextSegment(prompt + "Describe.<|end|><|assistant|>")], slots, tokenizer
    )
    return batch, expanded


def _forward(model, batch, input_ids):
    from audiogate.testing.tiny_models import native_phi4mm_inputs

    # The tiny model is the native port of the remote-code model (see the helper).
    named = native_phi4mm_inputs(batch.inputs)
    inputs = {name: torch.from_numpy(np.array(value)) for name, value in named.items()}
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([list(input_ids)], dtype=torch.long),
            logits_to_keep=1,
            **inputs,
        )


@pytest.mark.parametrize("count", [1, 2, 3])
def test_model_accepts_our_features_and_ids(
    host: FamilyHost, remote, stand_in_tokenizer, model, count: int
) -> None:
    batch, expanded = _prepare(host, remote, count, stand_in_tokenizer("remote_code"))
    assert all(tokens > 1 for tokens in batch.tokens)
    assert expanded.input_ids.count(AUDIO) == sum(batch.tokens)
    output = _forward(model, batch, expanded.input_ids)
    assert output.logits.shape == (1, 1, 200_064)
    assert torch.isfinite(output.logits).all()


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_off_by_one_total_is_caught_by_the_model(
    host: FamilyHost, remote, stand_in_tokenizer, model, delta: int
) -> None:
    batch, expanded = _prepare(host, remote, 2, stand_in_tokenizer("remote_code"))
    ids = list(expanded.input_ids)
    start, _ = expanded.audio_spans[1]
    if delta < 0:
        del ids[start]
    else:
        ids.insert(start, AUDIO)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _forward(model, batch, ids)


def test_audio_reaches_the_language_model(
    host: FamilyHost, remote, stand_in_tokenizer, model
) -> None:
    batch, expanded = _prepare(host, remote, 1, stand_in_tokenizer("remote_code"))
    first = _forward(model, batch, expanded.input_ids).logits
    silent = dict(batch.inputs)
    silent["input_audio_embeds"] = np.zeros_like(batch.inputs["input_audio_embeds"])
    other = _forward(model, type(batch)(inputs=silent, tokens=batch.tokens), expanded.input_ids)
    assert not torch.equal(first, other.logits)


def test_native_variant_inputs_are_accepted(
    host: FamilyHost, native, stand_in_tokenizer, model
) -> None:
    features = []
    for index, seconds in enumerate((0.7, 1.1)):
        rate = 44_100
        x = readonly(signal(int(rate * seconds), rate, seed=index)[:, 0].astype(np.float32))
        plan = host.plan_resample(native, source_rate_hz=rate, source_samples=x.size, clip_index=0)
        wave = host.resample(native, plan, x, clip_index=index, cancel=NEVER)
        assert plan.output_rate_hz == 16_000
        assert plan.algorithm == "soxr_hq"
        fplan = host.plan_features(native, rate_hz=16_000, samples=wave.size, clip_index=index)
        features.append(
            host.extract_features(
                native, fplan, wave, rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
    batch = host.collate_features(native, features)
    slots = [
        ClipSlot(ordinal=i + 1, tokens=c.tokens, frames=c.frames, sha256=f"{i:064x}")
        for i, c in enumerate(features)
    ]
    expanded = host.expand_prompt(
        native,
        [TextSegment("<|user|><|audio|><|audio|>Compare.<|end|><|assistant|>")],
        slots,
        stand_in_tokenizer("native"),
    )
    output = _forward(model, batch, expanded.input_ids)
    assert output.logits.shape == (1, 1, 200_064)
