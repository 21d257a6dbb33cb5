"""Answers: the JSON rendering of a prepared request, streamed piece by piece, and the
socket tuning that lets a slow but steady reader keep up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from audiogate.api import PreparedRequest
from audiogate.server.encoding import encode_features

if TYPE_CHECKING:  # requests imports errors, which answers with json_response
    from audiogate.server.requests import PrepareCall

__all__ = [
    "SEND_PIECE_BYTES",
    "UNSENT_LOWAT_BYTES",
    "FragmentsResponse",
    "cork",
    "json_response",
    "limit_unsent",
    "render_answer",
    "render_head",
    "send_pieces",
    "uncork",
]

log = logging.getLogger("audiogate.server")

# Answers larger than this go out in pieces of this size. uvicorn's ``send`` waits until
# the connection's buffer drained below its low-water mark (16 KiB), so the stall timer
# (--body-timeout), restarted for every piece, measures how long the client takes to read
# about one piece: smaller pieces lower the read rate a client needs. 64 KiB is the
# buffer's high-water mark, below which pieces would hardly lower it (the buffer takes
# several before uvicorn waits) and would cost more sends: one ASGI send is about 10 µs,
# and 10 MB take some 8.5 ms to send in 64 KiB pieces, 1.5 ms more than in 512 KiB ones.
SEND_PIECE_BYTES: Final = 64 * 1024
# What the kernel may keep unsent of a connection's output (TCP_NOTSENT_LOWAT). Without
# it Linux autotunes the send buffer up to 4 MiB and reports room only once a third of it
# drained: uvicorn's buffer drains in steps of about 1.4 MB, however small the pieces,
# and a client reading 150 KB/s looks stalled for 9 s at a time. With it, about 256 KiB
# queue ahead of the client (this, the piece and uvicorn's buffer). It limits only the
# unsent queue, not what is in flight, so it costs a fast client nothing measurable.
UNSENT_LOWAT_BYTES: Final = 128 * 1024


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def render_head(result: PreparedRequest, call: PrepareCall, served_model: str) -> bytes:
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
    return json.dumps(document, separators=(",", ":"), default=json_default).encode()


def render_answer(head: bytes, inputs: Mapping[str, Any], call: PrepareCall) -> list[bytes]:
    """The answer's JSON as fragments (their concatenation is the body): ``head`` with its
    ``features`` (``null`` without ``inputs``)."""
    features = encode_features(inputs, call.feature_format) if inputs else [b"null"]
    return [head[:-1], b',"features":', *features, b"}"]


def send_pieces(fragments: list[bytes]) -> list[bytes | memoryview]:
    """``fragments`` regrouped into pieces of :data:`SEND_PIECE_BYTES` (the last one
    shorter): a large fragment is sliced without a copy, small ones are joined with their
    neighbours (an answer's fragments are mostly a few bytes of JSON around each array,
    and every piece is one ASGI send: one per fragment made a 5 s clip's answer 21
    sends instead of 6)."""
    pieces: list[bytes | memoryview] = []
    pending: list[bytes | memoryview] = []
    room = SEND_PIECE_BYTES
    for fragment in fragments:
        view = memoryview(fragment)
        while len(view):
            part, view = view[:room], view[room:]
            pending.append(part)
            room -= len(part)
            if not room:
                pieces.append(pending[0] if len(pending) == 1 else b"".join(pending))
                pending, room = [], SEND_PIECE_BYTES
    if pending or not pieces:
        pieces.append(b"".join(pending))
    return pieces


class FragmentsResponse(Response):
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
        corked = None
        try:
            # Inside the try: whatever happens, on_sent gives the request's bytes back.
            corked = cork(send)
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            pieces = send_pieces(self.fragments)
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
            if corked is not None:
                uncork(corked)
            self.on_sent()


def json_response(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    body = json.dumps(payload, separators=(",", ":"), default=json_default).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def limit_unsent(send: Send) -> None:
    """Keep the kernel from holding more than about :data:`UNSENT_LOWAT_BYTES` of the
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
            sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_LOWAT_BYTES)


def cork(send: Send) -> Any:
    """Cork the connection's TCP socket (``TCP_CORK``: the kernel sends only full
    segments) for an answer written in several writes; the socket to :func:`uncork`
    after its last write, or ``None`` (not TCP, or no ``TCP_CORK``: nothing changes).

    uvicorn writes an answer's head on its own and each piece after it; on loopback each
    write went out as its own segment and woke the reader. Corked, the head leaves with
    the first piece and the pieces in full segments (alternated, render at concurrency
    4: about 15 % more answers per second, 0.5 ms less server CPU per request). The
    kernel sends a corked partial segment after 200 ms at the latest."""
    option = getattr(socket, "TCP_CORK", None)
    transport = _connection_transport(send)
    extra_info = getattr(transport, "get_extra_info", None)
    if option is None or extra_info is None:
        return None
    # The client may be gone already: uvloop's socket stand-in raises ValueError once
    # its descriptor is closed.
    try:
        sock = extra_info("socket")
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        sock.setsockopt(socket.IPPROTO_TCP, option, 1)
    except (OSError, ValueError):
        return None
    return sock


def uncork(sock: Any) -> None:
    """Send what a :func:`cork`-ed socket holds back (the answer's last partial
    segment) now."""
    # The connection is gone: uvloop's socket stand-in raises ValueError once its
    # descriptor is closed.
    with contextlib.suppress(OSError, ValueError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


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
