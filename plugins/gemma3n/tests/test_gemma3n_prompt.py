"""Gemma 3n prompt expansion: the chat template path, plain prompts, ids and refusals."""

from __future__ import annotations

import attrs
import pytest
from gemma3n_helpers import SPECIAL_TOKENS, segments_from_rendered

from audiogate.errors import PlaceholderError
from audiogate.host import FamilyHost
from audiogate.records import ClipSlot, MediaSegment, TextSegment, check_span_count
from audiogate_gemma3n.prompt import AUDIO_TOKEN, audio_block

BOA, EOA, AUDIO = 256_000, 262_272, 262_273
IMAGE, END_OF_TURN = 262_145, 106


def slots(n: int, tokens: int = 188) -> list[ClipSlot]:
    return [ClipSlot(ordinal=i + 1, tokens=tokens, frames=97, sha256=f"{i:064x}") for i in range(n)]


def check_invariants(expanded, tokenizer, clips):
    assert tuple(tokenizer.encode(expanded.text, add_special_tokens=False)) == expanded.input_ids
    assert check_span_count(expanded.audio_spans, [c.tokens for c in clips])
    ids = expanded.input_ids
    assert expanded.audio_token_id == AUDIO
    assert ids.count(AUDIO) == sum(c.tokens for c in clips)
    previous = -1
    for start, stop in expanded.audio_spans:
        assert start > previous  # clip order
        assert set(ids[start:stop]) == {AUDIO}
        assert ids[start - 1] == BOA
        assert ids[stop] == EOA
        previous = stop


def render(tokenizer, content, system: str | None = None):
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_block_text_is_the_processors_full_audio_sequence():
    block = audio_block()
    assert block == "\n\n<start_of_audio>" + "<audio_soft_token>" * 188 + "<end_of_audio>\n\n"


def test_chat_path_with_audio_and_images_in_order(host: FamilyHost, policy, tokenizer):
    content = [
        {"type": "audio"},
        {"type": "image"},
        {"type": "text", "text": "Compare the two clips."},
        {"type": "audio"},
        {"type": "image"},
    ]
    rendered = render(tokenizer, content, system="Be brief.")
    segments = segments_from_rendered(rendered)
    assert [s for s in segments if isinstance(s, MediaSegment)] == [
        MediaSegment("audio", 1), MediaSegment("image", 1),
        MediaSegment("audio", 2), MediaSegment("image", 2),
    ]  # fmt: skip
    clips = slots(2)
    expanded = host.expand_prompt(policy, segments, clips, tokenizer)
    check_invariants(expanded, tokenizer, clips)
    assert expanded.text == rendered.replace(AUDIO_TOKEN, audio_block())
    ids = expanded.input_ids
    assert ids[0] == SPECIAL_TOKENS["<bos>"]
    images = [i for i, t in enumerate(ids) if t == IMAGE]
    (_a1, b1), (a2, b2) = expanded.audio_spans
    assert len(images) == 2
    assert b1 < images[0] < a2 < b2 < images[1] < ids.index(END_OF_TURN)


def test_text_only_form_without_a_tokenizer(policy):
    segments = [TextSegment("<start_of_turn>user\n"), MediaSegment("audio", 1),
                TextSegment("Hi<end_of_turn>\n")]  # fmt: skip
    from audiogate_gemma3n.prompt import expand_prompt

    expanded = expand_prompt(policy, segments, slots(1), None)
    assert expanded.text == "<start_of_turn>user\n" + audio_block() + "Hi<end_of_turn>\n"
    assert expanded.input_ids == ()
    assert expanded.audio_spans == ()
    assert expanded.audio_token_id == AUDIO


def test_plain_prompt_placeholders_expand_in_order(host, policy, tokenizer):
    # mlxcel's test: [10, A, 20, A, 106] -> each A becomes wrapper + BOA + A*n + EOA + wrapper.
    text = "<start_of_turn>user\nx<audio_soft_token>y<audio_soft_token><end_of_turn>\n"
    clips = slots(2)
    expanded = host.expand_prompt(policy, [TextSegment(text)], clips, tokenizer)
    check_invariants(expanded, tokenizer, clips)
    assert expanded.text == (
        "<start_of_turn>user\nx" + audio_block() + "y" + audio_block() + "<end_of_turn>\n"
    )


