"""The ``audiogate.families`` entry point of Phi-4 Multimodal: registers the family and
its stages.

Each stage is one function of the module named after it (the file map in
:mod:`audiogate_phi4mm`), imported on the stage's first call
(:func:`audiogate.package_stages`): loading the plugin registers the family without
importing its numerics. Policy parsing is the family's own
(:func:`audiogate_phi4mm.policy.parse_policy`: the keys, then the remote-code or native
variant). The host calls them only for a ``phi4mm`` policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from audiogate import hookimpl, package_stages
from audiogate_phi4mm.policy import parse_policy, spec

__all__ = ["audiogate_register_families"]


@hookimpl
def audiogate_register_families(register: Callable[..., Any]) -> None:
    """Register the ``phi4mm`` family with the stages of its package and its policy parser."""
    register(spec(), stages=package_stages("audiogate_phi4mm", parse_policy=parse_policy))
