"""The reference HTTP server: a Starlette app around one :class:`~audiogate.api.AudioGate`.

``POST /v1/audio/prepare`` takes an OpenAI chat completions request and answers with the
expanded token ids, the per-clip accounting and the collated model inputs (or a typed
error); ``GET /metrics`` is Prometheus text; ``GET /healthz`` reports the worker.

Every prepare request is counted once in the audio metrics: the bounded worker counts
what reaches its admission and fails there or later (cancelled or rejected); the server
counts what fails or is cancelled before (body, JSON, acquisition, template), and a
request the worker prepared once its answer is admitted into the body budget (completed),
or as the answer was refused or abandoned there (``memory_limit``, cancelled). A
successful request without audio is not an audio request and counts nowhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import math
import os
import re
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio.to_thread
import attrs
import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from audiogate.acquire import AcquiredBytes
from audiogate.api import AudioGate, PreparedRequest
from audiogate.cancel import CancelToken
from audiogate.errors import (
    AudioGateError,
    LimitError,
    MemoryLimitError,
    PreprocessCancelled,
    WorkerUnavailableError,
    clear_frames,
)
from audiogate.host import FamilyHost
from audiogate.jsonkeys import DuplicateKeyError, loads_unique_keys
from audiogate.metrics import AudioMetrics
from audiogate.server.encoding import (
    FEATURE_FORMATS,
    FeatureFormat,
    encode_features,
    encoded_features_bound,
    safetensors_available,
)
from audiogate.server.errors import (
    RETRY_AFTER_SECONDS,
    STATUS_CLIENT_CLOSED,
    BadRequestError,
    RequestTimeoutError,
    ServerConfigError,
    error_payload,
    status_for,
)
from audiogate.worker import AudioWorker, OutcomeRecord, WorkerLimits, outcome_scope

__all__ = [
    "ABSOLUTE_MAX_AUDIO_REQUEST_BYTES",
    "JSON_OVERHEAD_BYTES",
    "PREPARE_PATH",
    "ServerLimits",
    "ServerWorker",
    "check_media_root",
    "create_app",
    "default_max_body_bytes",
]

log = logging.getLogger("audiogate.server")

MIB: Final = 1 << 20
PREPARE_PATH: Final = "/v1/audio/prepare"
#: The acquisition ceiling of one request's encoded audio (the seed's 500 MiB, §11).
ABSOLUTE_MAX_AUDIO_REQUEST_BYTES: Final = 500 * MIB
#: Room for the prompt text and the JSON around the base64 audio.
JSON_OVERHEAD_BYTES: Final = 2 * MIB
# Bodies larger than this are parsed (and responses larger than this rendered) on the
# server's one helper thread, so a big request does not stall every other connection
# (JSON and base64 run at GB/s: below this the hop costs more than it saves). One thread,
# not a pool: every thread that allocates large buffers gets its own malloc arena.
_OFFLOOP_BYTES: Final = 8 * MIB
# Parsing is slower where a body holds many small objects rather than one long base64
# string: 20 to 45 ms per MiB with the duplicate-key check. Bodies over this are parsed on
# the helper thread too, so a crafted one stalls the loop for a few ms at most.
_OFFLOOP_PARSE_BYTES: Final = 256 * 1024
_T = TypeVar("_T")
# Answers larger than this go out in pieces of this size. uvicorn's ``send`` waits until
# the connection's buffer drained below its low-water mark (16 KiB), so the stall timer
# (--body-timeout), restarted for every piece, measures how long the client takes to read
# about one piece: smaller pieces lower the read rate a client needs. 64 KiB is the
# buffer's high-water mark, below which pieces would hardly lower it (the buffer takes
# several before uvicorn waits) and would cost more sends: one ASGI send is about 10 µs,
# and 10 MB take some 8.5 ms to send in 64 KiB pieces, 1.5 ms more than in 512 KiB ones.
_SEND_PIECE_BYTES: Final = 64 * 1024
# What the kernel may keep unsent of a connection's output (TCP_NOTSENT_LOWAT). Without
# it Linux autotunes the send buffer up to 4 MiB and reports room only once a third of it
# drained: uvicorn's buffer drains in steps of about 1.4 MB, however small the pieces,
# and a client reading 150 KB/s looks stalled for 9 s at a time. With it, about 256 KiB
# queue ahead of the client (this, the piece and uvicorn's buffer). It limits only the
# unsent queue, not what is in flight, so it costs a fast client nothing measurable.
_UNSENT_LOWAT_BYTES: Final = 128 * 1024
_OPTION_KEYS: Final = frozenset({"feature_format", "return_features"})
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def default_max_body_bytes(max_audio_bytes: int) -> int:
    """The body cap for a request ceiling of ``max_audio_bytes`` encoded audio bytes
    (at most 500 MiB): their base64 plus :data:`JSON_OVERHEAD_BYTES`."""
    audio = min(max_audio_bytes, ABSOLUTE_MAX_AUDIO_REQUEST_BYTES)
    return math.ceil(audio / 3) * 4 + JSON_OVERHEAD_BYTES


@attrs.frozen(kw_only=True)
class ServerLimits:
    """Limits the server applies before the gate sees a request.

    :param max_body_bytes: one request body (checked on ``Content-Length`` and while
        streaming, before JSON parsing); ``None``: :func:`default_max_body_bytes` of the
        gate's (policy-narrowed) acquisition ceiling.
    :param max_inflight_body_bytes: the bytes the server holds for requests at once: bodies
        as their bytes arrive, then their answers until sent (``None``: four maximal
        bodies). New bodies are refused (413) while it is full; an answer waits for room
        up to ``body_idle_timeout_s`` (a request holding everything held may exceed it).
    :param body_idle_timeout_s: refuse a request (408) whose body stalls this long; abandon
        an answer whose next 64 KiB piece finds no room in the socket for this long (its
        client reads too little of it: about 256 KiB per timeout are needed); close
        connections this long after a shutdown starts.
    :param max_inflight_acquired_bytes: the bytes all requests' file and URL reads may hold
        at once, from the first byte known until the request's acquisition ends, after which
        the worker's admission reserves the clips (``None``: four maximal requests of
        encoded audio). A read that does not fit is
        refused (413, ``"in-flight acquired bytes"``).
    """

    max_body_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    max_inflight_body_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    body_idle_timeout_s: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    max_inflight_acquired_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )


# --- admission tracking --------------------------------------------------------------


@attrs.define
class _Ticket:
    """One request's progress: its metrics outcome (recorded once: by the worker for what
    fails from its admission on, by the gate or the server before; a prepared request by
    the server, as its answer was admitted or not) and whether its body was read."""

    outcome: OutcomeRecord
    body_read: bool = False


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
    ) -> None:
        super().__init__(host, limits=limits, metrics=metrics, name=name)


# --- server-side accounting ----------------------------------------------------------


class _ServerMetrics:
    """The server's own series, on the audio metrics' registry."""

    def __init__(self, metrics: AudioMetrics) -> None:
        registry = metrics.registry
        self.inflight_body_bytes = Gauge(
            "audiogate_server_inflight_body_bytes",
            "Bytes the server holds for requests: bodies as they arrive, answers until sent.",
            registry=registry,
        )
        self.inflight_acquired_bytes = Gauge(
            "audiogate_server_inflight_acquired_bytes",
            "Encoded bytes that requests' file and URL reads hold until their acquisition ends.",
            registry=registry,
        )
        self.responses = Counter(
            "audiogate_server_prepare_responses",
            "Answers of POST /v1/audio/prepare by HTTP status.",
            ["status"],
            registry=registry,
        )
        for status in (200, 400, 408, 413, 429, 499, 500, 503):
            self.responses.labels(status=str(status))


class _BodyBudget:
    """Bytes held for requests at once: bodies as they arrive, answers until sent
    (event-loop confined: no lock)."""

    def __init__(self, maximum: int, gauge: Gauge) -> None:
        self.maximum = maximum
        self.held = 0
        self._gauge = gauge
        self._freed = asyncio.Event()  # set whenever bytes are given back

    def hold(self) -> _BodyHold:
        return _BodyHold(self)

    def fits(self, nbytes: int) -> bool:
        return self.held + nbytes <= self.maximum

    def refusal(self, nbytes: int) -> MemoryLimitError:
        return MemoryLimitError(
            "in-flight request body bytes", actual=self.held + nbytes, maximum=self.maximum
        )

    def _take(self, nbytes: int, *, force: bool = False) -> None:
        if not force and not self.fits(nbytes):
            raise self.refusal(nbytes)
        self.held += nbytes
        self._gauge.set(self.held)

    def _give(self, nbytes: int) -> None:
        self.held -= nbytes
        self._gauge.set(self.held)
        self._freed.set()

    async def make_room(self, hold: _BodyHold, nbytes: int, *, timeout_s: float) -> None:
        """Hold ``nbytes`` more for ``hold`` once they fit, waiting up to ``timeout_s`` for
        other requests to give bytes back; a request that holds everything held may go
        past the maximum alone (an answer larger than the budget is still sent).

        :raises MemoryLimitError: no room came within ``timeout_s``.
        """
        try:
            async with asyncio.timeout(timeout_s):
                while not self.fits(nbytes) and self.held > hold.nbytes:
                    self._freed.clear()
                    await self._freed.wait()
        except TimeoutError:
            raise self.refusal(nbytes) from None
        hold.grow(nbytes, force=True)


class _BodyHold:
    """One request's share of the body budget; :meth:`release` gives it all back."""

    def __init__(self, budget: _BodyBudget) -> None:
        self._budget = budget
        self.nbytes = 0

    def grow(self, nbytes: int, *, force: bool = False) -> None:
        """Hold ``nbytes`` more; refused when the budget is full unless ``force``."""
        self._budget._take(nbytes, force=force)
        self.nbytes += nbytes

    def shrink(self, nbytes: int) -> None:
        """Give back ``nbytes`` of what this request holds."""
        nbytes = min(nbytes, self.nbytes)
        if nbytes > 0:
            self._budget._give(nbytes)
            self.nbytes -= nbytes

    def release(self) -> None:
        self.shrink(self.nbytes)


