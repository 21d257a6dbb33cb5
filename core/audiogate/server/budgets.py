"""The server's limits and budgets: one body's cap, the bytes all requests hold at once
(bodies and answers, acquired audio), and the server's own series that publish them."""

from __future__ import annotations

import ipaddress
import math
from typing import Any, Final, Literal

import attrs
from prometheus_client import Counter, Gauge

from audiogate.metrics import AudioMetrics

__all__ = [
    "ABSOLUTE_MAX_AUDIO_REQUEST_BYTES",
    "BODY_BYTES_LIMIT",
    "FAIR_SHARE_KEYS",
    "JSON_OVERHEAD_BYTES",
    "REFUSAL_DELAY_S",
    "ServerLimits",
    "ServerMetrics",
    "default_max_body_bytes",
]

MIB: Final = 1 << 20
#: The acquisition ceiling of one request's encoded audio (mlxcel's
#: ``ABSOLUTE_MAX_AUDIO_PAYLOAD_SIZE``, 500 MiB, ``src/server/media.rs``; docs/provenance.md).
ABSOLUTE_MAX_AUDIO_REQUEST_BYTES: Final = 500 * MIB
#: Room for the prompt text and the JSON around the base64 audio.
JSON_OVERHEAD_BYTES: Final = 2 * MIB
#: The limit name of a refusal by the body budget (``ServerLimits.max_inflight_body_bytes``).
BODY_BYTES_LIMIT: Final = "in-flight request body bytes"
#: Who a client is for its share of the worker (``ServerLimits.fair_share_by``).
FAIR_SHARE_KEYS: Final = ("auto", "address", "token")
#: How long a request refused from its head on a kept-alive connection waits for its 429
#: by default (``ServerLimits.refusal_delay_s``; at most the answer's ``Retry-After``, 1 s).
#: At 0.1 s, 5 s clips at c = 64 (55 clients beyond the worker's 9 places, retrying 10 ms
#: after each 429) drew ~480 refusals/s, each ~0.35 ms of server CPU in the mix; 0.5 s
#: drew ~105/s, but the clients it keeps out leave the server idle at times: a loaded
#: 6-round sweep at 0.5 s read c = 32 at 88 % of the peak (98 % at 0.1 s), c = 64 at 92 %
#: (93 %), so the default stays 0.1 s (docs/server.md).
REFUSAL_DELAY_S: Final = 0.1
#: The longest delay: the ``Retry-After`` of a refusal (seconds).
_MAX_REFUSAL_DELAY_S: Final = 1.0


def _lower(name: str) -> str:
    return name.lower()


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
    :param header_timeout_s: close a connection whose request head has not arrived this
        long after it opened or after its previous answer (a JSON 408 when part of a head
        had arrived).
    :param max_connections: connections served at once (lowered at start-up to fit under
        the process's open-file limit); one more is answered 503 and closed.
    :param min_body_rate: bytes per second a body must average once it has been arriving
        for ``body_idle_timeout_s`` (else 408); 0 turns the check off.
    :param retire_timeout_s: how long ``DELETE /v1/audio/sources/{sha256}`` waits for the
        requests holding the source to release it (then 409, and it is not retired).
    :param max_connections_per_client: connections one client address may hold open (a
        trusted proxy's are not capped); past it, that address's oldest connection waiting
        for a request head is closed to admit the new one, or the new one is answered 503.
    :param max_requests_per_client: requests to the worker one client may have in flight
        at once, from its request head to its answer (``None``: no fixed cap; while the
        worker is saturated and other clients have requests in flight, a client is still
        held to its fair share of the worker's threads plus queue).
    :param trusted_proxies: networks (CIDR) of proxies whose ``client_address_header``
        names the client; from any other peer the header is ignored.
    :param client_address_header: the header a trusted proxy names the client in (the
        rightmost address not itself a trusted proxy counts, as ``X-Forwarded-For``
        appends).
    :param fair_share_by: who a client is for ``max_requests_per_client`` and the fair
        share: ``"address"`` (its address), ``"token"`` (the owner of its bearer token;
        a request without a known token counts by its address), or ``"auto"`` (by token
        when the server has ``--auth-tokens``, else by address). By token, many users
        behind one NAT or proxy without a trusted header each get a share, and one owner
        gets one share from any number of addresses.
    :param refusal_delay_s: how long after its head a request refused from it on a
        kept-alive connection is answered (its body skipped meanwhile; ``0``: at once).
        A client that sends again as soon as it is answered (ignoring ``Retry-After``)
        then sends at most one request per delay and connection: under overload fewer
        refusals take the server's CPU from the requests it serves.
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
    header_timeout_s: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    max_connections: int = attrs.field(default=1024, validator=attrs.validators.ge(1))
    min_body_rate: int = attrs.field(default=32 * 1024, validator=attrs.validators.ge(0))
    retire_timeout_s: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    max_connections_per_client: int = attrs.field(default=256, validator=attrs.validators.ge(1))
    max_requests_per_client: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    trusted_proxies: tuple[str, ...] = attrs.field(
        default=(),
        converter=tuple,
        validator=attrs.validators.deep_iterable(attrs.validators.instance_of(str)),
    )
    client_address_header: str = attrs.field(default="x-forwarded-for", converter=_lower)
    fair_share_by: Literal["auto", "address", "token"] = attrs.field(
        default="auto", validator=attrs.validators.in_(FAIR_SHARE_KEYS)
    )
    refusal_delay_s: float = attrs.field(
        default=REFUSAL_DELAY_S,
        validator=[attrs.validators.ge(0), attrs.validators.le(_MAX_REFUSAL_DELAY_S)],
    )

    @trusted_proxies.validator
    def _networks(self, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # ValueError: not a CIDR


class ServerMetrics:
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
        self.head_refusals = Counter(
            "audiogate_server_head_refusals",
            "Requests refused from their head (429), before the app ran, by reason.",
            ["reason"],
            registry=registry,
        )
        for reason in ("queue_full", "memory_limit"):
            self.head_refusals.labels(reason=reason)
