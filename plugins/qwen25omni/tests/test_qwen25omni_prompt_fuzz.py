"""Generated prompts: expansion places exactly each clip's tokens, in order, or fails
closed with a PlaceholderError; nothing else escapes."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from audiogate.errors import PlaceholderError
from audiogate.records import ClipSlot, MediaSegment, PromptSegment, TextSegment
from audiogate_qwen25omni.geometry import audio_tokens
from audiogate_qwen25omni.prompt import USER_TURN, expand_prompt

AUDIO, BOS, EOS = "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"
PIECES = st.sampled_from(
    ["Hi ", " there", "\n", USER_TURN, "<|im_end|>\n", AUDIO, BOS, EOS, BOS + AUDIO + EOS, "[x]"]
)


def slots(count: int) -> list[ClipSlot]:
    return [
        ClipSlot(
            ordinal=i + 1,
            tokens=audio_tokens(100 + 37 * i),
            frames=100 + 37 * i,
            sha256=f"{i:064x}",
        )
        for i in range(count)
    ]


def check(expanded, clips, tokenizer) -> None:
    assert [b - a for a, b in expanded.audio_spans] == [c.tokens for c in clips]
    audio_id = expanded.audio_token_id
    positions = {i for a, b in expanded.audio_spans for i in range(a, b)}
    assert {i for i, t in enumerate(expanded.input_ids) if t == audio_id} == positions
    assert expanded.text.count(AUDIO) == sum(c.tokens for c in clips)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pieces=st.lists(PIECES, max_size=8), count=st.integers(0, 3))
def test_plain_prompts(policy, tokenizer, pieces, count):
    clips = slots(count)
    try:
        expanded = expand_prompt(policy, [TextSegment("".join(pieces))], clips, tokenizer)
    except PlaceholderError:
        return
    check(expanded, clips, tokenizer)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    layout=st.lists(st.one_of(PIECES, st.integers(1, 3)), max_size=8),
    count=st.integers(0, 3),
)
def test_chat_prompts(policy, tokenizer, layout, count):
    clips = slots(count)
    segments: list[PromptSegment] = [
        MediaSegment("audio", item) if isinstance(item, int) else TextSegment(item)
        for item in layout
    ]
    assume(any(isinstance(s, MediaSegment) for s in segments))
    try:
        expanded = expand_prompt(policy, segments, clips, tokenizer)
    except PlaceholderError:
        return
    check(expanded, clips, tokenizer)
