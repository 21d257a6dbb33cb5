"""audiogate: strict, budgeted audio input preprocessing for multimodal LLM servers.

Plugins import :data:`hookimpl` and register each family with its stages
(:class:`FamilyStages`, :func:`package_stages`); servers create a host with
:func:`create_host`.
"""

from __future__ import annotations

from audiogate._version import __version__
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import AudioGateError
from audiogate.family import FamilySpec, FamilyStages, package_stages
from audiogate.hookspecs import hookimpl
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy

__all__ = [
    "AudioGateError",
    "AudioPolicy",
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
