"""audiogate: strict, budgeted audio input preprocessing for multimodal LLM servers.

Plugins import :data:`hookimpl`; servers create a host with :func:`create_host`.
"""

from __future__ import annotations

from audiogate._version import __version__
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import AudioGateError
from audiogate.family import FamilySpec
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
    "__version__",
    "create_host",
    "hookimpl",
]
