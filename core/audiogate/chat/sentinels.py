"""Private numbered media sentinels that keep part positions through template rendering.

When a request declares audio, every media part becomes a sentinel such as
``<|audiogate_media_3f9c…_audio_2|>``: one-based per kind, counted across all messages,
carrying a per-request random nonce. User text cannot forge one: any text containing
the common prefix is refused before rendering, and the nonce is unguessable. After the
checkpoint's chat template has rendered the messages, :func:`parse_rendered` splits the
text back into text and media segments and fails closed on anything unexpected.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Final, Literal

import attrs

from audiogate.errors import PlaceholderError
from audiogate.records import MediaSegment, PromptSegment, TextSegment

__all__ = ["SENTINEL_PREFIX", "SentinelCodec", "parse_rendered"]

#: Every sentinel starts with this; user text containing it is refused.
SENTINEL_PREFIX: Final = "<|audiogate_media_"
_CLOSE: Final = "|>"
_NONCE_HEX: Final = 16
#: Ordinals are 1-based and short (a request has at most a few thousand parts).
_BODY: Final = re.compile(r"([0-9a-f]+)_([a-z]+)_([1-9][0-9]{0,8})")

MediaKind = Literal["audio", "image"]


@attrs.frozen
class SentinelCodec:
    """Makes and recognises one request's sentinels.

    :param nonce: lowercase hex, fresh per request (:meth:`fresh`).
    """

    nonce: str

    @classmethod
    def fresh(cls) -> SentinelCodec:
        """A codec with a new random nonce."""
        return cls(secrets.token_hex(_NONCE_HEX // 2))

    def sentinel(self, kind: MediaKind, ordinal: int) -> str:
        """The sentinel of the ``ordinal``-th (one-based) media part of ``kind``."""
        return f"{SENTINEL_PREFIX}{self.nonce}_{kind}_{ordinal}{_CLOSE}"


def parse_rendered(
    text: str, codec: SentinelCodec, *, expected: Mapping[str, int]
) -> list[PromptSegment]:
    """Split rendered prompt text into text and media segments.

    Every sentinel must appear exactly once, per kind in order 1, 2, 3, …, with this
    request's nonce, and every declared media part must appear.

    :param text: the chat template's output.
    :param codec: the request's codec.
    :param expected: declared part counts per kind (``{"audio": 2, "image": 1}``).
    :returns: segments in prompt order (adjacent text is never split).
    :raises PlaceholderError: a malformed, foreign, duplicated, reordered, skipped or
        missing sentinel.
    """
    segments: list[PromptSegment] = []
    next_ordinal = {"audio": 1, "image": 1}
    position = 0
    while True:
        start = text.find(SENTINEL_PREFIX, position)
        if start < 0:
            break
        if start > position:
            segments.append(TextSegment(text[position:start]))
        body_start = start + len(SENTINEL_PREFIX)
        end = text.find(_CLOSE, body_start)
        if end < 0:
            raise PlaceholderError("malformed media sentinel: missing |>")
        body = text[body_start:end]
        match = _BODY.fullmatch(body)
        if match is None:
            raise PlaceholderError(f"malformed media sentinel {text[start : end + 2]!r}")
        nonce, kind, ordinal_text = match.groups()
        if nonce != codec.nonce:
            raise PlaceholderError(
                "a media sentinel with a foreign nonce appeared in the rendered prompt "
                "(the chat template or the request injected it)"
            )
        if kind not in next_ordinal:
            raise PlaceholderError(
                f"media sentinel of unknown kind {kind!r}; expected audio or image"
            )
        ordinal = int(ordinal_text)
        if ordinal != next_ordinal[kind]:
            raise PlaceholderError(
                f"{kind} sentinel {ordinal} is out of sequence; expected {next_ordinal[kind]}"
            )
        next_ordinal[kind] += 1
        segments.append(MediaSegment(kind, ordinal))  # type: ignore[arg-type]
        position = end + len(_CLOSE)
    if position < len(text):
        segments.append(TextSegment(text[position:]))
    for kind, count in expected.items():
        found = next_ordinal.get(kind, 1) - 1
        if found != count:
            raise PlaceholderError(
                f"the rendered prompt contains {found} {kind} sentinel(s) but the request "
                f"declares {count} {kind} part(s); the chat template dropped or duplicated "
                f"media"
            )
    return segments
