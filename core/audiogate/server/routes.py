"""The routes: ``POST /v1/audio/prepare`` (read the body under its budgets, prepare,
answer), ``GET /metrics`` and ``GET /healthz``.

Every prepare request is counted once in the audio metrics: this handler owns it. What
fails before the call is parsed (the queue at the door, the body, JSON) is counted here;
from then on the handler drives a :class:`~audiogate.request.Request` and closes it
once: as completed when its answer is admitted into the body budget, or as the answer
was refused or abandoned there (``memory_limit``, cancelled), or with the error the
client was answered with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar

import anyio.to_thread
import attrs
import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from audiogate.acquire import AcquiredBytes
from audiogate.api import AudioGate
from audiogate.budget import BudgetHold, ByteBudget
from audiogate.cancel import CancelToken
from audiogate.errors import (
    AudioGateError,
    LimitError,
    MemoryLimitError,
    PreprocessCancelled,
    QueueFullError,
    WorkerUnavailableError,
    clear_frames,
)
from audiogate.metrics import record_outcome
from audiogate.request import Request as GateRequest
from audiogate.server.auth import OwnerTokens, owner_of
from audiogate.server.budgets import (
    BODY_BYTES_LIMIT,
    ServerLimits,
    ServerMetrics,
    default_max_body_bytes,
)
from audiogate.server.encoding import encoded_features_bound
from audiogate.server.errors import (
    STATUS_CLIENT_CLOSED,
    BadRequestError,
    RequestTimeoutError,
    error_response,
)
from audiogate.server.protocol import COLLECTED_BODY
from audiogate.server.requests import LargeBodyLane, parse_body, parse_call
from audiogate.server.responses import FragmentsResponse, json_response, render_answer, render_head
from audiogate.server.sources import SourceRoutes
from audiogate.worker import AudioWorker

__all__ = ["AudioServer", "ClientGone", "RequestTicket"]

MIB: Final = 1 << 20
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


@attrs.define
class _Ticket:
    """One request's progress: the gate's request once the call is parsed (it records
    the outcome when closed; before, this handler does) and whether the body was read."""

    request: GateRequest | None = None
    body_read: bool = False


class _RatedChunks:
    """A body's chunks and how fast they arrive: once the body has been arriving for
    ``grace_s``, it must average ``rate`` bytes per second (0: no minimum)."""

    def __init__(self, chunks: AsyncIterator[bytes], rate: int, grace_s: float) -> None:
        self.chunks = chunks
        self.rate = rate
        self.grace_s = grace_s
        self.started = time.monotonic()
        self.received = 0

    def rate_deadline(self) -> float:
        """When the bytes received so far fall below the minimum rate."""
        if self.rate <= 0:
            return math.inf
        return self.started + self.grace_s + self.received / self.rate


class _ClientGone(Exception):
    """The client disconnected; there is nobody to answer."""


#: Public names of the request's progress and of a gone client, for other handlers.
RequestTicket = _Ticket
ClientGone = _ClientGone


async def _wait_for_disconnect(receive: Receive) -> None:
    # Once the body is read, the server's next message is ``http.disconnect``: the client
    # went away (or the response completed, by which time this task is cancelled).
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _DisconnectWatch:
    """While the ``async with`` block runs, a client that disconnects cancels ``token``
    and then the handler's own task; the block then raises :class:`_ClientGone` once the
    work awaited in it has let go.

    The work runs in the handler's task, not a task of its own: one watcher task per
    block instead of a task for the work, one for the watch and an ``asyncio.wait``
    around them (issue #35: the handler's orchestration cost as much as a cached 1 s
    request's preparation). The watcher cancels the handler only while the block is
    suspended in it, so the cancellation lands inside the block, where it is taken back.
    """

    __slots__ = ("_active", "_gone", "_task", "_token", "_watcher")

    def __init__(self, request: Request, token: CancelToken | None) -> None:
        task = asyncio.current_task()
        assert task is not None, "a handler runs in a task"
        self._task = task
        self._token = token
        self._active = True
        self._gone = False
        self._watcher: asyncio.Task[None] | None = asyncio.create_task(self._watch(request.receive))

    async def _watch(self, receive: Receive) -> None:
        await _wait_for_disconnect(receive)
        if self._active:
            # The client went away: cancel acquisition and processing, then the await.
            self._gone = True
            if self._token is not None:
                self._token.cancel()
            self._task.cancel()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: object
    ) -> None:
        self._active = False
        # Dropped as well as cancelled: the ended watcher keeps its CancelledError, whose
        # traceback holds _watch's frame and so this watch. Kept, that was a cycle of about
        # 35 objects per request (the request's tasks, frames, cycle, token) for the
        # garbage collector, whose full collections stopped the loop 50-70 ms each.
        watcher, self._watcher = self._watcher, None
        assert watcher is not None
        watcher.cancel()
        if self._gone:
            self._task.uncancel()  # this watch's own cancellation, taken back
            raise _ClientGone from None
        cancelled = kind is not None and issubclass(kind, asyncio.CancelledError)
        if cancelled and self._token is not None:
            # This handler is being cancelled (shutdown): so are acquisition and processing.
            self._token.cancel()


class AudioServer:
    """The handlers of one app: ``POST /v1/audio/prepare``, ``GET /metrics``,
    ``GET /healthz``, and the app's lifespan (closing the worker)."""

    def __init__(
        self,
        gate: AudioGate,
        worker: AudioWorker,
        *,
        limits: ServerLimits,
        served_model: str,
        close_worker: bool,
        owners: Mapping[str, str] | None = None,
    ) -> None:
        self.gate = gate
        #: Bearer tokens → owners (``--auth-tokens``), indexed once for constant-time
        #: look-ups; ``None``: one anonymous owner.
        self.owners = None if owners is None else OwnerTokens.of(owners)
        self.worker = worker
        self.metrics = worker.metrics
        self.family = gate.policy.family
        self.metrics.ensure_family(self.family)
        self.served_model = served_model
        self.close_worker = close_worker
        self.max_body_bytes = limits.max_body_bytes or default_max_body_bytes(
            gate.acquisition.max_bytes_per_request
        )
        self.server_metrics = ServerMetrics(self.metrics)
        self._responses_by_status: dict[int, Counter] = {}
        self.limits = limits
        self.body_idle_timeout_s = limits.body_idle_timeout_s
        self.min_body_rate = limits.min_body_rate
        self._helper = concurrent.futures.ThreadPoolExecutor(1, "audiogate-server-io")
        #: Large bodies are read, parsed and prepared on at most half the worker's threads.
        self.large_bodies = LargeBodyLane(
            max(1, worker.limits.threads // 2), wait_s=limits.body_idle_timeout_s or None
        )
        self.bodies = ByteBudget(
            limits.max_inflight_body_bytes or 4 * self.max_body_bytes,
            limit=BODY_BYTES_LIMIT,
            on_change=self.server_metrics.inflight_body_bytes.set,
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
        #: The ``/v1/audio/sources`` handlers, with a source store.
        self.sources = SourceRoutes(self, gate.store) if gate.store is not None else None

    # --- POST /v1/audio/prepare --------------------------------------------------------

    async def prepare(self, request: Request) -> Response:
        # A prepared request still needs room for its answer in the body budget, which
        # may refuse it (413) or see the client leave while it waits (499): it is closed
        # (and counted) once its answer is admitted, or as it was answered.
        ticket = _Ticket()
        hold = self.bodies.hold()
        response: Response
        try:
            response = await self._prepare(request, hold, ticket)
            self._count(ticket, None)  # its answer is admitted: completed (if audio)
        except (_ClientGone, ClientDisconnect, PreprocessCancelled) as gone:
            self._count(ticket, gone, cancelled=True)
            response = Response(status_code=STATUS_CLIENT_CLOSED)
            clear_frames(gone)
        except Exception as error:
            self._count(ticket, error)
            response = error_response(error, close=not ticket.body_read)
            clear_frames(error)
        except asyncio.CancelledError:
            # uvicorn cancels the requests still running when its graceful shutdown times
            # out (--body-timeout); left to it, the client would get a bare 500 that no
            # metric counts. It gets a counted 503 instead, and the connection closes.
            task = asyncio.current_task()
            if task is None or task.uncancel() > 0:  # cancelled again: stop now
                self._count(ticket, None, cancelled=True)
                hold.release()
                raise
            stopped = WorkerUnavailableError(
                "the server is shutting down and stopped this request; retry it"
            )
            self._count(ticket, stopped)
            response = error_response(stopped, close=True)
        except BaseException:
            self._count(ticket, None, cancelled=True)
            hold.release()
            raise
        if not isinstance(response, FragmentsResponse):
            hold.release()  # an answer being sent releases it once it is out
        self.count_response(response.status_code)
        return response

    async def _prepare(self, request: Request, hold: BudgetHold, ticket: _Ticket) -> Response:
        owner = owner_of(request, self.owners)
        if self._queue_full():
            await self._refuse_at_the_door(request, ticket)
        async with self.large_bodies.ticket() as lane:  # see LargeBodyLane
            declared = request.headers.get("content-length")
            await lane.admit(None if declared is None else int(declared))
            body = await self._read_body(request, hold)
            ticket.body_read = True
            await lane.admit(len(body))
            if len(body) > _OFFLOOP_PARSE_BYTES:
                document = await self._off_loop(parse_body, body)
            else:
                document = parse_body(body)
            del body
            call = parse_call(document)
            del document
            token = CancelToken()
            prepared = ticket.request = self.gate.request(call.messages, cancel=token, owner=owner)
            result = await self._until_disconnect(request, prepared.run_async(), token)
        head = render_head(result, call, self.served_model)
        inputs = result.model_inputs if call.return_features else {}
        # The answer is held until it is sent: its bound is taken from the body budget
        # before it is encoded (waiting for room, as answers being sent give theirs
        # back), so clients that read slowly backpressure the others instead of growing
        # memory past the budget.
        bound = len(head) + 16 + (encoded_features_bound(inputs) if inputs else 0)
        await self._room_for_answer(request, hold, bound)
        nbytes = sum(int(np.asarray(a).nbytes) for a in inputs.values())
        if nbytes > _OFFLOOP_BYTES:
            fragments = await self._off_loop(render_answer, head, inputs, call)
        else:
            fragments = render_answer(head, inputs, call)
        del result, inputs
        response = FragmentsResponse(
            fragments, on_sent=hold.release, stall_timeout_s=self.body_idle_timeout_s
        )
        hold.shrink(bound - response.nbytes)  # what the bound overestimated
        return response

    async def _off_loop(self, function: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._helper, function, *args)

    async def _read_body(self, request: Request, hold: BudgetHold) -> bytes:
        cap = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and "transfer-encoding" in request.headers:
            # RFC 9112 §6.1: such a message may be an attempt at request smuggling, and a
            # server that answers it must close the connection (it does: body unread).
            raise BadRequestError(
                "the request has both Content-Length and Transfer-Encoding headers"
            )
        # What the connection collected of the body is held already (server.protocol).
        collected: BudgetHold | None = request.scope.get(COLLECTED_BODY)
        async with contextlib.aclosing(request.stream()) as stream:
            chunks = _RatedChunks(aiter(stream), self.min_body_rate, self.body_idle_timeout_s)
            if declared is not None:
                # h11 has already refused a malformed Content-Length. The preflight only
                # checks: bytes are held as they arrive, never on the client's word.
                length = int(declared)
                if length > cap:
                    raise LimitError("request body bytes", actual=length, maximum=cap)
                if not self.bodies.fits(length - (collected.nbytes if collected else 0)):
                    await self._discard(chunks)
                    raise self.bodies.refusal(length)
            # Joined once at the end: a growing bytearray copied a 1.28 MB body about
            # three times over as it grew, chunk by chunk.
            pieces: list[bytes] = []
            received = 0
            while (chunk := await self._next_chunk(chunks)) is not None:
                if not chunk:
                    continue  # Starlette's closing b"": joined, it would copy a lone body
                if received + len(chunk) > cap:
                    raise LimitError(
                        "request body bytes", actual=received + len(chunk), maximum=cap
                    )
                try:
                    fresh = len(chunk)
                    if collected is not None and collected.nbytes:
                        # Moved into this request's hold: held twice for a moment, never
                        # by none (another request could take them in between).
                        moved = min(collected.nbytes, fresh)
                        hold.take(moved, force=True)
                        collected.shrink(moved)
                        fresh -= moved
                    hold.take(fresh)
                except MemoryLimitError:
                    if declared is not None:
                        await self._discard(chunks)
                    raise
                pieces.append(chunk)
                received += len(chunk)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def _next_chunk(self, chunks: _RatedChunks) -> bytes | None:
        idle = self.body_idle_timeout_s
        wait_s = min(idle, chunks.rate_deadline() - time.monotonic())
        try:
            async with asyncio.timeout(max(0.0, wait_s)):
                chunk = await anext(chunks.chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            if wait_s < idle:
                raise RequestTimeoutError(
                    f"the request body arrives slower than {self.min_body_rate} bytes/s "
                    f"({chunks.received} bytes in {time.monotonic() - chunks.started:.0f} s)"
                ) from None
            raise RequestTimeoutError(f"no request body bytes arrived for {idle:g} s") from None
        chunks.received += len(chunk)
        return chunk

    async def _discard(self, chunks: _RatedChunks) -> None:
        # A body under the cap refused for a full budget is read and dropped (nothing is
        # kept), so the client, still sending, gets the 413 rather than a reset connection.
        with contextlib.suppress(ClientDisconnect, RequestTimeoutError):
            while await self._next_chunk(chunks) is not None:
                pass

    async def _until_disconnect(
        self, request: Request, work: Coroutine[Any, Any, _T], token: CancelToken | None = None
    ) -> _T:
        """``work``, or :class:`_ClientGone` as soon as the client disconnects (then
        ``token`` is cancelled and ``work`` awaited until it has let go)."""
        async with _DisconnectWatch(request, token):
            return await work
        raise AssertionError("unreachable")  # for mypy: the watch never swallows

    async def _room_for_answer(self, request: Request, hold: BudgetHold, nbytes: int) -> None:
        """Hold ``nbytes`` more for the answer in the body budget: at once where they fit
        (or this request holds everything held), else waiting for room until the client
        disconnects (:class:`_ClientGone`) or the body timeout (``MemoryLimitError``)."""
        bodies = self.bodies
        if bodies.fits(nbytes) or bodies.held <= hold.nbytes:
            hold.take(nbytes, force=True)  # make_room's answer without waiting: no tasks
            return
        await self._until_disconnect(
            request, bodies.make_room(hold, nbytes, timeout_s=self.body_idle_timeout_s)
        )

    def _queue_full(self) -> bool:
        return self.worker.queue_full

    async def _refuse_at_the_door(self, request: Request, ticket: _Ticket) -> None:
        """429 at the door while the worker's queue is full: the body is read and dropped
        (nothing held; a client that sends ``Connection: close`` would otherwise get a
        reset instead of the answer), never parsed; no template, no decoding, no plan.
        Refused at the worker's admission instead, a request cost about as much
        event-loop time as an answer, and under overload the admitted requests' loop
        work waited behind the refused ones' (docs/server.md, "Overload")."""
        depth = self.worker.limits.queue_depth
        refusal = QueueFullError(f"the audio queue is full ({depth} jobs waiting); retry later")
        declared = request.headers.get("content-length")
        if declared is not None and int(declared) > self.max_body_bytes:
            raise refusal  # not read: the connection closes
        async with contextlib.aclosing(request.stream()) as stream:
            chunks = _RatedChunks(aiter(stream), self.min_body_rate, self.body_idle_timeout_s)
            with contextlib.suppress(ClientDisconnect, RequestTimeoutError):
                while await self._next_chunk(chunks) is not None:
                    if chunks.received > self.max_body_bytes:
                        raise refusal  # a chunked body past the cap: not read to its end
        ticket.body_read = True
        raise refusal

    def _count(
        self, ticket: _Ticket, error: BaseException | None, *, cancelled: bool = False
    ) -> None:
        """End the request as it was answered: its gate request closes (and counts) it;
        one refused before the call was parsed is counted here."""
        if ticket.request is not None:
            ticket.request.close(error, cancelled=cancelled)
        elif error is not None or cancelled:
            record_outcome(self.metrics, self.family, None if cancelled else error)

    # --- for the app's other handlers (the vLLM render routes) --------------------------

    async def admit_body(self, request: Request, hold: BudgetHold, ticket: RequestTicket) -> bytes:
        """The request's body, read under this server's caps into ``hold``; a 429 at the
        door instead while the worker's queue is full.

        :raises QueueFullError: the queue is full (the body read and dropped).
        """
        if self._queue_full():
            await self._refuse_at_the_door(request, ticket)
        body = await self._read_body(request, hold)
        ticket.body_read = True
        return body

    async def off_loop(self, function: Callable[..., _T], *args: Any) -> _T:
        """``function(*args)`` on the server's helper thread."""
        return await self._off_loop(function, *args)

    async def until_disconnect(
        self, request: Request, work: Coroutine[Any, Any, _T], token: CancelToken | None = None
    ) -> _T:
        """``work``, or :class:`ClientGone` once the client disconnects."""
        return await self._until_disconnect(request, work, token)

    async def room_for_answer(self, request: Request, hold: BudgetHold, nbytes: int) -> None:
        """Hold ``nbytes`` more in the body budget for an answer (waiting for room; see
        :meth:`ByteBudget.make_room <audiogate.budget.ByteBudget.make_room>`), or
        :class:`ClientGone` once the client disconnects while it waits."""
        await self._room_for_answer(request, hold, nbytes)

    def count_response(self, status: int) -> None:
        """Count one prepare answer of ``status`` (its labelled counter looked up once)."""
        counter = self._responses_by_status.get(status)
        if counter is None:
            counter = self.server_metrics.responses.labels(status=str(status))
            self._responses_by_status[status] = counter
        counter.inc()

    def close_ticket(
        self, ticket: RequestTicket, error: BaseException | None, *, cancelled: bool = False
    ) -> None:
        """End and count the request as it was answered."""
        self._count(ticket, error, cancelled=cancelled)

    # --- GET /metrics, GET /healthz -----------------------------------------------------

    async def metrics_endpoint(self, request: Request) -> Response:
        if self.owners is not None:
            # With --auth-tokens, counters that move with content (feature-cache hits)
            # are no channel to callers without a token (docs/sources.md).
            try:
                owner_of(request, self.owners)
            except AudioGateError as error:
                return error_response(error, close=False)
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
        return json_response(503 if closed else 200, payload)

    # --- app -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        if self.sources is not None:
            await self.sources.close()
        if self.close_worker:
            await anyio.to_thread.run_sync(self.worker.close)
            if self.gate.store is not None:
                # Off the loop: closing finishes the store's pending writes.
                await anyio.to_thread.run_sync(self.gate.store.close)
        self._helper.shutdown(wait=False)
