"""Placeholder rules and expansion (mlxcel ``src/multimodal/phi4mm_prompt.rs``), both variants.

Tokenizers are stand-ins with Phi-4's real special-token ids and the checkpoint's chat
template (``build_stand_in_tokenizer``); the invariants checked everywhere: tokenizing
the text form gives ``input_ids``, each clip's span holds exactly its token count of id
200011 in clip order, images keep their order as one 200010 each.
"""

from __future__ import annotations

import re

import pytest

from audiogate.errors import PlaceholderError
from audiogate.host import FamilyHost
from audiogate.records import ClipSlot, MediaSegment, TextSegment

AUDIO, IMAGE = 200_011, 200_010
USER, END, ASSISTANT = 200_021, 200_020, 200_019


def clips(*tokens: int) -> list[ClipSlot]:
    return [
        ClipSlot(ordinal=i + 1, tokens=t, frames=8 * t, sha256=f"{i:064x}")
        for i, t in enumerate(tokens)
    ]


def _check_invariants(expanded, tokenizer, tokens: list[int]) -> None:
    assert list(tokenizer.encode(expanded.text, add_special_tokens=False)) == list(
        expanded.input_ids
    )
    assert expanded.audio_token_id == AUDIO
    assert len(expanded.audio_spans) == len(tokens)
    previous = 0
    for (start, stop), count in zip(expanded.audio_spans, tokens, strict=True):
        assert start >= previous
        assert stop - start == count
        assert set(expanded.input_ids[start:stop]) == {AUDIO}
        previous = stop
    assert expanded.input_ids.count(AUDIO) == sum(tokens)


def _expand(host: FamilyHost, policy, text: str, tokens: list[int], tokenizer):
    return host.expand_prompt(policy, [TextSegment(text)], clips(*tokens), tokenizer)


def test_numbered_tag_expands_in_place(host: FamilyHost, remote, stand_in_tokenizer) -> None:
    tok = stand_in_tokenizer("remote_code")
    prompt = "<|user|><|audio_1|>Transcribe this.<|end|><|assistant|>"
    expanded = _expand(host, remote, prompt, [3], tok)
    assert expanded.text == (
        "<|user|>" + "<|endoftext11|>" * 3 + "Transcribe this.<|end|><|assistant|>"
    )
    assert expanded.input_ids[:4] == (USER, AUDIO, AUDIO, AUDIO)
    assert expanded.input_ids[-2:] == (END, ASSISTANT)
    assert expanded.audio_spans == ((1, 4),)
    _check_invariants(expanded, tok, [3])


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|user|>\nWhat is said?<|end|>", "<|user|>\n<|audio_1|><|audio_2|>What is said?<|end|>"),
        ("<|user|>What is said?<|end|>", "<|user|><|audio_1|><|audio_2|>What is said?<|end|>"),
        ("What is said?", "<|audio_1|><|audio_2|>What is said?"),
    ],
)
def test_tags_are_synthesised_after_the_user_tag_when_absent(
    host: FamilyHost, remote, stand_in_tokenizer, prompt: str, expected: str
) -> None:
    tok = stand_in_tokenizer("remote_code")
    expanded = _expand(host, remote, prompt, [2, 1], tok)
    synthesised = expected.replace("<|audio_1|>", "<|endoftext11|>" * 2).replace(
        "<|audio_2|>", "<|endoftext11|>"
    )
    assert expanded.text == synthesised  # directly followed by the prompt text
    _check_invariants(expanded, tok, [2, 1])


def test_adjacent_tags_expand_as_distinct_clip_runs(
    host: FamilyHost, remote, stand_in_tokenizer
) -> None:
    tok = stand_in_tokenizer("remote_code")
    expanded = _expand(host, remote, "<|user|><|audio_1|><|audio_2|>Compare.<|end|>", [2, 3], tok)
    assert expanded.audio_spans == ((1, 3), (3, 6))
    _check_invariants(expanded, tok, [2, 3])


def test_images_and_audio_keep_prompt_order(host: FamilyHost, remote, stand_in_tokenizer) -> None:
    tok = stand_in_tokenizer("remote_code")
    prompt = "<|user|><|image_1|>A<|audio_1|>B<|image_2|>C<|audio_2|><|end|>"
    expanded = _expand(host, remote, prompt, [2, 1], tok)
    ids = expanded.input_ids
    media = [i for i in ids if i in (AUDIO, IMAGE)]
    assert media == [IMAGE, AUDIO, AUDIO, IMAGE, AUDIO]
    assert expanded.text.count("<|endoftext10|>") == 2
    _check_invariants(expanded, tok, [2, 1])


