"""Byte budgets shared by concurrent requests: one bound, one share per request.

A per-request ceiling bounds one request; a server handling many at once also needs a
bound on all of them together. A :class:`ByteBudget` is that bound, and each request
holds its share through a :class:`BudgetHold`, which gives everything back once. The
reference server keeps two: request bodies and answers (``"in-flight request body
bytes"``) and the file and URL reads of acquisition (``"in-flight acquired bytes"``,
:class:`audiogate.acquire.AcquiredBytes`). A request that does not fit is refused with
``MemoryLimitError`` under the budget's limit name, a transient refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from audiogate.errors import MemoryLimitError

__all__ = ["BudgetHold", "ByteBudget"]


class ByteBudget:
    """Bytes that requests may hold at once (thread-safe: files are read on threads).

    :param maximum: the bound, in bytes.
    :param limit: the limit's name in a refusal (``MemoryLimitError.limit``).
    :param on_change: called with the new total after every change (a gauge's ``set``).
    :raises ValueError: ``maximum`` is below 1.
    """

    def __init__(
        self, maximum: int, *, limit: str, on_change: Callable[[int], None] | None = None
    ) -> None:
        if maximum < 1:
            raise ValueError(f"maximum must be >= 1, not {maximum}")
        self.maximum = maximum
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()
        self._on_change = on_change
        # Tasks waiting in make_room(), woken whenever bytes are given back.
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def held(self) -> int:
        """Bytes held now."""
        return self._held

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit beside what is held."""
        return self._held + nbytes <= self.maximum

    def refusal(self, nbytes: int) -> MemoryLimitError:
        """The error refusing ``nbytes`` more."""
        return MemoryLimitError(self.limit, actual=self._held + nbytes, maximum=self.maximum)

    def take(self, nbytes: int, *, force: bool = False) -> None:
        """Hold ``nbytes`` more; ``force``: even past the maximum.

        :raises MemoryLimitError: they do not fit beside what is held.
        """
        with self._lock:
            if not force and self._held + nbytes > self.maximum:
                raise self.refusal(nbytes)
            self._held += nbytes
            # Published under the lock, so the gauge never shows an older total last.
            if self._on_change is not None:
                self._on_change(self._held)

    def give(self, nbytes: int) -> None:
        """Give back ``nbytes`` taken earlier."""
        with self._lock:
            self._held -= nbytes
            if self._on_change is not None:
                self._on_change(self._held)
            waiters, self._waiters = self._waiters, []
        for loop, freed in waiters:
            _wake(loop, freed)

    def hold(self) -> BudgetHold:
        """A new request's share, empty."""
        return BudgetHold(self)

    async def make_room(self, hold: BudgetHold, nbytes: int, *, timeout_s: float) -> None:
        """Hold ``nbytes`` more for ``hold`` once they fit, waiting up to ``timeout_s`` for
        other requests to give bytes back; a request that holds everything held may go
        past the maximum alone (an answer larger than the budget is still sent).

        :raises MemoryLimitError: no room came within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                while not self.fits(nbytes) and self._held > hold.nbytes:
                    freed: asyncio.Future[None] = loop.create_future()
                    with self._lock:
                        self._waiters.append((loop, freed))
                    try:
                        await freed
                    finally:
                        with self._lock, contextlib.suppress(ValueError):
                            self._waiters.remove((loop, freed))
        except TimeoutError:
            raise self.refusal(nbytes) from None
        hold.take(nbytes, force=True)


def _wake(loop: asyncio.AbstractEventLoop, freed: asyncio.Future[None]) -> None:
    def wake() -> None:
        if not freed.done():
            freed.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        wake()
    else:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            loop.call_soon_threadsafe(wake)


class BudgetHold:
    """One request's bytes in a :class:`ByteBudget`; :meth:`release` gives them back.

    After :meth:`release` it takes nothing more: a reader thread that outlives its
    cancelled request (it stops at its next cancellation check) cannot leak bytes.
    """

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._released = False
        self.nbytes = 0

    def take(self, nbytes: int, *, force: bool = False) -> None:
        """Hold ``nbytes`` more for this request (see :meth:`ByteBudget.take`)."""
        with self._lock:
            if nbytes <= 0 or self._released:
                return
            self._budget.take(nbytes, force=force)
            self.nbytes += nbytes

    def shrink(self, nbytes: int) -> None:
        """Give back ``nbytes`` of what this request holds."""
        with self._lock:
            nbytes = min(nbytes, self.nbytes)
            if nbytes <= 0:
                return
            self.nbytes -= nbytes
        self._budget.give(nbytes)

    def release(self) -> None:
        """Give back everything this request holds; idempotent."""
        with self._lock:
            nbytes, self.nbytes, self._released = self.nbytes, 0, True
        if nbytes:
            self._budget.give(nbytes)
