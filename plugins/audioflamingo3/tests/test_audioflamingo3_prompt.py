"""Prompt expansion against ``AudioFlamingo3Processor`` and its chat template, and the
placeholder rules (``audiogate_audioflamingo3.prompt``)."""

from __future__ import annotations

import numpy as np
import pytest
from audioflamingo3_helpers import reference

from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate_audioflamingo3.geometry import af3_geometry
from audiogate_audioflamingo3.prompt import expand_prompt

pytest.importorskip("transformers")

CODEC = SentinelCodec("00112233aabbccdd")
AUDIO = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}


def slot(samples: int, ordinal: int = 1) -> ClipSlot:
    geometry = af3_geometry(samples)
    return ClipSlot(
        ordinal=ordinal, tokens=geometry.tokens, frames=geometry.valid_frames, sha256="a" * 64
    )


def segments_of(tokenizer, messages, count):
    flat = flatten_messages(messages, codec=CODEC, parts=True)
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    return parse_rendered(text, CODEC, expected={"audio": count})


@pytest.mark.parametrize("audio_first", [True, False])
@pytest.mark.parametrize("samples", [321, 16_000, 480_000, 480_161, 1_000_000])
def test_chat_ids_equal_the_processors(policy, tokenizer, processor, samples, audio_first):
    """Wherever the audio part sits among the text parts, the template prints <sound>
    first; so does the expansion, with the processor's count."""
    text = {"type": "text", "text": "What is said? "}
    more = {"type": "text", "text": "Answer briefly."}
    ours = [AUDIO, text, more] if audio_first else [text, AUDIO, more]
    theirs = [{"type": "audio", "audio": "x"} if part is AUDIO else part for part in ours]
    segments = segments_of(tokenizer, [{"role": "user", "content": ours}], 1)
    expanded = expand_prompt(policy, segments, [slot(samples)], tokenizer, chat=True)
    rendered = processor.apply_chat_template(
        [{"role": "user", "content": theirs}], add_generation_prompt=True, tokenize=False
    )
    want = reference(processor, [np.full(samples, 0.1, dtype=np.float32)], rendered)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()
    assert expanded.text == rendered.replace("<sound>", "<sound>" * slot(samples).tokens)
    bare = expand_prompt(policy, segments, [slot(samples)], None, chat=True)
    assert bare.text == expanded.text
    assert bare.input_ids == ()


def test_the_transcription_request_gives_the_same_ids(policy, tokenizer, processor):
    """``apply_transcription_request`` (text, then audio) through the core's chat path."""
    waveform = np.full(50_000, 0.05, dtype=np.float32)
    want = processor.apply_transcription_request(waveform)
    segments = segments_of(
        tokenizer,
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Transcribe the input speech."}, AUDIO],
            }
        ],
        1,
    )
    expanded = expand_prompt(policy, segments, [slot(50_000)], tokenizer, chat=True)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()


def test_a_multi_turn_chat_puts_each_clip_in_its_own_message(policy, tokenizer):
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": [{"type": "text", "text": "First?"}, AUDIO]},
        {"role": "assistant", "content": "A dog."},
        {"role": "user", "content": [AUDIO, AUDIO, {"type": "text", "text": "And these?"}]},
    ]
    slots = [slot(16_000, 1), slot(20_000, 2), slot(900, 3)]
    expanded = expand_prompt(policy, segments_of(tokenizer, messages, 3), slots, tokenizer)
    runs = ["<sound>" * s.tokens for s in slots]
    assert expanded.text == (
        "<|im_start|>system\nBe terse.<|im_end|>\n"
        f"<|im_start|>user\n{runs[0]}First?<|im_end|>\n"
        "<|im_start|>assistant\nA dog.<|im_end|>\n"
        f"<|im_start|>user\n{runs[1]}{runs[2]}And these?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    starts = [start for start, _ in expanded.audio_spans]
    assert starts == sorted(starts)
    assert [b - a for a, b in expanded.audio_spans] == [s.tokens for s in slots]


def test_plain_prompt_placeholders_are_the_processors(policy, tokenizer, processor):
    text = "<sound>Describe it."
    waveform = np.full(33_333, 0.1, dtype=np.float32)
    want = reference(processor, [waveform], text)
    expanded = expand_prompt(policy, [TextSegment(text)], [slot(33_333)], tokenizer)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()


def test_plain_prompt_without_placeholders_goes_after_the_last_user_turn(policy, tokenizer):
    text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>user\nWhat?<|im_end|>\n"
    expanded = expand_prompt(policy, [TextSegment(text)], [slot(1_000), slot(2_000, 2)], None)
    first, second = slot(1_000).tokens, slot(2_000, 2).tokens
    assert expanded.text == text.replace(
        "user\nWhat?", "user\n" + "<sound>" * (first + second) + "What?"
    )
    bare = expand_prompt(policy, [TextSegment("Hello.")], [slot(1_000)], None)
    assert bare.text == "<sound>" * first + "Hello."


@pytest.mark.parametrize(
    ("segments", "clips"),
    [
        ([TextSegment("<sound><sound>x")], 1),  # two placeholders, one clip
        ([TextSegment("<sound>x")], 0),  # a placeholder, no clip
        ([TextSegment("a"), MediaSegment("audio", 1), TextSegment("<sound>")], 1),  # typed
        ([TextSegment("a"), MediaSegment("audio", 2)], 2),  # out of order
        ([TextSegment("a"), MediaSegment("audio", 1)], 2),  # a clip left over
        ([TextSegment("a"), MediaSegment("image", 1)], 0),  # no images
    ],
)
def test_placeholder_mismatches_fail_closed(policy, tokenizer, segments, clips):
    slots = [slot(16_000, i + 1) for i in range(clips)]
    for tok in (tokenizer, None):
        with pytest.raises(PlaceholderError):
            expand_prompt(policy, segments, slots, tok)


def test_a_chat_without_clips_refuses_a_typed_sound(policy, tokenizer):
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment("say <sound>")], [], tokenizer, chat=True)
    kept = expand_prompt(policy, [TextSegment("say hi")], [], tokenizer, chat=True)
    assert kept.text == "say hi"
    assert kept.audio_spans == ()


def test_a_claimed_count_must_be_the_pooled_rows(policy, tokenizer):
    wrong = ClipSlot(ordinal=1, tokens=26, frames=100, sha256="a" * 64)
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment("x")], [wrong], tokenizer)


def test_a_tokenizer_with_another_sound_id_is_refused(policy):
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    other = build_stand_in_tokenizer({"<sound>": 151_670, "<|im_end|>": 151_645})
    with pytest.raises(PolicyError):
        expand_prompt(policy, [TextSegment("x")], [slot(16_000)], other)


def test_a_multi_turn_chat_with_one_clip_equals_the_processor(policy, tokenizer, processor):
    ours = [
        {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": [{"type": "text", "text": "And this? "}, AUDIO]},
    ]
    theirs = [
        {
            **m,
            "content": [{"type": "audio", "audio": "x"} if p is AUDIO else p for p in m["content"]],
        }
        if isinstance(m["content"], list)
        else m
        for m in ours
    ]
    expanded = expand_prompt(policy, segments_of(tokenizer, ours, 1), [slot(70_000)], tokenizer)
    rendered = processor.apply_chat_template(theirs, add_generation_prompt=True, tokenize=False)
    want = reference(processor, [np.full(70_000, 0.1, dtype=np.float32)], rendered)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()
