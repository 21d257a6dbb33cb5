"""The reference HTTP server (Starlette on uvicorn): ``audiogate serve``.

See docs/server.md for the endpoints, the request and response schema and the error
mapping. The names below need the server dependencies (starlette, uvicorn), imported
when first used: the CLI reads :mod:`audiogate.server.options` for every command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from audiogate.server.app import PREPARE_PATH, ServerWorker, create_app
    from audiogate.server.budgets import ServerLimits
    from audiogate.server.encoding import decode_features
    from audiogate.server.options import ServeOptions
    from audiogate.server.run import ServerThread, build_app, serve

__all__ = [
    "PREPARE_PATH",
    "ServeOptions",
    "ServerLimits",
    "ServerThread",
    "ServerWorker",
    "build_app",
    "create_app",
    "decode_features",
    "serve",
]

_HOMES = {
    "PREPARE_PATH": "audiogate.server.app",
    "ServerLimits": "audiogate.server.budgets",
    "ServerWorker": "audiogate.server.app",
    "create_app": "audiogate.server.app",
    "decode_features": "audiogate.server.encoding",
    "ServeOptions": "audiogate.server.options",
    "ServerThread": "audiogate.server.run",
    "build_app": "audiogate.server.run",
    "serve": "audiogate.server.run",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
