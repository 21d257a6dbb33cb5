"""The ``audiogate.families`` entry point of Gemma 3n: its hook implementations."""

from __future__ import annotations

from collections.abc import Callable

from audiogate import hookimpl
from audiogate.family import FamilySpec
from audiogate_gemma3n.policy import spec

__all__ = ["audiogate_register_families"]


@hookimpl
def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
    """Register the ``gemma3n`` family."""
    register(spec())
