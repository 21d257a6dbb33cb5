"""Prompt expansion: chat audio parts and plain prompts → ``[BEGIN_AUDIO]`` + n × ``[AUDIO]``,
against mistral-common's layout (``<s>[INST]`` + chunks + ``[/INST]``) and its refusals."""

from __future__ import annotations

import pytest

from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate.testing.contract import check_expansion
from audiogate_voxtral.prompt import expand_prompt

CODEC = SentinelCodec("feedfacefeedface")
BOS, INST, END_INST, BEGIN, AUDIO, EOS = 1, 3, 4, 25, 24, 2


def slots(*windows: int) -> list[ClipSlot]:
    return [
        ClipSlot(ordinal=i + 1, tokens=375 * k, frames=3000 * k, sha256=f"{i:064x}")
        for i, k in enumerate(windows)
    ]


def text_ids(text: str) -> list[int]:
    return [1000 + b for b in text.encode()]


def chat_segments(tokenizer, messages, count):
    flat = flatten_messages(messages, codec=CODEC, parts=True)
    rendered = tokenizer.apply_chat_template(list(flat.messages), tokenize=False)
    return parse_rendered(rendered, CODEC, expected={"audio": count})


AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}


def test_chat_audio_parts_become_blocks_where_they_stand(policy, tokenizer):
    messages = [
        {
            "role": "user",
            "content": [AUDIO_PART, {"type": "text", "text": "and"}, AUDIO_PART],
        },
        {"role": "assistant", "content": "Two clips. "},
        {"role": "user", "content": "Thanks?"},
    ]
    clips = slots(1, 2)
    expanded = expand_prompt(policy, chat_segments(tokenizer, messages, 2), clips, tokenizer)
    want = [
        BOS,
        INST,
        BEGIN,
        *[AUDIO] * 375,
        *text_ids("and"),
        BEGIN,
        *[AUDIO] * 750,
        END_INST,
        *text_ids("Two clips."),
        EOS,
        INST,
        *text_ids("Thanks?"),
        END_INST,
    ]
    assert list(expanded.input_ids) == want
    assert expanded.audio_spans == ((3, 378), (382, 1132))
    assert not check_expansion(expanded, clips, tokenizer)


def test_plain_prompt_blocks_go_after_the_last_inst(policy, tokenizer):
    clips = slots(1, 1)
    expanded = expand_prompt(
        policy, [TextSegment("<s>[INST]Hi[/INST]Yo</s>[INST]Transcribe.[/INST]")], clips, tokenizer
    )
    assert expanded.text.startswith("<s>[INST]Hi[/INST]Yo</s>[INST][BEGIN_AUDIO][AUDIO]")
    assert expanded.text.endswith("[AUDIO]Transcribe.[/INST]")
    assert not check_expansion(expanded, clips, tokenizer)


@pytest.mark.parametrize(
    ("text", "head"), [("<s>Say it.", "<s>[BEGIN_AUDIO]"), ("Say it.", "[BEGIN_AUDIO]")]
)
def test_plain_prompt_without_a_user_turn(policy, tokenizer, text, head):
    expanded = expand_prompt(policy, [TextSegment(text)], slots(1), tokenizer)
    assert expanded.text.startswith(head)
    assert expanded.text.endswith("[AUDIO]Say it.")


def test_text_only_is_left_as_it_is(policy, tokenizer):
    expanded = expand_prompt(policy, [TextSegment("<s>[INST]Hi[/INST]")], [], tokenizer)
    assert list(expanded.input_ids) == [BOS, INST, *text_ids("Hi"), END_INST]
    assert expanded.audio_spans == ()


@pytest.mark.parametrize("marker", ["[AUDIO]", "[BEGIN_AUDIO]"])
def test_raw_audio_markers_are_refused(policy, tokenizer, marker):
    with pytest.raises(PlaceholderError, match="raw audio marker"):
        expand_prompt(policy, [TextSegment(f"[INST]{marker}x[/INST]")], slots(1), tokenizer)
    with pytest.raises(PlaceholderError, match="raw audio marker"):
        expand_prompt(policy, [TextSegment(f"[INST]{marker}[/INST]")], [], tokenizer)


def test_a_system_prompt_with_audio_is_refused_as_mistral_common_does(policy, tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [AUDIO_PART, {"type": "text", "text": "What?"}]},
    ]
    with pytest.raises(PlaceholderError, match="system"):
        expand_prompt(policy, chat_segments(tokenizer, messages, 1), slots(1), tokenizer)
    # Without audio a system prompt is fine.
    text = tokenizer.apply_chat_template(
        [messages[0], {"role": "user", "content": "Hi"}], tokenize=False
    )
    assert text == "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]"
    expanded = expand_prompt(policy, [TextSegment(text)], [], tokenizer)
    assert list(expanded.input_ids[:2]) == [BOS, 17]


def test_counts_and_order_fail_closed(policy, tokenizer):
    segments = [TextSegment("<s>[INST]"), MediaSegment("audio", 1), TextSegment("[/INST]")]
    with pytest.raises(PlaceholderError, match="2 audio clip"):
        expand_prompt(policy, segments, slots(1, 1), tokenizer)
    with pytest.raises(PlaceholderError, match="expected"):
        expand_prompt(policy, [*segments[:1], MediaSegment("audio", 2)], slots(1, 1), tokenizer)
    with pytest.raises(PlaceholderError, match="image"):
        expand_prompt(policy, [MediaSegment("image", 1)], slots(1), tokenizer)
    with pytest.raises(PlaceholderError, match="375 per"):
        expand_prompt(
            policy,
            segments,
            [ClipSlot(ordinal=1, tokens=374, frames=3000, sha256="0" * 64)],
            tokenizer,
        )


def test_a_tokenizer_with_other_audio_ids_is_refused(policy):
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    other = build_stand_in_tokenizer({"[AUDIO]": 30, "[BEGIN_AUDIO]": 25})
    with pytest.raises(PolicyError, match=r"\[AUDIO\]"):
        expand_prompt(policy, [TextSegment("x")], slots(1), other)


def test_without_a_tokenizer_only_the_text(policy):
    expanded = expand_prompt(policy, [TextSegment("[INST]x[/INST]")], slots(1), None)
    assert expanded.input_ids == ()
    assert expanded.text.count("[AUDIO]") == 375
