"""The embedded store: a directory of content-addressed blobs and an SQLite index.

Layout of ``DIR``::

    index.sqlite3        records (one row per owner and source; retired rows are history)
                         and the journal (one row per event), WAL mode, synchronous=FULL
    blobs/ab/ab12...     one file per digest, the source's bytes exactly
    features/ab12.../    persisted feature-cache entries of a source
    tmp/                 uploads being written

A write is crash-safe: the bytes go to ``tmp/``, are fsynced, renamed to the blob's path
(the directory fsynced), then the record and its journal row are committed in one
transaction; only then is the source acknowledged. Opening the store recovers: it
removes unfinished uploads and blobs no live record names, checks every live record's
blob (its size; its digest too with ``verify=True``) and marks a record whose blob is
gone ``lost``; records of retired sources are kept. The rename and the commit, and the
check and removal of a retired blob, hold SQLite's write lock, so processes sharing a
directory cannot lose a blob to each other's retirements.

``AUDIOGATE_STORE_CRASH_AT`` (tests only) makes the process SIGKILL itself at a named
point: ``upload`` (half the temporary file written), ``blob`` (blob renamed, record not
committed), ``retire`` (retirement committed, blob not yet removed).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from audiogate.errors import SourceQuotaError
from audiogate.store.source_record import (
    RecoveryReport,
    SourceRecord,
    SourceStatus,
    StoreQuotas,
    header_from_text,
    header_text,
)

__all__ = ["CRASH_ENV", "DirectoryBackend"]

#: The test hook's environment variable (see the module docstring).
CRASH_ENV: Final = "AUDIOGATE_STORE_CRASH_AT"
_INDEX: Final = "index.sqlite3"
_LIVE_SQL: Final = "('processing', 'ready')"
_CURRENT_SQL: Final = "('processing', 'ready', 'lost')"

_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sha256 TEXT NOT NULL,
    owner TEXT NOT NULL,
    scope TEXT NOT NULL,
    status TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    format TEXT NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL,
    header TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS sources_current ON sources (sha256, owner)
    WHERE status IN {_CURRENT_SQL};
CREATE INDEX IF NOT EXISTS sources_owner ON sources (owner);
CREATE INDEX IF NOT EXISTS sources_sha256 ON sources (sha256);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    event TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    owner TEXT,
    detail TEXT
);
"""

_COLUMNS: Final = (
    "sha256, owner, scope, status, bytes, duration_us, format, created_at, retired_at, header"
)


def _crash_point(name: str) -> None:
    # Tests only: a process killed here shows what recovery makes of this moment.
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _row(row: tuple[object, ...]) -> SourceRecord:
    sha256, owner, scope, status, nbytes, duration_us, fmt, created, retired, header = row
    return SourceRecord(
        sha256=str(sha256),
        owner=str(owner),
        scope=scope,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        nbytes=int(nbytes),  # type: ignore[call-overload]
        duration_us=int(duration_us),  # type: ignore[call-overload]
        source_format=str(fmt),
        created_at=float(created),  # type: ignore[arg-type]
        retired_at=None if retired is None else float(retired),  # type: ignore[arg-type]
        header=header_from_text(header if isinstance(header, str) else None),
    )


