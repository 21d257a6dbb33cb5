"""OpenAI-style chat messages: validation and sentinel flattening for audio requests.

Content is a string or a list of parts: ``text``, ``image_url``, ``input_audio`` and
``audio_url``. Any other part type is refused rather than dropped, so a media part can
never silently disappear. When the request declares audio, each message's content is
flattened to one string in which every media part is a private sentinel (1-based per
kind, counted across all messages); requests without audio are passed through
unchanged, so they render exactly as they would without audiogate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from audiogate.chat.sentinels import SENTINEL_PREFIX, SentinelCodec
from audiogate.errors import PlaceholderError

__all__ = ["AUDIO_PART_TYPES", "ChatRequestError", "FlattenedChat", "flatten_messages"]

AUDIO_PART_TYPES: Final = ("input_audio", "audio_url")
_IMAGE_PART_TYPES: Final = ("image_url",)
_PART_TYPES: Final = ("text", *_IMAGE_PART_TYPES, *AUDIO_PART_TYPES)


class ChatRequestError(PlaceholderError):
    """The messages are not a valid chat request."""


@attrs.frozen(kw_only=True)
class FlattenedChat:
    """Messages ready for the chat template, and the media parts they declared.

    :param messages: what the template renders (flattened only when audio is declared).
    :param audio_parts: the audio content parts in prompt order (for acquisition).
    :param image_parts: the image content parts in prompt order.
    :param codec: the request's sentinel codec, or ``None`` without audio.
    """

    messages: tuple[Mapping[str, Any], ...]
    audio_parts: tuple[Mapping[str, Any], ...]
    image_parts: tuple[Mapping[str, Any], ...]
    codec: SentinelCodec | None

    @property
    def has_audio(self) -> bool:
        """Whether any message declares audio."""
        return bool(self.audio_parts)


def _parts(message: Mapping[str, Any], index: int) -> list[Mapping[str, Any]] | None:
    if not isinstance(message, Mapping):
        raise ChatRequestError(f"message {index} must be an object, got {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ChatRequestError(f"message {index} needs a string 'role'")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        raise ChatRequestError(
            f"message {index} content must be a string or a list of parts, "
            f"got {type(content).__name__}"
        )
    for position, part in enumerate(content):
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise ChatRequestError(
                f"message {index} part {position} must be an object with a 'type'"
            )
        kind = part["type"]
        if kind not in _PART_TYPES:
            raise ChatRequestError(
                f"message {index} part {position} has unsupported type {kind!r}; "
                f"supported: {', '.join(_PART_TYPES)}"
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            raise ChatRequestError(f"message {index} part {position} needs a string 'text'")
    return list(content)


def flatten_messages(
    messages: Sequence[Mapping[str, Any]], *, codec: SentinelCodec | None = None
) -> FlattenedChat:
    """Validate ``messages`` and, if they declare audio, flatten them with sentinels.

    :raises PlaceholderError: malformed messages, an unsupported part type, or (when audio
        is declared) text that contains the reserved sentinel prefix.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise ChatRequestError("messages must be a non-empty list of message objects")
    all_parts = [_parts(message, i) for i, message in enumerate(messages)]
    audio = [p for parts in all_parts if parts for p in parts if p["type"] in AUDIO_PART_TYPES]
    images = [p for parts in all_parts if parts for p in parts if p["type"] in _IMAGE_PART_TYPES]
    if not audio:
        return FlattenedChat(
            messages=tuple(messages), audio_parts=(), image_parts=tuple(images), codec=None
        )

    codec = codec or SentinelCodec.fresh()
    counters = {"audio": 0, "image": 0}
    flattened: list[Mapping[str, Any]] = []
    for index, (message, parts) in enumerate(zip(messages, all_parts, strict=True)):
        content = message.get("content")
        if parts is None:
            text = content or ""
            _guard(text, index)
        else:
            pieces: list[str] = []
            for part in parts:
                kind = part["type"]
                if kind == "text":
                    _guard(part["text"], index)
                    pieces.append(part["text"])
                    continue
                media = "audio" if kind in AUDIO_PART_TYPES else "image"
                counters[media] += 1
                pieces.append(codec.sentinel(media, counters[media]))  # type: ignore[arg-type]
            text = "".join(pieces)
        flattened.append({**message, "content": text})
    return FlattenedChat(
        messages=tuple(flattened), audio_parts=tuple(audio), image_parts=tuple(images), codec=codec
    )


def _guard(text: str, index: int) -> None:
    if SENTINEL_PREFIX in text:
        raise ChatRequestError(
            f"message {index} text contains the reserved media sentinel prefix {SENTINEL_PREFIX!r}"
        )
