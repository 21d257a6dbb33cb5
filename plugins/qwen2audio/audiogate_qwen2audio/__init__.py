"""Qwen2-Audio family plugin for audiogate."""

from __future__ import annotations

from audiogate_qwen2audio._version import __version__

__all__ = ["__version__"]
