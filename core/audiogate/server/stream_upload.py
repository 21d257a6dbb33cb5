"""Streamed sources: a ``POST /v1/audio/sources`` body prepared while it is received, and
what the Realtime WebSocket (:mod:`~audiogate.server.realtime`) shares with it.

An upload sent without ``Content-Length`` (``Transfer-Encoding: chunked``), or declared
raw PCM (``?format=pcm16&rate_hz=24000&channels=1``), is read chunk by chunk into
:func:`~audiogate.streaming.transport.prepare_stream`: every chunk is held in the body
budget as it arrives, admitted on the running totals, decoded and pushed into the
family's streaming frontend, so the clip is prepared when the last byte comes. Then the
bytes are admitted and stored as a normal upload's are (the digest is the SHA-256 of the
bytes received) and the prepared clip goes where the normal upload's background
preparation puts it: the uploader's own part of the feature cache, under the key an
``audio_ref`` to the source looks up, and the store's persistent tier. The source is
``ready`` in the answer.

A limit crossed mid-stream (the body cap, the body budget, the policy's limits, the
deadlines of :mod:`~audiogate.streaming.deadlines`) answers the typed error at that chunk
and stops reading; a client that disconnects leaves nothing stored. Every path releases
what the stream held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Final

import attrs
from prometheus_client import Counter, Gauge
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from audiogate.acquire.clip import EncodedClip
from audiogate.budget import BudgetHold
from audiogate.cache.entry import CachedClip
from audiogate.cache.key import feature_key
from audiogate.cancel import CancelToken
from audiogate.decode.geometry import Encoding, SourceFormat
from audiogate.errors import (
    AudioGateError,
    DecodeError,
    LimitError,
    PreprocessCancelled,
    SourceQuotaError,
    clear_frames,
    error_code,
)
from audiogate.metrics import AudioMetrics, record_outcome
from audiogate.metrics.outcome import Completed
from audiogate.pipeline.preflight import preflight
from audiogate.pipeline.prepared import PreparedClip
from audiogate.server.errors import (
    STATUS_CLIENT_CLOSED,
    BadRequestError,
    error_payload,
    error_response,
)
from audiogate.server.responses import json_response
from audiogate.store import AddedSource, StoreWriteError
from audiogate.streaming.deadlines import StreamDeadlines
from audiogate.streaming.transport import prepare_stream, record_stream_waveforms

if TYPE_CHECKING:
    from audiogate.server.routes import AudioServer

__all__ = [
    "RAW_ENCODINGS",
    "STREAM_TRANSPORTS",
    "OwnerQuota",
    "StreamBody",
    "StreamMetrics",
    "StreamedUploads",
    "count_end",
    "owner_quota",
    "raw_declaration",
    "store_prepared",
]

#: The transports a stream arrives by (the ``transport`` label of the stream series).
STREAM_TRANSPORTS: Final = ("upload", "realtime")
#: Raw PCM encodings a stream may declare (``?format=``).
RAW_ENCODINGS: Final = ("pcm16", "f32")
_OUTCOMES: Final = ("completed", "refused", "cancelled")
#: Refusal codes exported at zero (others appear when they first occur).
_EXPORTED_REFUSALS: Final = ("limit", "memory_limit", "stream_timeout")
_STREAM_ORIGIN: Final = "bytes"
#: A WAV header's RIFF size field ends here.
_RIFF_SIZE_END: Final = 8
_UNKNOWN_RIFF_SIZES: Final = (0, 0xFFFFFFFF)


def _check_riff_size(head: bytes) -> None:
    """Refuse a WAV stream whose header does not declare its length, at its first bytes:
    the stored source must be a WAV the whole-clip path reads (which refuses such a
    header), and its digest the bytes received, so the header cannot be patched.

    :raises DecodeError: ``riff_size_mismatch``.
    """
    if head[:4] == b"RIFF" and int.from_bytes(head[4:8], "little") in _UNKNOWN_RIFF_SIZES:
        raise DecodeError(
            "the WAV upload's header does not declare its length (RIFF size 0 or "
            "0xFFFFFFFF), and a stored source must; stream raw PCM instead "
            "(?format=pcm16&rate_hz=...&channels=...)",
            clip_index=0,
            code="riff_size_mismatch",
        )


class StreamMetrics:
    """The series of streamed clips, on the audio metrics' registry."""

    def __init__(self, metrics: AudioMetrics) -> None:
        registry = metrics.registry
        self.inflight = Gauge(
            "audiogate_server_streams_inflight",
            "Streamed clips being received (chunked uploads, Realtime audio buffers).",
            ["transport"],
            registry=registry,
        )
        self.bytes = Counter(
            "audiogate_server_stream_bytes",
            "Audio bytes received by streamed clips.",
            ["transport"],
            registry=registry,
        )
        self.ended = Counter(
            "audiogate_server_streams",
            "Streamed clips ended, by transport and outcome (completed, refused, cancelled).",
            ["transport", "outcome"],
            registry=registry,
        )
        self.refusals = Counter(
            "audiogate_server_stream_refusals",
            "Streamed clips refused, by transport and error code (stream_timeout: cut by "
            "the idle or minimum-rate timeout).",
            ["transport", "code"],
            registry=registry,
        )
        self.realtime_sessions = Gauge(
            "audiogate_server_realtime_sessions",
            "Open /v1/realtime WebSocket sessions.",
            registry=registry,
        )
        for transport in STREAM_TRANSPORTS:
            self.inflight.labels(transport=transport)
            self.bytes.labels(transport=transport)
            for outcome in _OUTCOMES:
                self.ended.labels(transport=transport, outcome=outcome)
            for code in _EXPORTED_REFUSALS:
                self.refusals.labels(transport=transport, code=code)

    @contextlib.contextmanager
    def running(self, transport: str) -> Iterator[None]:
        """Count one stream in flight for the block."""
        gauge = self.inflight.labels(transport=transport)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    @contextlib.contextmanager
    def sessions(self) -> Iterator[None]:
        """Count one Realtime session open for the block."""
        self.realtime_sessions.inc()
        try:
            yield
        finally:
            self.realtime_sessions.dec()

    def end(self, transport: str, error: BaseException | None) -> None:
        """Count one stream's end: completed (``None``), cancelled, or refused."""
        if error is None:
            outcome = "completed"
        elif isinstance(error, PreprocessCancelled | ClientDisconnect | asyncio.CancelledError):
            outcome = "cancelled"
        else:
            outcome = "refused"
            self.refusals.labels(transport=transport, code=error_code(error)).inc()
        self.ended.labels(transport=transport, outcome=outcome).inc()


