"""The source endpoints (``audiogate serve --store DIR``, docs/sources.md) and owners.

* ``POST /v1/audio/sources``: the body is the audio itself (its ``Content-Type`` says
  the format: ``audio/wav``, ``audio/mpeg``, ``audio/flac``, ... or
  ``application/octet-stream`` for any container recognised from the bytes), or JSON
  ``{"input_audio": {...}}`` / ``{"audio_url": {...}}`` as in a chat content part;
  ``?scope=shared`` shares it. The body is read under the server's body cap and budget,
  then admitted as inline audio is, under the model's policy. ``201`` and the new record,
  or ``200`` and the existing one when the same owner uploads the same bytes again.
  A new source is ``processing`` while its features are computed (warming the feature
  cache), then ``ready``; a prompt referencing it meanwhile waits. A body sent chunked
  (no ``Content-Length``), or raw PCM declared in the query
  (``?format=pcm16&rate_hz=24000&channels=1``), is prepared while it is received
  (:mod:`~audiogate.server.stream_upload`) and answered ``ready``. A failed disk write
  answers a typed JSON ``507`` (the disk is full) or ``500`` and leaves no file behind.
* ``GET /v1/audio/sources``: the caller's sources; ``GET /v1/audio/sources/{sha256}``:
  one the caller may reference; ``DELETE /v1/audio/sources/{sha256}``: retire it (the
  answer comes once the requests holding it let go).

Owners: ``--auth-tokens FILE`` holds ``TOKEN OWNER`` lines (``#`` starts a comment);
every ``/v1/audio/*`` request then needs ``Authorization: Bearer TOKEN`` (else 401) and
acts as its owner. Without it, every request is :data:`~audiogate.store.ANONYMOUS_OWNER`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from starlette.requests import Request
from starlette.responses import Response

from audiogate.acquire import acquire_parts
from audiogate.decode.geometry import AUTO, WAV, SourceFormat
from audiogate.errors import AudioGateError, QueueFullError
from audiogate.server.auth import OwnerTokens, owner_of
from audiogate.server.errors import (
    BadRequestError,
    ServerConfigError,
    UnauthorizedError,
    error_payload,
    error_response,
)
from audiogate.server.requests import parse_body
from audiogate.server.responses import json_response
from audiogate.server.stream_upload import StreamedUploads, StreamMetrics, raw_declaration
from audiogate.store import SourceStore, StoreWriteError, check_digest
from audiogate.streaming.deadlines import StreamDeadlines

if TYPE_CHECKING:
    from audiogate.server.routes import AudioServer

__all__ = [
    "CONTENT_TYPES",
    "RAW_CONTENT_TYPES",
    "SOURCES_PATH",
    "SourceRoutes",
    "UnauthorizedError",
    "load_auth_tokens",
]

SOURCES_PATH: Final = "/v1/audio/sources"

#: Raw upload media types → the declared format (parameters after ``;`` are ignored).
CONTENT_TYPES: Final[Mapping[str, SourceFormat]] = {
    "audio/wav": WAV,
    "audio/wave": WAV,
    "audio/x-wav": WAV,
    "audio/vnd.wave": WAV,
    "audio/mpeg": SourceFormat("mp3"),
    "audio/mp3": SourceFormat("mp3"),
    "audio/flac": SourceFormat("flac"),
    "audio/x-flac": SourceFormat("flac"),
    "audio/ogg": SourceFormat("ogg"),
    "audio/opus": SourceFormat("opus"),
    "audio/webm": SourceFormat("webm"),
    "audio/mp4": SourceFormat("mp4"),
    "audio/m4a": SourceFormat("mp4"),
    "audio/x-m4a": SourceFormat("mp4"),
    "audio/aac": SourceFormat("mp4"),
    "audio/aiff": SourceFormat("aiff"),
    "audio/x-aiff": SourceFormat("aiff"),
    "audio/basic": SourceFormat("au"),
    "audio/x-au": SourceFormat("au"),
    "audio/x-caf": SourceFormat("caf"),
    "application/octet-stream": AUTO,
}

#: Media types a raw PCM upload (``?format=pcm16&rate_hz=...``) may be sent as.
RAW_CONTENT_TYPES: Final = frozenset({"", "application/octet-stream", "audio/pcm"})

log = logging.getLogger("audiogate.server")


def load_auth_tokens(path: str | os.PathLike[str]) -> OwnerTokens:
    """``--auth-tokens FILE``: one ``TOKEN OWNER`` per line; blank lines and ``#`` comments
    are skipped.

    :raises ServerConfigError: unreadable, a malformed line, a token given twice, or no
        token at all.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServerConfigError(
            f"the auth tokens file (--auth-tokens) {str(path)!r}: {exc}"
        ) from None
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ServerConfigError(
                f"the auth tokens file (--auth-tokens) {str(path)!r} line {number}: expected "
                f"'TOKEN OWNER', got {len(fields)} field(s)"
            )
        token, owner = fields
        if token in tokens:
            raise ServerConfigError(
                f"the auth tokens file (--auth-tokens) {str(path)!r} line {number}: a token "
                f"is given twice"
            )
        tokens[token] = owner
    if not tokens:
        raise ServerConfigError(
            f"the auth tokens file (--auth-tokens) {str(path)!r} holds no 'TOKEN OWNER' line"
        )
    return OwnerTokens(tokens)


