"""The reference HTTP server (Starlette on uvicorn): ``audiogate serve``.

See docs/server.md for the endpoints, the request and response schema and the error
mapping. Importing this package needs the server dependencies (starlette, uvicorn).
"""

from __future__ import annotations

from audiogate.server.app import PREPARE_PATH, ServerLimits, ServerWorker, create_app
from audiogate.server.encoding import decode_features
from audiogate.server.run import ServeOptions, ServerThread, build_app, serve

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
