"""``audiogate serve``'s options: :class:`ServeOptions`, and the command line that makes
them, whose help shows the options' own defaults.

Importing this module does not import the server's dependencies (starlette, uvicorn):
the CLI builds its parser from it for every command.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from pathlib import Path
from typing import Any, Final

import attrs

from audiogate.argtypes import positive_int
from audiogate.chat.prompt_text import MAX_PROMPT_TEXT_BYTES
from audiogate.server.budgets import FAIR_SHARE_KEYS, ServerLimits
from audiogate.store.source_record import StoreQuotas
from audiogate.store.store import DEFAULT_SOURCE_WAIT_S
from audiogate.streaming.deadlines import StreamDeadlines
from audiogate.worker import WorkerLimits
from audiogate.worker.reservations import MIB

__all__ = [
    "MAX_WORKERS",
    "ServeOptions",
    "add_serve_arguments",
    "parse_size",
    "serve_options",
]

_UNITS: Final = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_SIZE: Final = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"512KiB"``, ``"64MiB"`` or ``"1GiB"`` (binary units).

    :raises ValueError: not a whole number of bytes with a known unit.
    """
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size; use bytes or KiB, MiB, GiB (e.g. 64MiB)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


@attrs.frozen(kw_only=True)
class ServeOptions:
    """Everything ``audiogate serve`` takes.

    :param model_dir: the checkpoint directory (config files, tokenizer, chat template).
    :param media_root: the directory ``file://`` URLs and bare paths are confined to
        (``--media-path``); ``None`` refuses local files.
    :param allow_url_fetch: fetch ``http(s)://`` audio (public addresses only).
    :param threads: worker threads of the bounded worker (``--workers``).
    :param worker: the worker's capacities (``threads`` overrides its thread count).
    :param limits: body and connection limits.
    :param max_prefill_tokens: refuse expanded prompts longer than this.
    :param max_prompt_text_bytes: refuse chat messages with more text than this (UTF-8
        bytes) before the template renders them; lowered to ``max_prefill_tokens`` times
        the tokenizer's longest token.
    :param feature_cache_bytes: the feature cache's budget (``0``: none); its bytes count
        against ``worker.max_inflight_host_bytes``.
    :param store_dir: the source store's directory (``--store``; docs/sources.md): the
        ``/v1/audio/sources`` endpoints and ``audio_ref`` parts; ``None``: neither.
    :param verify_store: recompute every stored blob's digest when the store opens.
    :param auth_tokens: a file of ``TOKEN OWNER`` lines (``--auth-tokens``); every
        ``/v1/audio/*`` request then needs ``Authorization: Bearer TOKEN`` and acts as
        that owner. ``None``: every request is the one anonymous owner.
    :param store_quotas: what each owner, and the store, may hold.
    :param source_wait_s: how long a reference to a source still ``processing`` waits for
        it to be ready (then 409).
    :param stream_deadlines: the idle and minimum-rate timeouts of streamed clips
        (chunked uploads, ``/v1/realtime`` buffers).
    """

    model_dir: Path = attrs.field(converter=Path)
    host: str = "127.0.0.1"
    port: int = 8000
    media_root: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    allow_url_fetch: bool = False
    threads: int = 1
    worker: WorkerLimits = attrs.field(factory=WorkerLimits)
    limits: ServerLimits = attrs.field(factory=ServerLimits)
    max_prefill_tokens: int | None = None
    max_prompt_text_bytes: int = attrs.field(
        default=MAX_PROMPT_TEXT_BYTES, validator=attrs.validators.ge(1)
    )
    feature_cache_bytes: int = attrs.field(default=256 * MIB, validator=attrs.validators.ge(0))
    store_dir: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    verify_store: bool = False
    auth_tokens: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    store_quotas: StoreQuotas = attrs.field(factory=StoreQuotas)
    source_wait_s: float = attrs.field(
        default=DEFAULT_SOURCE_WAIT_S, validator=attrs.validators.gt(0)
    )
    log_level: str = "info"
    access_log: bool = True
    served_model_name: str | None = None
    stream_deadlines: StreamDeadlines = attrs.field(factory=StreamDeadlines)


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size (at least 1 byte)")
    return value