def _digest(request: Request) -> str:
    value = request.path_params["sha256"]
    try:
        return check_digest(value)
    except ValueError as exc:
        raise BadRequestError(str(exc), field="sha256") from None


def _scope(request: Request) -> str:
    scope = request.query_params.get("scope", "private")
    if scope not in ("private", "shared"):
        raise BadRequestError(
            f"scope must be 'private' or 'shared', not {scope[:40]!r}", field="scope"
        )
    return scope


class SourceRoutes:
    """The ``/v1/audio/sources`` handlers of one :class:`~audiogate.server.routes.AudioServer`."""

    def __init__(self, server: AudioServer, store: SourceStore) -> None:
        self.server = server
        self.store = store
        self._warming: set[asyncio.Task[None]] = set()
        self._streamed: StreamedUploads | None = None

    @property
    def streamed(self) -> StreamedUploads:
        """The streamed uploads' handler (:func:`~audiogate.server.app.create_app` sets
        it with the server's deadlines; else the default deadlines)."""
        if self._streamed is None:
            self._streamed = StreamedUploads(
                self.server, StreamDeadlines(), StreamMetrics(self.server.metrics)
            )
        return self._streamed

    @streamed.setter
    def streamed(self, handler: StreamedUploads) -> None:
        self._streamed = handler

    async def add(self, request: Request) -> Response:
        """``POST /v1/audio/sources``."""
        server = self.server
        hold = server.bodies.hold()
        try:
            owner = owner_of(request, server.owners)
            scope = _scope(request)
            media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            raw = raw_declaration(request.query_params)
            if raw is not None and media not in RAW_CONTENT_TYPES:
                raise BadRequestError(
                    f"raw PCM (?format=) is sent as one of {sorted(RAW_CONTENT_TYPES)}, not "
                    f"Content-Type {media!r}",
                    field="content-type",
                )
            if raw is None and media != "application/json" and media not in CONTENT_TYPES:
                raise BadRequestError(
                    f"Content-Type {media or '(none)'!r} is not an accepted upload; send the "
                    f"audio with one of {sorted(CONTENT_TYPES)}, or application/json with "
                    f'{{"input_audio": {{...}}}} or {{"audio_url": {{...}}}}',
                    field="content-type",
                )
            if raw is not None or (
                media != "application/json" and "content-length" not in request.headers
            ):
                # Raw PCM, or audio sent chunked: prepared while it is received.
                return await self.streamed.add(
                    request,
                    hold,
                    owner=owner,
                    scope=scope,
                    source_format=raw or CONTENT_TYPES[media],
                )
            body = bytes(await server._read_body(request, hold))
            if media == "application/json":
                data, source_format = await self._from_json(body)
            else:
                data, source_format = body, CONTENT_TYPES[media]
            del body
            gate = server.gate
            # In the store's own bounded executor: an upload waiting on the disk or the
            # index's write lock holds none of the loop's default threads.
            added = await self.store.run_async(
                lambda: gate.add_source(
                    data,
                    owner=owner,
                    scope=scope,  # type: ignore[arg-type]
                    source_format=source_format,
                    status="processing",
                )
            )
        except StoreWriteError as error:
            log.error("%s", error)
            return json_response(error.status, error_payload(error))
        except AudioGateError as error:
            return error_response(error, close=False)
        finally:
            hold.release()
        if added.created:
            self._warm(data, source_format, added.record.sha256, owner)
        return json_response(201 if added.created else 200, added.record.as_dict())

    async def _from_json(self, body: bytes) -> tuple[bytes, SourceFormat]:
        document = parse_body(body)
        kinds = (
            [k for k in ("input_audio", "audio_url") if k in document]
            if isinstance(document, dict)
            else []
        )
        if not isinstance(document, dict) or len(kinds) != 1 or len(document) != 1:
            raise BadRequestError(
                'a JSON upload is {"input_audio": {...}} or {"audio_url": {...}}, as in a '
                "chat content part",
                field="body",
            )
        kind = kinds[0]
        gate = self.server.gate
        (clip,) = await acquire_parts(
            [{"type": kind, kind: document[kind]}], policy=gate.acquisition
        )
        return clip.data, clip.source_format

    def _warm(self, data: bytes, source_format: SourceFormat, sha256: str, owner: str) -> None:
        """Compute the new source's features (the feature cache keeps them), then mark it
        ready; a prompt referencing it meanwhile waits."""

        async def warm() -> None:
            from audiogate.acquire import EncodedClip

            clip = EncodedClip(data=data, source_format=source_format, ordinal=1, origin="bytes")
            try:
                # In the uploader's own part of the feature cache: their references hit.
                await self.server.gate.prepare_async(clips=[clip], owner=owner)
            except QueueFullError:
                pass  # busy: computed by the first request that needs them
            except Exception as exc:  # admitted, so unexpected: the source stays usable
                log.warning("warming source %s failed: %s", sha256, exc)
            finally:
                await self.store.mark_ready_async(sha256, owner=owner)

        task = asyncio.get_running_loop().create_task(warm())
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def show(self, request: Request) -> Response:
        """``GET /v1/audio/sources/{sha256}``."""
        try:
            owner = owner_of(request, self.server.owners)
            record = await self.store.get_async(_digest(request), owner=owner)
        except AudioGateError as error:
            return error_response(error, close=False)
        return json_response(200, record.as_dict())

    async def listing(self, request: Request) -> Response:
        """``GET /v1/audio/sources`` (``?include_retired=true`` adds the history)."""
        try:
            owner = owner_of(request, self.server.owners)
        except AudioGateError as error:
            return error_response(error, close=False)
        history = request.query_params.get("include_retired", "false").lower() == "true"
        records = await self.store.list_async(owner, include_retired=history)
        return json_response(200, {"object": "list", "data": [r.as_dict() for r in records]})

    async def retire(self, request: Request) -> Response:
        """``DELETE /v1/audio/sources/{sha256}``."""
        try:
            owner = owner_of(request, self.server.owners)
            sha256 = _digest(request)
            record = await self.store.retire_async(
                sha256, owner=owner, timeout_s=self.server.limits.retire_timeout_s
            )
        except AudioGateError as error:
            return error_response(error, close=False)
        return json_response(200, record.as_dict())

    async def close(self) -> None:
        """Wait for the warm-ups still running (each ends by marking its source ready)."""
        for task in list(self._warming):
            with contextlib.suppress(BaseException):
                await task