def test_without_placeholders_blocks_go_before_the_last_user_turns_end(host, policy, tokenizer):
    text = (
        "<bos><start_of_turn>user\nFirst<end_of_turn>\n<start_of_turn>model\nOk<end_of_turn>\n"
        "<start_of_turn>user\nTranscribe both<end_of_turn>\n<start_of_turn>model\n"
    )
    clips = slots(2)
    expanded = host.expand_prompt(policy, [TextSegment(text)], clips, tokenizer)
    check_invariants(expanded, tokenizer, clips)
    anchor = text.rindex("Transcribe both") + len("Transcribe both")
    assert expanded.text == text[:anchor] + audio_block() * 2 + text[anchor:]
    _, stop = expanded.audio_spans[-1]
    assert expanded.input_ids[stop + 1 :][:3] == tuple(
        tokenizer.encode("\n\n<end_of_turn>", add_special_tokens=False)
    )


@pytest.mark.parametrize(
    ("text", "anchor"),
    [
        ("Describe this.", len("Describe this.")),  # no turn markers: the whole text is the user's
        ("ab<end_of_turn>cd", 2),  # mlxcel's test [1, 2, 106, 3]
        ("<start_of_turn>user\nopen turn", len("<start_of_turn>user\nopen turn")),
    ],
)
def test_insertion_point_without_placeholders(policy, text, anchor):
    from audiogate_gemma3n.prompt import expand_prompt

    expanded = expand_prompt(policy, [TextSegment(text)], slots(1), None)
    assert expanded.text == text[:anchor] + audio_block() + text[anchor:]


@pytest.mark.parametrize("placeholders", [1, 3])
def test_plain_placeholder_count_mismatch_is_refused(host, policy, tokenizer, placeholders):
    text = "<start_of_turn>user\n" + "<audio_soft_token>" * placeholders + "<end_of_turn>\n"
    with pytest.raises(PlaceholderError, match=f"placeholder mismatch.*{placeholders}.*2 audio"):
        host.expand_prompt(policy, [TextSegment(text)], slots(2), tokenizer)


def test_placeholders_without_clips_are_refused(policy):
    from audiogate_gemma3n.prompt import expand_prompt

    with pytest.raises(PlaceholderError, match="placeholder mismatch"):
        expand_prompt(policy, [TextSegment("a<audio_soft_token>")], [], None)


@pytest.mark.parametrize("literal", ["<start_of_audio>", "<end_of_audio>"])
def test_plain_prompt_refuses_block_literals(policy, literal):
    from audiogate_gemma3n.prompt import expand_prompt

    with pytest.raises(PlaceholderError, match="reserved literal"):
        expand_prompt(policy, [TextSegment(f"hi {literal}")], slots(1), None)


@pytest.mark.parametrize(
    "literal",
    ["<audio_soft_token>", "<start_of_audio>", "<end_of_audio>", "<image_soft_token>",
     "<start_of_image>", "<end_of_image>"],
)  # fmt: skip
def test_chat_path_refuses_injected_media_literals(host, policy, tokenizer, literal):
    # User text rendered by the template: the literal can only have been typed.
    segments = [
        TextSegment("<bos><start_of_turn>user\n"),
        MediaSegment("audio", 1),
        TextSegment(f"say {literal}<end_of_turn>\n<start_of_turn>model\n"),
    ]
    with pytest.raises(PlaceholderError, match="reserved literal"):
        host.expand_prompt(policy, segments, slots(1), tokenizer)


def test_chat_path_count_and_order_are_checked(host, policy, tokenizer):
    rendered = render(tokenizer, [{"type": "audio"}, {"type": "audio"}])
    segments = segments_from_rendered(rendered)
    with pytest.raises(PlaceholderError, match="placeholder mismatch: the prompt has 2 audio"):
        host.expand_prompt(policy, segments, slots(1), tokenizer)
    with pytest.raises(PlaceholderError, match="placeholder mismatch: the prompt has 2 audio"):
        host.expand_prompt(policy, segments, slots(3), tokenizer)
    swapped = [MediaSegment("audio", 2) if s == MediaSegment("audio", 1) else
               MediaSegment("audio", 1) if s == MediaSegment("audio", 2) else s
               for s in segments]  # fmt: skip
    with pytest.raises(PlaceholderError, match="audio position 1 refers to audio 2"):
        host.expand_prompt(policy, swapped, slots(2), tokenizer)
    images = [TextSegment("a"), MediaSegment("image", 2), MediaSegment("audio", 1)]
    with pytest.raises(PlaceholderError, match="image position 1 refers to image 2"):
        host.expand_prompt(policy, images, slots(1), tokenizer)


