"""The ``audiogate.families`` entry point of Gemma 3n: registers the family and its stages.

Each stage is one function of the module named after it (the file map in
:mod:`audiogate_gemma3n`), imported on the stage's first call
(:func:`audiogate.package_stages`): loading the plugin registers the family without
importing its numerics. The host calls them only for a ``gemma3n`` policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from audiogate import hookimpl, package_stages
from audiogate_gemma3n.policy import spec

__all__ = ["audiogate_register_families"]


@hookimpl
def audiogate_register_families(register: Callable[..., Any]) -> None:
    """Register the ``gemma3n`` family with the stages of its package."""
    register(spec(), stages=package_stages("audiogate_gemma3n"))