BAD_REMOTE = [
    ("duplicate", "<|audio_1|><|audio_1|>", 2, "exactly once in order"),
    ("reordered", "<|audio_2|><|audio_1|>", 2, "exactly once in order"),
    ("missing", "<|audio_1|>", 2, "exactly once in order"),
    ("skipped", "<|audio_1|><|audio_3|>", 2, "exactly once in order"),
    ("extra", "<|audio_1|><|audio_2|><|audio_3|>", 2, "exactly once in order"),
    ("no clip", "<|audio_1|>", 0, "exactly once"),
    ("bare", "<|audio|>", 1, "expected <|audio_N|>"),
    ("zero", "<|audio_0|>", 1, "expected <|audio_N|>"),
    ("leading zero", "<|audio_01|>", 1, "expected <|audio_N|>"),
    ("unterminated", "<|audio_1", 1, "expected <|audio_N|>"),
    ("lookalike", "<|audio_bos|>", 1, "expected <|audio_N|>"),
    ("reserved audio", "<|endoftext11|>", 1, "reserved"),
    ("reserved image", "hi <|endoftext10|>", 1, "reserved"),
    ("image skipped", "<|image_2|><|audio_1|>", 1, "image placeholders must appear"),
    ("bare image", "<|image|><|audio_1|>", 1, "expected <|image_N|>"),
]


@pytest.mark.parametrize(
    ("case", "prompt", "count", "message"), BAD_REMOTE, ids=[c[0] for c in BAD_REMOTE]
)
def test_remote_code_fails_closed(
    host: FamilyHost, remote, stand_in_tokenizer, case, prompt, count, message
) -> None:
    tok = stand_in_tokenizer("remote_code")
    with pytest.raises(PlaceholderError) as info:
        _expand(host, remote, "<|user|>" + prompt + "<|end|>", [1] * count, tok)
    assert message in str(info.value)


def test_clip_ordinals_and_sizes_are_checked(host: FamilyHost, remote) -> None:
    bad = [ClipSlot(ordinal=2, tokens=1, frames=8, sha256="0" * 64)]
    with pytest.raises(PlaceholderError, match="ordinal 2, expected 1"):
        host.expand_prompt(remote, [TextSegment("x")], bad, None)
    empty = [ClipSlot(ordinal=1, tokens=0, frames=0, sha256="0" * 64)]
    with pytest.raises(PlaceholderError, match="0 audio tokens"):
        host.expand_prompt(remote, [TextSegment("x")], empty, None)


def test_without_a_tokenizer_only_the_text_form_is_returned(host: FamilyHost, remote) -> None:
    expanded = host.expand_prompt(remote, [TextSegment("<|user|>hi")], clips(2), None)
    assert expanded.text == "<|user|><|endoftext11|><|endoftext11|>hi"
    assert expanded.input_ids == ()
    assert expanded.audio_spans == ()


def test_a_tokenizer_of_the_other_variant_is_refused(
    host: FamilyHost, remote, stand_in_tokenizer
) -> None:
    with pytest.raises(PlaceholderError, match="does not belong to this checkpoint"):
        _expand(host, remote, "<|user|>hi", [1], stand_in_tokenizer("native"))


_MARKER = re.compile(r"⟦(audio|image):(\d+)⟧")


def _chat_segments(tokenizer, messages) -> list:
    """What the core hands over for a chat: the rendered template split at media markers."""
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    segments: list = []
    cursor = 0
    for match in _MARKER.finditer(rendered):
        if match.start() > cursor:
            segments.append(TextSegment(rendered[cursor : match.start()]))
        segments.append(MediaSegment(match.group(1), int(match.group(2))))  # type: ignore[arg-type]
        cursor = match.end()
    if cursor < len(rendered):
        segments.append(TextSegment(rendered[cursor:]))
    return segments


