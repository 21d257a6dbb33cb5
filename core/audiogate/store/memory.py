"""Records, blobs and leases in memory: a store for tests, and the smallest example of the
three backend protocols (:mod:`audiogate.store.backend`). Nothing survives the process.

    store = SourceStore(MemoryRecords(), MemoryBlobs(), MemoryLeases())
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs

from audiogate.store.quotas import check_quotas
from audiogate.store.source_record import LIVE_STATUSES, SourceRecord, SourceStatus, StoreQuotas

__all__ = ["MemoryBlobs", "MemoryLeases", "MemoryRecords"]

_T = TypeVar("_T")


class MemoryRecords:
    """Source records in a list (retired ones kept as history), one lock for writes."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rows: list[SourceRecord] = []
        self.journal: list[tuple[str, str]] = []

    def _current_of(self, sha256: str, owner: str) -> int | None:
        for index, row in enumerate(self._rows):
            if row.sha256 == sha256 and row.owner == owner and row.status != "retired":
                return index
        return None

    def _live(self, sha256: str) -> bool:
        return any(r.sha256 == sha256 and r.live for r in self._rows)

    def insert(
        self, record: SourceRecord, quotas: StoreQuotas, publish: Callable[[], None]
    ) -> tuple[SourceRecord, bool]:
        """See :meth:`~audiogate.store.backend.RecordBackend.insert`."""
        with self._lock:
            index = self._current_of(record.sha256, record.owner)
            if index is not None and self._rows[index].live:
                return self._rows[index], False
            mine = [r for r in self._rows if r.owner == record.owner and r.live]
            check_quotas(
                quotas,
                record.nbytes,
                owner_bytes=sum(r.nbytes for r in mine),
                owner_count=len(mine),
                total_bytes=sum(r.nbytes for r in self._rows if r.live),
            )
            publish()
            if index is not None:  # lost: the same bytes bring it back
                self._rows[index] = attrs.evolve(
                    self._rows[index], status="retired", retired_at=time.time()
                )
            self._rows.append(record)
        return record, True

    def current(self, sha256: str) -> list[SourceRecord]:
        """See :meth:`~audiogate.store.backend.RecordBackend.current`."""
        with self._lock:
            rows = [r for r in self._rows if r.sha256 == sha256]
        latest: dict[str, SourceRecord] = {}
        for record in rows:
            held = latest.get(record.owner)
            if held is None or held.status == "retired":
                latest[record.owner] = record
        return list(latest.values())

    def live(self, sha256: str) -> bool:
        """See :meth:`~audiogate.store.backend.RecordBackend.live`."""
        with self._lock:
            return self._live(sha256)

    def records(self, owner: str, *, include_retired: bool = True) -> list[SourceRecord]:
        """See :meth:`~audiogate.store.backend.RecordBackend.records`."""
        with self._lock:
            return [
                r
                for r in self._rows
                if r.owner == owner and (include_retired or r.status != "retired")
            ]

    def set_status(self, sha256: str, owner: str, status: SourceStatus) -> SourceRecord | None:
        """See :meth:`~audiogate.store.backend.RecordBackend.set_status`."""
        with self._lock:
            index = self._current_of(sha256, owner)
            if index is None:
                return None
            if self._rows[index].live:
                self._rows[index] = attrs.evolve(self._rows[index], status=status)
            return self._rows[index]

    def retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """See :meth:`~audiogate.store.backend.RecordBackend.retire`."""
        with self._lock:
            index = self._current_of(sha256, owner)
            if index is None:
                return None
            retired = attrs.evolve(self._rows[index], status="retired", retired_at=time.time())
            self._rows[index] = retired
            return retired

    def mark_lost(self, sha256: str) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.mark_lost`."""
        with self._lock:
            changed = 0
            for index, row in enumerate(self._rows):
                if row.sha256 == sha256 and row.live:
                    self._rows[index] = attrs.evolve(row, status="lost")
                    changed += 1
            return changed

    def locked(self, sha256: str, action: Callable[[bool], _T]) -> _T:
        """See :meth:`~audiogate.store.backend.RecordBackend.locked`."""
        with self._lock:
            return action(self._live(sha256))

    def resume(self) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.resume`."""
        with self._lock:
            processing = [i for i, r in enumerate(self._rows) if r.status == "processing"]
            for index in processing:
                self._rows[index] = attrs.evolve(self._rows[index], status="ready")
            return len(processing)

    def live_blobs(self) -> list[tuple[str, int]]:
        """See :meth:`~audiogate.store.backend.RecordBackend.live_blobs`."""
        with self._lock:
            return list(
                {r.sha256: r.nbytes for r in self._rows if r.status in LIVE_STATUSES}.items()
            )

    def retired_count(self) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.retired_count`."""
        with self._lock:
            return sum(r.status == "retired" for r in self._rows)

    def note(self, event: str, detail: str) -> None:
        """See :meth:`~audiogate.store.backend.RecordBackend.note`."""
        with self._lock:
            self.journal.append((event, detail))

    def close(self) -> None:
        """Nothing to release."""


