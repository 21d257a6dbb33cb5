"""Sentinel flattening and fail-closed parsing of rendered prompts."""

from __future__ import annotations

import pytest

from audiogate.chat import (
    SENTINEL_PREFIX,
    ChatRequestError,
    SentinelCodec,
    flatten_messages,
    parse_rendered,
    renders_parts,
)
from audiogate.errors import PlaceholderError
from audiogate.records import MediaSegment, TextSegment

CODEC = SentinelCodec("00ff00ff00ff00ff")
A1, A2, I1 = CODEC.sentinel("audio", 1), CODEC.sentinel("audio", 2), CODEC.sentinel("image", 1)


def audio(n: int = 0) -> dict:
    return {"type": "input_audio", "input_audio": {"data": f"clip{n}", "format": "wav"}}


def test_sentinels_are_numbered_per_kind_across_messages_in_part_order() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "alpha "},
                audio(1),
                {"type": "text", "text": " beta "},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "audio_url", "audio_url": {"url": "y"}},
                {"type": "text", "text": "gamma"},
            ],
        },
    ]
    flat = flatten_messages(messages, codec=CODEC)
    assert flat.has_audio
    assert [m["content"] for m in flat.messages] == [
        "be brief",
        f"alpha {A1} beta ",
        "ok",
        f"{I1}{A2}gamma",
    ]
    assert [p["type"] for p in flat.audio_parts] == ["input_audio", "audio_url"]
    assert len(flat.image_parts) == 1
    assert flat.messages[1]["role"] == "user"


def test_parts_mode_keeps_list_content_with_each_media_part_a_sentinel_text_part() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "alpha ", "extra": 1},
                audio(1),
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": " beta "},
            ],
        },
    ]
    flat = flatten_messages(messages, codec=CODEC, parts=True)
    assert flat.messages[0]["content"] == "be brief"
    assert flat.messages[1]["content"] == [
        {"type": "text", "text": "alpha ", "extra": 1},
        {"type": "text", "text": A1},
        {"type": "text", "text": I1},
        {"type": "text", "text": " beta "},
    ]
    assert [p["type"] for p in flat.audio_parts] == ["input_audio"]
    # The caller's messages are not modified.
    assert messages[1]["content"][1]["type"] == "input_audio"


def test_renders_parts_probes_whether_a_renderer_prints_list_content() -> None:
    def by_parts(messages) -> str:
        return "".join(p["text"] for m in messages for p in m["content"])

    def strings_only(messages) -> str:
        return "".join("<|user|>" + m["content"] for m in messages)

    def first_part_only(messages) -> str:
        return messages[0]["content"][0]["text"]

    assert renders_parts(by_parts)
    assert not renders_parts(strings_only)  # str + list raises
    assert not renders_parts(first_part_only)


def test_requests_without_audio_are_passed_through_unchanged() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": f"quoting {SENTINEL_PREFIX}x|>"}]}
    ]
    flat = flatten_messages(messages, parts=True)
    assert not flat.has_audio
    assert flat.messages == tuple(messages)
    assert flat.codec is None
    # A string-only template gets the text of a message made of text parts.
    joined = flatten_messages(messages, parts=False)
    assert joined.messages == ({"role": "user", "content": f"quoting {SENTINEL_PREFIX}x|>"},)