def _size_or_zero(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # nan and inf are floats too: neither is a timeout (uvicorn rounds it to an integer).
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


def _refusal_delay(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:  # at most the answer's Retry-After (nan compares false)
        raise argparse.ArgumentTypeError(f"{text!r} is not a delay in seconds from 0 to 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return value


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a network (an address or CIDR, e.g. 10.0.0.0/8)"
        ) from None


#: ``--workers``: each is a thread started at once; far more than any machine has cores
#: would only fail to start ("can't start new thread") or exhaust memory.
MAX_WORKERS: Final = 1024


def _workers(text: str) -> int:
    value = positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too many worker threads (1 to {MAX_WORKERS})"
        )
    return value


def _default(cls: type, name: str) -> Any:
    """The default of attrs field ``name`` of ``cls`` (what the help text shows)."""
    return getattr(attrs.fields(cls), name).default


def _size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``audiogate serve``'s options to ``p``; their defaults are the options' own
    (:class:`ServeOptions`, :class:`~audiogate.worker.WorkerLimits`,
    :class:`~audiogate.server.budgets.ServerLimits`)."""
    host = _default(ServeOptions, "host")
    port = _default(ServeOptions, "port")
    threads = _default(ServeOptions, "threads")
    queue_depth = _default(WorkerLimits, "queue_depth")
    queued = _size_text(_default(WorkerLimits, "max_queued_encoded_bytes"))
    inflight = _size_text(_default(WorkerLimits, "max_inflight_host_bytes"))
    body_timeout = _default(ServerLimits, "body_idle_timeout_s")
    p.add_argument("--model", metavar="DIR", required=True, help="model directory to serve")
    p.add_argument(
        "--served-model-name",
        metavar="NAME",
        help="the model name requests must give, as in vLLM (default: the model directory's name)",
    )
    p.add_argument("--host", default=host, help=f"bind address (default: {host})")
    p.add_argument("--port", type=_port, default=port, help=f"bind port (default: {port}; 0: any)")
    p.add_argument(
        "--media-path", metavar="ROOT", help="directory file:// URLs and bare paths may read"
    )
    p.add_argument(
        "--allow-url-fetch", action="store_true", help="fetch http(s):// audio (public hosts)"
    )
    p.add_argument(
        "--workers",
        type=_workers,
        default=threads,
        metavar="N",
        help=f"audio worker threads (1 to {MAX_WORKERS}; default {threads})",
    )
    p.add_argument(
        "--queue-depth",
        type=positive_int,
        metavar="N",
        help=f"jobs waiting (default {queue_depth})",
    )
    p.add_argument(
        "--max-queued-encoded-bytes", type=_size, metavar="SIZE", help=f"default {queued}"
    )
    p.add_argument(
        "--max-inflight-host-bytes", type=_size, metavar="SIZE", help=f"default {inflight}"
    )
    p.add_argument(
        "--max-body-bytes",
        type=_size,
        metavar="SIZE",
        help="one request body (default: base64 of the model's request audio ceiling + 2MiB)",
    )
    p.add_argument(
        "--max-inflight-body-bytes",
        type=_size,
        metavar="SIZE",
        help="all request bodies held at once (default: 4 maximal bodies)",
    )
    p.add_argument(
        "--max-inflight-acquired-bytes",
        type=_size,
        metavar="SIZE",
        help="audio all requests' file and URL reads hold at once (default: 4 maximal requests)",
    )
    p.add_argument(
        "--body-timeout",
        type=_seconds,
        default=body_timeout,
        metavar="SECONDS",
        help=(
            "refuse a request whose body stalls this long (408), abandon an answer left "
            f"unread this long, close connections this long into a shutdown (default "
            f"{body_timeout:g})"
        ),
    )
    header_timeout = _default(ServerLimits, "header_timeout_s")
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=header_timeout,
        metavar="SECONDS",
        help=(
            "close a connection whose request head has not arrived this long after it "
            f"opened or after its last answer (default {header_timeout:g})"
        ),
    )
    max_connections = _default(ServerLimits, "max_connections")
    p.add_argument(
        "--max-connections",
        type=positive_int,
        default=max_connections,
        metavar="N",
        help=(
            "connections served at once (default "
            f"{max_connections}, lowered to fit under the open-file limit); past it the "
            "oldest connection waiting for a request head is closed, 503 if none waits"
        ),
    )
    per_client = _default(ServerLimits, "max_connections_per_client")
    p.add_argument(
        "--max-connections-per-client",
        type=positive_int,
        default=per_client,
        metavar="N",
        help=(
            "connections one client address may hold; past it (or past --max-connections) "
            "the oldest connection waiting for a request head is closed for the new one "
            f"(default {per_client})"
        ),
    )
    p.add_argument(
        "--max-requests-per-client",
        type=positive_int,
        metavar="N",
        help=(
            "requests one client may have in flight, more are answered 429 from their head "
            "(default: no fixed cap; a client is held to its fair share while the worker "
            "is saturated)"
        ),
    )
    p.add_argument(
        "--fair-share-by",
        choices=FAIR_SHARE_KEYS,
        default=_default(ServerLimits, "fair_share_by"),
        help=(
            "who a client is for --max-requests-per-client and the fair share: its address, "
            "its bearer token's owner, or auto (by token with --auth-tokens, else by "
            "address; the default)"
        ),
    )
    refusal_delay = _default(ServerLimits, "refusal_delay_s")
    p.add_argument(
        "--refusal-delay",
        type=_refusal_delay,
        default=refusal_delay,
        metavar="SECONDS",
        help=(
            "how long a request refused from its head (429) on a kept-alive connection "
            "waits for its answer, its body skipped: a client retrying at once then sends "
            f"one request per delay (0 to 1; default {refusal_delay:g})"
        ),
    )
    p.add_argument(
        "--trusted-proxy",
        type=_network,
        action="append",
        default=[],
        metavar="CIDR",
        help="a proxy whose --client-address-header names the client (repeatable)",
    )
    client_header = _default(ServerLimits, "client_address_header")
    p.add_argument(
        "--client-address-header",
        default=client_header,
        metavar="NAME",
        help=(
            "the header a --trusted-proxy names the client in, never read from another "
            f"peer (default {client_header})"
        ),
    )
    min_body_rate = _size_text(_default(ServerLimits, "min_body_rate"))
    p.add_argument(
        "--min-body-rate",
        type=_size_or_zero,
        default=_default(ServerLimits, "min_body_rate"),
        metavar="SIZE",
        help=(
            "bytes per second a body must average once it has been arriving for "
            f"--body-timeout, else 408 (default {min_body_rate}; 0: off)"
        ),
    )
    stream_idle = _default(StreamDeadlines, "idle_timeout_s")
    p.add_argument(
        "--stream-idle-timeout",
        type=_seconds,
        default=stream_idle,
        metavar="SECONDS",
        help=(
            "cut a streamed clip (a chunked upload, a /v1/realtime buffer) that sends "
            f"nothing this long, 408 stream_timeout (default {stream_idle:g})"
        ),
    )
    stream_rate = _default(StreamDeadlines, "min_rate")
    p.add_argument(
        "--stream-min-rate",
        type=_size_or_zero,
        default=stream_rate,
        metavar="SIZE",
        help=(
            "bytes per second a streamed clip must average once it has been open for "
            f"--stream-idle-timeout, else 408 (default {_size_text(stream_rate)}; 0: off)"
        ),
    )
    p.add_argument("--max-prefill-tokens", type=positive_int, metavar="N", help="prompt length cap")
    text_cap = _size_text(_default(ServeOptions, "max_prompt_text_bytes"))
    p.add_argument(
        "--max-prompt-text-bytes",
        type=_size,
        metavar="SIZE",
        help=(
            "refuse messages with more text before rendering them (default "
            f"{text_cap}, lowered to --max-prefill-tokens times the longest token)"
        ),
    )
    cache = _size_text(_default(ServeOptions, "feature_cache_bytes"))
    p.add_argument(
        "--feature-cache-bytes",
        type=_size_or_zero,
        default=_default(ServeOptions, "feature_cache_bytes"),
        metavar="SIZE",
        help=(
            "prepared clips kept for repeated audio, counted against "
            f"--max-inflight-host-bytes (default {cache}; 0: off)"
        ),
    )
    p.add_argument(
        "--log-level",
        default=_default(ServeOptions, "log_level"),
        choices=["critical", "error", "warning", "info", "debug", "trace"],
    )
    p.add_argument("--no-access-log", action="store_true", help="do not log every request")
    p.add_argument(
        "--store",
        metavar="DIR",
        help="source store directory: enables /v1/audio/sources and audio_ref parts",
    )
    p.add_argument(
        "--store-verify",
        action="store_true",
        help="recompute every stored source's SHA-256 when the store opens",
    )
    p.add_argument(
        "--store-max-bytes-per-owner", type=_size, metavar="SIZE", help="default: no limit"
    )
    p.add_argument(
        "--store-max-sources-per-owner", type=positive_int, metavar="N", help="default: no limit"
    )
    p.add_argument("--store-max-bytes", type=_size, metavar="SIZE", help="default: no limit")
    p.add_argument(
        "--store-wait",
        type=_seconds,
        default=_default(ServeOptions, "source_wait_s"),
        metavar="SECONDS",
        help="how long a reference to a source still processing waits for it "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--store-retire-timeout",
        type=_seconds,
        default=_default(ServerLimits, "retire_timeout_s"),
        metavar="SECONDS",
        help="how long retiring a source waits for the requests holding it (default: %(default)g)",
    )
    p.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="'TOKEN OWNER' lines: requests need a bearer token and act as its owner "
        "(default: one anonymous owner)",
    )


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The :class:`ServeOptions` of a command line parsed with :func:`add_serve_arguments`
    (an option not given keeps its default)."""
    worker = {
        name: getattr(args, name)
        for name in ("queue_depth", "max_queued_encoded_bytes", "max_inflight_host_bytes")
        if getattr(args, name) is not None
    }
    return ServeOptions(
        model_dir=args.model,
        host=args.host,
        port=args.port,
        media_root=args.media_path,
        allow_url_fetch=args.allow_url_fetch,
        threads=args.workers,
        worker=WorkerLimits(**worker),
        limits=ServerLimits(
            max_body_bytes=args.max_body_bytes,
            max_inflight_body_bytes=args.max_inflight_body_bytes,
            max_inflight_acquired_bytes=args.max_inflight_acquired_bytes,
            body_idle_timeout_s=args.body_timeout,
            header_timeout_s=args.header_timeout,
            max_connections=args.max_connections,
            min_body_rate=args.min_body_rate,
            retire_timeout_s=args.store_retire_timeout,
            max_connections_per_client=args.max_connections_per_client,
            max_requests_per_client=args.max_requests_per_client,
            fair_share_by=args.fair_share_by,
            refusal_delay_s=args.refusal_delay,
            trusted_proxies=tuple(args.trusted_proxy),
            client_address_header=args.client_address_header,
        ),
        max_prefill_tokens=args.max_prefill_tokens,
        **(
            {"max_prompt_text_bytes": args.max_prompt_text_bytes}
            if args.max_prompt_text_bytes is not None
            else {}
        ),
        feature_cache_bytes=args.feature_cache_bytes,
        store_dir=args.store,
        verify_store=args.store_verify,
        source_wait_s=args.store_wait,
        auth_tokens=args.auth_tokens,
        store_quotas=StoreQuotas(
            max_bytes_per_owner=args.store_max_bytes_per_owner,
            max_sources_per_owner=args.store_max_sources_per_owner,
            max_total_bytes=args.store_max_bytes,
        ),
        log_level=args.log_level,
        access_log=not args.no_access_log,
        served_model_name=args.served_model_name,
        stream_deadlines=StreamDeadlines(
            idle_timeout_s=args.stream_idle_timeout, min_rate=args.stream_min_rate
        ),
    )
