"""The embedded blobs: a directory of content-addressed files.

Layout of ``DIR``::

    blobs/ab/ab12...     one file per digest, the source's bytes exactly
    features/ab12.../    feature-cache entries of a source, and its manifest
    tmp/                 staged writes (``<name>.<pid>.<random>.part``)
    quarantine/          what recovery could not account for (never deleted by it)

A write is crash-safe: the bytes go to ``tmp/`` and are fsynced (:meth:`DirectoryBlobs.stage`),
then renamed to their path with the directory fsynced (:meth:`DirectoryBlobs.publish`);
the records backend calls the rename under its write lock. Recovery removes staged writes
whose process is gone. :meth:`~audiogate.store.SourceStore.open` keeps the records and
leases (:mod:`audiogate.store.sqlite`) in the same directory.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DirectoryBlobs"]


def _writer_alive(name: str) -> bool:
    """Whether the process that writes temporary file ``name`` (``<sha>.<pid>.<id>.part``)
    is running (and is not this process, which recovers before it writes)."""
    try:
        pid = int(name.split(".")[1])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.lru_cache(maxsize=256)
def _entry_name(feature_key: str) -> str:
    """A feature entry's file name: the digest of the cache's key text (a few per model)."""
    return hashlib.sha256(feature_key.encode("utf-8")).hexdigest() + ".bin"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryBlobs:
    """Blobs and feature entries under ``root`` (created if absent), see the module
    docstring."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self._blobs_dir = str(self.blobs)
        self.features = self.root / "features"
        self._features_dir = str(self.features)
        self.tmp = self.root / "tmp"
        self.quarantine_dir = self.root / "quarantine"
        for path in (self.root, self.blobs, self.features, self.tmp):
            path.mkdir(parents=True, exist_ok=True)

    def blob_path(self, sha256: str) -> Path:
        """Where the blob of ``sha256`` lives."""
        return self.blobs / sha256[:2] / sha256

    def _features_path(self, sha256: str, feature_key: str) -> str:
        # Asked on every feature-cache miss: string joins, the key's digest cached.
        return os.path.join(self._features_dir, sha256, _entry_name(feature_key))

    # --- BlobBackend -----------------------------------------------------------------

    def stage(self, sha256: str, data: bytes) -> str:
        """See :meth:`~audiogate.store.backend.BlobBackend.stage` (a fsynced file in
        ``tmp/``; the handle is its path)."""
        temp = self.tmp / f"{sha256}.{os.getpid()}.{uuid.uuid4().hex}.part"
        try:
            with open(temp, "xb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:  # a full disk, an I/O error: no partial file is left
            temp.unlink(missing_ok=True)
            raise
        return str(temp)

    def publish(self, handle: str, sha256: str, feature_key: str | None = None) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.publish` (a rename, the
        directories fsynced)."""
        if feature_key is None:
            # Replaces what is there: the same bytes, or a damaged copy (re-uploading
            # the bytes repairs it; the store checked their digest).
            target = self.blob_path(sha256)
        else:
            target = Path(self._features_path(sha256, feature_key))
        parent = target.parent
        created = not parent.exists()
        parent.mkdir(parents=True, exist_ok=True)
        os.replace(handle, target)
        _fsync_dir(parent)
        if created:
            _fsync_dir(parent.parent)

    def discard(self, handle: str) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.discard`."""
        Path(handle).unlink(missing_ok=True)

    def exists(self, sha256: str, nbytes: int) -> bool:
        """See :meth:`~audiogate.store.backend.BlobBackend.exists` (a ``stat``)."""
        # Every reference asks: a string path, not two Path joins.
        try:
            return os.stat(os.path.join(self._blobs_dir, sha256[:2], sha256)).st_size == nbytes
        except FileNotFoundError:
            return False

    def read(self, sha256: str, nbytes: int) -> bytes | None:
        """See :meth:`~audiogate.store.backend.BlobBackend.read`."""
        try:
            with open(self.blob_path(sha256), "rb") as blob:
                data = blob.read(nbytes + 1)
        except FileNotFoundError:
            return None
        return data if len(data) == nbytes else None

    def read_features(self, sha256: str, feature_key: str) -> bytes | None:
        """See :meth:`~audiogate.store.backend.BlobBackend.read_features`."""
        try:
            with open(self._features_path(sha256, feature_key), "rb") as entry:
                return entry.read()
        except FileNotFoundError:
            return None

    def remove(self, sha256: str) -> None:
        """See :meth:`~audiogate.store.backend.BlobBackend.remove`."""
        self.blob_path(sha256).unlink(missing_ok=True)
        folder = self.features / sha256
        if folder.is_dir():
            for entry in folder.iterdir():
                entry.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def quarantine(self, sha256: str) -> bool:
        """See :meth:`~audiogate.store.backend.BlobBackend.quarantine` (moved under
        ``quarantine/``, the blob as ``<sha256>``, its entries as ``<sha256>.entries``)."""
        blob = self.blob_path(sha256)
        folder = self.features / sha256
        moved = False
        if blob.exists() or folder.exists():
            self.quarantine_dir.mkdir(exist_ok=True)
            stamp = f"{time.time_ns()}"
            if blob.exists():
                os.replace(blob, self.quarantine_dir / f"{sha256}.{stamp}")
                moved = True
            if folder.exists():
                os.replace(folder, self.quarantine_dir / f"{sha256}.{stamp}.entries")
            _fsync_dir(self.quarantine_dir)
        return moved

    def digests(self) -> Iterator[str]:
        """See :meth:`~audiogate.store.backend.BlobBackend.digests`."""
        for folder in list(self.blobs.iterdir()):
            for blob in list(folder.iterdir()) if folder.is_dir() else ():
                yield blob.name
        for folder in list(self.features.iterdir()):
            yield folder.name

    def recover(self) -> int:
        """See :meth:`~audiogate.store.backend.BlobBackend.recover` (a staged file whose
        process is gone)."""
        removed = 0
        for temp in self.tmp.iterdir():
            if _writer_alive(temp.name):
                continue  # another process sharing the directory is writing it
            temp.unlink(missing_ok=True)
            removed += 1
        return removed

    def close(self) -> None:
        """Nothing to release."""
