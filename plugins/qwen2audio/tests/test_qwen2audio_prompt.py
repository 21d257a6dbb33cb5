"""Prompt expansion: chat audio parts and digest references, against ``Qwen2AudioProcessor``.

The chat segments are produced the way the core produces them (``flatten_messages`` →
the checkpoint's template → ``parse_rendered``), and the expanded ids must equal the
processor's ids for the same conversation exactly. Every refusal is exercised.
"""

from __future__ import annotations

import hashlib
import re

import attrs
import numpy as np
import pytest
from qwen2audio_helpers import SPECIAL_TOKENS, make_signal

from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered
from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate_qwen2audio.geometry import whisper_geometry
from audiogate_qwen2audio.policy import AUDIO_TOKEN_INDEX
from audiogate_qwen2audio.prompt import CHAT_TEMPLATE, expand_prompt

pytest.importorskip("transformers")

CODEC = SentinelCodec("0123456789abcdef")
LENGTHS = (16_000, 7_777, 480_000)  # 25, 12 and 750 tokens


def waveform(index: int) -> np.ndarray:
    return make_signal("am", samples=LENGTHS[index], seed=index)


def slot(index: int) -> ClipSlot:
    geometry = whisper_geometry(LENGTHS[index])
    digest = hashlib.sha256(f"clip {index}".encode()).hexdigest()
    return ClipSlot(
        ordinal=index + 1, tokens=geometry.tokens, frames=geometry.valid_frames, sha256=digest
    )


def expand(policy, segments, count, tokenizer):
    result = expand_prompt(policy, segments, [slot(i) for i in range(count)], tokenizer)
    if tokenizer is not None:
        # The invariant: the text form tokenizes to exactly the ids.
        assert tokenizer.encode(result.text, add_special_tokens=False) == list(result.input_ids)
        for (start, stop), index in zip(result.audio_spans, range(count), strict=True):
            assert stop - start == slot(index).tokens
            assert set(result.input_ids[start:stop]) == {151_646}
        assert result.input_ids.count(151_646) == sum(slot(i).tokens for i in range(count))
    return result


def openai_audio(index: int) -> dict:
    return {"type": "audio_url", "audio_url": {"url": f"file:///clip{index}.wav"}}


def template_audio(index: int) -> dict:
    return {"type": "audio", "audio_url": f"file:///clip{index}.wav"}


CONVERSATIONS = {
    "one clip": [
        [{"role": "user", "content": ["AUDIO0", {"type": "text", "text": "What is it?"}]}],
        1,
    ],
    "two clips, two turns, system": [
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "First: "}, "AUDIO0"]},
            {"role": "assistant", "content": "A tone."},
            {
                "role": "user",
                "content": [
                    "AUDIO1",
                    {"type": "text", "text": " and "},
                    "AUDIO2",
                    {"type": "text", "text": "?"},
                ],
            },
        ],
        3,
    ],
}


