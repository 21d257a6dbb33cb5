"""The shared run-of-audio-tokens expansion (``audiogate.expansion``) on a toy family.

The families that use it (Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni, GLM-ASR, Audio Flamingo
3) check it against their reference processors; these tests pin the pieces' own rules.
"""

from __future__ import annotations

import pytest

from audiogate.errors import PlaceholderError, PolicyError
from audiogate.expansion import (
    AudioMarkers,
    assemble,
    check_clips,
    delimited_chat_pieces,
    insert_after_last,
    split_at_placeholders,
)
from audiogate.records import ClipSlot, MediaSegment, TextSegment

pytest.importorskip("transformers")

MARKERS = AudioMarkers(audio="<A>", audio_id=300, bos="<B>", eos="<E>", bos_id=301, eos_id=302)
RAW = "the prompt holds {marker}"


def clips(*tokens: int) -> list[ClipSlot]:
    return [
        ClipSlot(ordinal=k + 1, tokens=n, frames=2 * n, sha256="a" * 64)
        for k, n in enumerate(tokens)
    ]


@pytest.fixture(scope="module")
def tokenizer():
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    return build_stand_in_tokenizer({"<A>": 300, "<B>": 301, "<E>": 302})


def chat(segments, slots):
    return delimited_chat_pieces(segments, slots, MARKERS, family="Toy", raw_message=RAW)


def test_markers_reserve_only_the_tokens_a_family_has():
    assert MARKERS.reserved == ("<A>", "<B>", "<E>")
    assert MARKERS.block == "<B><A><E>"
    bare = AudioMarkers(audio="<A>", audio_id=300)
    assert bare.reserved == ("<A>",)
    assert bare.token_ids == (("<A>", 300),)


def test_clip_counts_come_from_the_geometry():
    check_clips(clips(2, 3), audio_tokens=lambda f: f // 2, max_frames=10, pooling="{expected}")
    with pytest.raises(PlaceholderError, match="claims 3 tokens for 6 valid frames; toy 2"):
        check_clips(clips(3), audio_tokens=lambda f: 2, max_frames=10, pooling="toy {expected}")
    with pytest.raises(PlaceholderError, match="toy None"):
        check_clips(clips(6), audio_tokens=lambda f: 6, max_frames=10, pooling="toy {expected}")
    reordered = [ClipSlot(ordinal=2, tokens=1, frames=2, sha256="a" * 64)]
    with pytest.raises(PlaceholderError, match="ordinal 2"):
        check_clips(reordered, audio_tokens=lambda f: 1, max_frames=10, pooling="{expected}")


def test_bare_and_wrapped_chat_parts_give_one_text(tokenizer):
    slots = clips(2, 3)
    bare = chat(
        [TextSegment("u:"), MediaSegment("audio", 1), TextSegment("x"), MediaSegment("audio", 2)],
        slots,
    )
    wrapped = chat(
        [
            TextSegment("u:<B>"),
            MediaSegment("audio", 1),
            TextSegment("<E>x<B>"),
            MediaSegment("audio", 2),
            TextSegment("<E>"),
        ],
        slots,
    )
    one, other = assemble(bare, slots, MARKERS, tokenizer), assemble(wrapped, slots, MARKERS, None)
    assert one.text == other.text == "u:<B><A><A><E>x<B><A><A><A><E>"
    assert one.input_ids == tuple(tokenizer.encode(one.text, add_special_tokens=False))
    assert one.audio_spans == ((3, 5), (8, 11))


@pytest.mark.parametrize(
    ("segments", "count", "match"),
    [
        ([TextSegment("<B>"), MediaSegment("audio", 1)], 1, "half wrapped"),
        ([MediaSegment("audio", 1), TextSegment("<E>")], 1, "half wrapped"),
        ([MediaSegment("audio", 1), TextSegment("<A>")], 1, "the prompt holds '<A>'"),
        ([MediaSegment("audio", 1), TextSegment("<E>!")], 1, "half wrapped"),
        ([MediaSegment("audio", 1), TextSegment(" <B>")], 1, "contains 2 '<B>'"),
        ([MediaSegment("audio", 2)], 2, "where audio part 1 is expected"),
        ([MediaSegment("image", 1)], 1, "Toy plugin prepares audio only"),
        ([MediaSegment("audio", 1)], 2, "places 1 audio part"),
        ([TextSegment("<E>")], 0, "contains 1 '<E>'"),
    ],
)
def test_chat_parts_that_do_not_fit_are_refused(segments, count, match):
    with pytest.raises(PlaceholderError, match=match):
        chat(segments, clips(*[1] * count))


def test_placeholders_take_the_clips_in_order():
    slots = clips(1, 2)
    pieces = split_at_placeholders(["a<A>b", "<A>c"], "<A>", slots, lambda k: ("[", k, "]"))
    assert assemble(pieces or [], slots, MARKERS, None).text == "a[<A>]b[<A><A>]c"
    assert split_at_placeholders(["none"], "<A>", slots, lambda k: (k,)) is None
    with pytest.raises(PlaceholderError, match="1 '<A>' placeholder"):
        split_at_placeholders(["<A>"], "<A>", slots, lambda k: (k,))


def test_blocks_go_after_the_last_anchor_or_first():
    assert insert_after_last(["u>a", "u>b"], "u>", [0]) == ["u>a", "u>", 0, "b"]
    assert insert_after_last(["ab"], "u>", [0, 1]) == [0, 1, "ab"]


def test_a_tokenizer_with_other_ids_or_stray_audio_ids_is_refused(tokenizer):
    other = AudioMarkers(audio="<A>", audio_id=299)
    with pytest.raises(PolicyError, match="needs the single id 299"):
        assemble(["x", 0], clips(1), other, tokenizer)
    with pytest.raises(PlaceholderError, match="outside the audio positions"):
        assemble(["<A>", 0], clips(1), MARKERS, tokenizer)


def test_policy_options_name_other_markers():
    options = {"audio_token": "<X>", "audio_token_index": 7, "audio_eos_token_id": 9}
    configured = MARKERS.configured(options, audio_id="audio_token_index")
    assert (configured.audio, configured.audio_id, configured.eos_id) == ("<X>", 7, 9)
    assert (configured.bos, configured.bos_id, configured.eos) == ("<B>", 301, "<E>")
    # A family without delimiters does not gain them from options.
    bare = AudioMarkers(audio="<A>", audio_id=300).configured({"audio_bos_token": "<B>"})
    assert bare.reserved == ("<A>",)


def test_a_written_block_per_clip_or_the_blocks_after_the_anchor():
    from audiogate.expansion import written_block_pieces

    slots = clips(1, 2)
    written = written_block_pieces(
        ["u>a<B><A><E>b<B><A><E>"], slots, MARKERS, anchor="u>", raw_message=RAW
    )
    assert assemble(written, slots, MARKERS, None).text == "u>a<B><A><E>b<B><A><A><E>"
    inserted = written_block_pieces(["u>a"], slots, MARKERS, anchor="u>", raw_message=RAW)
    assert assemble(inserted, slots, MARKERS, None).text == "u><B><A><E><B><A><A><E>a"
    with pytest.raises(PlaceholderError, match="the prompt holds '<E>'"):
        written_block_pieces(["<B><A><E><E>"], slots[:1], MARKERS, anchor="u>", raw_message=RAW)