# --- request parsing -----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _PrepareCall:
    model: str | None
    messages: list[Any]
    feature_format: FeatureFormat
    return_features: bool


class _ClientGone(Exception):
    """The client disconnected; there is nobody to answer."""


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _parse_body(body: bytes | bytearray) -> Any:
    """The JSON document of a request body, which must be UTF-8 (a leading BOM is dropped).

    Decoded strictly first: ``json.loads`` on bytes would also take UTF-16 and UTF-32 and
    let encoded surrogates through ("surrogatepass"). A key given twice in one object is
    refused: parsers disagree on which one counts (Python's takes the last, some proxies
    and validators the first), so a request that a filter in front of the server read
    one way must not be served another way.
    """
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the request body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        document = loads_unique_keys(text)
    except RecursionError:
        raise BadRequestError("the request body is nested too deeply") from None
    except DuplicateKeyError as exc:
        raise BadRequestError(
            f"the request body gives the key {exc.shown} twice in one JSON object"
        ) from None
    except ValueError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from None
    del text
    # JSON admits a lone "\udXXX" escape; Python keeps it, tokenizers fail on it. The walk
    # only runs when the (UTF-8) body has such an escape at all (a valid pair is fine).
    if _SURROGATE_ESCAPE.search(body) and _lone_surrogate(document):
        raise BadRequestError("the request contains a lone UTF-16 surrogate (invalid Unicode)")
    return document


