"""audiogate: strict, budgeted audio input preprocessing for multimodal LLM servers.

Servers and scripts start from :class:`AudioGate` (``from audiogate import AudioGate``;
:mod:`audiogate.api`); code written for a transformers processor from
:class:`AudiogateProcessor` (:mod:`audiogate.integrations.transformers_processor`);
plugins import :data:`hookimpl` and register each family with its stages
(:class:`FamilyStages`, :func:`package_stages`); a host of the installed families is
:func:`create_host`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audiogate._version import __version__
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import AudioGateError
from audiogate.family import FamilySpec, FamilyStages, package_stages
from audiogate.hookspecs import hookimpl
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy

if TYPE_CHECKING:
    from audiogate.api import AudioGate
    from audiogate.integrations.transformers_processor import AudiogateProcessor

__all__ = [
    "AudioGate",
    "AudioGateError",
    "AudioPolicy",
    "AudiogateProcessor",
    "CancelToken",
    "Checkpoint",
    "FamilyHost",
    "FamilySpec",
    "FamilyStages",
    "__version__",
    "create_host",
    "hookimpl",
    "package_stages",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: ``import audiogate`` (a plugin, the CLI's start) stays light.
    if name == "AudioGate":
        from audiogate.api import AudioGate

        return AudioGate
    if name == "AudiogateProcessor":
        from audiogate.integrations.transformers_processor import AudiogateProcessor

        return AudiogateProcessor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
