"""Our collated features and expanded ids in a tiny random ``VoxtralForConditionalGeneration``.

The real model code encodes every 30 s window (3000 frames → 1500 positions), folds four
positions into one embedding (375 per window) and checks that the total number of
``[AUDIO]`` ids equals the embeddings, so an off-by-one total raises. It cannot see a count
moved from one clip to another; the expansion tests pin per-clip counts.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from voxtral_helpers import make_signal

from audiogate.cancel import NEVER
from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.records import ClipSlot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODEC = SentinelCodec("feedfacefeedface")


@pytest.fixture(scope="module")
def model():
    """The family's tiny model (``audiogate_voxtral.tiny_model``), seeded, in eval mode."""
    from audiogate_voxtral import tiny_model

    torch.manual_seed(0)
    built = tiny_model.build().eval()
    assert built.config.audio_token_id == 24
    assert built.config.text_config.vocab_size == 131_072
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
        [{"role": "user", "content": [*parts, {"type": "text", "text": "Describe."}]}],
        codec=CODEC,
        parts=True,
    )
    text = tokenizer.apply_chat_template(list(flat.messages), tokenize=False)
    segments = parse_rendered(text, CODEC, expected={"audio": len(lengths)})
    prompt = host.expand_prompt(policy, segments, slots, tokenizer)
    return batch, prompt


def forward(model, batch, ids):
    features = torch.from_numpy(np.array(batch.inputs["input_features"]))
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        return model(
            input_features=features,
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            logits_to_keep=1,
        )


def test_collated_names_and_dtypes_are_what_forward_takes(host, policy, tokenizer, model):
    batch, _ = prepare(host, policy, tokenizer, [16_000, 500_000])
    parameters = inspect.signature(type(model).forward).parameters
    assert set(batch.inputs) == {"input_features"} <= set(parameters)
    features = batch.inputs["input_features"]
    assert features.shape == (3, 128, 3000)
    assert features.dtype == np.float32
    assert not features.flags.writeable
    assert batch.tokens == (375, 750)


@pytest.mark.parametrize("lengths", [[16_000], [16_000, 500_000]])
def test_the_model_accepts_our_inputs(host, policy, tokenizer, model, lengths):
    batch, prompt = prepare(host, policy, tokenizer, lengths)
    out = forward(model, batch, list(prompt.input_ids))
    assert out.logits.shape[:2] == (1, 1)
    assert torch.isfinite(out.logits).all()


def test_the_audio_reaches_the_language_model(host, policy, tokenizer, model):
    batch, prompt = prepare(host, policy, tokenizer, [16_000])
    quiet = type(batch)(
        inputs={"input_features": np.full_like(batch.inputs["input_features"], -1.5)},
        tokens=batch.tokens,
    )
    loud = forward(model, batch, list(prompt.input_ids)).logits
    silent = forward(model, quiet, list(prompt.input_ids)).logits
    assert not torch.allclose(loud, silent)


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_off_by_one_total_is_caught_by_the_model(host, policy, tokenizer, model, delta):
    batch, prompt = prepare(host, policy, tokenizer, [16_000, 500_000])
    ids = list(prompt.input_ids)
    start, _stop = prompt.audio_spans[0]
    if delta < 0:
        del ids[start]
    else:
        ids.insert(start, prompt.audio_token_id)
    with pytest.raises(ValueError, match="Audio features and audio tokens do not match"):
        forward(model, batch, ids)
