"""JSON parsing that refuses a key given twice in one object.

Parsers disagree on such a document: Python's keeps the last value, others the first.
Requests (a filter in front of the server may have read the other value) and checkpoint
config files (the first value may be the stricter limit its author meant) are refused
instead of resolved.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DuplicateKeyError", "loads_unique_keys"]


#: Longest key quoted whole in a message (a key is as long as its client makes it).
_SHOWN_KEY_CHARACTERS = 100


class DuplicateKeyError(ValueError):
    """A JSON object gives ``key`` twice; ``shown`` is the key quoted for a message."""

    def __init__(self, key: str) -> None:
        self.key = key
        cut = key[:_SHOWN_KEY_CHARACTERS]
        self.shown = repr(cut) if cut == key else f"{cut!r}… ({len(key)} characters)"
        super().__init__(f"the key {self.shown} is given twice in one JSON object")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return document


def loads_unique_keys(text: str) -> Any:
    """``json.loads(text)``, refusing a key given twice in one object.

    :raises DuplicateKeyError: the first key found twice (a ``ValueError``).
    :raises json.JSONDecodeError, ValueError, RecursionError: as ``json.loads``.
    """
    return json.loads(text, object_pairs_hook=_unique_keys)
