"""Who is served under pressure (issue #33): the connection table (a cap per client
address and in total, making room by closing the oldest connection that waits for a
request head) and the request head's admission (a request the worker or the body budget
would refuse is refused from its head, its body never read; a client, by address or by
bearer token, is held to its share of the worker while others wait).

Both run on the event loop in the connection protocol (:mod:`audiogate.server.protocol`),
before the app: refusing costs one parsed head and one written answer.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from audiogate.errors import AudioGateError, QueueFullError

if TYPE_CHECKING:
    from audiogate.server.budgets import ServerLimits
    from audiogate.server.routes import AudioServer

__all__ = [
    "BODY_PATHS",
    "QUEUED_PATHS",
    "ClientAddresses",
    "ConnectionTable",
    "HeadAdmission",
]

#: Routes whose requests go to the worker: refused from the head while its queue is full,
#: and counted per client while in flight (``/v1/audio/prepare``, vLLM's render routes).
QUEUED_PATHS: Final = frozenset(
    {"/v1/audio/prepare", "/v1/chat/completions/render", "/v1/completions/render"}
)
#: Routes whose bodies the body budget holds: refused from the head while it is full.
BODY_PATHS: Final = QUEUED_PATHS | {"/v1/audio/sources"}
_PREPARE: Final = "/v1/audio/prepare"

_C = TypeVar("_C", bound=Hashable)


class ClientAddresses:
    """The client address of a connection or request: the peer's, or behind a trusted
    proxy (``trusted`` CIDRs) the one its ``header`` names, never a header from any
    other peer."""

    def __init__(self, trusted: Sequence[str] = (), header: str = "x-forwarded-for") -> None:
        self.networks = tuple(ipaddress.ip_network(n, strict=False) for n in trusted)
        self.header = header.lower().encode("latin-1")

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (one instance per server)
    def trusted(self, address: str) -> bool:
        """Whether ``address`` is a trusted proxy."""
        if not self.networks:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    def of(self, peer: str, headers: Sequence[tuple[bytes, bytes]]) -> str:
        """The client of a request from ``peer`` with (lower-case) ``headers``: the
        rightmost hop of the header that is not a trusted proxy (each proxy appends the
        address it saw; hops left of an untrusted one may be forged)."""
        if not self.networks or not self.trusted(peer):
            return peer
        hops = b",".join(value for name, value in headers if name == self.header)
        client = peer
        for hop in reversed(hops.split(b",")):
            text = hop.strip().decode("latin-1")
            try:
                ipaddress.ip_address(text)
            except ValueError:
                break  # not an address: stop at the last hop a trusted proxy vouched for
            client = text
            if not self.trusted(text):
                break
        return client


class ConnectionTable(Generic[_C]):
    """Open connections by client address, and those waiting for a request head (just
    opened, part of a head sent, or idle between requests) oldest-waiting first.

    :param cap: connections served at once.
    :param per_client: connections one address may hold (an exempt one: any number).
    """

    def __init__(self, cap: int, per_client: int) -> None:
        self.cap = cap
        self.per_client = per_client
        self._address: dict[_C, str] = {}
        self._count: Counter[str] = Counter()
        self._waiting: OrderedDict[_C, None] = OrderedDict()
        self._waiting_by: dict[str, OrderedDict[_C, None]] = {}

    def __len__(self) -> int:
        return len(self._address)

    def count(self, address: str) -> int:
        """Connections ``address`` holds."""
        return self._count[address]

    def make_room(self, address: str, *, exempt: bool = False) -> list[_C] | None:
        """Room for one more connection from ``address``: the connections to close for it
        (already out of the table), or ``None`` when none may close (refuse the new one).

        Past the address's cap its own oldest waiting connection makes room; past the
        total cap, the oldest waiting connection of any address.
        """
        victims: list[_C] = []
        if not exempt and self._count[address] >= self.per_client:
            own = self._waiting_by.get(address)
            if not own:
                return None
            victims.append(next(iter(own)))
            self.remove(victims[-1])
        if len(self._address) >= self.cap:
            if not self._waiting:
                return None
            victims.append(next(iter(self._waiting)))
            self.remove(victims[-1])
        return victims

    def add(self, connection: _C, address: str) -> None:
        """Serve ``connection`` (from ``address``), waiting for its first head."""
        self._address[connection] = address
        self._count[address] += 1
        self.waiting(connection)

    def waiting(self, connection: _C) -> None:
        """``connection`` waits for a request head from now on (the newest waiting)."""
        address = self._address.get(connection)
        if address is None:
            return
        self._waiting[connection] = None
        self._waiting.move_to_end(connection)
        own = self._waiting_by.setdefault(address, OrderedDict())
        own[connection] = None
        own.move_to_end(connection)

    def busy(self, connection: _C) -> None:
        """``connection``'s request head arrived: it no longer waits."""
        if self._waiting.pop(connection, 1) is None:
            own = self._waiting_by[self._address[connection]]
            del own[connection]
            if not own:
                del self._waiting_by[self._address[connection]]

    def remove(self, connection: _C) -> None:
        """``connection`` closed (or is being closed)."""
        address = self._address.get(connection)
        if address is None:
            return
        self.busy(connection)
        del self._address[connection]
        self._count[address] -= 1
        if not self._count[address]:
            del self._count[address]

    def oldest_waiting(self) -> list[_C]:
        """The waiting connections, oldest first (for tests and the docs)."""
        return list(self._waiting)


