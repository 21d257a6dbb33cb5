"""The connection guard: uvicorn's h11 protocol with a request-head timeout, a cap on
open connections (below the process's file limit), and malformed HTTP answered in the
server's JSON error shape.

uvicorn 0.3x-0.5x times out neither a new connection that sends nothing nor a request
head that stops half-way (its keep-alive timer stops at the first byte), and its
``limit_concurrency`` answers 503 only once a whole head has arrived: a client that
opens connections and sends a few bytes on each holds a file descriptor per connection
until the process runs out (then every ``accept()`` fails and is logged). Here:

* a request head must arrive within ``header_timeout_s`` of the connection (or of the
  previous answer on a kept-alive connection): else the connection is closed (with a
  JSON 408 when part of a head had arrived);
* at most ``max_connections`` connections are served; one over it is answered 503
  (JSON, ``Connection: close``, ``Retry-After: 1``) as soon as it is accepted, without
  reading its request, and closed; past a further :data:`OVERFLOW_CONNECTIONS` it is
  closed at once;
* malformed HTTP (h11's refusals, and a request with both ``Content-Length`` and
  ``Transfer-Encoding``, refused before the app runs, whatever its body) is a JSON 400
  that closes the connection, never uvicorn's plain-text one;
* each client address holds at most ``max_connections_per_client`` connections, and at
  either cap the oldest connection waiting for a request head (just opened, part of a
  head sent, or idle between requests) is closed to admit the new one; only when none
  waits is the new one answered 503 (:class:`~audiogate.server.admission.ConnectionTable`);
* a request the worker or the body budget would refuse now is refused from its head
  (:class:`~audiogate.server.admission.HeadAdmission`): a JSON 429 with ``Retry-After``
  and ``Connection: close`` is written, the body is never parsed nor handed to the app,
  and what the client still sends is dropped unread up to :data:`DRAIN_BYTES` (so that
  it reads the answer rather than a reset), past which the connection is aborted;
* an admitted request's body of declared length (``Content-Length``) is collected as it
  arrives, held in the body budget, and handed to the app whole, as one message, without
  h11 parsing it (:data:`COLLECT_WINDOW_S`, :data:`COLLECTED_BODY`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from audiogate.budget import BudgetHold
from audiogate.errors import AudioGateError, MemoryLimitError
from audiogate.server.admission import ClientAddresses, ConnectionTable, HeadAdmission
from audiogate.server.budgets import REFUSAL_DELAY_S
from audiogate.server.drain import BodySkip, Drain
from audiogate.server.errors import RETRY_AFTER_SECONDS, error_payload
from audiogate.server.fast_refusal import plain_head
from audiogate.server.requests import LARGE_BODY_BYTES

if TYPE_CHECKING:
    from h11._readers import ContentLengthReader

__all__ = [
    "COLLECTED_BODY",
    "COLLECT_WINDOW_S",
    "DRAIN_BYTES",
    "FD_RESERVE",
    "OVERFLOW_CONNECTIONS",
    "REFUSED_READ_PAUSE_S",
    "SKIP_BUFFERED_BYTES",
    "connection_cap",
    "guarded_h11",
    "raw_error",
]

log = logging.getLogger("audiogate.server")

#: File descriptors kept free of connections for everything else the process opens
#: (listening sockets, media files, URL fetches, the model's files, logs).
FD_RESERVE: Final = 128
#: Connections past the cap that still get their 503 (each lingers about
#: :data:`_LINGER_S` for it); past this many more they are closed unanswered.
OVERFLOW_CONNECTIONS: Final = 64
_LINGER_S: Final = 1.0
#: Bytes of a refused request's body dropped unread (while its client reads the 429)
#: before the connection is aborted.
DRAIN_BYTES: Final = 256 * 1024
#: A refused body on a kept-alive connection with at least this much left after a read is
#: read on by :class:`~audiogate.server.drain.BodySkip` into one shared buffer.
SKIP_BUFFERED_BYTES: Final = 16 * 1024
#: How long after a refusal on a kept-alive connection its 429 is written by default
#: (its body is skipped meanwhile; the connection's next head is read from then on):
#: ``ServerLimits.refusal_delay_s``. Its answer says ``Retry-After: 1``.
REFUSED_READ_PAUSE_S: Final = REFUSAL_DELAY_S
#: Below this soft file limit, start-up warns (and says how to raise it).
_LOW_FILE_LIMIT: Final = 4096
#: How long an admitted request's body is collected before the app sees any of it (at
#: most half the app's body idle timeout): uvicorn hands a body to the app in the
#: pieces the socket reads (about 20 app wake-ups and h11 events for a 1.28 MB body, each
#: ~64 KiB), collected it is one. A body still incomplete by then (a slow client) goes
#: on as uvicorn reads it, so the app's idle and minimum-rate deadlines see its bytes.
COLLECT_WINDOW_S: Final = 0.5
#: The scope key of a collected body's :class:`~audiogate.budget.BudgetHold`: the bytes
#: collected are held in the body budget as they arrive; the app moves them into its
#: request's hold as it reads the body (none given back in between, where another
#: request could take them), and what it leaves is given back once answered.
COLLECTED_BODY: Final = "audiogate.collected_body"
#: The route whose large bodies wait for a place in the large-body lane unread
#: (:class:`~audiogate.server.requests.LargeBodyLane`): those are not collected.
_LANE_PATH: Final = "/v1/audio/prepare"


def _body_reader() -> type[ContentLengthReader] | None:
    """h11's reader of a ``Content-Length`` body, whose private ``_length`` and
    ``_remaining`` the collection reads and ends; ``None`` where an h11 release lacks them
    (bodies then go as uvicorn reads them)."""
    try:
        from h11._readers import ContentLengthReader as reader
    except ImportError:
        return None
    probe = reader(1)
    if not (hasattr(probe, "_length") and hasattr(probe, "_remaining")):
        return None
    return reader


_CONTENT_LENGTH_READER: Final[type[ContentLengthReader] | None] = _body_reader()


def connection_cap(requested: int) -> int:
    """The connections to serve: ``requested``, lowered so that they, the overflow and
    :data:`FD_RESERVE` fit under the process's soft open-file limit (read now). Logs a
    warning when the limit lowers the cap or is low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return requested
    room = max(1, soft - FD_RESERVE - OVERFLOW_CONNECTIONS)
    cap = min(requested, room)
    if cap < requested:
        log.warning(
            "the open-file limit (ulimit -n) is %d: serving at most %d connections instead "
            "of %d (--max-connections); raise the limit (the hard limit is %s)",
            soft,
            cap,
            requested,
            "unlimited" if hard == resource.RLIM_INFINITY else hard,
        )
    elif soft < _LOW_FILE_LIMIT:
        log.warning("the open-file limit (ulimit -n) is low: %d", soft)
    return cap