def _parts(conversation, make):
    return [
        {**m, "content": [make(int(p[5:])) if isinstance(p, str) else p for p in m["content"]]}
        if isinstance(m["content"], list)
        else m
        for m in conversation
    ]


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_chat_ids_equal_the_processors(policy, tokenizer, processor, name):
    conversation, count = CONVERSATIONS[name]
    reference_text = processor.apply_chat_template(
        _parts(conversation, template_audio), add_generation_prompt=True, tokenize=False
    )
    reference = processor(
        text=reference_text,
        audio=[waveform(i) for i in range(count)],
        sampling_rate=16_000,
        return_tensors="np",
    )

    flat = flatten_messages(_parts(conversation, openai_audio), codec=CODEC)
    rendered = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    segments = parse_rendered(rendered, CODEC, expected={"audio": count})
    result = expand(policy, segments, count, tokenizer)
    assert list(result.input_ids) == reference["input_ids"][0].tolist()
    assert [slot(i).tokens for i in range(count)] == [
        (((n - 1) // 2 + 1) - 2) // 2 + 1 for n in reference["feature_attention_mask"].sum(-1)
    ]


def test_a_core_that_swaps_the_template_marker_gives_the_same_ids(policy, tokenizer, processor):
    """Audio parts rendered as parts, each template-printed <|AUDIO|> swapped for a sentinel."""
    conversation, count = CONVERSATIONS["two clips, two turns, system"]
    rendered = processor.apply_chat_template(
        _parts(conversation, template_audio), add_generation_prompt=True, tokenize=False
    )
    pieces = rendered.split("<|AUDIO|>")
    assert len(pieces) == count + 1
    swapped = pieces[0] + "".join(
        CODEC.sentinel("audio", i + 1) + piece for i, piece in enumerate(pieces[1:])
    )
    wrapped = expand(
        policy, parse_rendered(swapped, CODEC, expected={"audio": count}), count, tokenizer
    )
    flat = flatten_messages(_parts(conversation, openai_audio), codec=CODEC)
    bare_text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    bare = expand(
        policy, parse_rendered(bare_text, CODEC, expected={"audio": count}), count, tokenizer
    )
    assert wrapped.input_ids == bare.input_ids
    assert wrapped.text == bare.text


def test_text_only_without_a_tokenizer(policy):
    result = expand(policy, [TextSegment("hi "), MediaSegment("audio", 1)], 1, None)
    assert result.input_ids == ()
    assert result.audio_spans == ()
    assert result.text == "hi Audio 1: <|audio_bos|>" + "<|AUDIO|>" * 25 + "<|audio_eos|>\n"
    assert result.audio_token_id == 151_646


# --- plain prompts: digest references ----------------------------------------------------

TURN = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)


def ref(index: int) -> str:
    return f"[audio:{slot(index).sha256}]"


def test_references_name_the_clips_in_order(policy, tokenizer):
    text = TURN.format(f"say {ref(0)} then {ref(1)} Describe the sounds briefly.")
    result = expand(policy, [TextSegment(text)], 2, tokenizer)
    block = lambda i, n: f"Audio {i}: <|audio_bos|>" + "<|AUDIO|>" * n + "<|audio_eos|>\n"  # noqa: E731
    assert result.text == TURN.format(
        f"say {block(1, 25)} then {block(2, 12)} Describe the sounds briefly."
    )
    assert slot(0).sha256 not in result.text


def test_references_may_span_segments(policy, tokenizer):
    segments = [TextSegment(f"a {ref(0)} b"), TextSegment(f"{ref(1)} c")]
    result = expand(policy, segments, 2, tokenizer)
    assert result.text.startswith("a Audio 1: <|audio_bos|>")
    assert result.text.endswith("\n c")


def test_without_references_the_blocks_open_the_last_user_turn(policy, tokenizer):
    text = (
        "<|im_start|>user\nearlier<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
        "<|im_start|>user\nWhat are these?<|im_end|>\n<|im_start|>assistant\n"
    )
    result = expand(policy, [TextSegment(text)], 2, tokenizer)
    head, tail = text.rsplit("<|im_start|>user\n", 1)
    blocks = "".join(
        f"Audio {i + 1}: <|audio_bos|>" + "<|AUDIO|>" * slot(i).tokens + "<|audio_eos|>\n"
        for i in range(2)
    )
    assert result.text == head + "<|im_start|>user\n" + blocks + tail


def test_without_references_or_a_user_turn_the_blocks_lead(policy, tokenizer):
    result = expand(policy, [TextSegment("Transcribe.")], 1, tokenizer)
    assert result.text.startswith("Audio 1: <|audio_bos|><|AUDIO|>")
    assert result.text.endswith("<|audio_eos|>\nTranscribe.")


def test_the_processor_agrees_with_a_reference_prompt(policy, tokenizer, processor):
    """The template's own rendering of one audio part equals our reference expansion."""
    rendered = processor.apply_chat_template(
        [{"role": "user", "content": [template_audio(0), {"type": "text", "text": "Hi"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    reference = processor(
        text=rendered, audio=[waveform(0)], sampling_rate=16_000, return_tensors="np"
    )
    ours = expand(policy, [TextSegment(TURN.format(f"{ref(0)}Hi"))], 1, tokenizer)
    assert list(ours.input_ids) == reference["input_ids"][0].tolist()


MALFORMED = [
    "[audio:" + "A" * 64 + "]",  # uppercase hex
    "[audio:" + "a" * 63 + "]",  # 63 characters
    "[audio:" + "a" * 65 + "]",  # 65 characters
    "[audio:" + "g" * 64 + "]",  # not hex
    "[AUDIO:" + "a" * 64 + "]",  # the keyword's case
    "[audio: " + "a" * 64 + "]",  # a space
    "[audio:" + "a" * 64,  # no closing bracket
]


@pytest.mark.parametrize("reference", MALFORMED)
def test_malformed_references_refuse_the_prompt(policy, tokenizer, reference):
    with pytest.raises(PlaceholderError, match="malformed audio reference"):
        expand(policy, [TextSegment(f"{ref(0)} and {reference}")], 1, tokenizer)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (lambda: f"{ref(0)} {'[audio:' + 'e' * 64 + ']'}", "names no source"),
        (lambda: f"{ref(0)} {ref(0)}", "repeats"),
        (lambda: f"{ref(1)} {ref(0)}", "must name the sources in order"),
        (lambda: f"{ref(0)} only", "source 2 .* is not referenced"),
        (lambda: f"{ref(0)} {ref(1)} {ref(1)}", "repeats"),
    ],
)
def test_unknown_repeated_reordered_or_missing_references_refuse(policy, tokenizer, text, match):
    with pytest.raises(PlaceholderError, match=match):
        expand(policy, [TextSegment(text())], 2, tokenizer)


def test_two_clips_with_one_digest_cannot_be_referenced(policy, tokenizer):
    twins = [slot(0), attrs.evolve(slot(1), sha256=slot(0).sha256)]
    with pytest.raises(PlaceholderError, match="same source digest"):
        expand_prompt(policy, [TextSegment(f"{ref(0)} {ref(0)}")], twins, tokenizer)
    # Without references there is nothing to tell apart.
    expand_prompt(policy, [TextSegment("Compare.")], twins, tokenizer)


@pytest.mark.parametrize("marker", ["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"])
def test_raw_markers_in_a_plain_prompt_are_refused(policy, tokenizer, marker):
    with pytest.raises(PlaceholderError, match="raw trained audio marker"):
        expand(policy, [TextSegment(f"{ref(0)} {marker}")], 1, tokenizer)
    with pytest.raises(PlaceholderError, match="raw trained audio marker"):
        expand(policy, [TextSegment(f"no references {marker}")], 1, tokenizer)


# --- chat refusals -----------------------------------------------------------------------

BARE = [TextSegment("<|im_start|>user\n"), MediaSegment("audio", 1), TextSegment("Hi<|im_end|>\n")]


@pytest.mark.parametrize(
    ("segments", "count", "match"),
    [
        ([*BARE[:2], TextSegment("<|AUDIO|>")], 1, "raw trained audio marker"),
        ([*BARE[:2], TextSegment("<|audio_eos|> x <|audio_eos|>")], 1, "half wrapped"),
        ([TextSegment("x <|audio_bos|>"), *BARE], 1, r"contains 2 '<\|audio_bos\|>'"),
        (
            [TextSegment("Audio 1: <|audio_bos|>"), MediaSegment("audio", 1), TextSegment("x")],
            1,
            "half wrapped",
        ),
        (
            [
                TextSegment("Audio 2: <|audio_bos|>"),
                MediaSegment("audio", 1),
                TextSegment("<|audio_eos|>"),
            ],
            1,
            "half wrapped",
        ),
        ([*BARE, MediaSegment("image", 1)], 1, "image part"),
        ([MediaSegment("audio", 2)], 2, "where audio part 1 is expected"),
        ([MediaSegment("audio", 1), MediaSegment("audio", 1)], 2, "where audio part 2 is expected"),
        ([MediaSegment("audio", 1), MediaSegment("audio", 2)], 1, "request has 1 audio clip"),
        (BARE, 2, "places 1 audio part"),
        ([*BARE, TextSegment(ref(0))], 1, "audio parts and \\[audio:<sha256>\\] references"),
    ],
)
def test_chat_segments_that_do_not_match_the_clips_are_refused(
    policy, tokenizer, segments, count, match
):
    with pytest.raises(PlaceholderError, match=match):
        expand(policy, segments, count, tokenizer)


def test_clip_slots_must_carry_the_pooled_count_of_their_frames(policy, tokenizer):
    bad = attrs.evolve(slot(0), tokens=26)
    with pytest.raises(PlaceholderError, match="claims 26 tokens for 100 valid frames"):
        expand_prompt(policy, BARE, [bad], tokenizer)
    with pytest.raises(PlaceholderError, match="ordinal"):
        expand_prompt(policy, BARE, [attrs.evolve(slot(0), ordinal=2)], tokenizer)


def test_with_no_clips_text_passes_and_markers_or_references_are_refused(policy, tokenizer):
    # A text-only chat request: the text is kept as is, and nothing may claim audio.
    plain = expand_prompt(policy, [TextSegment("<|im_start|>user\nhi<|im_end|>\n")], [], tokenizer)
    assert plain.audio_spans == ()
    assert AUDIO_TOKEN_INDEX not in plain.input_ids
    assert plain.text == "<|im_start|>user\nhi<|im_end|>\n"
    for text in ("<|AUDIO|> hi", "<|audio_bos|>hi", "hi [audio:" + "ab" * 32 + "]"):
        with pytest.raises(PlaceholderError):
            expand_prompt(policy, [TextSegment(text)], [], tokenizer)


def test_a_tokenizer_with_other_audio_ids_is_a_policy_error(policy):
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    shifted = build_stand_in_tokenizer({**SPECIAL_TOKENS, "<|audio_bos|>": 151_700})
    with pytest.raises(PolicyError, match=re.escape("'<|audio_bos|>' to 151700")):
        expand(policy, BARE, 1, shifted)


def test_the_checkpoint_audio_token_index_is_used(policy):
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    moved = build_stand_in_tokenizer({**SPECIAL_TOKENS, "<|AUDIO|>": 151_800})
    other = attrs.evolve(policy, options={**policy.options, "audio_token_index": 151_800})
    result = expand_prompt(other, BARE, [slot(0)], moved)
    start, stop = result.audio_spans[0]
    assert set(result.input_ids[start:stop]) == {151_800}
    assert result.audio_token_id == 151_800


def test_the_template_matches_transformers_default(tokenizer):
    """Our copy renders like the template transformers ships for Qwen2-Audio."""
    from transformers import Qwen2AudioProcessor

    ours_conv, _ = CONVERSATIONS["two clips, two turns, system"]
    messages = _parts(ours_conv, template_audio)
    default = Qwen2AudioProcessor.default_chat_template.fget(None)  # type: ignore[attr-defined]
    assert tokenizer.chat_template == CHAT_TEMPLATE
    render = lambda t: tokenizer.apply_chat_template(  # noqa: E731
        messages, chat_template=t, add_generation_prompt=True, tokenize=False
    )
    assert render(CHAT_TEMPLATE) == render(default)
