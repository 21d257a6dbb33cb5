"""What a worker may hold, and the reservations that hold it.

One :class:`Reservation` owns a request's encoded and host bytes from queue admission
until its result is handed off (or the request fails, is cancelled, is refused, the
worker shuts down, or the job is garbage-collected) and releases them exactly once.
"""

from __future__ import annotations

import threading
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

    def reserve(self, encoded: int, host: int) -> Reservation:
        """Hold ``encoded`` and ``host`` bytes for one request.

        :raises MemoryLimitError: either total would pass its maximum.
        """
        with self._lock:
            if self.encoded + encoded > self._limits.max_queued_encoded_bytes:
                raise MemoryLimitError(
                    "queued encoded bytes",
                    actual=self.encoded + encoded,
                    maximum=self._limits.max_queued_encoded_bytes,
                )
            if self.host + host > self._limits.max_inflight_host_bytes:
                raise MemoryLimitError(
                    "in-flight host bytes",
                    actual=self.host + host,
                    maximum=self._limits.max_inflight_host_bytes,
                )
            self.encoded += encoded
            self.host += host
            self._publish()
        return Reservation(self, encoded, host)

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