def test_clips_must_have_188_tokens_and_ordinals_in_order(policy):
    from audiogate_gemma3n.prompt import expand_prompt

    with pytest.raises(PlaceholderError, match=r"clip 0 has 187 audio tokens.*exactly 188"):
        expand_prompt(policy, [TextSegment("x")], slots(1, tokens=187), None)
    wrong = [ClipSlot(ordinal=2, tokens=188, frames=1, sha256="0" * 64)]
    with pytest.raises(PlaceholderError, match="clip 0 maps to ordinal 2, expected 1"):
        expand_prompt(policy, [TextSegment("x")], wrong, None)


def test_config_json_token_ids_are_used_and_checked_against_the_tokenizer(host, policy):
    pytest.importorskip("transformers")
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    moved = attrs.evolve(
        policy,
        options={**policy.options, "boa_token_id": 300_000, "eoa_token_id": 300_001,
                 "audio_token_id": 300_002},
    )  # fmt: skip
    with_moved = build_stand_in_tokenizer(
        {**SPECIAL_TOKENS, "<start_of_audio>": 300_000, "<end_of_audio>": 300_001,
         "<audio_soft_token>": 300_002},
    )  # fmt: skip
    text = [TextSegment("<start_of_turn>user\n<audio_soft_token><end_of_turn>\n")]
    expanded = host.expand_prompt(moved, text, slots(1), with_moved)
    assert expanded.audio_token_id == 300_002
    ((start, stop),) = expanded.audio_spans
    assert set(expanded.input_ids[start:stop]) == {300_002}
    assert expanded.input_ids[start - 1] == 300_000
    assert expanded.input_ids[stop] == 300_001
    real = build_stand_in_tokenizer(SPECIAL_TOKENS)
    with pytest.raises(PlaceholderError, match=r"maps '<start_of_audio>' to id 256000.*300000"):
        host.expand_prompt(moved, text, slots(1), real)


def test_the_stand_in_tokenizer_keeps_gemmas_low_special_ids(tokenizer):
    for token, expected in SPECIAL_TOKENS.items():
        assert tokenizer.convert_tokens_to_ids(token) == expected
    ids = tokenizer.encode("<bos>hi\n\n<end_of_turn>", add_special_tokens=False)
    assert ids[0] == 2
    assert ids[-1] == 106
    assert not set(ids[1:-1]) & set(SPECIAL_TOKENS.values())
    assert tokenizer.decode(ids[1:-1]) == "hi\n\n"


class _Merging:
    """A tokenizer that does not keep ``<audio_soft_token>`` atomic: a run of more than one
    gains an extra id after it (what a non-special spelling merged by BPE could do)."""

    def __init__(self, inner):
        self.inner = inner

    def convert_tokens_to_ids(self, token):
        return self.inner.convert_tokens_to_ids(token)

    def encode(self, text, add_special_tokens=False):
        out = []
        ids = self.inner.encode(text, add_special_tokens=add_special_tokens)
        for index, token in enumerate(ids):
            out.append(token)
            run_ends = token == AUDIO and (index + 1 == len(ids) or ids[index + 1] != AUDIO)
            if run_ends and index > 0 and ids[index - 1] == AUDIO:
                out.append(7)
        return out


@pytest.mark.parametrize("clips", [1, 2])
def test_spliced_ids_are_what_encoding_the_whole_text_gives(host, policy, tokenizer, clips):
    from audiogate_gemma3n.prompt import _encode

    rendered = render(tokenizer, [{"type": "audio"}, {"type": "text", "text": " a b "}] * clips)
    expanded = host.expand_prompt(policy, segments_from_rendered(rendered), slots(clips), tokenizer)
    assert expanded.input_ids == tuple(_encode(tokenizer, expanded.text))
    check_invariants(expanded, tokenizer, slots(clips))


def test_a_tokenizer_that_merges_soft_tokens_gets_the_whole_text_encoded(host, policy, tokenizer):
    # Spliced, its ids would look right; encoded whole, the extra id shows and is refused.
    merging = _Merging(tokenizer)
    text = [TextSegment("<start_of_turn>user\n<audio_soft_token><end_of_turn>\n")]
    with pytest.raises(PlaceholderError, match="does not hold its block"):
        host.expand_prompt(policy, text, slots(1), merging)
