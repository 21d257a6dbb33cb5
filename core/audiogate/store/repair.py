"""``audiogate sources repair``: open a store whose index is damaged by setting the index
aside and rebuilding it from the blobs' manifests (docs/sources.md, "Damage and repair")."""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs

from audiogate.store.damage import StoreDamagedError
from audiogate.store.source_record import RecoveryReport
from audiogate.store.store import SourceStore

__all__ = ["RepairReport", "repair_store"]

_INDEX_FILES = ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm")


@attrs.frozen(kw_only=True)
class RepairReport:
    """What :func:`repair_store` did.

    :param recovery: the recovery of the reopened store (``rebuilt`` records,
        ``quarantined`` blobs, every digest verified).
    :param set_aside: the damaged index files, renamed (kept for inspection), or none
        where the index opened.
    """

    recovery: RecoveryReport
    set_aside: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The report as JSON."""
        return {"recovery": self.recovery.as_dict(), "set_aside": list(self.set_aside)}


def repair_store(path: str | os.PathLike[str]) -> RepairReport:
    """Open the embedded store in ``path`` with every digest verified; if its index is
    damaged, rename the index files to ``*.damaged-<ns>`` first, so the new index is
    rebuilt from the blobs' manifests (retired history and the journal are not: they
    stay in the renamed file). Blobs nothing accounts for go to ``quarantine/``; no blob
    is deleted."""
    root = Path(path)
    set_aside: list[str] = []
    try:
        store = SourceStore.open(root, verify=True)
    except StoreDamagedError:
        stamp = time.time_ns()
        for name in _INDEX_FILES:
            index = root / name
            if index.exists():
                target = root / f"{name}.damaged-{stamp}"
                os.replace(index, target)
                set_aside.append(str(target))
        store = SourceStore.open(root, verify=True)
    try:
        return RepairReport(recovery=store.recovery, set_aside=tuple(set_aside))
    finally:
        store.close()