@pytest.mark.parametrize(
    "content",
    [
        f"look {SENTINEL_PREFIX}00ff00ff00ff00ff_audio_1|>",
        [{"type": "text", "text": f"{SENTINEL_PREFIX}"}, audio()],
    ],
)
def test_user_text_with_the_sentinel_prefix_is_refused_when_audio_is_declared(content) -> None:
    messages = [{"role": "user", "content": content}, {"role": "user", "content": [audio()]}]
    with pytest.raises(PlaceholderError, match="reserved media sentinel"):
        flatten_messages(messages, codec=CODEC)


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"content": "x"}], "role"),
        ([{"role": "user", "content": 3}], "string or a list"),
        ([{"role": "user", "content": [{"type": "video_url"}]}], "unsupported type 'video_url'"),
        ([{"role": "user", "content": [{"text": "x"}]}], "'type'"),
        ([{"role": "user", "content": [{"type": "text", "text": 3}]}], "string 'text'"),
        # A lone surrogate (undecodable bytes) fails tokenizers with an untyped error.
        ([{"role": "user", "content": "hi \ud800"}], "content is not valid Unicode"),
        ([{"role": "user", "content": [{"type": "text", "text": "\udcff"}]}], "part 0 text"),
        (
            [
                {"role": "user", "content": [{"type": "text", "text": "a"}, audio()]},
                {"role": "\ud800"},
            ],
            "message 1 role",
        ),
    ],
)
def test_malformed_messages_fail_closed(messages, match: str) -> None:
    with pytest.raises(ChatRequestError, match=match):
        flatten_messages(messages)


def test_parser_preserves_text_and_exact_part_order() -> None:
    text = f"alpha{A1}beta{I1}{A2}gamma"
    segments = parse_rendered(text, CODEC, expected={"audio": 2, "image": 1})
    assert segments == [
        TextSegment("alpha"),
        MediaSegment("audio", 1),
        TextSegment("beta"),
        MediaSegment("image", 1),
        MediaSegment("audio", 2),
        TextSegment("gamma"),
    ]


@pytest.mark.parametrize(
    ("text", "expected", "match"),
    [
        (f"{A1}{A1}", {"audio": 1, "image": 0}, "out of sequence; expected 2"),
        (f"{A2}{A1}", {"audio": 2, "image": 0}, "out of sequence; expected 1"),
        (f"{I1}", {"audio": 1, "image": 1}, "contains 0 audio"),
        ("nothing", {"audio": 1, "image": 0}, "contains 0 audio"),
        (f"{A1}{A2}", {"audio": 1, "image": 0}, "contains 2 audio"),
        (f"{SENTINEL_PREFIX}00ff00ff00ff00ff_audio_1", {"audio": 1, "image": 0}, "missing \\|>"),
        (f"{SENTINEL_PREFIX}00ff00ff00ff00ff_audio|>", {"audio": 1, "image": 0}, "malformed"),
        (f"{SENTINEL_PREFIX}00ff00ff00ff00ff_audio_x|>", {"audio": 1, "image": 0}, "malformed"),
        (f"{SENTINEL_PREFIX}00ff00ff00ff00ff_user_text_1|>", {"audio": 1, "image": 0}, "malformed"),
        (f"{SENTINEL_PREFIX}00ff00ff00ff00ff_video_1|>", {"audio": 1, "image": 0}, "unknown kind"),
        (f"{SENTINEL_PREFIX}1234123412341234_audio_1|>", {"audio": 1, "image": 0}, "foreign nonce"),
    ],
)
def test_parser_fails_closed(text: str, expected: dict, match: str) -> None:
    with pytest.raises(PlaceholderError, match=match):
        parse_rendered(text, CODEC, expected=expected)


def test_fresh_codecs_have_distinct_unguessable_nonces() -> None:
    nonces = {SentinelCodec.fresh().nonce for _ in range(100)}
    assert len(nonces) == 100
    assert all(len(n) == 16 for n in nonces)


@pytest.mark.parametrize("ordinal", ["1" * 5000, "0", "01", "1234567890"])
def test_a_sentinel_ordinal_that_no_request_has_is_malformed(ordinal: str) -> None:
    text = f"{SENTINEL_PREFIX}{CODEC.nonce}_audio_{ordinal}|>"
    with pytest.raises(PlaceholderError):
        parse_rendered(text, CODEC, expected={"audio": 1})


def test_a_message_without_content_reaches_the_template_unchanged() -> None:
    # A tool-call turn has content None; templates test for it (``is none``).
    messages = [
        {"role": "user", "content": [audio(), {"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
    ]
    flat = flatten_messages(messages, codec=CODEC)
    assert flat.messages[1] == messages[1]
    assert flat.messages[1]["content"] is None
