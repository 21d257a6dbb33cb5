"""Streaming preparation: a clip's features computed while its audio arrives (docs/streaming.md)."""

from __future__ import annotations

__all__: list[str] = []
