"""The interface between :class:`~audiogate.store.SourceStore` and where sources live.

The embedded default is :class:`~audiogate.store.directory.DirectoryBackend` (a directory
of blobs and an SQLite index). A store shared by several servers implements the same
few methods; the :class:`~audiogate.store.SourceStore` (ownership, lifecycle, leases)
and its callers do not change.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from audiogate.store.source_record import RecoveryReport, SourceRecord, SourceStatus, StoreQuotas

__all__ = ["SourceBackend"]


@runtime_checkable
class SourceBackend(Protocol):
    """Durable blobs and records. Every method is thread-safe and each write is atomic:
    after a crash, a write is either complete or absent."""

    #: What opening the backend found and repaired.
    report: RecoveryReport

    def insert(
        self, data: bytes, record: SourceRecord, quotas: StoreQuotas
    ) -> tuple[SourceRecord, bool]:
        """Store ``data`` as ``record`` (its digest already computed) and acknowledge it.

        :returns: the owner's current record of this digest and whether it is new (the
            same owner's existing record is returned unchanged, the bytes not written
            again).
        :raises SourceQuotaError: a quota refuses it.
        """
        ...

    def current(self, sha256: str) -> list[SourceRecord]:
        """Every owner's current record of ``sha256``: the live or lost one, else the
        latest retired one."""
        ...

    def records(self, owner: str, *, include_retired: bool = True) -> list[SourceRecord]:
        """``owner``'s records, oldest first (retired history included by default)."""
        ...

    def set_status(self, sha256: str, owner: str, status: SourceStatus) -> SourceRecord | None:
        """Move ``owner``'s live record of ``sha256`` to ``status`` (``None``: none)."""
        ...

    def retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """Retire ``owner``'s current record of ``sha256`` and drop the blob if no live
        record names it any more (``None``: no current record)."""
        ...

    def read(self, sha256: str, nbytes: int, *, verify: bool = True) -> bytes | None:
        """The blob, checked against its size and (``verify``) its digest (``None``:
        missing or damaged)."""
        ...

    def exists(self, sha256: str, nbytes: int) -> bool:
        """Whether the blob is there with ``nbytes`` bytes (not read)."""
        ...

    def mark_lost(self, sha256: str) -> int:
        """Mark every live record of ``sha256`` lost; returns how many."""
        ...

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        """Persist a feature-cache entry of source ``sha256`` under ``key`` (atomic)."""
        ...

    def get_features(self, sha256: str, key: str) -> bytes | None:
        """A persisted feature-cache entry, or ``None``."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...
