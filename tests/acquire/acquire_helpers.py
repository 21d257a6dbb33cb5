"""Test helpers for acquisition: WAV bytes, parts, and a loopback HTTP server that can lie.

The server is written on ``asyncio`` streams (not ``http.server``) so a handler controls
every byte: a Content-Length that lies, a body that trickles or never ends, redirects.
It runs in the test's own event loop, so tests wait on events, never on sleeps. Each
exchange records the request head, the peer, the bytes of body sent and — through a
reader that waits for EOF — whether the client closed the connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from audiogate.acquire import AcquisitionPolicy
from audiogate.testing.audio import tone, wav_bytes

#: Generous: only reached when something is broken (never a measured duration).
WAIT_S = 10.0


def wav(samples: int = 1600, *, rate_hz: int = 16_000) -> bytes:
    """A small valid PCM16 WAV."""
    return wav_bytes(tone(samples=samples, rate_hz=rate_hz), rate_hz=rate_hz)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def input_audio(data: str, fmt: str = "wav", **extra: Any) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt, **extra}}


def audio_url(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url, **extra}}


def net_policy(**overrides: Any) -> AcquisitionPolicy:
    """URL fetching on, loopback admitted (the test server is on 127.0.0.1)."""
    settings: dict[str, Any] = {
        "allow_url_fetch": True,
        "allow_private_addresses": True,
        "total_timeout_s": WAIT_S,
        "connect_timeout_s": WAIT_S / 2,
    }
    settings.update(overrides)
    return AcquisitionPolicy(**settings)


def static_resolver(table: dict[str, list[str]], calls: list[str] | None = None) -> Any:
    """A resolver answering from ``table`` (unknown names raise like ``getaddrinfo``)."""

    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return table[host]

    return resolve


@dataclass
class Exchange:
    """One request the server received."""

    method: str
    target: str
    headers: dict[str, str]
    peer: tuple[Any, ...]
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    first_sent: asyncio.Event = field(default_factory=asyncio.Event)
    body_sent: int = 0


Handler = Callable[[Exchange, asyncio.StreamWriter], Awaitable[None]]


def head(status: int, headers: Iterable[tuple[str, str]] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def respond(
    body: bytes,
    *,
    status: int = 200,
    headers: Iterable[tuple[str, str]] = (),
    content_length: int | None = -1,
) -> Handler:
    """Answer ``body``; ``content_length`` -1: the true length, ``None``: none (close-delimited)."""

    async def handler(ex: Exchange, writer: asyncio.StreamWriter) -> None:
        fields = list(headers)
        if content_length is not None:
            claimed = len(body) if content_length == -1 else content_length
            fields.append(("Content-Length", str(claimed)))
        writer.write(head(status, fields) + body)
        ex.body_sent += len(body)
        await writer.drain()

    return handler


def redirect(location: str, *, status: int = 302) -> Handler:
    return respond(b"", status=status, headers=[("Location", location)])


def endless(*, chunk_bytes: int = 64 * 1024, content_length: int | None = None) -> Handler:
    """Stream body bytes until the client goes away (chunked unless a length is claimed)."""
    chunk = b"\0" * chunk_bytes

    async def handler(ex: Exchange, writer: asyncio.StreamWriter) -> None:
        fields = [("Content-Length", str(content_length))] if content_length is not None else []
        if content_length is None:
            fields.append(("Transfer-Encoding", "chunked"))
        writer.write(head(200, fields))
        frame = chunk if content_length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk)
        with contextlib.suppress(ConnectionError):
            while not ex.closed.is_set():
                writer.write(frame)
                ex.body_sent += len(chunk)
                ex.first_sent.set()
                await writer.drain()

    return handler


def trickle(first: bytes, *, content_length: int) -> Handler:
    """Send the head and ``first``, then stall until the client closes the connection."""

    async def handler(ex: Exchange, writer: asyncio.StreamWriter) -> None:
        writer.write(head(200, [("Content-Length", str(content_length))]) + first)
        ex.body_sent += len(first)
        await writer.drain()
        ex.first_sent.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ex.closed.wait(), WAIT_S * 3)

    return handler


class LoopbackServer:
    """``async with LoopbackServer() as server:``; then ``server.route(path, handler)``."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Handler] = {}
        self.exchanges: list[Exchange] = []
        self.sni_names: list[str | None] = []
        self.arrived = asyncio.Event()
        self._ssl = ssl_context
        self._tasks: set[asyncio.Task[None]] = set()
        if ssl_context is not None:
            ssl_context.sni_callback = self._record_sni
        self.port = 0

    def _record_sni(self, _sock: Any, name: str | None, _ctx: Any) -> None:
        self.sni_names.append(name)

    async def __aenter__(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def route(self, path: str, handler: Handler) -> str:
        """Serve ``handler`` at ``path``; return its URL."""
        self.routes[path] = handler
        return self.url(path)

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        watcher: asyncio.Task[None] | None = None
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            ex = Exchange(method, target, headers, writer.get_extra_info("peername"))
            self.exchanges.append(ex)
            self.arrived.set()

            async def watch_eof() -> None:
                with contextlib.suppress(ConnectionError):
                    while await reader.read(65536):
                        pass
                ex.closed.set()

            watcher = asyncio.create_task(watch_eof())
            handler = self.routes.get(target.split("?", 1)[0], respond(b"", status=404))
            await handler(ex, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            if watcher is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(watcher), WAIT_S)
            self._tasks.discard(task)
