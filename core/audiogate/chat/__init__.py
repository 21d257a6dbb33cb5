"""Chat requests: sentinel flattening, template rendering and fail-closed parsing."""

from __future__ import annotations

from audiogate.chat.messages import (
    AUDIO_PART_TYPES,
    ChatRequestError,
    FlattenedChat,
    flatten_messages,
    renders_parts,
    require_unicode,
    split_references,
)
from audiogate.chat.prompt_text import MAX_PROMPT_TEXT_BYTES, PROMPT_TEXT_LIMIT
from audiogate.chat.sentinels import SENTINEL_PREFIX, SentinelCodec, parse_rendered

__all__ = [
    "AUDIO_PART_TYPES",
    "MAX_PROMPT_TEXT_BYTES",
    "PROMPT_TEXT_LIMIT",
    "SENTINEL_PREFIX",
    "ChatRequestError",
    "FlattenedChat",
    "SentinelCodec",
    "flatten_messages",
    "parse_rendered",
    "renders_parts",
    "require_unicode",
    "split_references",
]
