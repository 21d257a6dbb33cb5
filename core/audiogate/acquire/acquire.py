"""The entry points: a request's content parts, the CLI's paths, an embedder's bytes.

* :func:`acquire_parts` (async) — a server's OpenAI-style audio parts, in order, and
  :func:`acquire_parts_sync`, its twin in the calling thread;
* :func:`acquire_paths` (sync) — the CLI user's own files (no media root needed);
* :func:`acquire_bytes` (sync) — bytes an embedding server already holds.

Each returns one :class:`~audiogate.pipeline.EncodedClip` per source, ordinals ``1..n``,
or raises for the whole request (fail closed: a clip never silently disappears):

1. cancellation, then the clip count (``LimitError("clip count")``), before anything is
   parsed or read;
2. every part is parsed and its cheap checks run before any source is read (shape,
   format gate, source kind; a data URI's media type; a URL's syntax, the fetch switch,
   ``https_only`` and the allow-list; a path's media root and name), so nothing is
   fetched for a request that is malformed anyway;
3. per clip in order, against what is left of the request (so a later clip can never
   transiently hold more than the aggregate allows): read under the byte cap, refuse an
   empty source, compare the declared format with the sniffed bytes, count the bytes.

Errors: :class:`~audiogate.errors.AcquisitionError` (``clip_index`` zero-based and
``origin``: ``"inline base64"``, ``"data URI"``, ``"URL"``, ``"file"``, ``"bytes"``, or
``"content part"`` for a part too malformed to classify);
:class:`~audiogate.errors.LimitError` (``"clip count"``, ``"encoded bytes per clip"``,
``"base64 characters"``) and its subclass :class:`~audiogate.errors.MemoryLimitError`
(``"encoded bytes per request"``, as in the pipeline's preflight);
:class:`~audiogate.errors.PreprocessCancelled` (checkpoint ``"Acquisition"``).

Blocking work of :func:`acquire_parts` (files, large base64) runs in the default
executor so the event loop stays responsive; cancelling the awaiting task stops that
work at its next chunk and closes any HTTP stream.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from audiogate.acquire.clip import EncodedClip, StoredHeader
from audiogate.acquire.context import (
    ORIGIN_BYTES,
    ORIGIN_DATA_URI,
    ORIGIN_FILE,
    ORIGIN_INLINE,
    ORIGIN_URL,
    ClipContext,
    LinkedToken,
    RequestBudget,
    SourceRefused,
)
from audiogate.acquire.files import (
    NO_MEDIA_ROOT_MESSAGE,
    read_local_path,
    read_media_file,
    strip_file_scheme,
    validate_media_name,
)
from audiogate.acquire.inline import data_uri_payload, decode_base64
from audiogate.acquire.parts import DeclaredSource, declare_parts
from audiogate.acquire.policy import AcquisitionPolicy
from audiogate.acquire.refs import NO_STORE_MESSAGE, ORIGIN_REFERENCE, SourceAccess, SourceLease
from audiogate.acquire.sniff import check_declared_format
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.geometry import WAV, SourceFormat
from audiogate.errors import AcquisitionError, LimitError

if TYPE_CHECKING:
    import httpx

# The URL modules (and httpx, tens of milliseconds) are imported by the first URL part:
# bytes, data URIs and files never need them.

__all__ = [
    "acquire_bytes",
    "acquire_parts",
    "acquire_parts_sync",
    "acquire_paths",
    "acquire_suspends",
]

_T = TypeVar("_T")

# Inline sources shorter than this are decoded on the loop: a thread hop costs more.
_INLINE_THREAD_CHARS: Final = 1 << 20


def _budget(policy: AcquisitionPolicy) -> RequestBudget:
    return RequestBudget(
        max_bytes_per_clip=policy.max_bytes_per_clip,
        max_bytes_per_request=policy.max_bytes_per_request,
    )


def _finish(
    data: bytes,
    source_format: SourceFormat,
    *,
    index: int,
    origin: str,
    budget: RequestBudget,
    stored_sha256: str | None = None,
) -> EncodedClip:
    try:
        if not data:
            raise SourceRefused("the source is empty (0 bytes)")
        check_declared_format(data, source_format)
    except SourceRefused as exc:
        raise AcquisitionError(exc.detail, clip_index=index, origin=origin) from None
    budget.add(len(data))
    return EncodedClip(
        data=data,
        source_format=source_format,
        ordinal=index + 1,
        origin=origin,
        stored_sha256=stored_sha256,
    )


async def _in_thread(work: Callable[[ClipContext], _T], ctx: ClipContext) -> _T:
    # The thread polls a token the awaiting task cancels when it is itself cancelled.
    inner = LinkedToken(ctx.cancel)
    try:
        return await asyncio.to_thread(work, attrs.evolve(ctx, cancel=inner))
    except asyncio.CancelledError:
        inner.cancel()
        raise


def _precheck(
    source: DeclaredSource, policy: AcquisitionPolicy, sources: SourceAccess | None
) -> None:
    # The checks that need no I/O, so a doomed request reads nothing at all.
    if source.origin == ORIGIN_REFERENCE:
        if sources is None:
            raise SourceRefused(NO_STORE_MESSAGE)
    elif source.origin == ORIGIN_URL:
        from audiogate.acquire.net import FETCH_DISABLED_MESSAGE, check_hop
        from audiogate.acquire.urls import parse_media_url

        if not policy.allow_url_fetch:
            raise SourceRefused(FETCH_DISABLED_MESSAGE)
        check_hop(parse_media_url(source.value), policy)
    elif source.origin == ORIGIN_FILE:
        if policy.media_root is None:
            raise SourceRefused(NO_MEDIA_ROOT_MESSAGE)
        validate_media_name(strip_file_scheme(source.value))
    elif source.origin == ORIGIN_DATA_URI:
        data_uri_payload(source.value, source.source_format)


async def _read_source(
    source: DeclaredSource,
    ctx: ClipContext,
    policy: AcquisitionPolicy,
    client: Callable[[], httpx.AsyncClient],
) -> bytes:
    value = source.value
    if source.origin == ORIGIN_URL:
        from audiogate.acquire.net import fetch_url

        return await fetch_url(value, ctx, policy=policy, client=client())
    if source.origin == ORIGIN_FILE:
        root = policy.media_root
        return await _in_thread(lambda c: read_media_file(root, value, c), ctx)
    start = 0
    if source.origin == ORIGIN_DATA_URI:
        start = data_uri_payload(value, source.source_format)
    else:
        assert source.origin == ORIGIN_INLINE
    if len(value) < _INLINE_THREAD_CHARS:
        return decode_base64(value, ctx, start=start)
    return await _in_thread(lambda c: decode_base64(value, c, start=start), ctx)


def _take(ctx: ClipContext, held: SourceLease) -> SourceLease:
    ctx.cap.check(held.nbytes)
    ctx.hold(held.nbytes)
    if held.header is None:
        held.data  # noqa: B018 (read now, off the loop: its header is read from it)
    return held


def _reference_clip(held: SourceLease, index: int, budget: RequestBudget) -> EncodedClip:
    """The clip of a leased (and taken) stored source."""
    header = held.header
    if header is None:
        return _finish(
            held.data,
            held.source_format,
            index=index,
            origin=ORIGIN_REFERENCE,
            budget=budget,
            stored_sha256=held.sha256,
        )
    # Not read: the preflight admits it by the header recorded at upload, and its bytes
    # (sniffed then, under the same format) are read only if it is decoded.
    budget.add(held.nbytes)
    return EncodedClip(
        source_format=held.source_format,
        ordinal=index + 1,
        origin=ORIGIN_REFERENCE,
        stored_sha256=held.sha256,
        stored_header=StoredHeader(nbytes=held.nbytes, geometry=header, read=lambda: held.data),
    )


async def _read_reference(
    source: DeclaredSource, ctx: ClipContext, sources: SourceAccess, budget: RequestBudget
) -> EncodedClip:
    index = source.index
    # Leased through the store's executor (the loop never waits on its backends; a wait
    # for a source still processing sleeps on the loop); one without a recorded header
    # is read in a thread, its header read from its bytes.
    held = await sources.open_async(source.value, cancel=ctx.cancel, clip_index=index)
    if held.header is None:
        lease = held
        held = await _in_thread(lambda c: _take(c, lease), ctx)
    else:
        _take(ctx, held)
    return _reference_clip(held, index, budget)


def _declared(
    parts: Sequence[Mapping[str, Any]],
    policy: AcquisitionPolicy,
    sources: SourceAccess | None,
    token: CancelToken,
) -> list[DeclaredSource]:
    """Every part parsed and pre-checked (no I/O): a doomed request reads nothing."""
    token.check(Checkpoint.ACQUISITION)
    declared = declare_parts(parts, max_clips=policy.max_clips)
    for source in declared:
        try:
            _precheck(source, policy, sources)
        except SourceRefused as exc:
            raise AcquisitionError(
                exc.detail, clip_index=source.index, origin=source.origin
            ) from None
    return declared


async def acquire_parts(
    parts: Sequence[Mapping[str, Any]],
    *,
    policy: AcquisitionPolicy,
    cancel: CancelToken | None = None,
    client: httpx.AsyncClient | None = None,
    sources: SourceAccess | None = None,
) -> list[EncodedClip]:
    """Turn one request's audio content parts into encoded clips, in order.

    :param parts: the request's audio parts (``input_audio`` / ``audio_url``), in prompt
        order; see :mod:`audiogate.acquire.parts` for the accepted shapes.
    :param policy: what may be read (narrow it with the family's policy first).
    :param cancel: the request's token, polled before and after every chunk and while a
        fetch waits on the network.
    :param client: the client URL requests are sent through (default: a fresh
        :func:`~audiogate.acquire.net.create_media_client`, closed on return). Requests
        are built here, pinned to checked addresses, so its base URL, headers, cookies
        and auth are never used; a client that goes through a proxy fails the peer check.
    :param sources: the request's access to a source store, which ``audio_ref`` parts
        are resolved through (its leases stay held for the caller to release; without
        it such a part is refused, naming the option).
    :returns: one clip per part, ordinals ``1..n``.
    :raises LimitError: too many parts or bytes (see the module docstring).
    :raises AcquisitionError: any source is malformed, refused or unreadable.
    :raises SourceError: a referenced source is missing, not accessible, retired, lost
        or still processing after the store's wait.
    :raises PreprocessCancelled: the token was cancelled.
    """
    token = cancel or NEVER
    declared = _declared(parts, policy, sources, token)
    budget = _budget(policy)
    held = policy.shared_bytes.hold() if policy.shared_bytes is not None else None
    owned: list[httpx.AsyncClient] = []

    def get_client() -> httpx.AsyncClient:
        if client is not None:
            return client
        if not owned:
            from audiogate.acquire.net import create_media_client

            owned.append(create_media_client())
        return owned[0]

    clips: list[EncodedClip] = []
    try:
        for source in declared:
            ctx = ClipContext(
                clip_index=source.index, cap=budget.cap(source.index), cancel=token, held=held
            )
            ctx.check_cancel()
            try:
                if source.origin == ORIGIN_REFERENCE:
                    assert sources is not None
                    clips.append(await _read_reference(source, ctx, sources, budget))
                    continue
                data = await _read_source(source, ctx, policy, get_client)
            except SourceRefused as exc:
                raise AcquisitionError(
                    exc.detail, clip_index=source.index, origin=source.origin
                ) from None
            clips.append(
                _finish(
                    data,
                    source.source_format,
                    index=source.index,
                    origin=source.origin,
                    budget=budget,
                )
            )
    finally:
        # The clips go on to the worker's admission budget; this request's share of the
        # in-flight acquisition bytes ends here, whatever happened.
        if held is not None:
            held.release()
        for owned_client in owned:
            await owned_client.aclose()
    return clips


def acquire_parts_sync(
    parts: Sequence[Mapping[str, Any]],
    *,
    policy: AcquisitionPolicy,
    cancel: CancelToken | None = None,
    sources: SourceAccess | None = None,
) -> list[EncodedClip]:
    """:func:`acquire_parts` in the calling thread, without an event loop: the same
    checks, errors and ceilings, for blocking callers (``AudioGate.prepare``, the batch
    engine). Inline data, data URIs, media files and stored sources are read right
    here; a request with a URL part runs :func:`acquire_parts` on an event loop of its
    own (the URL client is asynchronous).
    """
    token = cancel or NEVER
    declared = _declared(parts, policy, sources, token)  # a refused part starts no loop
    if any(source.origin == ORIGIN_URL for source in declared):
        return asyncio.run(acquire_parts(parts, policy=policy, cancel=cancel, sources=sources))
    budget = _budget(policy)
    held = policy.shared_bytes.hold() if policy.shared_bytes is not None else None
    clips: list[EncodedClip] = []
    try:
        for source in declared:
            ctx = ClipContext(
                clip_index=source.index, cap=budget.cap(source.index), cancel=token, held=held
            )
            ctx.check_cancel()
            try:
                if source.origin == ORIGIN_REFERENCE:
                    assert sources is not None
                    lease = sources.open(source.value, cancel=token, clip_index=source.index)
                    clips.append(_reference_clip(_take(ctx, lease), source.index, budget))
                    continue
                data = _read_here(source, ctx, policy)
            except SourceRefused as exc:
                raise AcquisitionError(
                    exc.detail, clip_index=source.index, origin=source.origin
                ) from None
            clips.append(
                _finish(
                    data,
                    source.source_format,
                    index=source.index,
                    origin=source.origin,
                    budget=budget,
                )
            )
    finally:
        if held is not None:
            held.release()
    return clips


def _read_here(source: DeclaredSource, ctx: ClipContext, policy: AcquisitionPolicy) -> bytes:
    """A part that is not a URL or a reference, read in the calling thread."""
    if source.origin == ORIGIN_FILE:
        return read_media_file(policy.media_root, source.value, ctx)
    start = 0
    if source.origin == ORIGIN_DATA_URI:
        start = data_uri_payload(source.value, source.source_format)
    return decode_base64(source.value, ctx, start=start)


def acquire_suspends(parts: Sequence[Mapping[str, Any]], *, policy: AcquisitionPolicy) -> bool:
    """Whether :func:`acquire_parts` of ``parts`` awaits anything: a URL, a media file or
    inline data long enough to be decoded in a thread. When not, a blocking caller may
    run it to its end without an event loop (``coroutine.send(None)``).

    Parts that do not parse are refused by :func:`acquire_parts` before it awaits.
    """
    try:
        sources = declare_parts(parts, max_clips=policy.max_clips)
    except (AcquisitionError, LimitError, SourceRefused):
        return False
    return any(
        source.origin not in {ORIGIN_INLINE, ORIGIN_DATA_URI}
        or len(source.value) >= _INLINE_THREAD_CHARS
        for source in sources
    )


def _formats(
    source_format: SourceFormat | Sequence[SourceFormat], count: int
) -> list[SourceFormat]:
    if isinstance(source_format, SourceFormat):
        return [source_format] * count
    formats = list(source_format)
    if len(formats) != count or not all(isinstance(f, SourceFormat) for f in formats):
        raise TypeError(
            f"source_format must be one SourceFormat or one per source ({count}), "
            f"not {source_format!r}"
        )
    return formats


def _check_count(count: int, policy: AcquisitionPolicy) -> None:
    if count > policy.max_clips:
        raise LimitError("clip count", actual=count, maximum=policy.max_clips)


def acquire_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    policy: AcquisitionPolicy,
    cancel: CancelToken | None = None,
    source_format: SourceFormat | Sequence[SourceFormat] = WAV,
) -> list[EncodedClip]:
    """Read the CLI user's own audio files (origin ``"file"``), in order.

    No media root is needed (they are the user's own paths; symlinks are followed), but
    only regular files are read, the size is checked before reading, the read is
    chunked under the cap, and a file that changes while it is read is refused.

    :param source_format: one format for every path, or one per path.
    :raises LimitError: too many paths or bytes.
    :raises AcquisitionError: a path is missing, not a regular file, changed, empty, or
        not what ``source_format`` declares.
    :raises PreprocessCancelled: the token was cancelled.
    """
    token = cancel or NEVER
    token.check(Checkpoint.ACQUISITION)
    _check_count(len(paths), policy)
    formats = _formats(source_format, len(paths))
    budget = _budget(policy)
    clips: list[EncodedClip] = []
    for index, (path, fmt) in enumerate(zip(paths, formats, strict=True)):
        ctx = ClipContext(clip_index=index, cap=budget.cap(index), cancel=token)
        ctx.check_cancel()
        try:
            data = read_local_path(path, ctx)
        except SourceRefused as exc:
            raise AcquisitionError(exc.detail, clip_index=index, origin=ORIGIN_FILE) from None
        clips.append(_finish(data, fmt, index=index, origin=ORIGIN_FILE, budget=budget))
    return clips


def acquire_bytes(
    blobs: Sequence[bytes | bytearray | memoryview],
    *,
    policy: AcquisitionPolicy,
    cancel: CancelToken | None = None,
    source_format: SourceFormat | Sequence[SourceFormat] = WAV,
) -> list[EncodedClip]:
    """Admit bytes an embedding server already holds (origin ``"bytes"``), in order.

    The same ceilings, empty check and format sniff as the other entry points; the bytes
    are copied into immutable ``bytes`` only if they are mutable.

    :param source_format: one format for every blob, or one per blob.
    :raises LimitError: too many blobs or bytes.
    :raises AcquisitionError: a blob is empty or not what ``source_format`` declares.
    :raises PreprocessCancelled: the token was cancelled.
    """
    token = cancel or NEVER
    token.check(Checkpoint.ACQUISITION)
    _check_count(len(blobs), policy)
    formats = _formats(source_format, len(blobs))
    budget = _budget(policy)
    clips: list[EncodedClip] = []
    for index, (blob, fmt) in enumerate(zip(blobs, formats, strict=True)):
        token.check(Checkpoint.ACQUISITION, index)
        budget.cap(index).check(memoryview(blob).nbytes)
        data = blob if isinstance(blob, bytes) else bytes(blob)
        clips.append(_finish(data, fmt, index=index, origin=ORIGIN_BYTES, budget=budget))
    return clips
