"""The prompt text a chat request may carry, bounded before any template or tokenizer
sees it, and the host bytes its rendering and tokenizing may take.

A tokenizer holds about 230 to 360 bytes per token while it encodes (ids, offsets,
token strings, then the Python list), and a text can cost one token per byte (byte
fallback, or a vocabulary without merges): measured on the three example checkpoints,
1 MB of ASCII, CJK or emoji text peaked at 223 to 345 MiB over the baseline. So the
text's bytes are capped before it is rendered, and the work is reserved as
:data:`TEXT_HOST_BYTES_PER_BYTE` bytes per text byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from audiogate.chat.sentinels import SENTINEL_PREFIX
from audiogate.errors import ContextLimitError

__all__ = [
    "INLINE_RENDER_BYTES",
    "MAX_PROMPT_TEXT_BYTES",
    "PROMPT_TEXT_LIMIT",
    "TEXT_HOST_BYTES_PER_BYTE",
    "check_prompt_text",
    "longest_token_bytes",
    "prompt_text_bytes",
    "prompt_text_limit",
    "text_host_bytes",
]

MIB: Final = 1 << 20
#: The absolute cap on a request's prompt text (UTF-8 bytes), whatever the prefill cap.
MAX_PROMPT_TEXT_BYTES: Final = 1 * MIB
#: Host bytes reserved per prompt text byte for rendering and tokenizing it (measured
#: peak: at most 362 per byte, one token per byte; see the module docstring).
TEXT_HOST_BYTES_PER_BYTE: Final = 512
#: An audio request's template renders on the event loop up to this much prompt text
#: (a few tens of microseconds; a hop to the worker costs more and would queue the
#: render behind audio jobs); above it, on the worker like a request without audio.
INLINE_RENDER_BYTES: Final = 64 * 1024
#: The limit name of a refusal (a ``ContextLimitError``, 413 ``context_limit``).
PROMPT_TEXT_LIMIT: Final = "prompt text bytes"
#: What a media part counts: its sentinel in the rendered prompt (prefix, nonce,
#: kind, ordinal, close), rounded up.
_MEDIA_PART_BYTES: Final = 64
_MEDIA_TYPES: Final = frozenset({"input_audio", "audio_url", "image_url"})
assert len(SENTINEL_PREFIX) + 16 + len("_image_") + 9 + 2 <= _MEDIA_PART_BYTES


def longest_token_bytes(tokenizer: Any) -> int | None:
    """The UTF-8 length of the tokenizer's longest vocabulary entry (added tokens
    included): an upper bound on the text bytes one token stands for (a byte-level
    entry's characters are one byte each, ``▁`` three for one space, ``<0xAB>`` six for
    one byte). ``None`` when the tokenizer has no readable vocabulary."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        return None
    try:
        vocab = get_vocab()
    except Exception:
        return None
    longest = max((len(str(entry).encode("utf-8", "surrogatepass")) for entry in vocab), default=0)
    return longest or None


def prompt_text_limit(
    *, max_prefill_tokens: int | None, tokenizer: Any, cap: int = MAX_PROMPT_TEXT_BYTES
) -> int:
    """The prompt text bytes a request may carry: ``cap``, lowered to
    ``max_prefill_tokens`` times the longest token's bytes (more text than that cannot
    fit in the prefill, whatever it tokenizes to)."""
    if cap < 1:
        raise ValueError(f"the prompt text cap must be at least 1 byte, got {cap}")
    longest = longest_token_bytes(tokenizer) if max_prefill_tokens is not None else None
    if max_prefill_tokens is None or longest is None:
        return cap
    return min(cap, max_prefill_tokens * longest)


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def prompt_text_bytes(messages: Any, *, stop_after: int | None = None) -> int:
    """The UTF-8 bytes of every string in chat ``messages`` (keys and values, at any
    depth), a media part counting as its sentinel (its payload never reaches the
    template). Stops counting once past ``stop_after``.

    The walk is iterative (no recursion limit) and looks at each string once; a string
    longer in characters than what is left is past the limit without being encoded.
    """
    total = 0
    stack: list[Any] = [messages]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if stop_after is not None and len(item) > stop_after - total:
                total += len(item)  # at least one byte per character: past the limit
            else:
                total += _text_bytes(item)
        # JSON's dict and list first: the ABC checks cost more than the walk itself.
        elif isinstance(item, dict) or (not isinstance(item, list) and isinstance(item, Mapping)):
            kind = item.get("type")
            if isinstance(kind, str) and kind in _MEDIA_TYPES:  # a list is not hashable
                total += _MEDIA_PART_BYTES
                continue
            for key, value in item.items():
                stack.append(key)
                stack.append(value)
        elif isinstance(item, list) or (
            isinstance(item, Sequence) and not isinstance(item, bytes | bytearray)
        ):
            stack.extend(item)
        elif item is not None:
            total += len(repr(item)) if isinstance(item, int | float | bool) else 0
        if stop_after is not None and total > stop_after:
            return total
    return total


def check_prompt_text(messages: Any, maximum: int) -> int:
    """The prompt text bytes of ``messages`` (:func:`prompt_text_bytes`), refused over
    ``maximum``.

    :raises ContextLimitError: more than ``maximum`` bytes (``actual`` is a lower bound
        when the count stopped early).
    """
    actual = prompt_text_bytes(messages, stop_after=maximum)
    if actual > maximum:
        raise ContextLimitError(PROMPT_TEXT_LIMIT, actual=actual, maximum=maximum)
    return actual


def text_host_bytes(text_bytes: int) -> int:
    """The host bytes reserved for rendering and tokenizing ``text_bytes`` of prompt."""
    return max(0, text_bytes) * TEXT_HOST_BYTES_PER_BYTE
