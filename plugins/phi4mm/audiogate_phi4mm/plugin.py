"""The ``audiogate.families`` entry point of Phi-4 Multimodal: its hook implementations."""

from __future__ import annotations

from collections.abc import Callable

from audiogate import hookimpl
from audiogate.family import FamilySpec
from audiogate_phi4mm.policy import spec

__all__ = ["audiogate_register_families"]


@hookimpl
def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
    """Register the ``phi4mm`` family."""
    register(spec())
