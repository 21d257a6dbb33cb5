"""Starting the server: build the gate, worker and app from options, run uvicorn.

The options (:class:`ServeOptions`) and their command line are in
:mod:`audiogate.server.options`.

``audiogate serve --model DIR`` calls :func:`serve`; tests and the load test use
:class:`ServerThread` (uvicorn in a background thread on an ephemeral loopback port).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final

import attrs
import uvicorn
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from starlette.applications import Starlette

from audiogate.acquire import AcquisitionPolicy
from audiogate.api import AudioGate
from audiogate.host import FamilyHost, create_host
from audiogate.metrics import AudioMetrics
from audiogate.server.admission import ClientAddresses, HeadAdmission
from audiogate.server.app import ServerWorker, check_media_root, create_app
from audiogate.server.budgets import ServerLimits
from audiogate.server.malloc import keep_freed_memory
from audiogate.server.options import ServeOptions, parse_size
from audiogate.server.protocol import connection_cap, guarded_h11
from audiogate.server.requests import SERVER_SWITCH_INTERVAL_S
from audiogate.server.sources import load_auth_tokens
from audiogate.server.stop_signals import interrupt_on_stop_signals
from audiogate.store import SourceStore

__all__ = [
    "ServeOptions",
    "ServerThread",
    "build_app",
    "freeze_start_up_objects",
    "parse_size",
    "serve",
    "server_registry",
    "websocket_frame_cap",
]

log = logging.getLogger("audiogate.server")


def server_registry() -> CollectorRegistry:
    """A fresh registry with prometheus-client's process, platform and GC collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def build_app(options: ServeOptions, *, host: FamilyHost | None = None) -> Starlette:
    """The app for ``options``: a :func:`server_registry` with the audio series, a
    :class:`ServerWorker` and the model's gate.

    :raises AudioGateError: the model directory cannot be loaded (``PolicyError``, ...),
        or the media root is not a directory (``ServerConfigError``).
    """
    media_root = None if options.media_root is None else options.media_root.resolve()
    check_media_root(media_root)  # before the model loads: fail fast
    owners = None if options.auth_tokens is None else load_auth_tokens(options.auth_tokens)
    host = host or create_host()
    metrics = AudioMetrics(server_registry(), families=host.families)
    store = None
    if options.store_dir is not None:
        store = SourceStore.open(
            options.store_dir,
            verify=options.verify_store,
            quotas=options.store_quotas,
            wait_s=options.source_wait_s,
        )
        logging.getLogger("audiogate.server").info(
            "source store %s opened: %s", options.store_dir, store.recovery.as_dict()
        )
    worker = ServerWorker(
        host,
        limits=attrs.evolve(options.worker, threads=options.threads),
        metrics=metrics,
        feature_cache_bytes=options.feature_cache_bytes,
        # Features of stored sources survive a restart in the store.
        feature_store=store,
    )
    try:
        acquisition = AcquisitionPolicy(
            allow_url_fetch=options.allow_url_fetch,
            media_root=media_root,
        )
        gate = AudioGate.from_model_dir(
            options.model_dir,
            host=host,
            worker=worker,
            acquisition=acquisition,
            max_prefill_tokens=options.max_prefill_tokens,
            max_prompt_text_bytes=options.max_prompt_text_bytes,
            store=store,
        )
        return create_app(
            gate,
            limits=options.limits,
            served_model=options.served_model_name or options.model_dir.name,
            owners=owners,
            stream_deadlines=options.stream_deadlines,
        )
    except BaseException:
        worker.close()
        if store is not None:
            store.close()
        raise


def _guarded_protocol(limits: ServerLimits, app: Any = None) -> type[asyncio.Protocol]:
    """The h11 protocol with the head timeout, the connection caps and (for an app made
    by :func:`create_app`) the admission of request heads of ``limits``."""
    server = getattr(getattr(app, "state", None), "audiogate", None)
    addresses = ClientAddresses(limits.trusted_proxies, limits.client_address_header)
    return guarded_h11(
        header_timeout_s=limits.header_timeout_s,
        max_connections=connection_cap(limits.max_connections),
        max_connections_per_client=limits.max_connections_per_client,
        admission=None if server is None else HeadAdmission(server, limits, addresses),
        addresses=addresses,
        refusal_delay_s=limits.refusal_delay_s,
    )


def _config(app: Starlette, options: ServeOptions) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        http=_guarded_protocol(options.limits, app),
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        access_log=options.access_log,
        lifespan="on",
        # One process: the bounded worker is the unit of parallelism (``--workers``).
        workers=None,
        # A client that keeps its connection open must not hold a shutdown forever: after
        # this long, open connections are closed (an answer stalls out in as long).
        timeout_graceful_shutdown=math.ceil(options.limits.body_idle_timeout_s),
        ws_max_size=websocket_frame_cap(app),
    )


#: A WebSocket event's JSON around its base64 audio (event type, ids), at most.
_EVENT_ENVELOPE_BYTES: Final = 64 << 10


