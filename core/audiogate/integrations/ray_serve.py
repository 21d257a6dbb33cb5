"""The reference server on Ray Serve: the same Starlette app ``audiogate serve`` runs
(endpoints, limits, metrics, errors), built once per replica.

::

    from ray import serve
    from audiogate.integrations.ray_serve import build_application
    from audiogate.server import ServeOptions

    serve.run(build_application(ServeOptions(model_dir="models/gemma-3n-e4b-it"),
                                num_replicas=2), route_prefix="/")

Each replica calls :func:`audiogate.server.build_app` in its own process (its own
worker, budgets and metrics registry), so ``/healthz`` and ``/metrics`` answer for the
replica that served them. Ray Serve's proxy, not uvicorn's connection guard, owns the
connections: ``--header-timeout``, ``--max-connections`` and ``--min-body-rate`` do not
apply (the body caps, the body and acquisition budgets and every request limit do).

Ray is the ``ray`` extra, imported when first used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from audiogate.errors import MissingExtraError
from audiogate.extras import require_module
from audiogate.server.options import ServeOptions
from audiogate.server.stop_signals import wait_for_a_stop_signal

__all__ = [
    "DEFAULT_NAME",
    "RayServeUnavailableError",
    "build_application",
    "require_serve",
    "serve_on_ray",
]

#: The deployment's (and application's) name.
DEFAULT_NAME: Final = "audiogate"


#: Ray Serve's name for :class:`~audiogate.errors.MissingExtraError` (the same class).
RayServeUnavailableError = MissingExtraError


def require_serve() -> Any:
    """The ``ray.serve`` module.

    :raises MissingExtraError: Ray Serve is not installed (names the ``ray`` extra).
    """
    return require_module("ray.serve", purpose="audiogate serve --engine ray (Ray Serve)")


class _AudioGateReplica:
    """One replica: the reference app for ``options``, built when the replica starts."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options

    def __serve_build_asgi_app__(self) -> Any:
        from audiogate.server.run import build_app

        return _BytesBodies(build_app(self.options))


class _BytesBodies:
    """The app, with every body it sends as ``bytes``: the reference server streams
    ``memoryview`` slices of its answers (uvicorn writes them as they are), and Ray
    Serve pickles each ASGI message on its way to the proxy, which a memoryview cannot
    be. Other attributes are the app's (Ray adds an exception handler to it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_bytes(message: Any) -> None:
            body = message.get("body")
            if body is not None and not isinstance(body, bytes):
                message = {**message, "body": bytes(body)}
            await send(message)

        await self.app(scope, receive, send_bytes)


def build_application(
    options: ServeOptions,
    *,
    num_replicas: int | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    max_ongoing_requests: int | None = None,
    name: str = DEFAULT_NAME,
) -> Any:
    """The bound Ray Serve application serving ``options`` (pass it to ``serve.run``).

    :param options: what ``audiogate serve`` takes (``host``/``port`` are unused: Ray
        Serve's proxy listens; see :func:`serve_on_ray`).
    :param num_replicas: a fixed number of replicas (default 1), or
    :param autoscaling_config: Ray Serve's autoscaling options (``min_replicas``,
        ``max_replicas``, ``target_ongoing_requests``, ...), passed through.
    :param ray_actor_options: each replica's resources (default ``{"num_cpus":
        options.threads}``: one CPU per worker thread).
    :param max_ongoing_requests: requests Ray routes to one replica at once (default:
        the worker's threads plus its queue depth: more would only be refused 429).
    :raises ValueError: both ``num_replicas`` and ``autoscaling_config``.
    """
    serve = require_serve()
    if num_replicas is not None and autoscaling_config is not None:
        raise ValueError("give num_replicas or autoscaling_config, not both")
    scaling: dict[str, Any] = {}
    if autoscaling_config is not None:
        scaling["autoscaling_config"] = dict(autoscaling_config)
    else:
        scaling["num_replicas"] = 1 if num_replicas is None else num_replicas
    if max_ongoing_requests is None:
        max_ongoing_requests = options.threads + options.worker.queue_depth
    actor = dict(ray_actor_options) if ray_actor_options is not None else {}
    actor.setdefault("num_cpus", options.threads)
    ingress = serve.ingress()(_AudioGateReplica)
    deployment = serve.deployment(
        ingress,
        name=name,
        ray_actor_options=actor,
        max_ongoing_requests=max_ongoing_requests,
        **scaling,
    )
    return deployment.bind(options)


def serve_on_ray(
    options: ServeOptions,
    *,
    num_replicas: int | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    address: str | None = None,
    block: bool = True,
) -> int:
    """``audiogate serve --engine ray``: start Ray Serve's proxy on ``options.host`` and
    ``options.port``, deploy :func:`build_application` at ``/``, and (``block``) wait
    until interrupted, then delete the application.

    :param address: an existing Ray cluster (default: ``ray.init()``'s local one).
    :returns: 0 after Ctrl-C or SIGTERM.
    """
    serve = require_serve()
    ray = require_module("ray", purpose="audiogate serve --engine ray")

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    serve.start(http_options={"host": options.host, "port": options.port})
    application = build_application(
        options, num_replicas=num_replicas, autoscaling_config=autoscaling_config
    )
    serve.run(application, name=DEFAULT_NAME, route_prefix="/")
    if not block:
        return 0

    try:
        wait_for_a_stop_signal()  # kill (SIGTERM): the same as Ctrl-C
    finally:
        serve.delete(DEFAULT_NAME)
        serve.shutdown()
    return 0
