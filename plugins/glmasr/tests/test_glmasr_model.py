"""Our collated inputs and expanded ids in a tiny random ``GlmAsrForConditionalGeneration``.

The model encodes each window row, merges 4 frames per row, keeps each row's positions by
its mask and scatters them, in order, into the ``<|pad|>`` positions; it raises when their total
differs from the rows kept. It cannot see a count moved from one clip to another; the
expansion and parity tests pin per-clip counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from glmasr_helpers import make_signal

from audiogate.cancel import NEVER
from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.records import ClipSlot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODEC = SentinelCodec("feedfacefeedface")


@pytest.fixture(scope="module")
def model():
    """The family's tiny model (``audiogate_glmasr.tiny_model``), seeded."""
    from audiogate_glmasr import tiny_model

    torch.manual_seed(0)
    return tiny_model.build().eval()


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
        [{"role": "user", "content": [*parts, {"type": "text", "text": "Transcribe."}]}],
        codec=CODEC,
        parts=True,
    )
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    segments = parse_rendered(text, CODEC, expected={"audio": len(lengths)})
    return batch, host.expand_prompt(policy, segments, slots, tokenizer)


def forward(model, batch, ids):
    with torch.no_grad():
        return model(
            input_ids=torch.tensor([ids]),
            input_features=torch.from_numpy(np.array(batch.inputs["input_features"])),
            input_features_mask=torch.from_numpy(np.array(batch.inputs["input_features_mask"])),
            logits_to_keep=1,
        )


@pytest.mark.parametrize(
    "lengths",
    [[16_000], [961], [480_000], [720_123], [16_000, 500_000, 4_000]],
    ids=["1s", "shortest", "one-window", "two-windows", "three-clips"],
)
def test_the_model_consumes_our_features_and_ids(host, policy, tokenizer, model, lengths):
    batch, prompt = prepare(host, policy, tokenizer, lengths)
    out = forward(model, batch, list(prompt.input_ids))
    assert out.logits.shape[:2] == (1, 1)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("delta", [-1, 1])
def test_one_pad_too_many_or_too_few_raises_in_the_model(host, policy, tokenizer, model, delta):
    batch, prompt = prepare(host, policy, tokenizer, [720_123])
    ids = list(prompt.input_ids)
    start, _ = prompt.audio_spans[0]
    ids = (
        ids[:start] + [59_260] * delta + ids[start:]
        if delta > 0
        else ids[:start] + ids[start + 1 :]
    )
    with pytest.raises((ValueError, RuntimeError)):
        forward(model, batch, ids)


def test_the_shared_tiny_model_helpers_find_this_familys(host, policy, tokenizer):
    """``audiogate.testing.tiny_models`` builds and runs it through the entry point."""
    from audiogate.testing.tiny_models import build_tiny_model, forward_tiny_model

    built = build_tiny_model("glmasr")
    batch, prompt = prepare(host, policy, tokenizer, [16_000, 600_000])
    out = forward_tiny_model("glmasr", built, prompt.input_ids, batch.inputs)
    assert torch.isfinite(out.logits).all()
