"""Each error names its own cause: the class a refusal is raised as, and the words of its
message, say what was wrong (not a neighbouring rule's words)."""

from __future__ import annotations

import pytest

from audiogate.api import AudioGate
from audiogate.chat import ChatRequestError, flatten_messages
from audiogate.chat.prompt_text import PROMPT_TEXT_LIMIT
from audiogate.errors import (
    AudioGateError,
    ContextLimitError,
    DecodeError,
    LimitError,
    MemoryLimitError,
    PlaceholderError,
    RequestError,
    SourceQuotaError,
    SourceStoreMissingError,
)
from audiogate.testing.audio import tone, wav_bytes


def test_a_chat_request_error_is_a_request_error_not_a_placeholder_error() -> None:
    assert issubclass(ChatRequestError, RequestError)
    assert issubclass(ChatRequestError, AudioGateError)
    assert not issubclass(ChatRequestError, PlaceholderError)


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        ([], "messages must be a non-empty list"),
        (["hi"], "message 0 must be an object"),
        ([{"role": "user", "content": [{"type": "input_video"}]}], "input_video"),
    ],
)
def test_malformed_messages_are_invalid_chat_messages(messages: list, words: str) -> None:
    with pytest.raises(ChatRequestError) as info:
        flatten_messages(messages, parts=True)
    message = str(info.value)
    assert message.startswith("invalid chat messages: ")
    assert words in message
    assert "placeholder" not in message


def test_add_source_without_a_store_says_there_is_no_store() -> None:
    gate = AudioGate.from_family("gemma3n")
    data = wav_bytes(tone(seconds=0.5), rate_hz=16_000)
    with pytest.raises(SourceStoreMissingError) as info:
        gate.add_source(data)
    message = str(info.value)
    assert message.startswith("no source store: add_source needs a source store")
    assert "audiogate serve --store DIR" in message
    assert "placeholder" not in message
    assert info.value.code == "no_source_store"
    assert not isinstance(info.value, PlaceholderError)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            LimitError("request body bytes", actual=5, maximum=3),
            "request body bytes limit exceeded: actual 5, maximum 3",
        ),
        (
            MemoryLimitError("in-flight request body bytes", actual=5, maximum=3),
            "in-flight request body bytes limit exceeded: actual 5, maximum 3",
        ),
        (
            ContextLimitError("prefill tokens", actual=5, maximum=3),
            "prefill tokens limit exceeded: actual 5, maximum 3",
        ),
        (
            ContextLimitError(PROMPT_TEXT_LIMIT, actual=5, maximum=3),
            "prompt text bytes limit exceeded: actual 5, maximum 3",
        ),
        (
            SourceQuotaError("sources per owner", actual=5, maximum=3),
            "sources per owner quota exceeded: actual 5, maximum 3",
        ),
        # The audio's own limits still say so.
        (
            LimitError("clip count", actual=5, maximum=3),
            "audio clip count limit exceeded: actual 5, maximum 3",
        ),
    ],
)
def test_a_limit_that_is_not_the_audios_does_not_say_audio(error: LimitError, message: str) -> None:
    assert str(error) == message


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("buffer_not_contiguous", "audio clip 1 cannot be read as bytes: x"),
        ("geometry_mismatch", "audio clip 1 does not match the geometry given for it: x"),
        ("riff_size_mismatch", "audio clip 1 is corrupt: x"),
    ],
)
def test_a_decode_refusal_that_is_not_corruption_does_not_say_corrupt(
    code: str, message: str
) -> None:
    assert str(DecodeError("x", clip_index=0, code=code)) == message


def test_a_non_contiguous_buffer_is_refused_as_unreadable_not_corrupt() -> None:
    import numpy as np

    from audiogate.decode import inspect

    data = memoryview(np.zeros(64, dtype=np.uint8))[::2]
    with pytest.raises(DecodeError) as info:
        inspect(data, clip_index=0)
    assert info.value.code == "buffer_not_contiguous"
    assert "corrupt" not in str(info.value)


def test_a_policy_error_without_a_file_does_not_say_in_audio_policy() -> None:
    from audiogate.errors import PolicyError

    assert str(PolicyError("unknown audio family 'x'")) == (
        "invalid audio policy: unknown audio family 'x'"
    )
    assert str(PolicyError("x", json_path="/a")) == "invalid audio policy at /a: x"
    assert str(PolicyError("x", file="config.json", json_path="/a", value=3)) == (
        "invalid audio policy in config.json at /a: x (got 3)"
    )