def raw_declaration(params: Mapping[str, str]) -> SourceFormat | None:
    """The raw PCM ``params`` declare (``format``, ``rate_hz``, ``channels`` (default 1)),
    or ``None`` without ``format``.

    :raises BadRequestError: an unknown encoding, or a rate or channel count that is not a
        positive integer.
    """
    encoding = params.get("format")
    if encoding is None:
        return None
    if encoding not in RAW_ENCODINGS:
        raise BadRequestError(
            f"format must be one of {list(RAW_ENCODINGS)} (raw PCM, little-endian, "
            f"interleaved), not {encoding[:40]!r}",
            field="format",
        )
    numbers = {}
    for name, default in (("rate_hz", None), ("channels", "1")):
        text = params.get(name, default)
        if text is None or not text.isdigit() or int(text) < 1:
            raise BadRequestError(
                f"raw PCM needs {name} as a positive integer, not {str(text)[:40]!r}",
                field=name,
            )
        numbers[name] = int(text)
    declared: Encoding = "pcm16" if encoding == "pcm16" else "f32"
    return SourceFormat.raw(declared, rate_hz=numbers["rate_hz"], channels=numbers["channels"])


@attrs.frozen
class OwnerQuota:
    """What ``--store-max-bytes-per-owner`` leaves an owner when its stream starts."""

    used: int
    maximum: int

    def check(self, received: int) -> None:
        """:raises SourceQuotaError: ``received`` more bytes would pass the quota."""
        if self.used + received > self.maximum:
            raise SourceQuotaError(
                "source bytes per owner", actual=self.used + received, maximum=self.maximum
            )


async def owner_quota(server: AudioServer, owner: str) -> OwnerQuota | None:
    """The owner's byte quota as its stream starts (``None``: no store or no quota), so a
    stream past it is refused at that chunk instead of after its last byte. (The store
    checks every quota again when it stores the source; a stream of bytes the owner
    already stored is refused here where a whole upload of them would be answered 200.)"""
    store = server.gate.store
    if store is None or store.quotas.max_bytes_per_owner is None:
        return None
    records = await store.list_async(owner)
    used = sum(record.nbytes for record in records if record.live)
    return OwnerQuota(used=used, maximum=store.quotas.max_bytes_per_owner)


def _cache_prepared(
    server: AudioServer, clip: PreparedClip, data: bytes, source_format: SourceFormat, owner: str
) -> None:
    """Put ``clip`` where a request referencing the source looks it up: the owner's part
    of the feature cache, under the key its plan gives (and the persistent tier)."""
    gate = server.gate
    cache = gate.feature_cache
    if not cache.max_bytes:
        return
    encoded = EncodedClip(data=data, source_format=source_format, ordinal=1, origin=_STREAM_ORIGIN)
    (clip_plan,) = preflight(gate.host, gate.policy, [encoded]).clips
    key = feature_key(
        gate.host,
        gate.policy,
        clip.sha256,
        decode_frames=clip_plan.decode_geometry.frames,
        normalized_samples=clip_plan.normalized_samples,
        source_format=source_format,
    )
    cache.scoped(owner).put(key, CachedClip(clip))


