"""``/v1/realtime``: a WebSocket speaking the OpenAI Realtime API's *input* events.

The client sends ``input_audio_buffer.append`` (``{"audio": <base64 PCM16 LE mono>}``),
``input_audio_buffer.commit``, ``input_audio_buffer.clear`` and ``session.update``; the
server answers ``session.created`` when it connects, ``session.updated``,
``input_audio_buffer.committed`` (the clip's digest, accounting and, with a source
store, the ``audio_ref`` that names it in chat requests), ``input_audio_buffer.cleared``,
and ``error`` events in OpenAI's shape with audiogate's codes. No response is generated:
audiogate prepares audio, a model server answers.

Each buffer between commits is one clip prepared while its appends arrive
(:func:`~audiogate.streaming.transport.prepare_stream` over a queue): its bytes are held
in the server's body budget, admitted on the running totals and cut by the stream
deadlines; a commit finishes it, stores it as the caller's private source (``ready`` at
once, its prepared clip in the caller's part of the feature cache) and answers its
accounting. The input format is PCM16 at 24 kHz, as OpenAI's; another rate is declared
with ``?input_audio_rate_hz=16000`` or ``session.update`` ``{"session":
{"input_audio_format": "pcm16", "input_audio_rate_hz": 16000}}``.

Auth: ``Authorization: Bearer TOKEN``, or (as OpenAI's browser clients send it, since a
browser cannot set headers on a WebSocket) the subprotocol
``openai-insecure-api-key.TOKEN``. Without a known token the server sends an ``error``
(``unauthorized``) and closes with code 1008.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.websockets import WebSocket, WebSocketDisconnect

from audiogate.budget import BudgetHold
from audiogate.cancel import CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import (
    AudioGateError,
    EmptyAudioError,
    LimitError,
    PreprocessCancelled,
    clear_frames,
)
from audiogate.pipeline.prepared import PreparedClip
from audiogate.server.auth import OwnerTokens
from audiogate.server.errors import (
    BadRequestError,
    UnauthorizedError,
    error_payload,
    status_for,
)
from audiogate.server.stream_upload import (
    OwnerQuota,
    StreamBody,
    StreamMetrics,
    count_end,
    owner_quota,
    store_prepared,
)
from audiogate.store import ANONYMOUS_OWNER, StoreWriteError
from audiogate.streaming.deadlines import StreamDeadlines
from audiogate.streaming.transport import prepare_stream

if TYPE_CHECKING:
    from audiogate.server.routes import AudioServer

__all__ = [
    "DEFAULT_REALTIME_RATE_HZ",
    "REALTIME_PATH",
    "REALTIME_SUBPROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "RealtimeRoutes",
]

REALTIME_PATH: Final = "/v1/realtime"
#: OpenAI's ``pcm16``: 24 kHz, mono, 16-bit little-endian.
DEFAULT_REALTIME_RATE_HZ: Final = 24_000
#: The subprotocol echoed when the client offers it (OpenAI's browser clients do).
REALTIME_SUBPROTOCOL: Final = "realtime"
#: A subprotocol carrying the bearer token (browsers cannot set headers).
TOKEN_SUBPROTOCOL_PREFIX: Final = "openai-insecure-api-key."
_POLICY_VIOLATION: Final = 1008
_CLIENT_EVENTS: Final = (
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "session.update",
)


def _owner(websocket: WebSocket, owners: OwnerTokens | None, offered: list[str]) -> str:
    """Who connects: the owner of the bearer header's token, or of the token
    subprotocol's; :data:`ANONYMOUS_OWNER` without ``--auth-tokens``.

    :raises UnauthorizedError: no known token.
    """
    if owners is None:
        return ANONYMOUS_OWNER
    tokens = []
    scheme, _, token = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip(" \t"):
        tokens.append(token.strip(" \t").encode("latin-1"))
    tokens += [
        p[len(TOKEN_SUBPROTOCOL_PREFIX) :].encode("utf-8")
        for p in offered
        if p.startswith(TOKEN_SUBPROTOCOL_PREFIX)
    ]
    for candidate in tokens:
        owner = owners.owner(candidate)
        if owner is not None:
            return owner
    raise UnauthorizedError(
        "this server needs 'Authorization: Bearer TOKEN' or the subprotocol "
        f"'{TOKEN_SUBPROTOCOL_PREFIX}TOKEN' with a known token"
    )


def _rate(text: Any, field: str) -> int:
    value = text
    if isinstance(text, str) and text.isdigit():
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequestError(
            f"{field} must be a positive integer (Hz), not {str(text)[:40]!r}", field=field
        )
    return value


class _Buffer:
    """One input audio buffer: the clip being prepared from its appends."""

    def __init__(self, session: _Session, quota: OwnerQuota | None) -> None:
        server = session.routes.server
        self.quota = quota
        #: Each append's bytes and its client ``event_id``; ``None`` ends the buffer.
        self.queue: asyncio.Queue[tuple[bytes, str | None] | None] = asyncio.Queue()
        self.body = StreamBody()
        self.hold: BudgetHold = server.bodies.hold()
        self.token = CancelToken()
        self.source_format = SourceFormat.raw("pcm16", rate_hz=session.rate_hz, channels=1)
        #: The client event of the chunk being prepared (a refusal names it).
        self.event_id: str | None = None
        self._gauge = session.routes.metrics.inflight.labels(transport="realtime")
        self._gauge.inc()
        self._released = False
        self.task: asyncio.Task[PreparedClip] = asyncio.ensure_future(
            prepare_stream(
                server.gate.host,
                server.gate.policy,
                self._chunks(),
                source_format=self.source_format,
                budget=server.bodies,
                cancel=self.token,
                origin="bytes",
                deadlines=session.routes.deadlines,
            )
        )

    async def _chunks(self) -> AsyncIterator[bytes]:
        while (item := await self.queue.get()) is not None:
            chunk, self.event_id = item
            yield chunk
        self.body.ended_at = time.perf_counter()

    async def abandon(self) -> None:
        """Stop preparing (cleared, refused or disconnected) and release what it held."""
        self.token.cancel()
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        self.release()

    def release(self) -> None:
        """Release the bytes held (once, whichever path ends the buffer)."""
        if self._released:
            return
        self._released = True
        self.body.parts.clear()
        self.hold.release()
        self._gauge.dec()


class _Session:
    """One connection's events."""

    def __init__(self, routes: RealtimeRoutes, websocket: WebSocket, owner: str) -> None:
        self.routes = routes
        self.websocket = websocket
        self.owner = owner
        self.rate_hz = DEFAULT_REALTIME_RATE_HZ
        self.buffer: _Buffer | None = None
        self.id = "sess_" + secrets.token_hex(8)
        self._ids = itertools.count(1)

    def event_id(self) -> str:
        return f"event_{next(self._ids)}"

    def described(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.session",
            "model": self.routes.server.served_model,
            "modalities": ["audio"],
            "input_audio_format": "pcm16",
            "input_audio_rate_hz": self.rate_hz,
            "turn_detection": None,
        }

    async def send(self, event: dict[str, Any]) -> None:
        await self.websocket.send_text(
            json.dumps({"event_id": self.event_id(), **event}, separators=(",", ":"))
        )

    async def send_error(self, error: BaseException, event_id: str | None) -> None:
        await self.send(error_event(error, event_id))

    async def run(self) -> None:
        await self.send({"type": "session.created", "session": self.described()})
        receiving: asyncio.Future[Any] | None = None
        try:
            while True:
                if receiving is None:
                    receiving = asyncio.ensure_future(self.websocket.receive())
                waits: set[asyncio.Future[Any]] = {receiving}
                if self.buffer is not None:
                    waits.add(self.buffer.task)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                buffer = self.buffer
                if buffer is not None and buffer.task in done:
                    # Ended before its commit: refused at a chunk, or cut by a deadline.
                    await self._refused(buffer)
                if receiving not in done:
                    continue
                message = receiving.result()
                receiving = None
                if message["type"] == "websocket.disconnect":
                    return
                await self._dispatch(message)
        except WebSocketDisconnect:
            return
        finally:
            if receiving is not None and not receiving.done():
                receiving.cancel()
            if self.buffer is not None:
                buffer, self.buffer = self.buffer, None
                await buffer.abandon()
                count_end(
                    self.routes.server,
                    self.routes.metrics,
                    "realtime",
                    PreprocessCancelled(checkpoint="disconnect", clip_index=0),
                )

    async def _refused(self, buffer: _Buffer) -> None:
        self.buffer = None
        error = buffer.task.exception() if not buffer.task.cancelled() else None
        buffer.release()
        if error is None:  # cannot happen before a commit; counted as cancelled
            error = PreprocessCancelled(checkpoint="decode", clip_index=0)
        count_end(self.routes.server, self.routes.metrics, "realtime", error)
        await self.send_error(error, buffer.event_id)
        clear_frames(error)

    async def _dispatch(self, message: Mapping[str, Any]) -> None:
        event_id = None
        try:
            text = message.get("text")
            if text is None:
                raise BadRequestError("events are JSON text frames", field="event")
            try:
                event = json.loads(text)
            except ValueError as exc:
                raise BadRequestError(f"the event is not JSON: {exc}", field="event") from None
            if not isinstance(event, dict):
                raise BadRequestError("an event is a JSON object", field="event")
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            kind = event.get("type")
            if kind == "input_audio_buffer.append":
                await self._append(event, event_id)
            elif kind == "input_audio_buffer.commit":
                await self._commit()
            elif kind == "input_audio_buffer.clear":
                await self._clear()
            elif kind == "session.update":
                await self._update(event)
            else:
                raise BadRequestError(
                    f"unsupported event type {str(kind)[:60]!r}; this endpoint takes "
                    f"{', '.join(_CLIENT_EVENTS)}",
                    field="type",
                )
        except AudioGateError as error:
            await self.send_error(error, event_id)

    async def _append(self, event: Mapping[str, Any], event_id: str | None) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise BadRequestError("input_audio_buffer.append needs audio (base64)", field="audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequestError("audio is not valid base64", field="audio") from None
        if not data:
            return
        if self.buffer is None:
            quota = await owner_quota(self.routes.server, self.owner)
            self.buffer = _Buffer(self, quota)
        buffer = self.buffer
        cap = self.routes.server.max_body_bytes
        total = buffer.body.received + len(data)
        try:
            if total > cap:
                raise LimitError("request body bytes", actual=total, maximum=cap)
            if buffer.quota is not None:
                buffer.quota.check(total)
            buffer.hold.take(len(data))
        except AudioGateError as error:
            self.buffer = None
            await buffer.abandon()
            count_end(self.routes.server, self.routes.metrics, "realtime", error)
            raise
        buffer.body.received = total
        buffer.body.parts.append(data)
        self.routes.metrics.bytes.labels(transport="realtime").inc(len(data))
        buffer.queue.put_nowait((data, event_id))

    async def _commit(self) -> None:
        buffer, self.buffer = self.buffer, None
        if buffer is None:
            raise EmptyAudioError(clip_index=0, detail="the input audio buffer is empty")
        server = self.routes.server
        error: BaseException | None = None
        clip: PreparedClip | None = None
        try:
            buffer.queue.put_nowait(None)
            clip = await buffer.task
            event: dict[str, Any] = {
                "type": "input_audio_buffer.committed",
                "previous_item_id": None,
                "item_id": "item_" + clip.sha256[:24],
                "clip": _accounting(clip),
            }
            if server.gate.store is not None:
                added = await store_prepared(
                    server,
                    clip,
                    buffer.body.take(),
                    owner=self.owner,
                    scope="private",
                    source_format=buffer.source_format,
                )
                event["audio_ref"] = {"sha256": added.record.sha256}
                event["source"] = added.record.as_dict()
            await self.send(event)
        except BaseException as failed:
            error = failed
            raise
        finally:
            buffer.release()
            count_end(
                server,
                self.routes.metrics,
                "realtime",
                error,
                clip=clip,
                ended_at=buffer.body.ended_at,
            )

    async def _clear(self) -> None:
        buffer, self.buffer = self.buffer, None
        if buffer is not None:
            await buffer.abandon()
            count_end(
                self.routes.server,
                self.routes.metrics,
                "realtime",
                PreprocessCancelled(checkpoint="clear", clip_index=0),
            )
        await self.send({"type": "input_audio_buffer.cleared"})

    async def _update(self, event: Mapping[str, Any]) -> None:
        session = event.get("session", {})
        if not isinstance(session, dict):
            raise BadRequestError("session.update needs a session object", field="session")
        audio_format = session.get("input_audio_format", "pcm16")
        if audio_format != "pcm16":
            raise BadRequestError(
                f"input_audio_format must be 'pcm16', not {str(audio_format)[:40]!r}",
                field="session.input_audio_format",
            )
        rate = self.rate_hz
        if "input_audio_rate_hz" in session:
            rate = _rate(session["input_audio_rate_hz"], "session.input_audio_rate_hz")
        if rate != self.rate_hz and self.buffer is not None:
            raise BadRequestError(
                "the input audio rate cannot change while the buffer holds audio; commit or "
                "clear it first",
                field="session.input_audio_rate_hz",
            )
        self.rate_hz = rate
        await self.send({"type": "session.updated", "session": self.described()})


def _accounting(clip: PreparedClip) -> dict[str, Any]:
    return {
        "sha256": clip.sha256,
        "bytes": clip.encoded_bytes,
        "source_rate_hz": clip.source_rate_hz,
        "channels": clip.channels,
        "source_samples": clip.source_samples,
        "duration_us": clip.duration_us,
        "normalized_samples": clip.normalized_samples,
        "effective_rate_hz": clip.effective_rate_hz,
        "frames": clip.frames,
        "tokens": clip.tokens,
        "truncated": clip.truncated,
    }


def error_event(error: BaseException, event_id: str | None) -> dict[str, Any]:
    """An ``error`` event in OpenAI's shape, with audiogate's code and reason (and the
    limit's figures where there are any); ``event_id`` is the client event's."""
    body = error_payload(error)["error"]
    status = error.status if isinstance(error, StoreWriteError) else status_for(error)
    detail: dict[str, Any] = {
        "type": "invalid_request_error" if status < 500 else "server_error",
        "code": body["code"],
        "message": body["message"],
        "param": body.get("field"),
        "event_id": event_id,
        "status": status,
        "reason": body["reason"],
    }
    for name in ("limit", "actual", "maximum"):
        if name in body:
            detail[name] = body[name]
    return {"type": "error", "error": detail}


class RealtimeRoutes:
    """The ``/v1/realtime`` WebSocket of one server."""

    def __init__(
        self, server: AudioServer, deadlines: StreamDeadlines, metrics: StreamMetrics
    ) -> None:
        self.server = server
        self.deadlines = deadlines
        self.metrics = metrics

    async def endpoint(self, websocket: WebSocket) -> None:
        """One connection: accept, authenticate, then the session's events."""
        offered = list(websocket.scope.get("subprotocols") or [])
        chosen = REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in offered else None
        await websocket.accept(subprotocol=chosen)
        try:
            owner = _owner(websocket, self.server.owners, offered)
            session = _Session(self, websocket, owner)
            rate = websocket.query_params.get("input_audio_rate_hz")
            if rate is not None:
                session.rate_hz = _rate(rate, "input_audio_rate_hz")
        except AudioGateError as error:
            with contextlib.suppress(Exception):
                await websocket.send_text(json.dumps(error_event(error, None)))
                await websocket.close(code=_POLICY_VIOLATION)
            return
        with self.metrics.sessions():
            await session.run()
        with contextlib.suppress(Exception):
            await websocket.close()
