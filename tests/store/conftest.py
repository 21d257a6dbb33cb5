"""The store suite runs over every backend: the embedded directory (blobs, SQLite records
and leases in one folder), SQLite records and leases with the blobs under a separate root,
and everything in memory. A test reaches a backend's storage only through
:class:`Backing`, so the same test proves each one."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audiogate.store import SourceStore
from audiogate.store.directory import DirectoryBlobs, _entry_name
from audiogate.store.manifest import MANIFEST_KEY
from audiogate.store.memory import MemoryBlobs, MemoryLeases, MemoryRecords
from audiogate.store.sqlite import SqliteLeases, SqliteRecords

BACKINGS = ("directory", "split", "memory")


class Backing:
    """Opens stores over one backend's storage (reopening finds what the last one left)
    and reaches into that storage as a crash or a damaged disk would."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        if kind == "memory":
            self.memory = (MemoryRecords(), MemoryBlobs(), MemoryLeases())

    @property
    def blob_root(self) -> Path:
        return self.root / "blobs-root" if self.kind == "split" else self.root / "store"

    def parts(self) -> tuple[Any, Any, Any]:
        """New records, blobs and leases backends over this storage."""
        if self.kind == "memory":
            return self.memory
        if self.kind == "directory":
            blobs = DirectoryBlobs(self.root / "store")
            index = blobs.root
            names = ("index.sqlite3", "leases.sqlite3")
        else:
            blobs = DirectoryBlobs(self.blob_root)
            index = self.root / "index"
            index.mkdir(exist_ok=True)
            names = ("records.sqlite3", "leases.sqlite3")
        return SqliteRecords(index / names[0]), blobs, SqliteLeases(index / names[1])

    def open(self, **options: Any) -> SourceStore:
        if self.kind == "directory":
            return SourceStore.open(self.root / "store", **options)
        return SourceStore(*self.parts(), **options)

    # --- the storage, as a crash or a damaged disk leaves it ---------------------------

    def _memory_blobs(self) -> MemoryBlobs:
        return self.memory[1]

    def blobs(self) -> list[str]:
        """The digests that have a blob."""
        if self.kind == "memory":
            return sorted(self._memory_blobs().blobs)
        return sorted(p.name for p in (self.blob_root / "blobs").rglob("*") if p.is_file())

    def staged(self) -> int:
        """Staged writes left behind."""
        if self.kind == "memory":
            return len(self._memory_blobs()._staged)
        return len(list((self.blob_root / "tmp").iterdir()))

    def features(self, sha256: str) -> int:
        """Feature entries kept for ``sha256`` (its manifest not counted)."""
        if self.kind == "memory":
            return len(set(self._memory_blobs().features.get(sha256, {})) - {MANIFEST_KEY})
        folder = self.blob_root / "features" / sha256
        manifest = _entry_name(MANIFEST_KEY)
        return len([p for p in folder.iterdir() if p.name != manifest]) if folder.is_dir() else 0

    def write_blob(self, sha256: str, data: bytes) -> None:
        """Put ``data`` where the blob of ``sha256`` is (replacing it, or an orphan)."""
        if self.kind == "memory":
            self._memory_blobs().blobs[sha256] = data
            return
        path = DirectoryBlobs(self.blob_root).blob_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def lose(self, sha256: str) -> None:
        """The blob of ``sha256`` disappears."""
        if self.kind == "memory":
            del self._memory_blobs().blobs[sha256]
        else:
            DirectoryBlobs(self.blob_root).blob_path(sha256).unlink()

    def blob_size(self, sha256: str) -> int:
        if self.kind == "memory":
            return len(self._memory_blobs().blobs[sha256])
        return DirectoryBlobs(self.blob_root).blob_path(sha256).stat().st_size

    def leave_unfinished(self) -> None:
        """A staged write of a process that died."""
        if self.kind == "memory":
            self._memory_blobs()._staged["dead"] = b"half"
        else:
            name = f"{'0' * 64}.999999999.x.part"
            (self.blob_root / "tmp" / name).write_bytes(b"half")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(params=BACKINGS)
def backing(request: pytest.FixtureRequest, tmp_path: Path) -> Backing:
    return Backing(request.param, tmp_path)


@pytest.fixture
def store(backing: Backing) -> Iterator[SourceStore]:
    opened = backing.open()
    yield opened
    opened.close()
