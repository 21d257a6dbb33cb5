"""Remote media: resolve once, check every address, dial a checked one, check the peer.

Per hop (the first URL and every redirect, at most ``max_redirects``):

1. :func:`~audiogate.acquire.urls.parse_media_url` (strict, cross-checked with httpx);
   ``https_only`` and the host allow-list;
2. the host is resolved **once** (an IP literal is not resolved) with the policy's
   resolver (default :func:`system_resolver`: ``getaddrinfo`` in the loop's executor),
   and **every** address must be public (:mod:`audiogate.acquire.addresses`) unless
   ``allow_private_addresses``;
3. the request is sent to a checked address: **pinning** puts the address itself in the
   request URL, while the ``Host`` header and the TLS SNI/certificate name stay the
   host name (httpcore's ``sni_hostname`` extension). The connection therefore never
   makes a second lookup — not even a client with its own transport can re-resolve;
4. after connecting, before any body byte is read, the socket's peer address must be
   the pinned address and pass the same check (a proxy or a custom transport fails
   here);
5. redirects (301/302/303/307/308) are followed by hand with ``GET``; other statuses
   than 2xx (206 included) are refused; a ``Content-Encoding`` is refused (no
   decompression bombs: ``Accept-Encoding: identity``);
6. ``Content-Length`` above the cap is refused before the body; the body is streamed
   under a running cap (h11 never delivers more than a declared length).

Every request carries ``Connection: close``, so no connection (and its TLS identity) is
ever reused for another host, and no request uses the client's cookies, auth, default
headers or base URL. The whole fetch is bounded by ``total_timeout_s``, each connect by
``connect_timeout_s``. A cancel token is polled while the fetch waits, so a cancelled
request stops even if the server stalls; cancelling the awaiting task closes the stream.
No proxy support: the default client ignores ``HTTP(S)_PROXY``, and a caller's client
that uses one fails step 4.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Final

import httpx

from audiogate._version import __version__
from audiogate.acquire import addresses
from audiogate.acquire.context import ClipContext, SourceRefused
from audiogate.acquire.policy import PRIVATE_MEDIA_URLS_ENV, AcquisitionPolicy, IPAddress
from audiogate.acquire.urls import MediaURL, host_allowed, parse_media_url
from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import PreprocessCancelled

__all__ = [
    "CANCEL_POLL_S",
    "FETCH_DISABLED_MESSAGE",
    "USER_AGENT",
    "check_hop",
    "create_media_client",
    "fetch_url",
    "resolve_checked",
    "system_resolver",
]

USER_AGENT: Final = f"audiogate/{__version__}"
#: The refusal of a URL source when fetching is not switched on.
FETCH_DISABLED_MESSAGE: Final = (
    "fetching media URLs is disabled (AcquisitionPolicy.allow_url_fetch is off)"
)
#: How often a fetch that is waiting on the network looks at the cancel token.
CANCEL_POLL_S: Final = 0.05

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_DIGITS: Final = re.compile(r"[0-9]{1,20}")


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve ``host`` with ``getaddrinfo`` in the event loop's executor (TCP only)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [
        addresses.normalize_address(str(info[4][0]))
        for info in infos
        if info[0] in (socket.AF_INET, socket.AF_INET6)
    ]


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    # Built once (certifi's bundle); SSL_CERT_FILE and friends are ignored on purpose.
    return httpx.create_ssl_context(trust_env=False)


def create_media_client(*, verify: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` configured the way media fetching expects.

    No environment proxies, netrc or certificate settings (``trust_env=False``), no
    automatic redirects, no kept-alive connections, HTTP/1.1 only.

    :param verify: the TLS context (default: certifi's CAs).
    """
    return httpx.AsyncClient(
        verify=verify if verify is not None else _default_ssl_context(),
        trust_env=False,
        follow_redirects=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def _blocked(url: MediaURL, address: IPAddress, why: str) -> SourceRefused:
    verb = "is" if url.literal is not None else "resolves to"
    return SourceRefused(
        f"media URL host {url.host!r} {verb} {address}, which is not a public address "
        f"({why}); set {PRIVATE_MEDIA_URLS_ENV}=1 at start-up to allow private addresses"
    )


def check_hop(url: MediaURL, policy: AcquisitionPolicy) -> None:
    """The per-hop switches: ``https_only`` and the host allow-list.

    :raises SourceRefused: the hop is not allowed.
    """
    if policy.https_only and url.scheme != "https":
        raise SourceRefused(f"media URL refused: plain http to {url.host!r} (https only)")
    if policy.allowed_hosts is not None and not host_allowed(url.host, policy.allowed_hosts):
        raise SourceRefused(f"media URL refused: host {url.host!r} is not in the allowed hosts")


async def resolve_checked(url: MediaURL, policy: AcquisitionPolicy) -> list[IPAddress]:
    """The addresses ``url`` may be dialled at, after checking every one of them.

    :raises SourceRefused: unresolvable, or any address is not public (and private
        addresses are not allowed): the message names the host, the address and
        :data:`~audiogate.acquire.policy.PRIVATE_MEDIA_URLS_ENV`.
    """
    if url.literal is not None:
        found: list[IPAddress] = [url.literal]
    else:
        resolver = policy.resolver or system_resolver
        try:
            answer: Sequence[IPAddress | str] = await resolver(url.host, url.port)
        except OSError as exc:
            raise SourceRefused(
                f"media URL host {url.host!r} could not be resolved ({exc})"
            ) from None
        try:
            found = list(dict.fromkeys(addresses.normalize_address(a) for a in answer))
        except ValueError as exc:
            raise SourceRefused(
                f"the resolver answered a non-address for {url.host!r} ({exc})"
            ) from None
        if not found:
            raise SourceRefused(f"media URL host {url.host!r} could not be resolved (no addresses)")
    if not policy.allow_private_addresses:
        for address in found:
            why = addresses.refusal(address)
            if why is not None:
                raise _blocked(url, address, why)
    return found


def _check_peer(
    response: httpx.Response, url: MediaURL, pinned: IPAddress, policy: AcquisitionPolicy
) -> None:
    stream = response.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if not peer:
        raise SourceRefused(
            f"the peer address of the connection to {url.host!r} is unknown "
            f"(a custom transport cannot be checked)"
        )
    try:
        actual = addresses.normalize_address(str(peer[0]))
    except ValueError:  # a Unix-socket transport reports its path
        raise SourceRefused(
            f"the connection to {url.host!r} reached a peer that is not an IP address "
            f"(a custom transport cannot be checked)"
        ) from None
    if actual != pinned:
        raise SourceRefused(
            f"the connection to {url.host!r} reached {actual}, not the checked address "
            f"{pinned} (proxies are not supported)"
        )
    if not policy.allow_private_addresses:
        why = addresses.refusal(actual)
        if why is not None:
            raise _blocked(url, actual, why)


async def _open(
    client: httpx.AsyncClient,
    url: MediaURL,
    found: Sequence[IPAddress],
    policy: AcquisitionPolicy,
) -> httpx.Response:
    timeouts = {
        "connect": policy.connect_timeout_s,
        "read": policy.total_timeout_s,
        "write": policy.total_timeout_s,
        "pool": policy.total_timeout_s,
    }
    extensions: dict[str, object] = {"timeout": timeouts}
    if url.scheme == "https" and url.literal is None:
        extensions["sni_hostname"] = url.host
    failures: list[str] = []
    for address in found:
        request = httpx.Request(
            "GET",
            url.dial_url(address),
            headers=[
                ("Host", url.authority),
                ("User-Agent", USER_AGENT),
                ("Accept", "*/*"),
                ("Accept-Encoding", "identity"),
                ("Connection", "close"),
            ],
            extensions=extensions,
        )
        try:
            response = await client.send(request, stream=True, follow_redirects=False, auth=None)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failures.append(f"{address}: {exc or type(exc).__name__}")
            continue
        except ValueError as exc:
            # httpx resolves a redirect's Location while receiving the answer (even with
            # redirects off); urllib and idna raise a plain ValueError for some of them.
            raise _bad_location(url, exc) from None
        _forget_cookies(client, response)
        try:
            _check_peer(response, url, address, policy)
        except BaseException:
            await response.aclose()
            raise
        return response
    raise SourceRefused(f"could not connect to {url.host!r} ({'; '.join(failures)})")


def _forget_cookies(client: httpx.AsyncClient, response: httpx.Response) -> None:
    """Drop what the media server's ``Set-Cookie`` put into the client's jar.

    ``client.send`` stores them (audiogate never sends them: it builds every request), and
    a caller's long-lived client must not keep an untrusted origin's cookies. They are
    stored under the address dialled, which is what is cleared here.
    """
    if "set-cookie" not in response.headers:
        return
    host = response.request.url.host
    domains = {host, f"{host}.local", f"[{host}]", f"[{host}].local"}
    jar = client.cookies.jar
    for cookie in list(jar):
        if cookie.domain.lstrip(".") in domains:
            jar.clear(cookie.domain, cookie.path, cookie.name)


def _bad_location(url: MediaURL, exc: ValueError) -> SourceRefused:
    """The refusal of a redirect whose ``Location`` the URL parsers cannot read."""
    return SourceRefused(
        f"redirect from {url.host!r} refused: the Location is not a valid URL "
        f"({type(exc).__name__}: {exc})"
    )


def _next_hop(response: httpx.Response, url: MediaURL) -> MediaURL:
    locations = response.headers.get_list("location")
    if len(locations) != 1:
        raise SourceRefused(
            f"{url.host!r} answered HTTP {response.status_code} with "
            f"{len(locations)} Location headers"
        )
    location = locations[0]
    if not location or any(not "!" <= ch <= "~" or ch == "\\" for ch in location):
        raise SourceRefused(
            f"redirect from {url.host!r} refused: the Location has spaces, controls, "
            f"non-ASCII or backslashes"
        )
    try:
        joined = httpx.URL(url.url).join(location)
    except httpx.InvalidURL as exc:
        raise SourceRefused(f"redirect from {url.host!r} refused: {exc}") from None
    except ValueError as exc:  # urljoin and idna raise plain ValueError (UnicodeError)
        raise _bad_location(url, exc) from None
    return parse_media_url(str(joined))


def _content_length(response: httpx.Response) -> int | None:
    values = {v.strip() for v in response.headers.get_list("content-length")}
    if not values:
        return None
    if len(values) != 1 or not _DIGITS.fullmatch(next(iter(values))):
        raise SourceRefused(f"malformed Content-Length {sorted(values)}")
    return int(values.pop())


async def _read_body(response: httpx.Response, ctx: ClipContext) -> bytes:
    declared = _content_length(response)
    held = 0
    if declared is not None:
        ctx.cap.check(declared)
        ctx.hold(declared)
        held = declared
    pieces: list[bytes] = []
    total = 0
    ctx.check_cancel()
    async for chunk in response.aiter_raw():
        ctx.check_cancel()
        total += len(chunk)
        ctx.cap.check(total)
        if total > held:  # no (or a lying) Content-Length: hold the chunks as they come
            ctx.hold(total - held)
            held = total
        pieces.append(chunk)
    ctx.check_cancel()
    return b"".join(pieces)


async def _fetch(
    first: MediaURL, ctx: ClipContext, policy: AcquisitionPolicy, client: httpx.AsyncClient
) -> bytes:
    url = first
    for hop in range(policy.max_redirects + 1):
        check_hop(url, policy)
        found = await resolve_checked(url, policy)
        ctx.check_cancel()
        response = await _open(client, url, found, policy)
        try:
            status = response.status_code
            if status in _REDIRECTS:
                if hop == policy.max_redirects:
                    raise SourceRefused(
                        f"too many redirects: more than {policy.max_redirects} "
                        f"(the last from {url.host!r})"
                    )
                url = _next_hop(response, url)
                continue
            if not 200 <= status < 300 or status == 206:
                raise SourceRefused(f"{url.host!r} answered HTTP {status}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise SourceRefused(
                    f"{url.host!r} sent Content-Encoding {encoding!r}; compressed transfers "
                    f"are refused"
                )
            return await _read_body(response, ctx)
        finally:
            await response.aclose()
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


@contextlib.asynccontextmanager
async def _cancel_on_token(ctx: ClipContext) -> AsyncIterator[None]:
    """Cancel the current task when ``ctx.cancel`` fires; surface it as PreprocessCancelled."""
    token = ctx.cancel
    task = asyncio.current_task()
    if token is NEVER or task is None:
        yield
        return
    fired = False

    async def watch() -> None:
        nonlocal fired
        while not token.cancelled:
            await asyncio.sleep(CANCEL_POLL_S)
        fired = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if fired and task.uncancel() == 0:
            raise PreprocessCancelled(
                checkpoint=Checkpoint.ACQUISITION.value, clip_index=ctx.clip_index
            ) from None
        raise
    finally:
        watcher.cancel()


async def fetch_url(
    text: str, ctx: ClipContext, *, policy: AcquisitionPolicy, client: httpx.AsyncClient
) -> bytes:
    """Fetch one media URL under ``ctx.cap`` (see the module docstring for the checks).

    :raises SourceRefused: fetching is disabled, or a check failed, or the transfer did.
    :raises LimitError: ``Content-Length`` or the streamed body is over the cap.
    :raises PreprocessCancelled: the token was cancelled.
    """
    if not policy.allow_url_fetch:
        raise SourceRefused(FETCH_DISABLED_MESSAGE)
    first = parse_media_url(text)
    try:
        async with asyncio.timeout(policy.total_timeout_s), _cancel_on_token(ctx):
            return await _fetch(first, ctx, policy, client)
    except TimeoutError:
        raise SourceRefused(
            f"fetching from {first.host!r} took longer than {policy.total_timeout_s:g} s"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise SourceRefused(
            f"fetching from {first.host!r} failed: {type(exc).__name__}: {exc}"
        ) from None
