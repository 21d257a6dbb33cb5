"""Phi-4 Multimodal family plugin for audiogate."""

from __future__ import annotations

from audiogate_phi4mm._version import __version__

__all__ = ["__version__"]