async def store_prepared(
    server: AudioServer,
    clip: PreparedClip,
    data: bytes,
    *,
    owner: str,
    scope: str,
    source_format: SourceFormat,
) -> AddedSource:
    """Store a streamed clip's bytes as ``owner``'s source (admitted as any upload is,
    ``ready`` at once) and its prepared clip in the feature cache; in the store's own
    executor (the disk, the index's lock).

    :raises AudioGateError: admission or a quota refuses it.
    :raises StoreWriteError: the disk or the index failed.
    """
    gate = server.gate
    store = gate.store
    assert store is not None

    def work() -> AddedSource:
        added = gate.add_source(
            data,
            owner=owner,
            scope=scope,  # type: ignore[arg-type]
            source_format=source_format,
            status="ready",
        )
        _cache_prepared(server, clip, data, source_format, owner)
        return added

    return await store.run_async(work)


@attrs.define
class StreamBody:
    """What a stream received: its chunks (kept for the store), and whether and when it
    ended (``time.perf_counter()``)."""

    parts: list[bytes] = attrs.Factory(list)
    received: int = 0
    ended_at: float | None = None

    def take(self) -> bytes:
        """The bytes received, joined (the parts are dropped)."""
        data = b"".join(self.parts)
        self.parts.clear()
        return data


def count_end(
    server: AudioServer,
    metrics: StreamMetrics,
    transport: str,
    error: BaseException | None,
    *,
    clip: PreparedClip | None = None,
    ended_at: float | None = None,
) -> None:
    """Count one stream's end in the stream series and, as one request, in the audio
    metrics (completed with the time from its last byte to its answer, cancelled, or
    refused under its error's reason; a prepared ``clip``'s waveform series as a whole
    clip's)."""
    metrics.end(transport, error)
    if clip is not None:  # prepared: its waveform counted as a whole clip's
        record_stream_waveforms(server.metrics, server.family, clip)
    if error is None and clip is not None:
        latency = time.perf_counter() - (ended_at or time.perf_counter())
        outcome: Completed | BaseException | None = Completed(
            latency_seconds=latency, prefill_tokens=clip.tokens
        )
    elif error is None or isinstance(error, ClientDisconnect):
        outcome = None  # cancelled
    else:
        outcome = error
    record_outcome(server.metrics, server.family, outcome)


class StreamedUploads:
    """The streamed ``POST /v1/audio/sources`` of one server."""

    def __init__(
        self, server: AudioServer, deadlines: StreamDeadlines, metrics: StreamMetrics
    ) -> None:
        self.server = server
        self.deadlines = deadlines
        self.metrics = metrics

    async def add(
        self,
        request: Request,
        hold: BudgetHold,
        *,
        owner: str,
        scope: str,
        source_format: SourceFormat,
    ) -> Response:
        """Receive, prepare and store one streamed upload (``hold``: the body budget's
        hold of this request, released by the caller)."""
        server = self.server
        gate = server.gate
        body = StreamBody()
        error: BaseException | None = None
        clip: PreparedClip | None = None
        with self.metrics.running("upload"):
            try:
                quota = await owner_quota(server, owner)
                clip = await prepare_stream(
                    gate.host,
                    gate.policy,
                    self._chunks(request, hold, body, source_format, quota),
                    source_format=source_format,
                    budget=server.bodies,
                    cancel=CancelToken(),
                    origin=_STREAM_ORIGIN,
                    deadlines=self.deadlines,
                )
                added = await store_prepared(
                    server,
                    clip,
                    body.take(),
                    owner=owner,
                    scope=scope,
                    source_format=source_format,
                )
            except ClientDisconnect as gone:
                error = gone
                return Response(status_code=STATUS_CLIENT_CLOSED)
            except StoreWriteError as failed:
                error = failed
                return json_response(failed.status, error_payload(failed))
            except AudioGateError as refused:
                error = refused
                # Refused mid-stream: the rest of the body is never read (the connection
                # closes); refused after its last byte: the connection may be reused.
                return error_response(refused, close=body.ended_at is None)
            except BaseException as other:
                error = other
                raise
            finally:
                body.parts.clear()
                count_end(server, self.metrics, "upload", error, clip=clip, ended_at=body.ended_at)
                if error is not None:
                    clear_frames(error)
        return json_response(201 if added.created else 200, added.record.as_dict())

    async def _chunks(
        self,
        request: Request,
        hold: BudgetHold,
        body: StreamBody,
        source_format: SourceFormat,
        quota: OwnerQuota | None,
    ) -> AsyncIterator[bytes]:
        """The body's chunks, each held in the body budget and kept for the store."""
        cap = self.server.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and int(declared) > cap:
            raise LimitError("request body bytes", actual=int(declared), maximum=cap)
        counted = self.metrics.bytes.labels(transport="upload")
        wav = source_format.container == "wav"
        async with contextlib.aclosing(request.stream()) as stream:
            async for chunk in stream:
                if not chunk:
                    continue
                total = body.received + len(chunk)
                if total > cap:
                    raise LimitError("request body bytes", actual=total, maximum=cap)
                if quota is not None:
                    quota.check(total)
                if wav and body.received < _RIFF_SIZE_END <= total:
                    _check_riff_size(b"".join(body.parts) + chunk)
                hold.take(len(chunk))
                body.received = total
                counted.inc(len(chunk))
                body.parts.append(chunk)
                yield chunk
        body.ended_at = time.perf_counter()
