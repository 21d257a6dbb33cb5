"""toyvoice: an example audiogate family plugin (see ``docs/plugins/tutorial.md``)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
