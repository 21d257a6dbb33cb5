"""Prompt expansion against the processor's own replacement, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from qwen3omni_helpers import AUDIO_ID, render, run_processor

from audiogate.errors import PlaceholderError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate_qwen3omni.geometry import audio_tokens
from audiogate_qwen3omni.prompt import USER_TURN, expand_prompt

BLOCK = "<|audio_start|><|audio_pad|><|audio_end|>"


def slots(*frames: int) -> list[ClipSlot]:
    return [
        ClipSlot(ordinal=i + 1, tokens=audio_tokens(f), frames=f, sha256=f"{i:064x}")
        for i, f in enumerate(frames)
    ]


@pytest.mark.parametrize("seconds", [[1.0], [0.5, 2.3], [0.0201, 4.0, 1.1]])
def test_plain_rendered_text_gives_the_processors_ids(policy, processor, seconds):
    waveforms = [np.zeros(round(s * 16_000), dtype=np.float32) + 0.01 for s in seconds]
    text = render(processor, len(waveforms))
    reference = run_processor(processor, text, waveforms)
    frames = reference["feature_attention_mask"].sum(-1).tolist()
    expanded = expand_prompt(policy, [TextSegment(text)], slots(*frames), processor.tokenizer)
    assert list(expanded.input_ids) == reference["input_ids"][0].tolist()
    assert [b - a for a, b in expanded.audio_spans] == [audio_tokens(f) for f in frames]
    assert expanded.text.count("<|audio_pad|>") == int((reference["input_ids"] == AUDIO_ID).sum())


def test_bare_and_wrapped_chat_parts_expand_alike(policy, tokenizer):
    clips = slots(100, 250)
    bare = [
        TextSegment(f"{USER_TURN}"),
        MediaSegment("audio", 1),
        MediaSegment("audio", 2),
        TextSegment("Hi<|im_end|>\n"),
    ]
    wrapped = [
        TextSegment(f"{USER_TURN}<|audio_start|>"),
        MediaSegment("audio", 1),
        TextSegment("<|audio_end|><|audio_start|>"),
        MediaSegment("audio", 2),
        TextSegment("<|audio_end|>Hi<|im_end|>\n"),
    ]
    one = expand_prompt(policy, bare, clips, tokenizer)
    two = expand_prompt(policy, wrapped, clips, tokenizer)
    assert one == two
    assert one.text == (
        f"{USER_TURN}<|audio_start|>{'<|audio_pad|>' * 13}<|audio_end|>"
        f"<|audio_start|>{'<|audio_pad|>' * 33}<|audio_end|>Hi<|im_end|>\n"
    )


def test_a_plain_prompt_without_blocks_gets_them_in_the_last_user_turn(policy, tokenizer):
    text = f"<|im_start|>system\nS<|im_end|>\n{USER_TURN}Say it.<|im_end|>\n"
    expanded = expand_prompt(policy, [TextSegment(text)], slots(100), tokenizer)
    assert expanded.text == text.replace(
        USER_TURN, USER_TURN + "<|audio_start|>" + "<|audio_pad|>" * 13 + "<|audio_end|>"
    )


@pytest.mark.parametrize(
    "text",
    [
        f"{BLOCK}",  # one block for two clips
        f"{BLOCK}{BLOCK}{BLOCK}",  # three for two
        f"{BLOCK}<|audio_pad|>{BLOCK}",  # a loose audio token
        f"{BLOCK}<|audio_start|>{BLOCK}",  # a loose delimiter
        f"<|audio_start|><|audio_pad|>{BLOCK}<|audio_end|>",
    ],
)
@pytest.mark.parametrize("with_tokenizer", [True, False])
def test_plain_block_count_and_loose_markers_are_refused(policy, tokenizer, text, with_tokenizer):
    with pytest.raises(PlaceholderError):
        expand_prompt(
            policy, [TextSegment(text)], slots(100, 200), tokenizer if with_tokenizer else None
        )


@pytest.mark.parametrize(
    "segments",
    [
        [TextSegment("a <|audio_pad|> b"), MediaSegment("audio", 1)],
        [TextSegment("<|audio_start|>"), MediaSegment("audio", 1)],  # half wrapped
        [MediaSegment("audio", 1), TextSegment(BLOCK)],
        [MediaSegment("audio", 2)],
        [MediaSegment("image", 1), MediaSegment("audio", 1)],
    ],
)
def test_chat_refusals(policy, tokenizer, segments):
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, segments, slots(100), tokenizer)


def test_a_clip_claiming_another_count_is_refused(policy, tokenizer):
    with pytest.raises(PlaceholderError, match="claims"):
        expand_prompt(
            policy,
            [TextSegment(BLOCK)],
            [ClipSlot(ordinal=1, tokens=14, frames=100, sha256="0" * 64)],
            tokenizer,
        )


def test_a_tokenizer_with_other_ids_is_refused_every_time(policy, tokenizer):
    from audiogate.errors import PolicyError
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    wrong = build_stand_in_tokenizer(
        {"<|audio_pad|>": 1_000, "<|audio_start|>": 1_001, "<|audio_end|>": 1_002}
    )
    for _ in range(2):
        with pytest.raises(PolicyError, match="tokenizer"):
            expand_prompt(policy, [TextSegment(BLOCK)], slots(100), wrong)
    # The right tokenizer still passes after the wrong one was refused.
    assert expand_prompt(policy, [TextSegment(BLOCK)], slots(100), tokenizer).input_ids
