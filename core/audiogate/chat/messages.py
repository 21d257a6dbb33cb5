"""OpenAI-style chat messages: validation and sentinel flattening for audio requests.

Content is a string or a list of parts: ``text``, ``image_url``, ``input_audio``,
``audio_url`` and ``audio_ref`` (a stored source named by digest, docs/sources.md). Any
other part type is refused rather than dropped, so a media part can never silently
disappear. When the request declares audio, every media part becomes a private sentinel
(1-based per kind, counted across all messages); requests without audio are passed
through unchanged, so they render exactly as they would without audiogate (except that
a string-only template gets a message of text parts as its text).

Where the sentinels go depends on the template. One that prints list content part by
part (Gemma 3n's trims each text part; Qwen2-Audio's and Phi-4 MM native's iterate the
parts) gets the list back with each media part turned into a text part holding its
sentinel (``parts=True``), so its text parts render exactly as for the real request.
One that only takes string content (the Phi-4 MM remote-code template) gets each
message flattened to one string. :func:`renders_parts` tells which, by rendering a
probe once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from audiogate.chat.sentinels import SENTINEL_PREFIX, SentinelCodec
from audiogate.errors import ChatRequestError, PlaceholderError, RequestError

__all__ = [
    "AUDIO_PART_TYPES",
    "ChatRequestError",
    "FlattenedChat",
    "flatten_messages",
    "renders_parts",
    "require_unicode",
    "split_references",
]

AUDIO_PART_TYPES: Final = ("input_audio", "audio_url", "audio_ref")
_IMAGE_PART_TYPES: Final = ("image_url",)
_PART_TYPES: Final = ("text", *_IMAGE_PART_TYPES, *AUDIO_PART_TYPES)


@attrs.frozen(kw_only=True)
class FlattenedChat:
    """Messages ready for the chat template, and the media parts they declared.

    :param messages: what the template renders (flattened only when media are declared).
    :param audio_parts: the audio content parts in prompt order (for acquisition).
    :param image_parts: the image content parts in prompt order.
    :param codec: the request's sentinel codec, or ``None`` without media.
    """

    messages: tuple[Mapping[str, Any], ...]
    audio_parts: tuple[Mapping[str, Any], ...]
    image_parts: tuple[Mapping[str, Any], ...]
    codec: SentinelCodec | None

    @property
    def has_audio(self) -> bool:
        """Whether any message declares audio."""
        return bool(self.audio_parts)


def _is_mapping(value: object) -> bool:
    # A JSON object is a dict: checked first, as the ABC check costs more.
    return isinstance(value, (dict, Mapping))


def _parts(message: Mapping[str, Any], index: int) -> list[Mapping[str, Any]] | None:
    if not _is_mapping(message):
        raise ChatRequestError(f"message {index} must be an object, got {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ChatRequestError(f"message {index} needs a string 'role'")
    require_unicode(role, f"message {index} role", error=ChatRequestError)
    content = message.get("content")
    if content is None or isinstance(content, str):
        if content:
            require_unicode(content, f"message {index} content", error=ChatRequestError)
        return None
    if not isinstance(content, list):
        raise ChatRequestError(
            f"message {index} content must be a string or a list of parts, "
            f"got {type(content).__name__}"
        )
    for position, part in enumerate(content):
        if not _is_mapping(part) or not isinstance(part.get("type"), str):
            raise ChatRequestError(
                f"message {index} part {position} must be an object with a 'type'"
            )
        kind = part["type"]
        if kind not in _PART_TYPES:
            raise ChatRequestError(
                f"message {index} part {position} has unsupported type {kind!r}; "
                f"supported: {', '.join(_PART_TYPES)}"
            )
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ChatRequestError(f"message {index} part {position} needs a string 'text'")
            require_unicode(
                part["text"], f"message {index} part {position} text", error=ChatRequestError
            )
    return list(content)


def require_unicode(text: str, where: str, *, error: type[RequestError] = RequestError) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate, as from undecodable bytes):
    tokenizers and templates fail on it with untyped errors.

    :param error: what to raise: a :class:`~audiogate.errors.RequestError` (a plain
        prompt), a :class:`~audiogate.errors.ChatRequestError` for chat messages.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{where} is not valid Unicode: a lone surrogate at offset {exc.start}"
        ) from None


#: Two text parts whose rendering shows whether a template prints list content.
_PROBE_TEXTS: Final = ("audiogate probe one", "audiogate probe two")


def renders_parts(render: Callable[[Sequence[Mapping[str, Any]]], str]) -> bool:
    """Whether ``render`` prints a user message's list of text parts (each of them).

    A template that only takes string content raises on the probe or drops its parts.
    """
    probe = [{"role": "user", "content": [{"type": "text", "text": t} for t in _PROBE_TEXTS]}]
    try:
        rendered = render(probe)
    except Exception:
        return False
    return isinstance(rendered, str) and all(t in rendered for t in _PROBE_TEXTS)


def flatten_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    codec: SentinelCodec | None = None,
    parts: bool = False,
) -> FlattenedChat:
    """Validate ``messages`` and, if they declare media, put sentinels in their media parts.

    Images alone count too: their positions must reach the family's expansion (which
    writes its image placeholder there, or refuses images), never vanish in a template
    that does not know the part type.

    :param parts: keep list content as a list, each media part a text part holding its
        sentinel; otherwise each message's content becomes one string.
    :raises ChatRequestError: malformed messages or an unsupported part type.
    :raises PlaceholderError: (when media are declared) text that contains the reserved
        sentinel prefix.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise ChatRequestError("messages must be a non-empty list of message objects")
    all_parts = [_parts(message, i) for i, message in enumerate(messages)]
    declared = [p for each in all_parts if each for p in each]
    audio = [p for p in declared if p["type"] in AUDIO_PART_TYPES]
    images = [p for p in declared if p["type"] in _IMAGE_PART_TYPES]
    if not audio and not images:
        if not parts:
            # A string-only template: list content of text parts only becomes its text.
            messages = [
                {**m, "content": "".join(p["text"] for p in each)}
                if each is not None and all(p["type"] == "text" for p in each)
                else m
                for m, each in zip(messages, all_parts, strict=True)
            ]
        return FlattenedChat(
            messages=tuple(messages), audio_parts=(), image_parts=tuple(images), codec=None
        )

    codec = codec or SentinelCodec.fresh()
    counters = {"audio": 0, "image": 0}
    flattened: list[Mapping[str, Any]] = []
    for index, (message, content_parts) in enumerate(zip(messages, all_parts, strict=True)):
        if content_parts is None:
            # String content, or none at all (a tool-call turn): the template sees it as
            # the client sent it.
            _guard(message.get("content") or "", index)
            flattened.append(message)
            continue
        pieces: list[dict[str, Any]] = []
        for part in content_parts:
            kind = part["type"]
            if kind == "text":
                _guard(part["text"], index)
                pieces.append(dict(part))
                continue
            media = "audio" if kind in AUDIO_PART_TYPES else "image"
            counters[media] += 1
            sentinel = codec.sentinel(media, counters[media])  # type: ignore[arg-type]
            pieces.append({"type": "text", "text": sentinel})
        content_out: str | list[dict[str, Any]] = (
            pieces if parts else "".join(p["text"] for p in pieces)
        )
        flattened.append({**message, "content": content_out})
    return FlattenedChat(
        messages=tuple(flattened), audio_parts=tuple(audio), image_parts=tuple(images), codec=codec
    )


