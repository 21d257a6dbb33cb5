"""What a worker may hold, and the reservations that hold it.

One :class:`Reservation` owns a request's encoded and host bytes from queue admission
until its result is handed off (or the request fails, is cancelled, is refused, the
worker shuts down, or the job is garbage-collected) and releases them exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

import attrs

from audiogate.errors import MemoryLimitError
from audiogate.metrics import AudioMetrics

__all__ = ["Ledger", "Reservation", "WorkerLimits"]

MIB: Final = 1 << 20


@attrs.frozen(kw_only=True)
class WorkerLimits:
    """Capacities of a worker; all configurable.

    :param queue_depth: jobs waiting for a worker thread.
    :param result_depth: finished results waiting for their consumers.
    :param max_queued_encoded_bytes: encoded bytes held by queued, running and handed-off jobs.
    :param max_inflight_host_bytes: planned host bytes held likewise.
    :param threads: worker threads.
    """

    queue_depth: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    result_depth: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    max_queued_encoded_bytes: int = attrs.field(default=512 * MIB, validator=attrs.validators.ge(1))
    max_inflight_host_bytes: int = attrs.field(default=1280 * MIB, validator=attrs.validators.ge(1))
    threads: int = attrs.field(default=1, validator=attrs.validators.ge(1))


class Ledger:
    """A worker's reservation totals, updated atomically; publishes the gauges."""

    def __init__(self, limits: WorkerLimits, metrics: AudioMetrics | None) -> None:
        self._limits = limits
        self._metrics = metrics
        self._lock = threading.Lock()
        self.encoded = 0
        self.host = 0
        #: Bytes the feature cache holds (not a reservation: evicted when one needs room).
        self.cache = 0
        self._reclaim: Callable[[int], object] | None = None

    def reserve(self, encoded: int, host: int) -> Reservation:
        """Hold ``encoded`` and ``host`` bytes for one request. The feature cache's
        resident bytes count against the host cap too; when they are what stands in the
        way, entries are evicted first (the cache never refuses a request that would fit
        without it).

        :raises MemoryLimitError: either total would pass its maximum.
        """
        for attempt in range(2):
            with self._lock:
                if self.encoded + encoded > self._limits.max_queued_encoded_bytes:
                    raise MemoryLimitError(
                        "queued encoded bytes",
                        actual=self.encoded + encoded,
                        maximum=self._limits.max_queued_encoded_bytes,
                    )
                cap = self._limits.max_inflight_host_bytes
                over = self.host + self.cache + host - cap
                if over > 0 and (
                    attempt or self._reclaim is None or self.host + host > cap or not self.cache
                ):
                    raise MemoryLimitError(
                        "in-flight host bytes", actual=self.host + self.cache + host, maximum=cap
                    )
                if over <= 0:
                    self.encoded += encoded
                    self.host += host
                    self._publish()
                    return Reservation(self, encoded, host)
                reclaim = self._reclaim
                assert reclaim is not None
            # Outside the lock: the cache takes its own lock, then this one to release.
            reclaim(over)
        raise AssertionError("unreachable")  # pragma: no cover

    def bind_cache(self, reclaim: Callable[[int], object]) -> None:
        """Let :meth:`reserve` evict feature-cache entries (``reclaim(nbytes)``)."""
        self._reclaim = reclaim

    def charge_cache(self, nbytes: int) -> bool:
        """Charge feature-cache bytes if they fit under the host cap beside the
        reservations; ``False`` (nothing charged) if not."""
        with self._lock:
            if self.host + self.cache + nbytes > self._limits.max_inflight_host_bytes:
                return False
            self.cache += nbytes
            return True

    def release_cache(self, nbytes: int) -> None:
        """Give back feature-cache bytes charged before."""
        with self._lock:
            self.cache -= nbytes

    def _release(self, encoded: int, host: int) -> None:
        with self._lock:
            self.encoded -= encoded
            self.host -= host
            self._publish()

    def _publish(self) -> None:
        if self._metrics is not None:
            self._metrics.set_gauges(queued_bytes=self.encoded, inflight_host_bytes=self.host)


class Reservation:
    """Encoded and host bytes held for one request; :meth:`release` works exactly once."""

    def __init__(self, ledger: Ledger, encoded: int, host: int) -> None:
        self.encoded_bytes = encoded
        self.host_bytes = host
        self._ledger = ledger
        self._lock = threading.Lock()
        self._released = False

    @property
    def released(self) -> bool:
        """Whether the bytes have been given back."""
        return self._released

    def release(self) -> bool:
        """Give the bytes back; returns ``False`` if already released."""
        with self._lock:
            if self._released:
                return False
            self._released = True
        self._ledger._release(self.encoded_bytes, self.host_bytes)
        return True
