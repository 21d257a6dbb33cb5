"""Each error names its own cause: the class a refusal is raised as, and the words of its
message, say what was wrong (not a neighbouring rule's words)."""

from __future__ import annotations

import pytest

from audiogate.api import AudioGate
from audiogate.chat import ChatRequestError, flatten_messages
from audiogate.errors import (
    AudioGateError,
    PlaceholderError,
    RequestError,
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
