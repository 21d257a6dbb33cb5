"""Prompt expansion against ``GlmAsrProcessor`` and its chat template, and the placeholder
rules (``audiogate_glmasr.prompt``)."""

from __future__ import annotations

import numpy as np
import pytest
from glmasr_helpers import reference

from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate_glmasr.geometry import glmasr_geometry
from audiogate_glmasr.prompt import expand_prompt

pytest.importorskip("transformers")

CODEC = SentinelCodec("00112233aabbccdd")
AUDIO = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
BOS, PAD, EOS = "<|begin_of_audio|>", "<|pad|>", "<|end_of_audio|>"


def slot(samples: int, ordinal: int = 1) -> ClipSlot:
    geometry = glmasr_geometry(samples)
    return ClipSlot(
        ordinal=ordinal, tokens=geometry.tokens, frames=geometry.valid_frames, sha256="a" * 64
    )


def segments_of(tokenizer, messages, count):
    flat = flatten_messages(messages, codec=CODEC, parts=True)
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    return parse_rendered(text, CODEC, expected={"audio": count})


def theirs(content):
    return [{"type": "audio", "audio": "x"} if part is AUDIO else part for part in content]


TEXT = {"type": "text", "text": "What is said? "}
MORE = {"type": "text", "text": "Answer briefly."}
SPACE = {"type": "text", "text": "  "}
LAYOUTS = {
    "audio-text": [AUDIO, TEXT, MORE],
    "text-audio": [TEXT, AUDIO],
    "text-audio-space": [MORE, AUDIO, SPACE],
    "space-audio-text": [SPACE, AUDIO, MORE],
    "audio-only": [AUDIO],
    "text-audio-text": [TEXT, AUDIO, MORE],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("samples", [961, 16_000, 480_000, 480_161, 1_000_000])
def test_chat_ids_equal_the_processors(policy, tokenizer, processor, samples, layout):
    """Wherever the audio part sits, the expansion is the processor's expansion of the
    template's rendering (the trim of a block that ends the content included)."""
    content = LAYOUTS[layout]
    messages = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": content}]
    segments = segments_of(tokenizer, messages, 1)
    expanded = expand_prompt(policy, segments, [slot(samples)], tokenizer, chat=True)
    rendered = processor.apply_chat_template(
        [messages[0], {"role": "user", "content": theirs(content)}],
        add_generation_prompt=True,
        tokenize=False,
    )
    want = reference(processor, [np.full(samples, 0.1, dtype=np.float32)], rendered)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()
    assert expanded.text == rendered.replace(PAD, PAD * slot(samples).tokens)
    bare = expand_prompt(policy, segments, [slot(samples)], None, chat=True)
    assert bare.text == expanded.text
    assert bare.input_ids == ()


def test_the_transcription_request_gives_the_same_ids(policy, tokenizer, processor):
    """``apply_transcription_request`` (audio, then text) through the core's chat path."""
    waveform = np.full(50_000, 0.05, dtype=np.float32)
    want = processor.apply_transcription_request(waveform)
    segments = segments_of(
        tokenizer,
        [
            {
                "role": "user",
                "content": [
                    AUDIO,
                    {"type": "text", "text": "Please transcribe this audio into text"},
                ],
            }
        ],
        1,
    )
    expanded = expand_prompt(policy, segments, [slot(50_000)], tokenizer, chat=True)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()


def test_several_clips_each_get_the_templates_block(policy, tokenizer, processor):
    messages = [
        {"role": "user", "content": [AUDIO, {"type": "text", "text": "First?"}]},
        {"role": "assistant", "content": "A dog."},
        {"role": "user", "content": [AUDIO, AUDIO]},
    ]
    slots = [slot(16_000, 1), slot(20_000, 2), slot(1_000, 3)]
    expanded = expand_prompt(policy, segments_of(tokenizer, messages, 3), slots, tokenizer)
    rendered = processor.apply_chat_template(
        [
            {**m, "content": theirs(m["content"])} if isinstance(m["content"], list) else m
            for m in messages
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    runs = iter(PAD * s.tokens for s in slots)
    assert expanded.text == "".join(
        piece + (next(runs) if index < 3 else "") for index, piece in enumerate(rendered.split(PAD))
    )
    assert [b - a for a, b in expanded.audio_spans] == [s.tokens for s in slots]


def test_plain_prompt_placeholders_are_the_processors(policy, tokenizer, processor):
    for text in (f"{BOS}{PAD}{EOS}Describe it.", f"<|user|>\n{BOS}{PAD}{EOS}<|user|>\nHi"):
        waveform = np.full(33_333, 0.1, dtype=np.float32)
        want = reference(processor, [waveform], text)
        expanded = expand_prompt(policy, [TextSegment(text)], [slot(33_333)], tokenizer)
        assert list(expanded.input_ids) == want["input_ids"][0].tolist()


def test_a_bare_plain_placeholder_is_wrapped(policy):
    expanded = expand_prompt(
        policy, [TextSegment(f"Hear {PAD} and {PAD}.")], [slot(1_000), slot(2_000, 2)], None
    )
    first, second = slot(1_000).tokens, slot(2_000, 2).tokens
    assert expanded.text == f"Hear {BOS}{PAD * first}{EOS} and {BOS}{PAD * second}{EOS}."


def test_plain_prompt_without_placeholders_gets_the_blocks_after_the_last_user_turn(policy):
    text = "<|user|>\nHi<|assistant|>\nYes<|user|>\nWhat?<|assistant|>\n"
    expanded = expand_prompt(policy, [TextSegment(text)], [slot(1_000), slot(2_000, 2)], None)
    blocks = "".join(f"{BOS}{PAD * s.tokens}{EOS}<|user|>\n" for s in (slot(1_000), slot(2_000, 2)))
    assert expanded.text == text.replace("<|user|>\nWhat?", "<|user|>\n" + blocks + "What?")
    bare = expand_prompt(policy, [TextSegment("Hello.")], [slot(1_000)], None)
    assert bare.text == f"{BOS}{PAD * slot(1_000).tokens}{EOS}<|user|>\nHello."


@pytest.mark.parametrize(
    ("segments", "clips"),
    [
        ([TextSegment(f"{PAD}{PAD}x")], 1),  # two placeholders, one clip
        ([TextSegment(f"{PAD}x")], 0),  # a placeholder, no clip
        ([TextSegment(f"{BOS}{PAD}x")], 1),  # half wrapped
        ([TextSegment(f"{PAD}{EOS}x")], 1),  # half wrapped
        ([TextSegment(f"{PAD} {EOS}")], 1),  # a stray delimiter
        ([TextSegment(f"x {BOS}")], 1),  # a stray delimiter, no placeholder
        ([TextSegment("a"), MediaSegment("audio", 1), TextSegment(PAD)], 1),  # typed
        ([TextSegment(BOS), MediaSegment("audio", 1)], 1),  # typed delimiter
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


@pytest.mark.parametrize("literal", [PAD, BOS, EOS])
def test_a_chat_without_clips_refuses_typed_audio_tokens(policy, tokenizer, literal):
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment(f"say {literal}")], [], tokenizer, chat=True)
    kept = expand_prompt(policy, [TextSegment("say hi")], [], tokenizer, chat=True)
    assert kept.text == "say hi"
    assert kept.audio_spans == ()


def test_a_claimed_count_must_be_the_merged_rows(policy, tokenizer):
    wrong = ClipSlot(ordinal=1, tokens=13, frames=100, sha256="a" * 64)
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment("x")], [wrong], tokenizer)


def test_a_tokenizer_with_other_audio_ids_is_refused(policy):
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    other = build_stand_in_tokenizer({PAD: 59_260, BOS: 59_263, EOS: 59_262})
    with pytest.raises(PolicyError):
        expand_prompt(policy, [TextSegment("x")], [slot(16_000)], other)


def test_a_multi_turn_chat_with_one_clip_equals_the_processor(policy, tokenizer, processor):
    ours = [
        {"role": "system", "content": [{"type": "text", "text": " Be terse. "}]},
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": [{"type": "text", "text": "And this? "}, AUDIO]},
    ]
    theirs_messages = [
        {**m, "content": theirs(m["content"])} if isinstance(m["content"], list) else m
        for m in ours
    ]
    expanded = expand_prompt(policy, segments_of(tokenizer, ours, 1), [slot(70_000)], tokenizer)
    rendered = processor.apply_chat_template(
        theirs_messages, add_generation_prompt=True, tokenize=False
    )
    want = reference(processor, [np.full(70_000, 0.1, dtype=np.float32)], rendered)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()


@pytest.mark.parametrize("layout", ["audio-text", "text-audio"])
@pytest.mark.parametrize("samples", [961, 480_161])
def test_the_rendered_template_as_processor_text_gives_the_processors_ids(
    policy, tokenizer, processor, samples, layout
):
    """``processor(text=<rendered template>)``: the text split at ``<|pad|>`` arrives with
    the audio part already between the delimiters, and gets just its rows, as the
    processor expands it (it was refused as a typed delimiter)."""
    messages = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": theirs(LAYOUTS[layout])},
    ]
    rendered = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    before, after = rendered.split(PAD)
    segments = [TextSegment(before), MediaSegment("audio", 1), TextSegment(after)]
    expanded = expand_prompt(policy, segments, [slot(samples)], tokenizer, chat=True)
    want = reference(processor, [np.full(samples, 0.1, dtype=np.float32)], rendered)
    assert list(expanded.input_ids) == want["input_ids"][0].tolist()
    # A part wrapped on one side only is still refused.
    with pytest.raises(PlaceholderError, match="half wrapped"):
        expand_prompt(policy, segments[:2], [slot(samples)], None, chat=True)
