"""Content-digest source references in plain prompts: ``[audio:<64 lowercase hex>]``.

The Qwen2-Audio serving guide (docs/provenance.md): "Replace SHA256 with the displayed
64 lowercase hexadecimal characters. Several audio references can appear in one prompt,
in order. [...] Missing, malformed, retired or inaccessible sources refuse the complete prompt."
Anything that starts like a reference (``[audio:`` in any letter case) must be a
well-formed one; the digest is the SHA-256 of the clip's encoded source bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs

from audiogate.errors import PlaceholderError
from audiogate.records import ClipSlot

__all__ = ["DIGEST_RE", "REFERENCE_RE", "Reference", "find_references", "match_references"]

DIGEST_RE: Final = re.compile(r"[0-9a-f]{64}")
REFERENCE_RE: Final = re.compile(r"\[audio:([0-9a-f]{64})\]")
_ATTEMPT_RE: Final = re.compile(r"\[\s*audio\s*:", re.IGNORECASE)
_SHOWN: Final = 80


@attrs.frozen
class Reference:
    """One well-formed reference: ``text[start:stop]`` in segment ``segment``."""

    segment: int
    start: int
    stop: int
    digest: str


def _excerpt(text: str, start: int) -> str:
    piece = text[start : start + _SHOWN]
    return repr(piece + ("..." if len(text) > start + _SHOWN else ""))


def find_references(texts: Sequence[str]) -> list[Reference]:
    """Every reference in ``texts`` (prompt segments, in order).

    :raises PlaceholderError: something that starts like a reference is not exactly
        ``[audio:`` + 64 lowercase hex digits + ``]``.
    """
    found: list[Reference] = []
    for segment, text in enumerate(texts):
        for attempt in _ATTEMPT_RE.finditer(text):
            match = REFERENCE_RE.match(text, attempt.start())
            if match is None:
                raise PlaceholderError(
                    f"malformed audio reference at {_excerpt(text, attempt.start())}; a "
                    f"reference is '[audio:' + the source's SHA-256 as 64 lowercase "
                    f"hexadecimal characters + ']'"
                )
            found.append(Reference(segment, match.start(), match.end(), match.group(1)))
    return found


def match_references(references: Sequence[Reference], clips: Sequence[ClipSlot]) -> None:
    """Check that ``references`` name every clip once, in clip order.

    :raises PlaceholderError: an unknown, repeated, out-of-order or missing reference, or
        two clips with the same digest (a digest could not tell them apart).
    """
    owner: dict[str, int] = {}
    for index, clip in enumerate(clips):
        if not DIGEST_RE.fullmatch(clip.sha256):
            raise PlaceholderError(
                f"audio clip {clip.ordinal} has no valid source digest ({clip.sha256!r}); "
                f"references need 64 lowercase hexadecimal characters"
            )
        if clip.sha256 in owner:
            raise PlaceholderError(
                f"audio clips {owner[clip.sha256] + 1} and {index + 1} have the same source "
                f"digest {clip.sha256}; a digest reference cannot tell them apart"
            )
        owner[clip.sha256] = index
    seen: set[str] = set()
    for position, reference in enumerate(references):
        digest = reference.digest
        if digest not in owner:
            raise PlaceholderError(
                f"audio reference {position + 1} [audio:{digest}] names no source of this "
                f"request; known sources: {', '.join(c.sha256 for c in clips) or 'none'}"
            )
        if digest in seen:
            raise PlaceholderError(
                f"audio reference {position + 1} repeats [audio:{digest}]; each source is "
                f"referenced once"
            )
        seen.add(digest)
        if owner[digest] != position:
            raise PlaceholderError(
                f"audio reference {position + 1} names source {owner[digest] + 1} "
                f"[audio:{digest}]; references must name the sources in order, so "
                f"position {position + 1} must be [audio:{clips[position].sha256}]"
            )
    if len(references) != len(clips):
        missing = clips[len(references)]
        raise PlaceholderError(
            f"the prompt references {len(references)} of {len(clips)} audio sources; "
            f"source {missing.ordinal} [audio:{missing.sha256}] is not referenced"
        )