def raw_error(
    status: int, phrase: str, kind: str, message: str, *, reason: str | None, **headers: str
) -> bytes:
    """A whole HTTP/1.1 answer carrying the server's JSON error shape, closing the
    connection (written straight to a socket: no request may have been parsed)."""
    error = {"type": kind, "reason": reason, "message": message, "clip_index": None}
    body = json.dumps({"error": error}, separators=(",", ":")).encode()
    lines = [
        f"HTTP/1.1 {status} {phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


_OVERLOADED: Final = raw_error(
    503,
    "Service Unavailable",
    "ConnectionLimitError",
    "the server has too many open connections; retry later",
    reason=None,
    **{"retry-after": "1"},
)
_ADDRESS_OVERLOADED: Final = raw_error(
    503,
    "Service Unavailable",
    "ConnectionLimitError",
    "this client address has too many open connections; retry later",
    reason=None,
    **{"retry-after": "1"},
)
_HEAD_TIMEOUT: Final = "the request head did not arrive in time"


_ANSWERS: dict[tuple[str, str, bool], bytes] = {}


def refusal_answer(error: AudioGateError, *, close: bool = True) -> bytes:
    """The whole 429 answer refusing a request from its head (``Retry-After``), closing the
    connection or not. Answers are kept by message: under overload most refusals repeat
    one (a few dozen distinct ones at most: counts and limits are small integers)."""
    key = (type(error).__name__, str(error), close)
    answer = _ANSWERS.get(key)
    if answer is None:
        body = json.dumps(error_payload(error), separators=(",", ":")).encode()
        closing = "connection: close\r\n" if close else ""
        answer = (
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{closing}"
            f"retry-after: {RETRY_AFTER_SECONDS}\r\n\r\n"
        ).encode("ascii") + body
        if len(_ANSWERS) < 1024:
            _ANSWERS[key] = answer
    return answer


def _drained_length(request: h11.Request) -> int | None:
    """The body length to skip to keep ``request``'s connection after refusing it: its
    ``Content-Length`` when at most :data:`DRAIN_BYTES` on a kept-alive HTTP/1.1
    connection; else ``None`` (the connection closes)."""
    if request.http_version != b"1.1":
        return None
    length = None
    for name, value in request.headers:
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" or (name == b"connection" and b"close" in value.lower()):
            return None
    return length if length is not None and length <= DRAIN_BYTES else None


class _ProtocolRefusal(h11.RemoteProtocolError):
    """A request h11 parsed but the server refuses as malformed HTTP."""


def _both_lengths(request: h11.Request) -> bool:
    names = {name.lower() for name, _ in request.headers}
    return b"content-length" in names and b"transfer-encoding" in names


def guarded_h11(
    *,
    header_timeout_s: float,
    max_connections: int,
    max_connections_per_client: int | None = None,
    admission: HeadAdmission | None = None,
    addresses: ClientAddresses | None = None,
    refusal_delay_s: float = REFUSED_READ_PAUSE_S,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the guards of this module (pass it as
    ``uvicorn.Config(http=...)``).

    :param max_connections_per_client: connections per client address (``None``: only
        the total cap).
    :param admission: refuses requests from their heads; ``None``: the app decides.
    :param addresses: who the client is (the trusted proxies; default: the peer).
    :param refusal_delay_s: how long after its head a request refused on a kept-alive
        connection is answered (``ServerLimits.refusal_delay_s``).
    """
    per_client = max_connections_per_client or max_connections
    table: ConnectionTable[GuardedH11Protocol] = ConnectionTable(max_connections, per_client)
    who = addresses or ClientAddresses()

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        #: When the head awaited is due (loop time; ``None``: none is awaited). The head
        #: timer is armed once and, firing before this, re-armed for what is left: a
        #: kept-alive connection's requests move this, not a timer each.
        _head_due: float | None = None
        #: Reading was paused for bytes that came while a refusal's answer was due.
        _paused = False
        _refused = False
        _refusal: str | None = None
        _peer = ""
        #: The client an admitted request counts against until it is answered.
        _inflight: str | None = None
        _drained = 0
        #: Body bytes of a refused request still to skip before the next head (kept alive).
        _skip = 0
        _skipping = False
        _skip_from: bytes | None = None
        #: A refused request's 429, written ``refusal_delay_s`` after its head.
        _answer_due: bytes | None = None
        #: What followed the skipped body (a pipelined request), read once answered.
        _after_skip: bytes | None = None
        #: An admitted request's body collected so far (``None``: none is), the bytes of
        #: it still to come, and their hold in the body budget (until the app takes it).
        _pieces: list[bytes] | None = None
        #: Bytes of the first piece that h11 read (they came with the head).
        _parsed = 0
        _body_left = 0
        _body_hold: BudgetHold | None = None
        _collect_timer: asyncio.TimerHandle | None = None

        #: The connections served, for tests (eviction order).
        connection_table = table

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            victims = table.make_room(self._peer, exempt=who.trusted(self._peer))
            if victims is None:
                own = table.count(self._peer) >= per_client
                self._refuse_overload(len(self.connections) - max_connections, own=own)
                return
            for victim in victims:
                victim._evict()
            table.add(self, self._peer)
            self._guard_next_event()
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            if self._pieces is not None:
                self._end_collection()  # the app sees the disconnect
            self._release_body()
            table.remove(self)
            self._release()
            if self._refused and self.cycle is None:
                # Refused before any request ran: nothing of uvicorn's to wind down but
                # the connection's entry (its h11 state would only raise and be dropped).
                self.connections.discard(self)
                self.transport.close()
                self._unguard()
                return
            super().connection_lost(exc)
            self._unguard()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                # Refused (and not yet drained by drain.Drain): what the client still
                # sends is dropped, never parsed.
                self._drained += len(data)
                if self._drained > DRAIN_BYTES:
                    self.transport.abort()
                return
            if self._skipping:
                self._skip_body(data)
                return
            if self._pieces is not None:
                self._collect(data)
                return
            if admission is not None and self._refused_plain(data):
                return
            super().data_received(data)

        def _refused_plain(self, data: bytes) -> bool:
            """Whether ``data``'s request, a plain head, was refused before h11 parsed it
            (:mod:`audiogate.server.fast_refusal`; admitted or unusual: h11 reads it)."""
            assert admission is not None
            head = plain_head(data, self.conn, self.conn._max_incomplete_event_size)
            if head is None:
                return False
            error = admission.refusal(b"POST", head.target, head.headers, self._peer)
            if error is None:
                return False
            self._unset_keepalive_if_required()
            table.busy(self)
            self._refuse_request(error, head.drained(DRAIN_BYTES), parsed=False)
            if self._skipping:  # the body after the head, skipped as handle_events does
                self._skip_body(data, head.size)
                if self._skipping and self._skip:
                    self._arm_head_timer()
            return True

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request head arrived
                self._cancel_head_timer()
                if self._inflight is not None:  # admitted (so admission is not None)
                    self._collect_body()
            if self._skip_from is not None:  # a refused request's body follows its head
                data, self._skip_from = self._skip_from, None
                self._skip_body(data)
                if self._skipping and self._skip:
                    # The rest of the body must arrive within the head timeout, like a head.
                    self._arm_head_timer()

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            # From here the connection is a WebSocket's (/v1/realtime): no head timer (it
            # would close the socket), and it stays in the table, counted against the
            # caps as a busy connection, until its socket closes.
            self._stop_head_timer()
            self._release()
            super().handle_websocket_upgrade(event)
            upgraded = self.transport.get_protocol()
            lost = upgraded.connection_lost

            def connection_lost(exc: Exception | None) -> None:
                table.remove(self)
                lost(exc)

            upgraded.connection_lost = connection_lost  # type: ignore[method-assign]

        def on_response_complete(self) -> None:
            self._release()
            self._release_body()
            table.waiting(self)
            # Armed first: a pipelined request that the call below starts disarms it.
            self._arm_head_timer()
            super().on_response_complete()

        def send_400_response(self, msg: str) -> None:
            message = self._refusal or f"malformed HTTP request: {msg}"
            self._refusal = None
            self._stop_head_timer()
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                self.transport.write(
                    raw_error(400, "Bad Request", "BadRequestError", message, reason="waveform")
                )
            self.transport.close()

        # --- admitted bodies, collected ---------------------------------------------

        def _collect_body(self) -> None:
            """Collect the body of the admitted request whose head just arrived, when its
            length is declared, it is within the body cap and no large-body lane waits
            for it (the bytes that came with the head are taken along)."""
            assert admission is not None
            reader = self.conn._reader
            if (
                _CONTENT_LENGTH_READER is None
                or not isinstance(reader, _CONTENT_LENGTH_READER)
                or reader._remaining <= 0
            ):
                return
            server = admission.server
            length = reader._length
            if length > server.max_body_bytes or (
                length >= LARGE_BODY_BYTES and self.scope["path"] == _LANE_PATH
            ):
                return  # the app refuses it unread, or the lane holds it unread
            cycle = self.cycle
            head = bytes(cycle.body)
            hold = server.bodies.hold()
            try:
                hold.take(len(head))
            except MemoryLimitError:
                return  # the app refuses it as it reads it
            if head:  # the app has not run yet: its first message is the whole body
                cycle.body = bytearray()
                cycle.message_event.clear()
            self._pieces = [head] if head else []
            self._parsed = len(head)
            self._body_left = reader._remaining
            self._body_hold = hold
            self.scope[COLLECTED_BODY] = hold  # type: ignore[typeddict-unknown-key]
            window = min(COLLECT_WINDOW_S, server.body_idle_timeout_s / 2)
            self._collect_timer = self.loop.call_later(window, self._collect_timed_out)
            self.flow.resume_reading()  # uvicorn pauses past 64 KiB held for the app

        def _collect(self, data: bytes) -> None:
            """Keep ``data`` (held in the body budget); hand the body over once whole."""
            assert self._pieces is not None
            assert self._body_hold is not None
            try:
                self._body_hold.take(len(data))
            except MemoryLimitError:
                self._stop_collecting(data)  # the app refuses it as it reads it
                return
            self._pieces.append(data)
            self._body_left -= len(data)
            if self._body_left <= 0:
                self._deliver_body()

        def _end_collection(self) -> list[bytes]:
            """Stop collecting: the pieces (their bytes still held)."""
            pieces, self._pieces = self._pieces or [], None
            if self._collect_timer is not None:
                self._collect_timer.cancel()
                self._collect_timer = None
            return pieces

        def _release_body(self) -> None:
            """Give back what the app did not take of the collected body."""
            if self._body_hold is not None:
                self._body_hold.release()
                self._body_hold = None

        def _deliver_body(self) -> None:
            """The whole body to the app as one message (bytes: uvicorn passes them on
            without a copy; h11 reads none of it, its reader told the body is in), then
            to h11 what followed it (a pipelined request)."""
            pieces = self._end_collection()
            self._parsed = 0
            extra, self._body_left = -self._body_left, 0
            rest = b""
            if extra:  # within the last piece (the body was incomplete before it)
                last = pieces[-1]
                pieces[-1], rest = last[: len(last) - extra], last[len(last) - extra :]
                assert self._body_hold is not None
                self._body_hold.shrink(extra)
            reader = self.conn._reader
            assert _CONTENT_LENGTH_READER is not None
            assert isinstance(reader, _CONTENT_LENGTH_READER)
            reader._remaining = 0
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            self.cycle.body = body  # type: ignore[assignment]
            if rest:
                self.conn.receive_data(rest)
            self.handle_events()  # h11's EndOfMessage: the app's one message

        def _collect_timed_out(self) -> None:
            self._collect_timer = None
            self._stop_collecting(b"")

        def _stop_collecting(self, data: bytes) -> None:
            """Go on as uvicorn reads a body: what was collected, and ``data``, to h11 (the
            collected bytes still held: the app takes them over as it reads them)."""
            pieces = self._end_collection()
            if self._parsed:  # read by h11 with the head: the app's as uvicorn left them
                self.cycle.body += pieces.pop(0)
                self.cycle.message_event.set()
                self._parsed = 0
            pieces.append(data)
            self._body_left = 0
            joined = b"".join(pieces)
            if joined and not self.transport.is_closing():
                H11Protocol.data_received(self, joined)

        # --- guards ----------------------------------------------------------------

        def _guard_next_event(self) -> None:
            parse: Callable[[], Any] = self.conn.next_event

            def next_event() -> Any:
                try:
                    event = parse()
                except h11.RemoteProtocolError as exc:
                    self._refusal = f"malformed HTTP request: {exc}"
                    raise
                if isinstance(event, h11.Request):
                    if _both_lengths(event):
                        # RFC 9112 §6.1: possible request smuggling. Refused here, before
                        # h11 reads a body framed one way or the other and before the app
                        # runs: the answer is this one, and the connection closes.
                        self._refusal = (
                            "the request has both Content-Length and Transfer-Encoding headers"
                        )
                        raise _ProtocolRefusal(self._refusal)
                    table.busy(self)
                    if admission is not None:
                        client, error = admission.admit(
                            event.method, event.target, event.headers, self._peer
                        )
                        if error is not None:
                            self._refuse_request(error, _drained_length(event))
                            return h11.NEED_DATA  # uvicorn never sees this request
                        self._inflight = client
                return event

            self.conn.next_event = next_event  # type: ignore[method-assign]

        def _unguard(self) -> None:
            """Undo :meth:`_guard_next_event`: its closure refers to this protocol, which
            refers to the h11 state holding it, a cycle only the garbage collector would
            free (about 15 objects per connection, and their collections, which walk the
            whole heap in time, under a flood of refused connections)."""
            vars(self.conn).pop("next_event", None)

        def _release(self) -> None:
            if self._inflight is not None and admission is not None:
                admission.release(self._inflight)
            self._inflight = None

        def _arm_head_timer(self) -> None:
            """A head is due within ``header_timeout_s`` from now (a timer set only when
            none is)."""
            due = self.loop.time() + header_timeout_s
            self._head_due = due
            if self._head_timer is None:
                self._head_timer = self.loop.call_at(due, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            """No head is awaited now (the timer, if set, then finds nothing due)."""
            self._head_due = None

        def _stop_head_timer(self) -> None:
            """No head is awaited any more: the timer goes too (it holds this protocol)."""
            self._head_due = None
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            due = self._head_due
            if due is None:
                return
            if due > self.loop.time():  # moved on since the timer was set
                self._head_timer = self.loop.call_at(due, self._head_timed_out)
                return
            self._head_due = None
            if self.transport.is_closing():
                return
            started, _ = self.conn.trailing_data
            if started and self.conn.their_state is h11.IDLE:
                message = f"{_HEAD_TIMEOUT} ({header_timeout_s:g} s)"
                self.transport.write(
                    raw_error(
                        408, "Request Timeout", "RequestTimeoutError", message, reason="waveform"
                    )
                )
            self.transport.close()

        def _evict(self) -> None:
            """Closed to admit a newer connection (already out of the table): it waited
            longest for a request head."""
            self._stop_head_timer()
            self.transport.abort()  # its descriptor is free for the new one at once

        def _refuse_request(
            self, error: AudioGateError, skip: int | None, *, parsed: bool = True
        ) -> None:
            """Refuse the request whose head just arrived, skipping ``skip`` bytes of its
            body on a kept-alive connection (``None``: close it). ``parsed``: h11 read the
            head (a fresh h11 state reads the next one); else h11 never saw it, and its
            state, idle between requests, reads the next head as it is."""
            self._cancel_head_timer()
            if skip is None:
                self._refused = True
                table.remove(self)  # closing: its place goes to a new connection
                self._linger(refusal_answer(error))
                return
            # A small body on a kept-alive connection: its bytes are skipped unparsed as
            # they arrive (the client may reuse the connection, and a refusal costs no
            # new connection), and it is answered refusal_delay_s later. A client that
            # sends again at once after its 429 then costs the loop one refusal per
            # delay and connection, not one per round trip; and its next request, read
            # as soon as it arrives, waits in no pause (admitted, its latency is its
            # own).
            self._answer_due = refusal_answer(error, close=False)
            self.loop.call_later(refusal_delay_s, self._answer_refusal)
            self._skip = skip
            self._skipping = True
            if parsed:
                leftover, _ = self.conn.trailing_data
                self._unguard()
                self.conn = h11.Connection(h11.SERVER, self.conn._max_incomplete_event_size)
                self._guard_next_event()
                self._skip_from = bytes(leftover)

        def _skip_body(self, data: bytes, start: int = 0) -> None:
            """Skip the refused body's bytes in ``data[start:]`` (never copied: a refused
            body is up to :data:`DRAIN_BYTES`, and under overload most bytes read are
            theirs)."""
            taken = min(len(data) - start, self._skip)
            self._skip -= taken
            if self._skip:
                if self._skip >= SKIP_BUFFERED_BYTES:
                    # The rest is read into the drains' shared buffer, not into a
                    # ``bytes`` object per read (body_skipped hands the connection back).
                    self.transport.set_protocol(BodySkip(self.transport, self, self._skip))
                return
            # The body is skipped. The connection's next request is read once the refusal
            # is answered. Reading goes on meanwhile (its client waits for the answer:
            # usually nothing comes), and pauses only when bytes do come, kept until then
            # (one read's worth at most; the next bytes wait in the socket).
            self._cancel_head_timer()
            end = start + taken
            rest = data[end:] if end < len(data) else b""
            if self._answer_due is None:
                self._read_again(rest)
                return
            if rest:
                self.transport.pause_reading()
                self._paused = True
            self._after_skip = (self._after_skip or b"") + rest

        def body_skipped(self) -> None:
            """:class:`~audiogate.server.drain.BodySkip` read the rest of the refused
            body: the connection is this protocol's again."""
            self._skip = 0
            self._skip_body(b"")

        def _answer_refusal(self) -> None:
            answer, self._answer_due = self._answer_due, None
            if answer is None or self.transport.is_closing():
                return
            self.transport.write(answer)
            if self._after_skip is not None:  # the body is skipped: read on
                rest, self._after_skip = self._after_skip, None
                self._read_again(rest)

        def _read_again(self, rest: bytes) -> None:
            self._skipping = False
            if self.transport.is_closing():
                return
            table.waiting(self)
            self._arm_head_timer()
            if self._paused:
                self._paused = False
                self.transport.resume_reading()
            if rest:  # the next request, pipelined
                super().data_received(rest)

        def _refuse_overload(self, excess: int, *, own: bool) -> None:
            self._refused = True
            if excess > OVERFLOW_CONNECTIONS:
                self.transport.abort()
                return
            self._linger(_ADDRESS_OVERLOADED if own else _OVERLOADED)

        def _linger(self, answer: bytes) -> None:
            transport = self.transport
            transport.write(answer)
            # Half-close after the answer and linger briefly, reading and dropping what
            # the client sends: closing with its request unread would reset the
            # connection, and the client might never see the answer. The drain reads
            # into a buffer of its own, closes when the client does, and hands the loss
            # back here.
            if transport.can_write_eof():
                transport.write_eof()
            drain = Drain(
                transport,
                limit=DRAIN_BYTES,
                linger_s=_LINGER_S,
                loop=self.loop,
                lost=self.connection_lost,
            )
            transport.set_protocol(drain)

    return GuardedH11Protocol
