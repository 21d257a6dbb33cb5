"""Deadlines of a stream: the idle timeout and the minimum rate, over any async iterator
of byte chunks.

A client that opens a stream and then sends nothing (or a byte now and then) would hold
its reservation, its connection and its frontend for as long as it liked. :func:`paced`
wraps the stream's chunks and cuts it with a
:class:`~audiogate.errors.StreamTimeoutError` when

* no chunk arrives for ``idle_timeout_s`` while the consumer waits for one, or
* once the stream has been open for ``grace_s``, the bytes received average less than
  ``min_rate`` bytes per second over the time past the grace: at time ``t`` after the
  start, at least ``min_rate * (t - grace_s)`` bytes must have arrived.

The time comes from a :class:`Clock`: :class:`LoopClock` (the event loop's monotonic
clock) in a server, :class:`ManualClock` in tests, which moves only when told, so a test
can cut a stream at an exact instant without sleeping.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from typing import Any, Final, Protocol, TypeVar

import attrs

from audiogate.errors import StreamTimeoutError

__all__ = [
    "DEFAULT_STREAM_IDLE_TIMEOUT_S",
    "DEFAULT_STREAM_MIN_RATE",
    "Clock",
    "LoopClock",
    "ManualClock",
    "StreamDeadlines",
    "paced",
]

#: Seconds a stream may send nothing before it is cut (``--stream-idle-timeout``).
DEFAULT_STREAM_IDLE_TIMEOUT_S: Final = 15.0
#: Bytes per second a stream must average after its grace (``--stream-min-rate``):
#: well under the slowest voice stream audiogate takes (Opus at 6 kbit/s is 750 B/s).
DEFAULT_STREAM_MIN_RATE: Final = 512

_T = TypeVar("_T")


class Clock(Protocol):
    """Where a stream's deadlines read the time (seconds, monotonic)."""

    def now(self) -> float:
        """The current time, in seconds."""
        ...

    async def within(self, deadline: float, awaitable: Awaitable[_T]) -> _T:
        """``awaitable``'s result, or :class:`TimeoutError` once :meth:`now` reaches
        ``deadline`` first (``awaitable`` is then cancelled)."""
        ...


class LoopClock:
    """The running event loop's monotonic clock (``loop.time()``)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def within(self, deadline: float, awaitable: Awaitable[_T]) -> _T:
        if math.isinf(deadline):
            return await awaitable
        async with asyncio.timeout_at(deadline):
            return await awaitable


def _expire(expired: asyncio.Future[None]) -> None:
    if not expired.done():
        expired.set_result(None)


class ManualClock:
    """A clock that moves only when :meth:`advance` is called (for tests): a wait whose
    deadline the clock reaches ends with :class:`TimeoutError`, at that call."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []
        #: Waits begun so far (a test advances once the consumer waits for its n-th chunk).
        self.waits = 0

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward and expire the waits it passes (from any
        thread: a test drives a server's clock from its own)."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward, not by {seconds}")
        self._now += seconds
        for deadline, expired in list(self._waiters):
            if deadline <= self._now:
                expired.get_loop().call_soon_threadsafe(_expire, expired)

    @property
    def waiting(self) -> int:
        """How many waits are pending."""
        return sum(not expired.done() for _, expired in self._waiters)

    async def within(self, deadline: float, awaitable: Awaitable[_T]) -> _T:
        task: asyncio.Future[_T] = asyncio.ensure_future(awaitable)
        expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if deadline <= self._now:
            expired.set_result(None)
        entry = (deadline, expired)
        self._waiters.append(entry)
        self.waits += 1
        try:
            pending: set[asyncio.Future[Any]] = {task, expired}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiters.remove(entry)
            if not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    if expired.done():
                        # Cancelled by this clock, not from outside: the deadline won.
                        pass
                    else:
                        raise
        if task.cancelled() and expired.done():
            raise TimeoutError
        return task.result()


@attrs.frozen(kw_only=True)
class StreamDeadlines:
    """How slow a stream may be.

    :param idle_timeout_s: cut a stream that sends nothing for this long (seconds, > 0).
    :param min_rate: bytes per second it must average after ``grace_s`` (0: no minimum).
    :param grace_s: seconds from the start before the minimum rate applies (``None``:
        ``idle_timeout_s``).
    :param clock: where the time comes from (``None``: a :class:`LoopClock`).
    """

    idle_timeout_s: float = attrs.field(
        default=DEFAULT_STREAM_IDLE_TIMEOUT_S, validator=attrs.validators.gt(0)
    )
    min_rate: int = attrs.field(default=DEFAULT_STREAM_MIN_RATE, validator=attrs.validators.ge(0))
    grace_s: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    clock: Clock | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def grace(self) -> float:
        """The grace in seconds, resolved."""
        return self.idle_timeout_s if self.grace_s is None else self.grace_s


async def paced(
    chunks: AsyncIterable[bytes],
    deadlines: StreamDeadlines,
    *,
    clock: Clock | None = None,
) -> AsyncIterator[bytes]:
    """``chunks``, cut with :class:`~audiogate.errors.StreamTimeoutError` where they
    arrive too slowly (the module docstring's rules).

    The idle timeout counts while this iterator waits for the next chunk (time the
    consumer spends on a chunk is not the client's). ``chunks`` is closed however the
    iteration ends, so the caller's reservation can be released at once.

    :param clock: the clock (default: ``deadlines.clock``, else a :class:`LoopClock`).
    :raises StreamTimeoutError: idle (``kind="idle"``) or too slow (``kind="min_rate"``).
    """
    clock = clock or deadlines.clock or LoopClock()
    iterator = aiter(chunks)
    started = clock.now()
    received = 0
    try:
        while True:
            waiting_since = clock.now()
            idle_deadline = waiting_since + deadlines.idle_timeout_s
            rate_deadline = (
                started + deadlines.grace + received / deadlines.min_rate
                if deadlines.min_rate
                else math.inf
            )
            try:
                chunk = await clock.within(min(idle_deadline, rate_deadline), anext(iterator))
            except StopAsyncIteration:
                return
            except TimeoutError:
                elapsed = clock.now() - started
                if rate_deadline < idle_deadline:
                    raise StreamTimeoutError(
                        f"the stream sent {received} bytes in {elapsed:.1f} s, under the "
                        f"minimum of {deadlines.min_rate} bytes/s after the first "
                        f"{deadlines.grace:g} s",
                        kind="min_rate",
                    ) from None
                raise StreamTimeoutError(
                    f"the stream sent nothing for {deadlines.idle_timeout_s:g} s "
                    f"({received} bytes in {elapsed:.1f} s)",
                    kind="idle",
                ) from None
            received += len(chunk)
            yield chunk
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