def test_chat_template_path_expands_media_positions(
    host: FamilyHost, remote, stand_in_tokenizer
) -> None:
    tok = stand_in_tokenizer("remote_code")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "⟦audio:1⟧ then ⟦image:1⟧ and ⟦audio:2⟧: compare."},
        {"role": "assistant", "content": "OK."},
        {"role": "user", "content": "And ⟦audio:3⟧?"},
    ]
    segments = _chat_segments(tok, messages)
    expanded = host.expand_prompt(remote, segments, clips(2, 3, 1), tok)
    assert expanded.text.startswith("<|system|>Be brief.<|end|><|user|><|endoftext11|>")
    assert expanded.text.endswith("<|end|><|assistant|>")
    media = [i for i in expanded.input_ids if i in (AUDIO, IMAGE)]
    assert media == [AUDIO] * 2 + [IMAGE] + [AUDIO] * 3 + [AUDIO]
    _check_invariants(expanded, tok, [2, 3, 1])


def test_chat_path_never_synthesises_and_refuses_typed_duplicates(
    host: FamilyHost, remote, stand_in_tokenizer
) -> None:
    tok = stand_in_tokenizer("remote_code")
    segments = _chat_segments(tok, [{"role": "user", "content": "⟦audio:1⟧ <|audio_1|>"}])
    with pytest.raises(PlaceholderError, match="exactly once"):
        host.expand_prompt(remote, segments, clips(1), tok)
    only_image = _chat_segments(tok, [{"role": "user", "content": "⟦image:1⟧ hi"}])
    with pytest.raises(PlaceholderError, match=r"found \[\] for 1 audio item"):
        host.expand_prompt(remote, only_image, clips(1), tok)
    reordered = _chat_segments(tok, [{"role": "user", "content": "⟦audio:2⟧⟦audio:1⟧"}])
    with pytest.raises(PlaceholderError, match="position 2 is out of sequence; expected 1"):
        host.expand_prompt(remote, reordered, clips(1, 1), tok)
    injected = _chat_segments(tok, [{"role": "user", "content": "⟦audio:1⟧<|endoftext11|>"}])
    with pytest.raises(PlaceholderError, match="reserved"):
        host.expand_prompt(remote, injected, clips(1), tok)


def test_native_variant_uses_the_unnumbered_placeholder(
    host: FamilyHost, native, stand_in_tokenizer
) -> None:
    tok = stand_in_tokenizer("native")
    expanded = _expand(host, native, "<|user|><|audio|>A<|audio|>B<|end|>", [2, 3], tok)
    assert expanded.text == "<|user|>" + "<|audio|>" * 2 + "A" + "<|audio|>" * 3 + "B<|end|>"
    _check_invariants(expanded, tok, [2, 3])
    synthesised = _expand(host, native, "<|user|>What is said?<|end|>", [2], tok)
    assert synthesised.text == "<|user|><|audio|><|audio|>What is said?<|end|>"
    _check_invariants(synthesised, tok, [2])


def test_native_chat_template_path(host: FamilyHost, native, stand_in_tokenizer) -> None:
    tok = stand_in_tokenizer("native")
    messages = [{"role": "user", "content": "⟦image:1⟧⟦audio:1⟧What is happening?"}]
    expanded = host.expand_prompt(native, _chat_segments(tok, messages), clips(4), tok)
    assert expanded.text == "<|user|><|image|>" + "<|audio|>" * 4 + (
        "What is happening?<|end|><|assistant|>"
    )
    assert expanded.input_ids[:6] == (USER, IMAGE, AUDIO, AUDIO, AUDIO, AUDIO)
    _check_invariants(expanded, tok, [4])


def test_native_chat_positions_must_be_in_sequence(
    host: FamilyHost, native, stand_in_tokenizer
) -> None:
    tok = stand_in_tokenizer("native")
    segments = [TextSegment("<|user|>"), MediaSegment("audio", 2), MediaSegment("audio", 1)]
    with pytest.raises(PlaceholderError, match="out of sequence"):
        host.expand_prompt(native, segments, clips(1, 2), tok)


@pytest.mark.parametrize(
    ("prompt", "count", "message"),
    [
        ("<|audio_1|>", 1, "expects <|audio|>"),
        ("<|audio|><|audio|>", 1, "2 <|audio|> placeholders but 1"),
        ("<|audio|>", 2, "1 <|audio|> placeholders but 2"),
        ("<|endoftext11|>", 1, "reserved"),
    ],
)
def test_native_variant_fails_closed(
    host: FamilyHost, native, stand_in_tokenizer, prompt, count, message
) -> None:
    with pytest.raises(PlaceholderError) as info:
        _expand(host, native, "<|user|>" + prompt, [1] * count, stand_in_tokenizer("native"))
    assert message in str(info.value)
