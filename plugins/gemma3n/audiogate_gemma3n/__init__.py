"""Gemma 3n family plugin for audiogate."""

from __future__ import annotations

from audiogate_gemma3n._version import __version__

__all__ = ["__version__"]