class DirectoryBackend:
    """Blobs in ``root/blobs``, records in ``root/index.sqlite3`` (see the module
    docstring); opening it runs the recovery, whose counts are :attr:`report`.

    :param verify: recompute every live blob's digest while recovering (else sizes only;
        every read checks the digest anyway).
    """

    def __init__(self, root: str | os.PathLike[str], *, verify: bool = False) -> None:
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self._blobs_dir = str(self.blobs)
        self.features = self.root / "features"
        self.tmp = self.root / "tmp"
        for path in (self.root, self.blobs, self.features, self.tmp):
            path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.root / _INDEX, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        # An acknowledged source survives power loss, not only a crash of this process.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._add_header_column()
        # Look-ups of a digest (every reference) read through a connection of their own:
        # in WAL mode a reader never waits for a writer, so they never wait behind the
        # write lock's fsyncs (an upload's, a retirement's).
        self._reader = sqlite3.connect(
            self.root / _INDEX, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()
        self.report = self._recover(verify=verify)

    def _add_header_column(self) -> None:
        """Give an index made before records kept headers its ``header`` column (``NULL``:
        those sources' headers are read from their bytes)."""
        with self._write() as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(sources)")}
            if "header" not in columns:
                db.execute("ALTER TABLE sources ADD COLUMN header TEXT")

    # --- paths and transactions -----------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        """Where the blob of ``sha256`` lives."""
        return self.blobs / sha256[:2] / sha256

    def _features_path(self, sha256: str, key: str) -> Path:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.features / sha256 / f"{name}.bin"

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding SQLite's write lock (across processes)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _journal(self, db: sqlite3.Connection, event: str, sha256: str, owner: str | None) -> None:
        db.execute(
            "INSERT INTO journal (at, event, sha256, owner) VALUES (?, ?, ?, ?)",
            (time.time(), event, sha256, owner),
        )

    def _write_file(self, data: bytes, target: Path, *, crash: str | None = None) -> Path:
        """``data`` in a fsynced temporary file beside nothing: ``tmp/``."""
        temp = self.tmp / f"{target.name}.{os.getpid()}.{uuid.uuid4().hex}.part"
        with open(temp, "xb") as out:
            half = len(data) // 2
            out.write(data[:half])
            if crash is not None:
                out.flush()
                _crash_point(crash)
            out.write(data[half:])
            out.flush()
            os.fsync(out.fileno())
        return temp

    def _publish(self, temp: Path, target: Path) -> None:
        """Rename ``temp`` to ``target`` durably (the directories fsynced)."""
        parent = target.parent
        created = not parent.exists()
        parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)
        _fsync_dir(parent)
        if created:
            _fsync_dir(parent.parent)

    # --- SourceBackend ---------------------------------------------------------------

    def insert(
        self, data: bytes, record: SourceRecord, quotas: StoreQuotas
    ) -> tuple[SourceRecord, bool]:
        """See :meth:`SourceBackend.insert`."""
        existing = self._current_of(record.sha256, record.owner)
        if existing is not None and existing.live:
            return existing, False
        with self._lock:  # early: nothing is written for an upload refused anyway
            self._check_quotas(self._db, record, quotas)
        target = self.blob_path(record.sha256)
        temp = self._write_file(data, target, crash="upload")
        try:
            with self._write() as db:
                existing = self._current_of(record.sha256, record.owner)
                if existing is not None and existing.live:
                    return existing, False
                self._check_quotas(db, record, quotas)
                if not self._blob_ok(record.sha256, record.nbytes):
                    self._publish(temp, target)
                _crash_point("blob")
                if existing is not None:  # lost: the same bytes bring it back
                    db.execute(
                        "UPDATE sources SET status = 'retired', retired_at = ? "
                        f"WHERE sha256 = ? AND owner = ? AND status IN {_CURRENT_SQL}",
                        (time.time(), record.sha256, record.owner),
                    )
                db.execute(
                    f"INSERT INTO sources ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.sha256,
                        record.owner,
                        record.scope,
                        record.status,
                        record.nbytes,
                        record.duration_us,
                        record.source_format,
                        record.created_at,
                        None,
                        header_text(record.header),
                    ),
                )
                self._journal(db, "add", record.sha256, record.owner)
        finally:
            temp.unlink(missing_ok=True)
        return record, True

    def _check_quotas(
        self, db: sqlite3.Connection, record: SourceRecord, quotas: StoreQuotas
    ) -> None:
        owner_bytes, owner_count = db.execute(
            f"SELECT COALESCE(SUM(bytes), 0), COUNT(*) FROM sources "
            f"WHERE owner = ? AND status IN {_LIVE_SQL}",
            (record.owner,),
        ).fetchone()
        if (
            quotas.max_sources_per_owner is not None
            and owner_count + 1 > quotas.max_sources_per_owner
        ):
            raise SourceQuotaError(
                "sources per owner", actual=owner_count + 1, maximum=quotas.max_sources_per_owner
            )
        if (
            quotas.max_bytes_per_owner is not None
            and owner_bytes + record.nbytes > quotas.max_bytes_per_owner
        ):
            raise SourceQuotaError(
                "source bytes per owner",
                actual=owner_bytes + record.nbytes,
                maximum=quotas.max_bytes_per_owner,
            )
        if quotas.max_total_bytes is not None:
            (total,) = db.execute(
                "SELECT COALESCE(SUM(bytes), 0) FROM (SELECT DISTINCT sha256, bytes FROM "
                f"sources WHERE status IN {_LIVE_SQL})"
            ).fetchone()
            shared = db.execute(
                f"SELECT 1 FROM sources WHERE sha256 = ? AND status IN {_LIVE_SQL} LIMIT 1",
                (record.sha256,),
            ).fetchone()
            grown = total + (0 if shared else record.nbytes)
            if grown > quotas.max_total_bytes:
                raise SourceQuotaError(
                    "source store bytes", actual=grown, maximum=quotas.max_total_bytes
                )

    def _current_of(self, sha256: str, owner: str) -> SourceRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM sources WHERE sha256 = ? AND owner = ? "
                f"AND status IN {_CURRENT_SQL}",
                (sha256, owner),
            ).fetchone()
        return None if row is None else _row(row)

    def current(self, sha256: str) -> list[SourceRecord]:
        """See :meth:`SourceBackend.current` (what is committed; never waits for a
        writer)."""
        with self._read_lock:
            rows = self._reader.execute(
                f"SELECT {_COLUMNS} FROM sources WHERE sha256 = ? ORDER BY id", (sha256,)
            ).fetchall()
        latest: dict[str, SourceRecord] = {}
        for record in map(_row, rows):
            held = latest.get(record.owner)
            if held is None or held.status == "retired":
                latest[record.owner] = record
        return list(latest.values())

    def records(self, owner: str, *, include_retired: bool = True) -> list[SourceRecord]:
        """See :meth:`SourceBackend.records`."""
        where = "" if include_retired else f" AND status IN {_CURRENT_SQL}"
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM sources WHERE owner = ?{where} ORDER BY id", (owner,)
            ).fetchall()
        return [_row(row) for row in rows]

    def set_status(self, sha256: str, owner: str, status: SourceStatus) -> SourceRecord | None:
        """See :meth:`SourceBackend.set_status`."""
        with self._write() as db:
            changed = db.execute(
                f"UPDATE sources SET status = ? WHERE sha256 = ? AND owner = ? "
                f"AND status IN {_LIVE_SQL}",
                (status, sha256, owner),
            ).rowcount
            if changed:
                self._journal(db, status, sha256, owner)
        return self._current_of(sha256, owner) if status != "retired" else None

    def retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """See :meth:`SourceBackend.retire`."""
        now = time.time()
        with self._write() as db:
            row = db.execute(
                f"SELECT id FROM sources WHERE sha256 = ? AND owner = ? "
                f"AND status IN {_CURRENT_SQL}",
                (sha256, owner),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE sources SET status = 'retired', retired_at = ? WHERE id = ?", (now, row[0])
            )
            self._journal(db, "retire", sha256, owner)
        _crash_point("retire")
        self._drop_if_unused(sha256)
        return next(r for r in self.current(sha256) if r.owner == owner)

    def _drop_if_unused(self, sha256: str) -> bool:
        # Under the write lock: a concurrent insert of the same bytes (another process)
        # publishes its blob inside the same lock, so it is never removed under it.
        with self._write() as db:
            used = db.execute(
                f"SELECT 1 FROM sources WHERE sha256 = ? AND status IN {_LIVE_SQL} LIMIT 1",
                (sha256,),
            ).fetchone()
            if used:
                return False
            self._remove_blob(sha256)
        return True

    def _remove_blob(self, sha256: str) -> None:
        self.blob_path(sha256).unlink(missing_ok=True)
        folder = self.features / sha256
        if folder.is_dir():
            for entry in folder.iterdir():
                entry.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _blob_ok(self, sha256: str, nbytes: int) -> bool:
        try:
            return self.blob_path(sha256).stat().st_size == nbytes
        except FileNotFoundError:
            return False

    def exists(self, sha256: str, nbytes: int) -> bool:
        """See :meth:`SourceBackend.exists`."""
        # Every reference asks: a string path, not two Path joins.
        try:
            return os.stat(os.path.join(self._blobs_dir, sha256[:2], sha256)).st_size == nbytes
        except FileNotFoundError:
            return False

    def read(self, sha256: str, nbytes: int, *, verify: bool = True) -> bytes | None:
        """See :meth:`SourceBackend.read`."""
        try:
            with open(self.blob_path(sha256), "rb") as blob:
                data = blob.read(nbytes + 1)
        except FileNotFoundError:
            return None
        if len(data) != nbytes:
            return None
        if verify and hashlib.sha256(data).hexdigest() != sha256:
            return None
        return data

    def mark_lost(self, sha256: str) -> int:
        """See :meth:`SourceBackend.mark_lost`."""
        with self._write() as db:
            return self._mark_lost(db, sha256)

    def _mark_lost(self, db: sqlite3.Connection, sha256: str) -> int:
        changed = db.execute(
            f"UPDATE sources SET status = 'lost' WHERE sha256 = ? AND status IN {_LIVE_SQL}",
            (sha256,),
        ).rowcount
        if changed:
            self._journal(db, "lost", sha256, None)
        return int(changed)

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        """See :meth:`SourceBackend.put_features`."""
        target = self._features_path(sha256, key)
        temp = self._write_file(blob, target)
        try:
            with self._write() as db:
                live = db.execute(
                    f"SELECT 1 FROM sources WHERE sha256 = ? AND status IN {_LIVE_SQL} LIMIT 1",
                    (sha256,),
                ).fetchone()
                if live:  # a retired source's features are not kept
                    self._publish(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def get_features(self, sha256: str, key: str) -> bytes | None:
        """See :meth:`SourceBackend.get_features`."""
        try:
            return self._features_path(sha256, key).read_bytes()
        except FileNotFoundError:
            return None

    def close(self) -> None:
        """Close the index."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()

    # --- recovery --------------------------------------------------------------------

    def _recover(self, *, verify: bool) -> RecoveryReport:
        with self._write() as db:
            unfinished = 0
            for temp in self.tmp.iterdir():
                if _writer_alive(temp.name):
                    continue  # another process sharing the directory is writing it
                temp.unlink(missing_ok=True)
                unfinished += 1
            resumed = db.execute(
                "UPDATE sources SET status = 'ready' WHERE status = 'processing'"
            ).rowcount
            live = db.execute(
                f"SELECT DISTINCT sha256, bytes FROM sources WHERE status IN {_LIVE_SQL}"
            ).fetchall()
            lost = 0
            for sha256, nbytes in live:
                good = self._blob_ok(sha256, nbytes)
                if good and verify:
                    good = self.read(sha256, nbytes) is not None
                if not good:
                    lost += self._mark_lost(db, sha256)
                    self._remove_blob(sha256)
            keep = {
                row[0]
                for row in db.execute(
                    f"SELECT DISTINCT sha256 FROM sources WHERE status IN {_LIVE_SQL}"
                )
            }
            orphans = 0
            for folder in self.blobs.iterdir():
                for blob in folder.iterdir() if folder.is_dir() else ():
                    if blob.name not in keep:
                        self._remove_blob(blob.name)
                        orphans += 1
            for folder in self.features.iterdir():
                if folder.name not in keep:
                    self._remove_blob(folder.name)
            (retired,) = db.execute(
                "SELECT COUNT(*) FROM sources WHERE status = 'retired'"
            ).fetchone()
            if unfinished or orphans or lost or resumed:
                db.execute(
                    "INSERT INTO journal (at, event, sha256, detail) VALUES (?, 'recover', '', ?)",
                    (time.time(), f"unfinished={unfinished} orphans={orphans} lost={lost}"),
                )
        return RecoveryReport(
            unfinished_removed=unfinished,
            orphans_removed=orphans,
            lost=lost,
            resumed=int(resumed),
            checked=len(live),
            verified=verify,
            retired_kept=int(retired),
        )
