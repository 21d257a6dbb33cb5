"""Our collated inputs and expanded ids in a tiny random
``GraniteSpeechForConditionalGeneration`` (transformers 5.24.0, stock code).

The model runs its conformer over every row of ``input_features``, projects windows of
15 rows into 3 queries each, keeps the projected rows that ``input_features_mask``
marks, and checks that their total equals the ``<|audio|>`` positions; an off-by-one
total raises. It cannot see a count moved from one clip to another; the expansion tests
pin per-clip counts.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from granitespeech_helpers import SYSTEM_PROMPT, make_signal

from audiogate.cancel import NEVER
from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.records import ClipSlot, readonly

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODEC = SentinelCodec("feedfacefeedface")
AUDIO_ID = 49_159


@pytest.fixture(scope="module")
def model():
    from audiogate.testing.tiny_models import build_tiny_model

    built = build_tiny_model("granitespeech")
    assert built.config.audio_token_index == AUDIO_ID
    return built


def prepare(host, policy, tokenizer, lengths):
    """Our features (plugin hooks) and ids (core chat path + plugin expansion)."""
    clips, slots = [], []
    for index, samples in enumerate(lengths):
        waveform = readonly(make_signal("speechlike", samples=samples, seed=index))
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
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [*parts, {"type": "text", "text": "Transcribe."}]},
        ],
        codec=CODEC,
    )
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    segments = parse_rendered(text, CODEC, expected={"audio": len(lengths)})
    prompt = host.expand_prompt(policy, segments, slots, tokenizer, chat=True)
    return batch, prompt


def forward(model, batch, ids):
    from audiogate.testing.tiny_models import forward_tiny_model

    return forward_tiny_model("granitespeech", model, ids, batch.inputs)


def test_collated_names_and_dtypes_are_what_forward_takes(host, policy, tokenizer, model):
    batch, _ = prepare(host, policy, tokenizer, [16_000, 4_000])
    parameters = inspect.signature(type(model).forward).parameters
    assert set(batch.inputs) == {"input_features", "input_features_mask"} <= set(parameters)
    features, mask = batch.inputs["input_features"], batch.inputs["input_features_mask"]
    assert features.shape == (2, 50, 160)
    assert features.dtype == np.float32
    assert mask.shape == (2, 12)
    assert mask.dtype == np.bool_
    assert mask.sum(-1).tolist() == [12, 3]
    assert batch.tokens == (12, 3)
    assert not features.flags.writeable
    assert not mask.flags.writeable


@pytest.mark.parametrize("lengths", [[16_000], [16_000, 7_777, 2_000]])
def test_the_model_accepts_our_inputs(host, policy, tokenizer, model, lengths):
    batch, prompt = prepare(host, policy, tokenizer, lengths)
    out = forward(model, batch, list(prompt.input_ids))
    assert out.logits.shape[:2] == (1, 1)  # logits_to_keep=1
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_off_by_one_total_is_caught_by_the_model(host, policy, tokenizer, model, delta):
    batch, prompt = prepare(host, policy, tokenizer, [16_000, 7_777])
    ids = list(prompt.input_ids)
    start, _stop = prompt.audio_spans[0]
    if delta < 0:
        del ids[start]
    else:
        ids.insert(start, prompt.audio_token_id)
    with pytest.raises(ValueError, match="Audio features and audio tokens do not match"):
        forward(model, batch, ids)