def _guard(text: str, index: int) -> None:
    # Text claiming a media position, like a family's reserved placeholder literal in a
    # prompt: a placeholder error, not a malformed message.
    if SENTINEL_PREFIX in text:
        raise PlaceholderError(
            f"message {index} text contains the reserved media sentinel prefix {SENTINEL_PREFIX!r}"
        )


def _split_text(text: str, pattern: re.Pattern[str]) -> list[dict[str, Any]] | None:
    pieces: list[dict[str, Any]] = []
    cursor = 0
    for match in pattern.finditer(text):
        if match.start() > cursor:
            pieces.append({"type": "text", "text": text[cursor : match.start()]})
        pieces.append({"type": "audio_ref", "audio_ref": {"sha256": match.group(1)}})
        cursor = match.end()
    if not pieces:
        return None
    if cursor < len(text):
        pieces.append({"type": "text", "text": text[cursor:]})
    return pieces


def split_references(
    messages: Sequence[Mapping[str, Any]], pattern: re.Pattern[str]
) -> list[Mapping[str, Any]]:
    """``messages`` with each text reference to a stored source (``pattern``, the family's
    form such as Qwen2-Audio's ``[audio:<sha256>]``, group 1 the digest) made an
    ``audio_ref`` part at its place, so that references and audio parts are numbered
    together in message order. Messages without a reference are returned as they are;
    anything malformed is left for validation and the family's expansion to refuse.
    """
    out: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            split = _split_text(content, pattern)
            out.append(message if split is None else {**message, "content": split})
            continue
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[Any] = []
        changed = False
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else None
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(text, str):
                split = _split_text(text, pattern)
                if split is not None:
                    parts.extend(split)
                    changed = True
                    continue
            parts.append(part)
        out.append({**message, "content": parts} if changed else message)
    return out