def _parse_call(document: Any) -> _PrepareCall:
    if not isinstance(document, dict):
        raise BadRequestError(
            f"the request body must be a JSON object (an OpenAI chat completions request), "
            f"got {type(document).__name__}"
        )
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError(
            f"'model' must be a string, got {type(model).__name__}", field="model"
        )
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty list", field="messages")
    options = document.get("audiogate", {})
    if not isinstance(options, dict):
        raise BadRequestError(
            f"'audiogate' must be an object, got {type(options).__name__}", field="audiogate"
        )
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise BadRequestError(
            f"unknown 'audiogate' option(s) {unknown}; allowed: {sorted(_OPTION_KEYS)}",
            field="audiogate",
        )
    feature_format = options.get("feature_format", "npy")
    if feature_format not in FEATURE_FORMATS:
        raise BadRequestError(
            f"'audiogate.feature_format' must be one of {list(FEATURE_FORMATS)}, "
            f"got {feature_format!r}",
            field="audiogate.feature_format",
        )
    if feature_format == "safetensors" and not safetensors_available():
        raise BadRequestError(
            "'audiogate.feature_format' 'safetensors' needs the safetensors package on the "
            "server (pip install safetensors); use 'npy'",
            field="audiogate.feature_format",
        )
    return_features = options.get("return_features", True)
    if not isinstance(return_features, bool):
        raise BadRequestError(
            f"'audiogate.return_features' must be true or false, got {return_features!r}",
            field="audiogate.return_features",
        )
    return _PrepareCall(
        model=model,
        messages=messages,
        feature_format=feature_format,
        return_features=return_features,
    )


