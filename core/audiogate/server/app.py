"""The reference HTTP server: a Starlette app around one :class:`~audiogate.api.AudioGate`.

``POST /v1/audio/prepare`` takes an OpenAI chat completions request and answers with the
expanded token ids, the per-clip accounting and the collated model inputs (or a typed
error); ``GET /metrics`` is Prometheus text; ``GET /healthz`` reports the worker.

This module builds the app; the concerns live beside it: :mod:`~audiogate.server.requests`
(parsing), :mod:`~audiogate.server.responses` (rendering, streaming, socket tuning),
:mod:`~audiogate.server.budgets` (limits and budgets), :mod:`~audiogate.server.routes`
(the handlers), :mod:`~audiogate.server.errors` (errors as HTTP answers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from audiogate.api import AudioGate
from audiogate.cache import FeatureStore
from audiogate.host import FamilyHost
from audiogate.metrics import AudioMetrics
from audiogate.server.budgets import (
    ABSOLUTE_MAX_AUDIO_REQUEST_BYTES,
    JSON_OVERHEAD_BYTES,
    ServerLimits,
    default_max_body_bytes,
)
from audiogate.server.errors import ServerConfigError, http_error
from audiogate.server.realtime import REALTIME_PATH, RealtimeRoutes
from audiogate.server.responses import limit_unsent
from audiogate.server.routes import AudioServer
from audiogate.server.sources import SOURCES_PATH
from audiogate.server.stream_upload import StreamedUploads, StreamMetrics
from audiogate.server.vllm_render import (
    CHAT_RENDER_PATH,
    COMPLETION_RENDER_PATH,
    VllmRenderConfig,
    VllmRenderRoutes,
    render_config,
)
from audiogate.streaming.deadlines import StreamDeadlines
from audiogate.worker import AudioWorker, WorkerLimits

__all__ = [
    "ABSOLUTE_MAX_AUDIO_REQUEST_BYTES",
    "JSON_OVERHEAD_BYTES",
    "PREPARE_PATH",
    "REALTIME_PATH",
    "SOURCES_PATH",
    "ServerLimits",
    "ServerWorker",
    "check_media_root",
    "create_app",
    "default_max_body_bytes",
]

PREPARE_PATH: Final = "/v1/audio/prepare"


class ServerWorker(AudioWorker):
    """The :class:`~audiogate.worker.AudioWorker` the app runs its requests on (and
    closes on shutdown); named ``audiogate-server`` by default."""

    def __init__(
        self,
        host: FamilyHost,
        *,
        limits: WorkerLimits | None = None,
        metrics: AudioMetrics | None = None,
        name: str = "audiogate-server",
        feature_cache_bytes: int = 0,
        feature_store: FeatureStore | None = None,
    ) -> None:
        super().__init__(
            host,
            limits=limits,
            metrics=metrics,
            name=name,
            feature_cache_bytes=feature_cache_bytes,
            feature_store=feature_store,
        )


class _AudioApp(Starlette):
    """The Starlette app, which tunes each connection's socket for its answers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            limit_unsent(send)
        await super().__call__(scope, receive, send)


def check_media_root(root: Path | None) -> None:
    """Refuse to serve from a media root that is not a directory (checked at start-up, so
    requests never need to be told the server's path).

    :raises ServerConfigError: ``root`` is set but is not an existing directory.
    """
    if root is not None and not os.path.isdir(root):
        raise ServerConfigError(f"the media root (--media-path) {str(root)!r} is not a directory")


def _model_dir(gate: AudioGate) -> Path | None:
    source = Path(gate.policy_source) if gate.policy_source else None
    return source if source is not None and source.is_dir() else None


def create_app(
    gate: AudioGate,
    *,
    limits: ServerLimits | None = None,
    served_model: str | None = None,
    close_worker: bool = True,
    owners: Mapping[str, str] | None = None,
    vllm: VllmRenderConfig | None = None,
    stream_deadlines: StreamDeadlines | None = None,
) -> Starlette:
    """The Starlette app serving ``gate``.

    :param gate: the model's gate; its ``worker`` must be a :class:`ServerWorker` (the
        audio metrics exported on ``/metrics`` are that worker's registry).
    :param limits: body and acquisition limits (defaults derived from the gate's policy).
        Unless the gate's acquisition policy already has a ``shared_bytes`` budget, the
        app gives it one (``limits.max_inflight_acquired_bytes``).
    :param served_model: the ``model`` echoed when a request names none (default: the
        family name).
    :param close_worker: close the worker (and the gate's source store) when the app
        shuts down.
    :param owners: bearer tokens → owners (``--auth-tokens``): every ``/v1/audio/*``
        request then needs a known token; ``None``: one anonymous owner. With a source
        store on the gate, the app serves ``/v1/audio/sources`` (docs/sources.md).
    :param vllm: the context length and feature dtype of vLLM's render endpoints
        (docs/vllm.md), served for a family vLLM serves (default: read from the gate's
        model directory).
    :param stream_deadlines: the idle and minimum-rate timeouts of streamed clips
        (chunked uploads, ``/v1/realtime`` buffers; docs/streaming.md).
    :raises TypeError: the gate has no :class:`ServerWorker`.
    :raises ServerConfigError: the gate's media root is not a directory.
    """
    worker = gate.worker
    if not isinstance(worker, ServerWorker):
        raise TypeError(
            "create_app needs an AudioGate whose worker is a ServerWorker "
            f"(got {type(worker).__name__}); pass worker=ServerWorker(host, ...)"
        )
    check_media_root(gate.acquisition.media_root)
    server = AudioServer(
        gate,
        worker,
        limits=limits or ServerLimits(),
        served_model=served_model or gate.policy.family,
        close_worker=close_worker,
        owners=owners,
    )
    handlers: dict[Any, Callable[[Request, Exception], Any]] = {HTTPException: http_error}
    routes: list[BaseRoute] = [
        Route(PREPARE_PATH, server.prepare, methods=["POST"]),
        Route("/metrics", server.metrics_endpoint, methods=["GET"]),
        Route("/healthz", server.healthz, methods=["GET"]),
    ]
    renders = VllmRenderRoutes.of(server, vllm or render_config(_model_dir(gate)))
    if renders is not None:
        routes += [
            Route(CHAT_RENDER_PATH, renders.chat, methods=["POST"]),
            Route(COMPLETION_RENDER_PATH, renders.completion, methods=["POST"]),
        ]
    deadlines = stream_deadlines or StreamDeadlines()
    streams = StreamMetrics(server.metrics)
    routes.append(
        WebSocketRoute(REALTIME_PATH, RealtimeRoutes(server, deadlines, streams).endpoint)
    )
    if server.sources is not None:
        sources = server.sources
        sources.streamed = StreamedUploads(server, deadlines, streams)
        routes += [
            Route(SOURCES_PATH, sources.add, methods=["POST"]),
            Route(SOURCES_PATH, sources.listing, methods=["GET"]),
            Route(SOURCES_PATH + "/{sha256}", sources.show, methods=["GET"]),
            Route(SOURCES_PATH + "/{sha256}", sources.retire, methods=["DELETE"]),
        ]
    app = _AudioApp(
        routes=routes,
        exception_handlers=handlers,
        lifespan=server.lifespan,
    )
    app.state.audiogate = server
    return app
