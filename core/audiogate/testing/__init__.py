"""Test support for audiogate and its family plugins (also a pytest plugin, ``pytest11``)."""

from __future__ import annotations

__all__: list[str] = []