# --- responses -----------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _render_head(result: PreparedRequest, call: _PrepareCall, served_model: str) -> bytes:
    """The answer's JSON without its features (a closed object)."""
    summary = result.summary()
    document = {
        "object": "audiogate.prepared",
        "model": call.model if call.model is not None else served_model,
        "family": result.family,
        "input_ids": list(result.input_ids),
        "prefill_positions": result.prefill_positions,
        "text": result.text,
        "audio_spans": [list(span) for span in result.audio_spans],
        "clips": summary["clips"],
        "totals": summary["totals"],
    }
    return json.dumps(document, separators=(",", ":"), default=_json_default).encode()


def _render_answer(head: bytes, inputs: Mapping[str, Any], call: _PrepareCall) -> list[bytes]:
    """The answer's JSON as fragments (their concatenation is the body): ``head`` with its
    ``features`` (``null`` without ``inputs``)."""
    features = encode_features(inputs, call.feature_format) if inputs else [b"null"]
    return [head[:-1], b',"features":', *features, b"}"]


class _FragmentsResponse(Response):
    """A JSON answer sent from its fragments, piece by piece, without joining them.

    Each piece waits for the transport to drain (uvicorn's flow control), so a slow reader
    holds at most about one piece in the transport; a piece that finds no room within
    ``stall_timeout_s`` abandons the answer. ``on_sent`` runs once the last byte is
    handed over or the client is gone.
    """

    def __init__(
        self, fragments: list[bytes], *, on_sent: Callable[[], None], stall_timeout_s: float
    ) -> None:
        super().__init__(media_type="application/json")
        self.fragments = fragments
        self.nbytes = sum(len(f) for f in fragments)
        self.on_sent = on_sent
        self.stall_timeout_s = stall_timeout_s
        self.headers["content-length"] = str(self.nbytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            if self.nbytes <= _SEND_PIECE_BYTES:
                pieces: list[bytes | memoryview] = [b"".join(self.fragments)]
            else:
                pieces = [
                    memoryview(fragment)[offset : offset + _SEND_PIECE_BYTES]
                    for fragment in self.fragments
                    for offset in range(0, len(fragment), _SEND_PIECE_BYTES)
                ]
            last = len(pieces) - 1
            sent = 0
            for index, piece in enumerate(pieces):
                more = index < last
                message = {"type": "http.response.body", "body": piece, "more_body": more}
                try:
                    async with asyncio.timeout(self.stall_timeout_s):
                        await send(message)
                except TimeoutError:
                    # A client that stops reading would hold its answer (and its share of
                    # the body budget) for as long as it stays connected: the answer is
                    # abandoned, and the server closes the connection.
                    log.warning(
                        "a client read too little of its answer for %g s to make room for "
                        "its next %d bytes (%d of %d sent); closing the connection",
                        self.stall_timeout_s,
                        len(piece),
                        sent,
                        self.nbytes,
                    )
                    return
                sent += len(piece)
        finally:
            self.fragments = []
            self.on_sent()


def _json_response(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    body = json.dumps(payload, separators=(",", ":"), default=_json_default).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


# --- the app -------------------------------------------------------------------------


def _limit_unsent(send: Send) -> None:
    """Keep the kernel from holding more than about :data:`_UNSENT_LOWAT_BYTES` of the
    connection's output unsent, so that its room shows as the client reads.

    uvicorn's ``send`` is its request cycle's bound method, whose ``transport`` is the
    connection's (h11 and httptools alike): ASGI offers no other way to the socket. Under
    another server, on a Unix socket or without ``TCP_NOTSENT_LOWAT`` (Windows) nothing
    changes, and room shows in the kernel's larger steps.
    """
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    transport = _connection_transport(send)
    extra_info = getattr(transport, "get_extra_info", None)  # asyncio's or uvloop's
    if option is None or extra_info is None:
        return
    sock = extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, _UNSENT_LOWAT_BYTES)


def _connection_transport(send: Send) -> Any:
    """The ``transport`` of the request cycle whose bound ``send`` this is, also under
    wrappers that close over it (uvicorn's message logger at ``--log-level trace``)."""
    pending: list[Any] = [send]
    for _ in range(8):  # a few wrappers deep at most
        if not pending:
            break
        candidate = pending.pop(0)
        transport = getattr(getattr(candidate, "__self__", None), "transport", None)
        if transport is not None:
            return transport
        for cell in getattr(candidate, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if callable(cell.cell_contents):
                    pending.append(cell.cell_contents)
    return None


class _AudioApp(Starlette):
    """The Starlette app, which tunes each connection's socket for its answers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            _limit_unsent(send)
        await super().__call__(scope, receive, send)


async def _wait_for_disconnect(receive: Receive) -> None:
    # Once the body is read, the server's next message is ``http.disconnect``: the client
    # went away (or the response completed, by which time this task is cancelled).
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _AudioServer:
    def __init__(
        self,
        gate: AudioGate,
        worker: ServerWorker,
        *,
        limits: ServerLimits,
        served_model: str,
        close_worker: bool,
    ) -> None:
        self.gate = gate
        self.worker = worker
        self.metrics = worker.metrics
        self.family = gate.policy.family
        self.metrics.ensure_family(self.family)
        self.served_model = served_model
        self.close_worker = close_worker
        self.max_body_bytes = limits.max_body_bytes or default_max_body_bytes(
            gate.acquisition.max_bytes_per_request
        )
        self.server_metrics = _ServerMetrics(self.metrics)
        self.body_idle_timeout_s = limits.body_idle_timeout_s
        self._helper = concurrent.futures.ThreadPoolExecutor(1, "audiogate-server-io")
        self.bodies = _BodyBudget(
            limits.max_inflight_body_bytes or 4 * self.max_body_bytes,
            self.server_metrics.inflight_body_bytes,
        )
        # Files and URLs are read outside the body budget: all requests' reads share this.
        acquired = gate.acquisition.shared_bytes
        if acquired is None:
            acquired = AcquiredBytes(
                limits.max_inflight_acquired_bytes or 4 * gate.acquisition.max_bytes_per_request,
                on_change=self.server_metrics.inflight_acquired_bytes.set,
            )
            gate.acquisition = attrs.evolve(gate.acquisition, shared_bytes=acquired)
        self.acquired = acquired

    # --- POST /v1/audio/prepare --------------------------------------------------------

    async def prepare(self, request: Request) -> Response:
        # The outcome record is seen by the gate and the worker in this request's tasks
        # (they copy the context): whoever ends the request counts it, once.
        with outcome_scope(fresh=True) as outcome:
            # A prepared request still needs room for its answer in the body budget, which
            # may refuse it (413) or see the client leave while it waits (499): the worker
            # leaves the completion to this handler, which counts what it answered.
            outcome.defer_completion = True
            return await self._prepare_counted(request, _Ticket(outcome=outcome))

    async def _prepare_counted(self, request: Request, ticket: _Ticket) -> Response:
        hold = self.bodies.hold()
        response: Response
        try:
            response = await self._prepare(request, hold, ticket)
            ticket.outcome.settle(None)  # its answer is admitted: completed (if audio)
        except (_ClientGone, ClientDisconnect, PreprocessCancelled) as gone:
            self._count_failure(ticket, None)
            response = Response(status_code=STATUS_CLIENT_CLOSED)
            clear_frames(gone)
        except Exception as error:
            self._count_failure(ticket, error)
            response = self._error_response(error, close=not ticket.body_read)
            clear_frames(error)
        except asyncio.CancelledError:
            # uvicorn cancels the requests still running when its graceful shutdown times
            # out (--body-timeout); left to it, the client would get a bare 500 that no
            # metric counts. It gets a counted 503 instead, and the connection closes.
            task = asyncio.current_task()
            if task is None or task.uncancel() > 0:  # cancelled again: stop now
                self._count_failure(ticket, None)
                hold.release()
                raise
            stopped = WorkerUnavailableError(
                "the server is shutting down and stopped this request; retry it"
            )
            self._count_failure(ticket, stopped)
            response = self._error_response(stopped, close=True)
        except BaseException:
            self._count_failure(ticket, None)
            hold.release()
            raise
        if not isinstance(response, _FragmentsResponse):
            hold.release()  # an answer being sent releases it once it is out
        self.server_metrics.responses.labels(status=str(response.status_code)).inc()
        return response

    async def _prepare(self, request: Request, hold: _BodyHold, ticket: _Ticket) -> Response:
        body = await self._read_body(request, hold)
        ticket.body_read = True
        if len(body) > _OFFLOOP_PARSE_BYTES:
            document = await self._off_loop(_parse_body, body)
        else:
            document = _parse_body(body)
        del body
        call = _parse_call(document)
        del document
        result = await self._run_until_disconnect(request, call.messages)
        head = _render_head(result, call, self.served_model)
        inputs = result.model_inputs if call.return_features else {}
        # The answer is held until it is sent: its bound is taken from the body budget
        # before it is encoded (waiting for room, as answers being sent give theirs
        # back), so clients that read slowly backpressure the others instead of growing
        # memory past the budget.
        bound = len(head) + 16 + (encoded_features_bound(inputs) if inputs else 0)
        await self._until_disconnect(
            request, self.bodies.make_room(hold, bound, timeout_s=self.body_idle_timeout_s)
        )
        nbytes = sum(int(np.asarray(a).nbytes) for a in inputs.values())
        if nbytes > _OFFLOOP_BYTES:
            fragments = await self._off_loop(_render_answer, head, inputs, call)
        else:
            fragments = _render_answer(head, inputs, call)
        del result, inputs
        response = _FragmentsResponse(
            fragments, on_sent=hold.release, stall_timeout_s=self.body_idle_timeout_s
        )
        hold.shrink(bound - response.nbytes)  # what the bound overestimated
        return response

    async def _off_loop(self, function: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._helper, function, *args)

    async def _read_body(self, request: Request, hold: _BodyHold) -> bytearray:
        cap = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and "transfer-encoding" in request.headers:
            # RFC 9112 §6.1: such a message may be an attempt at request smuggling, and a
            # server that answers it must close the connection (it does: body unread).
            raise BadRequestError(
                "the request has both Content-Length and Transfer-Encoding headers"
            )
        async with contextlib.aclosing(request.stream()) as stream:
            chunks = aiter(stream)
            if declared is not None:
                # h11 has already refused a malformed Content-Length. The preflight only
                # checks: bytes are held as they arrive, never on the client's word.
                length = int(declared)
                if length > cap:
                    raise LimitError("request body bytes", actual=length, maximum=cap)
                if not self.bodies.fits(length):
                    await self._discard(chunks)
                    raise self.bodies.refusal(length)
            buffer = bytearray()
            while (chunk := await self._next_chunk(chunks)) is not None:
                if len(buffer) + len(chunk) > cap:
                    raise LimitError(
                        "request body bytes", actual=len(buffer) + len(chunk), maximum=cap
                    )
                try:
                    hold.grow(len(chunk))
                except MemoryLimitError:
                    if declared is not None:
                        await self._discard(chunks)
                    raise
                buffer += chunk
        return buffer

    async def _next_chunk(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        try:
            async with asyncio.timeout(self.body_idle_timeout_s):
                return await anext(chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise RequestTimeoutError(
                f"no request body bytes arrived for {self.body_idle_timeout_s:g} s"
            ) from None

    async def _discard(self, chunks: AsyncIterator[bytes]) -> None:
        # A body under the cap refused for a full budget is read and dropped (nothing is
        # kept), so the client, still sending, gets the 413 rather than a reset connection.
        with contextlib.suppress(ClientDisconnect, RequestTimeoutError):
            while await self._next_chunk(chunks) is not None:
                pass

    async def _run_until_disconnect(self, request: Request, messages: list[Any]) -> PreparedRequest:
        token = CancelToken()
        return await self._until_disconnect(
            request, self.gate.prepare_async(messages, cancel=token), token
        )

    async def _until_disconnect(
        self, request: Request, work: Coroutine[Any, Any, _T], token: CancelToken | None = None
    ) -> _T:
        """``work``, or :class:`_ClientGone` as soon as the client disconnects (then
        ``token`` is cancelled and ``work`` awaited until it has let go)."""
        task = asyncio.create_task(work)
        watcher = asyncio.create_task(_wait_for_disconnect(request.receive))
        try:
            done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                # The client went away, or this handler is being cancelled (shutdown):
                # cancel acquisition and processing, and wait until they have let go.
                if token is not None:
                    token.cancel()
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task in done:
            return task.result()
        raise _ClientGone

    def _count_failure(self, ticket: _Ticket, error: BaseException | None) -> None:
        # Counted here unless the gate or the worker counts it (a success the worker
        # left for this handler is replaced by this failure).
        ticket.outcome.settle(functools.partial(self.worker.record_failure, self.family, error))

    def _error_response(self, error: Exception, *, close: bool) -> Response:
        status = status_for(error)
        if status >= 500 and not isinstance(error, AudioGateError):
            log.error("unexpected error preparing a request", exc_info=error)
        elif status >= 500:
            log.error("%s", error)
        headers = {}
        if status == 429:
            headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        if close:
            # The rest of the body was never read: the connection cannot be reused.
            headers["Connection"] = "close"
        return _json_response(status, error_payload(error), headers)

    # --- GET /metrics, GET /healthz -----------------------------------------------------

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(self, request: Request) -> Response:
        closed = self.worker.closed
        limits = self.worker.limits
        payload = {
            "status": "unavailable" if closed else "ok",
            "family": self.family,
            "model": self.served_model,
            "worker": {
                "state": "closed" if closed else "running",
                "threads": limits.threads,
                "queue_depth": limits.queue_depth,
                "queued_encoded_bytes": self.worker.queued_encoded_bytes,
                "inflight_host_bytes": self.worker.inflight_host_bytes,
                "max_queued_encoded_bytes": limits.max_queued_encoded_bytes,
                "max_inflight_host_bytes": limits.max_inflight_host_bytes,
            },
            "server": {
                "max_body_bytes": self.max_body_bytes,
                "inflight_body_bytes": self.bodies.held,
                "max_inflight_body_bytes": self.bodies.maximum,
                "inflight_acquired_bytes": self.acquired.held,
                "max_inflight_acquired_bytes": self.acquired.maximum,
            },
        }
        return _json_response(503 if closed else 200, payload)

    # --- app -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        if self.close_worker:
            await anyio.to_thread.run_sync(self.worker.close)
        self._helper.shutdown(wait=False)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    payload = {
        "error": {
            "type": "HTTPException",
            "reason": None,
            "message": exc.detail,
            "clip_index": None,
        }
    }
    return _json_response(exc.status_code, payload, exc.headers)


def check_media_root(root: Path | None) -> None:
    """Refuse to serve from a media root that is not a directory (checked at start-up, so
    requests never need to be told the server's path).

    :raises ServerConfigError: ``root`` is set but is not an existing directory.
    """
    if root is not None and not os.path.isdir(root):
        raise ServerConfigError(f"the media root (--media-path) {str(root)!r} is not a directory")


def create_app(
    gate: AudioGate,
    *,
    limits: ServerLimits | None = None,
    served_model: str | None = None,
    close_worker: bool = True,
) -> Starlette:
    """The Starlette app serving ``gate``.

    :param gate: the model's gate; its ``worker`` must be a :class:`ServerWorker` (the
        audio metrics exported on ``/metrics`` are that worker's registry).
    :param limits: body and acquisition limits (defaults derived from the gate's policy).
        Unless the gate's acquisition policy already has a ``shared_bytes`` budget, the
        app gives it one (``limits.max_inflight_acquired_bytes``).
    :param served_model: the ``model`` echoed when a request names none (default: the
        family name).
    :param close_worker: close the worker when the app shuts down.
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
    server = _AudioServer(
        gate,
        worker,
        limits=limits or ServerLimits(),
        served_model=served_model or gate.policy.family,
        close_worker=close_worker,
    )
    handlers: dict[Any, Callable[[Request, Exception], Any]] = {HTTPException: _http_error}
    app = _AudioApp(
        routes=[
            Route(PREPARE_PATH, server.prepare, methods=["POST"]),
            Route("/metrics", server.metrics_endpoint, methods=["GET"]),
            Route("/healthz", server.healthz, methods=["GET"]),
        ],
        exception_handlers=handlers,
        lifespan=server.lifespan,
    )
    app.state.audiogate = server
    return app