def websocket_frame_cap(app: Any) -> int:
    """The largest WebSocket message the server reads (``/v1/realtime``'s events): the
    base64 of one request body's cap plus an event's JSON. A message is buffered whole
    before any check, so uvicorn's default (16 MiB) would let each open connection hold
    that much; an append carrying more than a whole body is refused anyway."""
    server = getattr(getattr(app, "state", None), "audiogate", None)
    if server is None:
        return 16 << 20
    body: int = server.max_body_bytes
    return -(-body // 3) * 4 + _EVENT_ENVELOPE_BYTES


#: The exit code when the server cannot start (the address cannot be bound or resolved):
#: bad input, as the CLI reference documents (uvicorn itself would exit with 3).
START_FAILURE_EXIT: Final = 2


class _BindErrors(logging.Filter):
    """Keeps the ``OSError`` uvicorn logs when it cannot bind or resolve the address (it
    then exits with its own code, 3), so that :func:`serve` names it in its one line."""

    def __init__(self, server: uvicorn.Server) -> None:
        super().__init__()
        self.server = server
        self.errors: list[OSError] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, OSError) and not self.server.started:
            self.errors.append(record.msg)
            return False
        return True


#: What ``Ctrl-C`` and ``kill`` send; both shut the server down gracefully.
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _graceful_signals(server: uvicorn.Server) -> Iterator[None]:
    """SIGINT and SIGTERM shut ``server`` down gracefully, and the process goes on.

    uvicorn restores the handlers it found once it has shut down, then raises the signals
    it caught again (``Server.capture_signals``): with Python's own handlers, a
    ``KeyboardInterrupt`` traceback or death by SIGTERM. The handlers it finds here are
    ``server.handle_exit``, for which a signal after the shutdown changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are only delivered to the main thread
        return
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def freeze_start_up_objects() -> int:
    """Collect, then move every object alive now (the model's policy, its tokenizer,
    modules) out of the garbage collector's reach for the process's life (``gc.freeze``);
    returns how many were frozen.

    A full collection walks every tracked object: with a tokenizer loaded it stopped the
    loop 80 to 120 ms, against about 9 ms with the start-up objects frozen (5 s clips,
    ``-c 64``, where the requests in flight promote enough survivors for about one full
    collection every 6 s; issue #33). What start-up leaves is never garbage anyway."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def serve(options: ServeOptions, *, host: FamilyHost | None = None) -> int:
    """Run the server until interrupted (SIGINT/SIGTERM); returns the exit code.

    :returns: 0 after a clean shutdown (in-flight requests finish first);
        :data:`START_FAILURE_EXIT` when it could not start (a port in use, an address that
        does not resolve), after logging why in one line.
    :raises KeyboardInterrupt: SIGINT or SIGTERM while the model loads (the CLI exits 130).
    """
    # Until uvicorn's handlers are in place (the collection below runs finalisers, where
    # Python would drop an interrupt).
    with interrupt_on_stop_signals():
        app = build_app(options, host=host)
        sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)  # why: see the constant
        keep_freed_memory()  # why: see audiogate.server.malloc
        freeze_start_up_objects()  # why: see its docstring
        server = uvicorn.Server(_config(app, options))
    # After uvicorn.Config, which configures uvicorn's loggers.
    bind = _BindErrors(server)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(bind)
    try:
        with _graceful_signals(server):
            server.run()
    except (SystemExit, OSError) as exc:
        # uvicorn exits with 3 after logging a bind error: that error says why.
        errors = [exc] if isinstance(exc, OSError) else bind.errors
        if errors:
            why = errors[-1].strerror or str(errors[-1])
        else:
            why = "the application did not start (see the log above)"
        log.error("the server could not start on %s:%s: %s", options.host, options.port, why)
        return START_FAILURE_EXIT
    finally:
        uvicorn_log.removeFilter(bind)
    return 0 if server.started else START_FAILURE_EXIT


class ServerThread:
    """uvicorn serving ``app`` in a background thread (tests, the load test).

    ``port=0`` binds an ephemeral port; :attr:`url` is the bound address::

        with ServerThread(app) as running:
            httpx.get(running.url + "/healthz")
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        server = getattr(getattr(app, "state", None), "audiogate", None)
        limits = server.limits if server is not None else ServerLimits()
        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            http=_guarded_protocol(limits, app),
            ws_max_size=websocket_frame_cap(app),
        )
        self.server = uvicorn.Server(self.config)
        self._thread = threading.Thread(target=self.server.run, name="audiogate-uvicorn")
        self.port = 0

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.config.host}:{self.port}"

    def start(self, *, timeout_s: float = 30.0) -> ServerThread:
        """Start and wait until the socket is bound.

        :raises RuntimeError: the server did not start within ``timeout_s``.
        """
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the audiogate server did not start")
            time.sleep(0.01)
        sockets = self.server.servers[0].sockets
        self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Ask the server to exit (graceful: in-flight requests finish) and join it."""
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
