"""Our collated inputs and expanded ids in a tiny random
``Qwen2_5OmniThinkerForConditionalGeneration`` (the real model code, toy widths).

The thinker scatters its audio encoder's rows into the ``<|AUDIO|>`` positions; it
checks the rows against the lengths it derives from ``feature_attention_mask``, and the
scatter fails when there are more positions than rows. So the test pins the per-clip
counts against the encoder's own, and the total against the rows it returns.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from qwen25omni_helpers import make_signal

from audiogate.cancel import NEVER
from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.records import ClipSlot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODEC = SentinelCodec("feedfacefeedface")


@pytest.fixture(scope="module")
def model():
    from audiogate.testing.tiny_models import build_tiny_model

    built = build_tiny_model("qwen25omni")
    assert built.config.audio_token_index == 151_646
    return built


def prepare(host, policy, tokenizer, lengths):
    """Our features (plugin hooks) and ids (core chat path + plugin expansion)."""
    clips, slots = [], []
    for index, samples in enumerate(lengths):
        waveform = make_signal("am", samples=samples, seed=index)
        plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=index)
        clips.append(
            host.extract_features(
                policy, plan, waveform, rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
        slots.append(
            ClipSlot(ordinal=index + 1, tokens=plan.tokens, frames=plan.frames, sha256="0" * 64)
        )
    batch = host.collate_features(policy, clips)
    parts = [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}] * len(lengths)
    flat = flatten_messages(
        [{"role": "user", "content": [*parts, {"type": "text", "text": "Describe."}]}], codec=CODEC
    )
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    segments = parse_rendered(text, CODEC, expected={"audio": len(lengths)})
    prompt = host.expand_prompt(policy, segments, slots, tokenizer)
    return batch, prompt


def tensors(batch):
    return {name: torch.from_numpy(np.array(value)) for name, value in batch.inputs.items()}


def test_collated_names_and_dtypes_are_what_forward_takes(host, policy, tokenizer, model):
    batch, _ = prepare(host, policy, tokenizer, [16_000, 4_000])
    parameters = inspect.signature(type(model).forward).parameters
    assert set(batch.inputs) == {"input_features", "feature_attention_mask"} <= set(parameters)
    features, mask = batch.inputs["input_features"], batch.inputs["feature_attention_mask"]
    assert features.shape == (2, 128, 30_000)
    assert features.dtype == np.float32
    assert mask.dtype == np.int32
    assert mask.sum(-1).tolist() == [100, 25]
    assert batch.tokens == (25, 6)
    assert not features.flags.writeable
    assert not mask.flags.writeable


@pytest.mark.parametrize("lengths", [[16_000], [16_000, 7_777, 321]])
@pytest.mark.slow
def test_the_thinker_accepts_our_inputs(host, policy, tokenizer, model, lengths):
    batch, prompt = prepare(host, policy, tokenizer, lengths)
    inputs = tensors(batch)
    with torch.no_grad():
        _, per_clip = model.model.audio_tower._get_feat_extract_output_lengths(
            inputs["feature_attention_mask"].sum(-1)
        )
        rows = model.get_audio_features(**inputs).last_hidden_state
    spans = [stop - start for start, stop in prompt.audio_spans]
    assert per_clip.tolist() == spans == list(batch.tokens)
    assert rows.shape[0] == sum(spans)
    input_ids = torch.tensor([list(prompt.input_ids)])
    with torch.no_grad():
        out = model(**inputs, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    assert out.logits.shape[:2] == (1, len(prompt.input_ids))
    assert torch.isfinite(out.logits).all()


@pytest.mark.slow
def test_one_position_too_many_is_caught_by_the_thinker(host, policy, tokenizer, model):
    batch, prompt = prepare(host, policy, tokenizer, [16_000, 7_777])
    ids = list(prompt.input_ids)
    ids.insert(prompt.audio_spans[0][0], prompt.audio_token_id)
    input_ids = torch.tensor([ids])
    with pytest.raises((ValueError, RuntimeError)), torch.no_grad():
        model(**tensors(batch), input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
