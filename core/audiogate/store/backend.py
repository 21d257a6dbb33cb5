"""The three interfaces between :class:`~audiogate.store.SourceStore` and where sources live:
records, blobs and leases (docs/sources.md, "Writing a backend").

Each can be replaced alone: blobs in object storage with records in a shared database,
or every part in memory (:mod:`audiogate.store.memory`). The store composes them; the
embedded default (:meth:`~audiogate.store.SourceStore.open`) is SQLite records and leases
(:mod:`audiogate.store.sqlite`) over a directory of blobs
(:mod:`audiogate.store.directory`).

The contract that keeps them consistent without knowing one another: a blob is made
visible (:meth:`BlobBackend.publish`) and removed (:meth:`BlobBackend.remove`) only inside
:meth:`RecordBackend.insert` and :meth:`RecordBackend.locked`, under the records' write
lock, so a process removing an unused blob and another publishing the same bytes for a
new record never interleave. Every method is thread-safe; the store calls them off any
event loop (its async methods hop to its executor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, runtime_checkable

from audiogate.store.source_record import SourceRecord, SourceStatus, StoreQuotas

__all__ = ["BlobBackend", "LeaseBackend", "RecordBackend"]

_T = TypeVar("_T")


@runtime_checkable
class RecordBackend(Protocol):
    """Durable source records: one per owner and digest that is current (live or lost),
    plus the history of retired ones. Each write is atomic: after a crash it is either
    complete or absent."""

    def insert(
        self, record: SourceRecord, quotas: StoreQuotas, publish: Callable[[], None]
    ) -> tuple[SourceRecord, bool]:
        """Commit ``record`` unless its owner already has a live record of its digest.

        Under the write lock: an existing live record is returned with ``False`` (nothing
        called); else ``quotas`` are checked, ``publish()`` makes the blob visible, and
        the record (replacing a lost current one) is committed; returns it with ``True``.

        :raises SourceQuotaError: a quota refuses it (nothing published).
        """
        ...

    def current(self, sha256: str) -> list[SourceRecord]:
        """Every owner's current record of ``sha256``: the live or lost one, else the
        latest retired one. A look-up that never waits for a writer."""
        ...

    def live(self, sha256: str) -> bool:
        """Whether a live record (any owner's) names ``sha256``; asked on every
        feature-cache miss: a look-up that never waits for a writer."""
        ...

    def records(self, owner: str, *, include_retired: bool = True) -> list[SourceRecord]:
        """``owner``'s records, oldest first."""
        ...

    def set_status(self, sha256: str, owner: str, status: SourceStatus) -> SourceRecord | None:
        """Move ``owner``'s live record of ``sha256`` to ``status`` (``"processing"``,
        ``"ready"``); returns the current record (``None``: none)."""
        ...

    def retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """Retire ``owner``'s current record of ``sha256`` (``None``: it has none). The
        blob is not touched: the store removes it through :meth:`locked`."""
        ...

    def mark_lost(self, sha256: str) -> int:
        """Mark every live record of ``sha256`` lost; returns how many."""
        ...

    def locked(self, sha256: str, action: Callable[[bool], _T]) -> _T:
        """Call ``action(live)`` under the write lock :meth:`insert` publishes under;
        ``live``: whether a live record names ``sha256``. The store removes an unused
        blob, and keeps a live source's features, this way."""
        ...

    def resume(self) -> int:
        """Recovery: records left ``processing`` by a process that died are ``ready``;
        returns how many."""
        ...

    def live_blobs(self) -> list[tuple[str, int]]:
        """Recovery: each digest a live record names, with its size in bytes."""
        ...

    def retired_count(self) -> int:
        """How many retired records the history keeps."""
        ...

    def note(self, event: str, detail: str) -> None:
        """Keep an event of the store's (a recovery's counts) where the records keep
        history; a backend without a journal may ignore it."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...


@runtime_checkable
class BlobBackend(Protocol):
    """Source bytes by digest, and each source's feature-cache entries. A write goes to
    a staging area first (:meth:`stage`, durable but invisible) so a crash leaves either
    nothing visible or the whole blob."""

    def stage(self, sha256: str, data: bytes) -> str:
        """Write ``data`` durably where no reader sees it; returns a handle for
        :meth:`publish` or :meth:`discard`."""
        ...

    def publish(self, handle: str, sha256: str, feature_key: str | None = None) -> None:
        """Make a staged write visible, atomically: the blob of ``sha256``, or (with
        ``feature_key``) one of its entries, replacing any (a damaged blob is repaired
        by publishing its bytes again)."""
        ...

    def discard(self, handle: str) -> None:
        """Drop a staged write (none left: nothing happens)."""
        ...

    def exists(self, sha256: str, nbytes: int) -> bool:
        """Whether the blob of ``sha256`` is there with ``nbytes`` bytes (not read)."""
        ...

    def read(self, sha256: str, nbytes: int) -> bytes | None:
        """The blob's bytes (``None``: missing, or not ``nbytes`` long). The store checks
        the digest."""
        ...

    def read_features(self, sha256: str, feature_key: str) -> bytes | None:
        """A feature entry of source ``sha256`` (``None``: none)."""
        ...

    def remove(self, sha256: str) -> None:
        """Remove the blob of ``sha256`` and its feature entries (absent: nothing)."""
        ...

    def quarantine(self, sha256: str) -> bool:
        """Recovery: set the blob of ``sha256`` and its entries aside where nothing reads
        them, never deleting them (no record accounts for them: an index lost or damaged,
        a crash before a record was committed); returns whether a blob was there."""
        ...

    def digests(self) -> Iterable[str]:
        """Recovery: every digest that has a blob or feature entries here."""
        ...

    def recover(self) -> int:
        """Recovery: drop staged writes whose writer is gone; returns how many."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...


@runtime_checkable
class LeaseBackend(Protocol):
    """Who holds a source, across every process sharing the store. A lease and a
    retirement mark belong to a ``holder`` (one store instance) and expire at a time,
    so the leases of a process that died end by themselves."""

    def take(self, sha256: str, owner: str, holder: str, ttl_s: float) -> str | None:
        """Lease ``owner``'s record of ``sha256`` for ``ttl_s`` seconds; returns its id,
        or ``None`` (taking nothing) while a retirement of it is under way. Atomic
        against :meth:`begin_retire`."""
        ...

    def release(self, lease_id: str) -> None:
        """End a lease (ended or unknown: nothing happens)."""
        ...

    def held(self, sha256: str, owner: str) -> int:
        """How many unexpired leases ``owner``'s record of ``sha256`` has."""
        ...

    def begin_retire(self, sha256: str, owner: str, holder: str, ttl_s: float) -> None:
        """Mark ``owner``'s record of ``sha256`` as being retired: :meth:`take` refuses
        it until :meth:`end_retire` (or ``ttl_s`` seconds)."""
        ...

    def end_retire(self, sha256: str, owner: str, holder: str) -> None:
        """Remove ``holder``'s retirement mark."""
        ...

    def retiring(self, sha256: str, owner: str) -> bool:
        """Whether an unexpired retirement mark is on ``owner``'s record of ``sha256``."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...
