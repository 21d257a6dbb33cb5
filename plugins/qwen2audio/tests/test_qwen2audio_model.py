"""Our collated inputs and expanded ids in a tiny random ``Qwen2AudioForConditionalGeneration``.

The real model code checks that the total number of ``<|AUDIO|>`` positions equals the
encoder's pooled rows, so an off-by-one total raises. It cannot see a
count moved from one clip to another; the expansion tests pin per-clip counts.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from qwen2audio_helpers import make_signal

from audiogate.cancel import NEVER
from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.records import ClipSlot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODEC = SentinelCodec("feedfacefeedface")


@pytest.fixture(scope="module")
def model():
    from audiogate.testing.tiny_models import build_tiny_model

    built = build_tiny_model("qwen2audio")
    assert built.config.audio_token_index == 151_646
    return built


def prepare(qwen_host, policy, tokenizer, lengths):
    """Our features (plugin hooks) and ids (core chat path + plugin expansion)."""
    clips, slots = [], []
    for index, samples in enumerate(lengths):
        waveform = make_signal("am", samples=samples, seed=index)
        plan = qwen_host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=index)
        clips.append(
            qwen_host.extract_features(
                policy, plan, waveform, rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
        slots.append(
            ClipSlot(ordinal=index + 1, tokens=plan.tokens, frames=plan.frames, sha256="0" * 64)
        )
    batch = qwen_host.collate_features(policy, clips)
    parts = [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}] * len(lengths)
    flat = flatten_messages(
        [{"role": "user", "content": [*parts, {"type": "text", "text": "Describe."}]}], codec=CODEC
    )
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    segments = parse_rendered(text, CODEC, expected={"audio": len(lengths)})
    prompt = qwen_host.expand_prompt(policy, segments, slots, tokenizer)
    return batch, prompt


def forward(model, batch, ids):
    inputs = {name: torch.from_numpy(np.array(value)) for name, value in batch.inputs.items()}
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        return model(**inputs, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))


def test_collated_names_and_dtypes_are_what_forward_takes(qwen_host, policy, tokenizer, model):
    batch, _ = prepare(qwen_host, policy, tokenizer, [16_000, 4_000])
    parameters = inspect.signature(type(model).forward).parameters
    assert set(batch.inputs) == {"input_features", "feature_attention_mask"} <= set(parameters)
    features, mask = batch.inputs["input_features"], batch.inputs["feature_attention_mask"]
    assert features.shape == (2, 128, 3000)
    assert features.dtype == np.float32
    assert mask.shape == (2, 3000)
    assert mask.dtype == np.int32
    assert mask.sum(-1).tolist() == [100, 25]
    assert batch.tokens == (25, 6)
    assert not features.flags.writeable
    assert not mask.flags.writeable


@pytest.mark.parametrize("lengths", [[16_000], [16_000, 7_777]])
@pytest.mark.slow
def test_the_model_accepts_our_inputs(qwen_host, policy, tokenizer, model, lengths):
    batch, prompt = prepare(qwen_host, policy, tokenizer, lengths)
    out = forward(model, batch, list(prompt.input_ids))
    assert out.logits.shape[:2] == (1, len(prompt.input_ids))
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("delta", [-1, 1])
@pytest.mark.slow
def test_an_off_by_one_total_is_caught_by_the_model(qwen_host, policy, tokenizer, model, delta):
    batch, prompt = prepare(qwen_host, policy, tokenizer, [16_000, 7_777])
    ids = list(prompt.input_ids)
    start, _stop = prompt.audio_spans[0]
    if delta < 0:
        del ids[start]
    else:
        ids.insert(start, prompt.audio_token_id)
    with pytest.raises(ValueError, match="Audio features and audio tokens do not match"):
        forward(model, batch, ids)
