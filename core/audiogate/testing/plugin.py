"""The ``pytest11`` entry point: fixtures and the family contract suite (see docs)."""

from __future__ import annotations

__all__: list[str] = []