class HeadAdmission:
    """Decides from a request's head whether it is served: refused (429, ``Retry-After``)
    while the worker's queue is full or its declared body does not fit the body budget
    now, or while its client holds more than its share of the worker.

    A client's share: at most ``max_requests_per_client`` requests in flight (head to
    answer); and while the requests in flight fill the worker's places (threads plus
    queue), the places divided among the clients with requests in flight (a client alone:
    all of them). So the queue does not overflow with requests admitted at once and
    refused only after their bodies were parsed, and a newcomer is admitted while the
    others hold more than their share. Reconnecting changes nothing: both count by client
    (:meth:`client_of`: its address, or its bearer token's owner).
    """

    def __init__(
        self, server: AudioServer, limits: ServerLimits, addresses: ClientAddresses
    ) -> None:
        self.server = server
        self.max_per_client = limits.max_requests_per_client
        self.addresses = addresses
        by_token = limits.fair_share_by == "token" or (
            limits.fair_share_by == "auto" and server.owners is not None
        )
        #: The bearer tokens clients count by (``fair_share_by``); ``None``: by address.
        self.owners = server.owners if by_token else None
        self.inflight: Counter[str] = Counter()
        self.total = 0
        # Each refusal increments two counters: their children are looked up once.
        self._rejections: dict[str, Any] = {}
        self._head_refusals: dict[str, Any] = {}
        self._responses_429 = server.server_metrics.responses.labels(status="429")
        server.metrics.ensure_family(server.family)

    def admit(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]], peer: str
    ) -> tuple[str | None, AudioGateError | None]:
        """``(client, None)``: served and counted in flight until :meth:`release`;
        ``(None, error)``: refused with ``error`` (counted in the metrics here);
        ``(None, None)``: a route this does not gate."""
        path, client, error = self._decide(method, target, headers, peer)
        if error is not None:
            self._count(path, error)
            return None, error
        if client is not None:
            self.inflight[client] += 1
            self.total += 1
        return client, None

    def refusal(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]], peer: str
    ) -> AudioGateError | None:
        """The error :meth:`admit` would refuse the request with now (counted in the
        metrics here, as there), or ``None``: nothing is counted, and :meth:`admit`,
        asked on the same loop turn, admits it (the fast path's question, before h11
        parses the head: :mod:`audiogate.server.fast_refusal`)."""
        path, _, error = self._decide(method, target, headers, peer)
        if error is not None:
            self._count(path, error)
        return error

    def _decide(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]], peer: str
    ) -> tuple[str, str | None, AudioGateError | None]:
        """The request's path, the client it counts against (queued routes) and the
        error refusing it, counting nothing."""
        if method != b"POST":
            return "", None, None
        path = target.partition(b"?")[0].decode("latin-1")
        if path not in BODY_PATHS:
            return path, None, None
        error = self._pressure(path, headers)
        client = None
        if error is None and path in QUEUED_PATHS:
            client = self.client_of(peer, headers)
            error = self._beyond_share(client)
        return path, client, error

    def client_of(self, peer: str, headers: Sequence[tuple[bytes, bytes]]) -> str:
        """Who a request from ``peer`` with (lower-case) ``headers`` counts against: its
        client address, or by token (``fair_share_by``) ``"token:"`` and its bearer
        token's owner (a request without a known token: its address; the app answers
        it 401)."""
        if self.owners is not None:
            for name, value in headers:
                if name == b"authorization":
                    scheme, _, token = value.partition(b" ")
                    token = token.strip(b" \t")
                    if token and scheme.lower() == b"bearer":
                        owner = self.owners.owner(token)
                        if owner is not None:
                            return "token:" + owner
                    break
        return self.addresses.of(peer, headers)

    def release(self, client: str) -> None:
        """A request :meth:`admit` counted has been answered (or its client left)."""
        self.total -= 1
        self.inflight[client] -= 1
        if self.inflight[client] <= 0:
            del self.inflight[client]

    def _pressure(self, path: str, headers: Sequence[tuple[bytes, bytes]]) -> AudioGateError | None:
        worker = self.server.worker
        if path in QUEUED_PATHS and worker.queue_full:
            depth = worker.limits.queue_depth
            return QueueFullError(f"the audio queue is full ({depth} jobs waiting); retry later")
        bodies = self.server.bodies
        for name, value in headers:
            if name == b"content-length":
                length = int(value)  # h11 has refused a malformed one
                # A body larger than the whole budget is the app's 413 (it never fits).
                if length <= bodies.maximum and not bodies.fits(length):
                    return bodies.refusal(length)
                break
        return None

    def _beyond_share(self, client: str) -> AudioGateError | None:
        mine = self.inflight[client]
        if self.max_per_client is not None and mine >= self.max_per_client:
            return QueueFullError(
                f"this client has {mine} requests in flight (at most {self.max_per_client}); "
                "retry later"
            )
        limits = self.server.worker.limits
        capacity = limits.threads + limits.queue_depth
        if self.total >= capacity:
            # Saturated: the worker's places are shared among the clients with requests in
            # flight. Refused here, from the head, a request costs nothing more; admitted
            # past the places, it would be parsed and planned, then refused at the queue.
            clients = len(self.inflight) + (0 if mine else 1)
            share = max(1, capacity // clients)
            if mine >= share:
                return QueueFullError(
                    f"the audio worker is saturated ({self.total} requests in flight for "
                    f"{capacity} places) and this client has {mine}, its share among "
                    f"{clients} clients; retry later"
                )
        return None

    def _count(self, path: str, error: AudioGateError) -> None:
        head = self._head_refusals.get(error.reason)
        if head is None:
            head = self.server.server_metrics.head_refusals.labels(reason=error.reason)
            self._head_refusals[error.reason] = head
        head.inc()
        if path in QUEUED_PATHS:  # a source upload is not a prepare request
            # As record_outcome counts a rejection, with the child looked up once.
            counter = self._rejections.get(error.reason)
            if counter is None:
                server = self.server
                counter = server.metrics.rejections.labels(
                    family=server.family, reason=error.reason
                )
                self._rejections[error.reason] = counter
            counter.inc()
        if path == _PREPARE:
            self._responses_429.inc()
