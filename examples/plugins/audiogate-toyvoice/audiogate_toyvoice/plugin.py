"""The ``audiogate.families`` entry point of toyvoice: registers the family and its stages.

Thin on purpose: each stage is the function of the module named after it
(``resample.plan_resample``, ``features.extract_features``...), which
:func:`audiogate.package_stages` finds and imports on its first call. The host calls them
only for a toyvoice policy, so none of them checks whose policy it got. ``parse_policy``
is left to the core default, which applies the key table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from audiogate import hookimpl, package_stages
from audiogate_toyvoice.policy import spec

__all__ = ["audiogate_register_families"]


@hookimpl
def audiogate_register_families(register: Callable[..., Any]) -> None:
    """Register the ``toyvoice`` family with the stages of its package."""
    register(spec(), stages=package_stages("audiogate_toyvoice"))