class MemoryBlobs:
    """Blobs and feature entries in dictionaries."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._staged: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.features: dict[str, dict[str, bytes]] = {}
        #: What recovery could not account for: ``(digest, blob or None, entries)``.
        self.quarantined: list[tuple[str, bytes | None, dict[str, bytes]]] = []
        self._ids = itertools.count()

    def stage(self, sha256: str, data: bytes) -> str:
        """See :meth:`~audiogate.store.backend.BlobBackend.stage`."""
        handle = f"{sha256}.{next(self._ids)}"
        with self._lock:
            self._staged[handle] = bytes(data)
        return handle

    def publish(self, handle: str, sha256: str, feature_key: str | None = None) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.publish`."""
        with self._lock:
            data = self._staged.pop(handle)
            if feature_key is None:
                self.blobs[sha256] = data  # the same bytes, or a repair of damaged ones
            else:
                self.features.setdefault(sha256, {})[feature_key] = data

    def discard(self, handle: str) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.discard`."""
        with self._lock:
            self._staged.pop(handle, None)

    def exists(self, sha256: str, nbytes: int) -> bool:
        """See :meth:`~audiogate.store.backend.BlobBackend.exists`."""
        with self._lock:
            data = self.blobs.get(sha256)
        return data is not None and len(data) == nbytes

    def read(self, sha256: str, nbytes: int) -> bytes | None:
        """See :meth:`~audiogate.store.backend.BlobBackend.read`."""
        with self._lock:
            data = self.blobs.get(sha256)
        return data if data is not None and len(data) == nbytes else None

    def read_features(self, sha256: str, feature_key: str) -> bytes | None:
        """See :meth:`~audiogate.store.backend.BlobBackend.read_features`."""
        with self._lock:
            return self.features.get(sha256, {}).get(feature_key)

    def remove(self, sha256: str) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.remove`."""
        with self._lock:
            self.blobs.pop(sha256, None)
            self.features.pop(sha256, None)

    def quarantine(self, sha256: str) -> bool:
        """See :meth:`~audiogate.store.backend.BlobBackend.quarantine` (moved to
        :attr:`quarantined`)."""
        with self._lock:
            blob = self.blobs.pop(sha256, None)
            entries = self.features.pop(sha256, {})
            if blob is not None or entries:
                self.quarantined.append((sha256, blob, entries))
        return blob is not None

    def digests(self) -> Iterator[str]:
        """See :meth:`~audiogate.store.backend.BlobBackend.digests`."""
        with self._lock:
            held = list(self.blobs) + list(self.features)
        return iter(held)

    def recover(self) -> int:
        """See :meth:`~audiogate.store.backend.BlobBackend.recover` (every staged write:
        no other process shares these)."""
        with self._lock:
            count = len(self._staged)
            self._staged.clear()
        return count

    def close(self) -> None:
        """Nothing to release."""


@attrs.define
class _Mark:
    sha256: str
    owner: str
    holder: str
    retiring: bool
    expires: float


class MemoryLeases:
    """Leases and retirement marks in a dictionary."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, _Mark] = {}
        self._ids = itertools.count()

    def take(self, sha256: str, owner: str, holder: str, ttl_s: float) -> str | None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.take`."""
        lease_id = str(next(self._ids))
        with self._lock:
            if self._retiring(sha256, owner):
                return None
            self._marks[lease_id] = _Mark(sha256, owner, holder, False, time.time() + ttl_s)
        return lease_id

    def release(self, lease_id: str) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.release`."""
        with self._lock:
            self._marks.pop(lease_id, None)

    def _alive(self, retiring: bool, sha256: str, owner: str) -> list[_Mark]:
        now = time.time()
        return [
            m
            for m in self._marks.values()
            if m.sha256 == sha256
            and m.owner == owner
            and m.retiring is retiring
            and m.expires > now
        ]

    def held(self, sha256: str, owner: str) -> int:
        """See :meth:`~audiogate.store.backend.LeaseBackend.held`."""
        with self._lock:
            return len(self._alive(False, sha256, owner))

    def begin_retire(self, sha256: str, owner: str, holder: str, ttl_s: float) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.begin_retire`."""
        with self._lock:
            mark = _Mark(sha256, owner, holder, True, time.time() + ttl_s)
            self._marks[f"retire-{next(self._ids)}"] = mark

    def end_retire(self, sha256: str, owner: str, holder: str) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.end_retire`."""
        with self._lock:
            for key, mark in list(self._marks.items()):
                if (mark.sha256, mark.owner, mark.holder, mark.retiring) == (
                    sha256,
                    owner,
                    holder,
                    True,
                ):
                    del self._marks[key]

    def _retiring(self, sha256: str, owner: str) -> bool:
        return bool(self._alive(True, sha256, owner))

    def retiring(self, sha256: str, owner: str) -> bool:
        """See :meth:`~audiogate.store.backend.LeaseBackend.retiring`."""
        with self._lock:
            return self._retiring(sha256, owner)

    def close(self) -> None:
        """Nothing to release."""
