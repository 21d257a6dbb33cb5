"""Encoded bytes held by acquisitions in flight, across the requests of a server.

The per-request ceilings bound one request; a server reading many requests' files and
URLs at once also needs a bound on all of them together, or N concurrent requests hold
N times the request ceiling before any admission budget sees them. An
:class:`AcquiredBytes` budget (set as ``AcquisitionPolicy.shared_bytes``) is that bound:
each request takes its bytes from it as they are known (a file's size before it is read,
a URL's ``Content-Length`` or its chunks as they arrive) and gives them all back when its
acquisition returns, after which the worker's admission budget counts the clips. A
request that does not fit is refused with ``MemoryLimitError`` (``"in-flight acquired
bytes"``), a transient refusal like the other shared budgets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from audiogate.errors import MemoryLimitError

__all__ = ["ACQUIRED_BYTES_LIMIT", "AcquiredBytes", "RequestHold"]

#: The limit name of a refusal by :class:`AcquiredBytes`.
ACQUIRED_BYTES_LIMIT = "in-flight acquired bytes"


class AcquiredBytes:
    """Bytes all in-flight acquisitions may hold at once (thread-safe: files are read on
    worker threads).

    :param maximum: the bound, in bytes.
    :param on_change: called with the new total after every change (a gauge's ``set``).
    :raises ValueError: ``maximum`` is below 1.
    """

    def __init__(self, maximum: int, *, on_change: Callable[[int], None] | None = None) -> None:
        if maximum < 1:
            raise ValueError(f"maximum must be >= 1, not {maximum}")
        self.maximum = maximum
        self._held = 0
        self._lock = threading.Lock()
        self._on_change = on_change

    @property
    def held(self) -> int:
        """Bytes held now."""
        return self._held

    def take(self, nbytes: int) -> None:
        """Hold ``nbytes`` more.

        :raises MemoryLimitError: they do not fit beside what is held.
        """
        with self._lock:
            if self._held + nbytes > self.maximum:
                raise MemoryLimitError(
                    ACQUIRED_BYTES_LIMIT, actual=self._held + nbytes, maximum=self.maximum
                )
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

    def hold(self) -> RequestHold:
        """A new request's share, empty."""
        return RequestHold(self)


class RequestHold:
    """One request's bytes in an :class:`AcquiredBytes`; :meth:`release` gives them back.

    After :meth:`release` it takes nothing more: a reader thread that outlives its
    cancelled request (it stops at its next cancellation check) cannot leak bytes.
    """

    def __init__(self, budget: AcquiredBytes) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._released = False
        self.nbytes = 0

    def take(self, nbytes: int) -> None:
        """Hold ``nbytes`` more for this request (see :meth:`AcquiredBytes.take`)."""
        with self._lock:
            if nbytes <= 0 or self._released:
                return
            self._budget.take(nbytes)
            self.nbytes += nbytes

    def release(self) -> None:
        """Give back everything this request holds; idempotent."""
        with self._lock:
            nbytes, self.nbytes, self._released = self.nbytes, 0, True
        if nbytes:
            self._budget.give(nbytes)
