"""The store's own failures: :class:`StoreDamagedError` (its index cannot be read;
opening refuses rather than guess: an empty index would orphan every blob) and
:class:`StoreWriteError` (a write failed: a full disk, an I/O error)."""

from __future__ import annotations

import errno
from pathlib import Path

from audiogate.errors import AudioGateError

__all__ = ["StoreDamagedError", "StoreWriteError"]

# What a full disk or an exhausted quota of the filesystem reports.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class StoreDamagedError(AudioGateError):
    """The store's index ``path`` is damaged: a one-line message names it and the repair
    command (``audiogate sources repair --store DIR``), which rebuilds the index from the
    blobs' manifests and quarantines what it cannot account for (docs/sources.md)."""

    code = "store_damaged"

    def __init__(self, path: str | Path, detail: str, *, store: str | Path | None = None) -> None:
        self.path = Path(path)
        words = " ".join(str(detail).split())
        self.detail = words if len(words) <= 160 else words[:157] + "..."
        where = self.path.parent if store is None else Path(store)
        super().__init__(
            f"source store index {self.path} is damaged ({self.detail}); nothing was changed: "
            f"run `audiogate sources repair --store {where}` to rebuild it from the blobs"
        )


class StoreWriteError(AudioGateError):
    """Storing a source failed in the disk or database (nothing was acknowledged and no
    temporary file is left); :attr:`full` when the disk (or its quota) is full. The
    server answers ``507`` when full, else ``500``.

    :param what: what was being written (``"the upload of <sha256>"``).
    :param cause: the operating system's or database's error.
    """

    code = "store_write"

    def __init__(self, what: str, cause: BaseException) -> None:
        number = getattr(cause, "errno", None)
        full_db = "full" in str(cause).lower() and "database" in str(cause).lower()
        self.full = number in _FULL or full_db
        self.status = 507 if self.full else 500
        reason = "the disk is full" if self.full else type(cause).__name__
        detail = getattr(cause, "strerror", None) or str(cause)
        super().__init__(f"storing {what} failed: {reason} ({detail}); nothing was stored")
