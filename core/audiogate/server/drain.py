"""The drain of a refused connection (issue #33): once its answer is written, what its
client still sends is read and dropped, so that the client reads the answer rather than
a reset (closing a socket with unread bytes resets the connection), up to a cap, past
which the connection is aborted; and the skip of a refused request's body on a
connection kept alive.

:class:`Drain` takes the connection over from its HTTP protocol
(``transport.set_protocol``), as :class:`BodySkip` does until the body is skipped. As
buffered protocols they have each read land in one buffer that both share (the loop
reads on one thread, and the bytes are never looked at): no ``bytes`` object per read,
nor their copy out of the loop's own buffer. A refused 5 s clip's body is 214 kB, read
in a few pieces, and under overload most of the bytes the server reads are those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["SCRATCH_BYTES", "BodySkip", "BodySkipper", "Drain"]

#: The size of the buffer every drain reads into (one read takes at most this much).
SCRATCH_BYTES: Final = 256 * 1024
_SCRATCH: Final = memoryview(bytearray(SCRATCH_BYTES))


class Drain(asyncio.BufferedProtocol):
    """A refused connection from its answer on: reads and drops at most ``limit`` bytes
    (one more read aborts it), closes when its client closes or ``linger_s`` after this
    started, whichever comes first, and then hands the loss to ``lost`` (the HTTP
    protocol's ``connection_lost``, for its bookkeeping)."""

    __slots__ = ("_left", "_lost", "_timer", "_transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        *,
        limit: int,
        linger_s: float,
        loop: asyncio.AbstractEventLoop,
        lost: Callable[[Exception | None], None],
    ) -> None:
        self._transport = transport
        self._left = limit
        self._lost = lost
        self._timer: asyncio.TimerHandle | None = loop.call_later(linger_s, transport.close)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _SCRATCH

    def buffer_updated(self, nbytes: int) -> None:
        self._left -= nbytes
        if self._left < 0:
            self._transport.abort()

    def eof_received(self) -> None:
        """The client closed: so does the connection (``None``: the transport closes)."""

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lost(exc)


class BodySkipper(Protocol):
    """The HTTP protocol a :class:`BodySkip` stands in for."""

    def body_skipped(self) -> None:
        """The body is skipped: the connection is this protocol's again."""

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


class BodySkip(asyncio.BufferedProtocol):
    """A refused request's body on a kept-alive connection, from its second read on:
    ``left`` bytes read into the shared buffer and dropped (never a ``bytes`` object:
    under overload most bytes the server reads are refused 5 s clips' bodies, 214 kB
    each), then the connection handed back to ``owner`` (its next bytes, the next
    request, are read by ``owner``: a read never goes past the body)."""

    __slots__ = ("_left", "_owner", "_transport")

    def __init__(self, transport: asyncio.Transport, owner: BodySkipper, left: int) -> None:
        self._transport = transport
        self._owner = owner
        self._left = left

    def get_buffer(self, sizehint: int) -> memoryview:
        left = self._left
        return _SCRATCH if left >= SCRATCH_BYTES else _SCRATCH[:left]

    def buffer_updated(self, nbytes: int) -> None:
        self._left -= nbytes
        if self._left <= 0:
            self._transport.set_protocol(self._owner)  # type: ignore[arg-type]
            self._owner.body_skipped()

    def eof_received(self) -> bool | None:
        return self._owner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._owner.pause_writing()

    def resume_writing(self) -> None:
        self._owner.resume_writing()
