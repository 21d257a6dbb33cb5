"""The embedded records and leases: SQLite files a store's processes share.

* :class:`SqliteRecords` (``index.sqlite3``): one row per owner and source (retired rows
  are history) and a journal (one row per event); WAL mode, ``synchronous=FULL`` (an
  acknowledged source survives power loss). A blob is published inside the transaction
  that commits its record, and removed inside one that finds no live record naming it
  (``BEGIN IMMEDIATE``: SQLite's write lock, across processes), so processes sharing the
  index never lose a blob to each other's retirements.
* :class:`SqliteLeases` (``leases.sqlite3``): the leases requests hold and the
  retirements under way, each with its holder and expiry; ``synchronous=OFF`` (a lease
  outlives no crash of its holder: a machine that lost power holds nothing), in a file of
  its own so a lease never waits behind an upload's fsyncs.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

from audiogate.store.damage import StoreDamagedError
from audiogate.store.holders import holder_alive
from audiogate.store.quotas import check_quotas
from audiogate.store.source_record import (
    SourceRecord,
    SourceStatus,
    StoreQuotas,
    header_from_text,
    header_text,
)

__all__ = ["SqliteLeases", "SqliteRecords"]

_T = TypeVar("_T")
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

_LEASE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS leases (
    id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    owner TEXT NOT NULL,
    holder TEXT NOT NULL,
    retiring INTEGER NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_source ON leases (sha256, owner);
"""


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


def _connect(path: Path, *, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


class _Writer:
    """One connection's write transactions (``BEGIN IMMEDIATE``: SQLite's write lock,
    across processes)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.lock = threading.RLock()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")


class SqliteRecords:
    """Source records in the SQLite file ``path`` (created if absent), see the module
    docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._db = _connect(self.path, synchronous="FULL")
        except sqlite3.DatabaseError as exc:
            raise StoreDamagedError(self.path, str(exc)) from None
        try:
            self._check()
            self._writer = _Writer(self._db)
            self._db.executescript(_SCHEMA)
            self._add_header_column()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreDamagedError(self.path, str(exc)) from None
        except StoreDamagedError:
            self._db.close()
            raise
        # Look-ups of a digest (every reference) read through a connection of their own:
        # in WAL mode a reader never waits for a writer, so they never wait behind the
        # write lock's fsyncs (an upload's, a retirement's).
        self._reader = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def _check(self) -> None:
        """Refuse an index SQLite finds damaged (a page-level check, once at open).

        :raises StoreDamagedError: it is.
        """
        rows = self._db.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:
            raise StoreDamagedError(self.path, "; ".join(str(r[0]) for r in rows[:3]))

    def _add_header_column(self) -> None:
        """Give an index made before records kept headers its ``header`` column (``NULL``:
        those sources' headers are read from their bytes)."""
        with self._writer.write() as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(sources)")}
            if "header" not in columns:
                db.execute("ALTER TABLE sources ADD COLUMN header TEXT")

    def _journal(self, db: sqlite3.Connection, event: str, sha256: str, owner: str | None) -> None:
        db.execute(
            "INSERT INTO journal (at, event, sha256, owner) VALUES (?, ?, ?, ?)",
            (time.time(), event, sha256, owner),
        )

    # --- RecordBackend ---------------------------------------------------------------

    def insert(
        self, record: SourceRecord, quotas: StoreQuotas, publish: Callable[[], None]
    ) -> tuple[SourceRecord, bool]:
        """See :meth:`~audiogate.store.backend.RecordBackend.insert`."""
        with self._writer.write() as db:
            existing = self._current_of(db, record.sha256, record.owner)
            if existing is not None and existing.live:
                return existing, False
            self._check_quotas(db, record, quotas)
            publish()
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
        return record, True

    def _check_quotas(
        self, db: sqlite3.Connection, record: SourceRecord, quotas: StoreQuotas
    ) -> None:
        owner_bytes, owner_count = db.execute(
            f"SELECT COALESCE(SUM(bytes), 0), COUNT(*) FROM sources "
            f"WHERE owner = ? AND status IN {_LIVE_SQL}",
            (record.owner,),
        ).fetchone()
        total = None
        if quotas.max_total_bytes is not None:
            (total,) = db.execute(
                f"SELECT COALESCE(SUM(bytes), 0) FROM sources WHERE status IN {_LIVE_SQL}"
            ).fetchone()
        check_quotas(
            quotas,
            record.nbytes,
            owner_bytes=owner_bytes,
            owner_count=owner_count,
            total_bytes=total,
        )

    def _current_of(self, db: sqlite3.Connection, sha256: str, owner: str) -> SourceRecord | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM sources WHERE sha256 = ? AND owner = ? "
            f"AND status IN {_CURRENT_SQL}",
            (sha256, owner),
        ).fetchone()
        return None if row is None else _row(row)

    def current(self, sha256: str) -> list[SourceRecord]:
        """See :meth:`~audiogate.store.backend.RecordBackend.current` (what is committed;
        never waits for a writer)."""
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

    def live(self, sha256: str) -> bool:
        """See :meth:`~audiogate.store.backend.RecordBackend.live`."""
        with self._read_lock:
            row = self._reader.execute(
                f"SELECT 1 FROM sources WHERE sha256 = ? AND status IN {_LIVE_SQL} LIMIT 1",
                (sha256,),
            ).fetchone()
        return row is not None

    def records(self, owner: str, *, include_retired: bool = True) -> list[SourceRecord]:
        """See :meth:`~audiogate.store.backend.RecordBackend.records`."""
        where = "" if include_retired else f" AND status IN {_CURRENT_SQL}"
        with self._read_lock:
            rows = self._reader.execute(
                f"SELECT {_COLUMNS} FROM sources WHERE owner = ?{where} ORDER BY id", (owner,)
            ).fetchall()
        return [_row(row) for row in rows]

    def set_status(self, sha256: str, owner: str, status: SourceStatus) -> SourceRecord | None:
        """See :meth:`~audiogate.store.backend.RecordBackend.set_status`."""
        with self._writer.write() as db:
            changed = db.execute(
                f"UPDATE sources SET status = ? WHERE sha256 = ? AND owner = ? "
                f"AND status IN {_LIVE_SQL}",
                (status, sha256, owner),
            ).rowcount
            if changed:
                self._journal(db, status, sha256, owner)
            return self._current_of(db, sha256, owner)

    def retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """See :meth:`~audiogate.store.backend.RecordBackend.retire`."""
        with self._writer.write() as db:
            row = db.execute(
                f"SELECT id FROM sources WHERE sha256 = ? AND owner = ? "
                f"AND status IN {_CURRENT_SQL}",
                (sha256, owner),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE sources SET status = 'retired', retired_at = ? WHERE id = ?",
                (time.time(), row[0]),
            )
            self._journal(db, "retire", sha256, owner)
            retired = db.execute(f"SELECT {_COLUMNS} FROM sources WHERE id = ?", row).fetchone()
        return _row(retired)

    def mark_lost(self, sha256: str) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.mark_lost`."""
        with self._writer.write() as db:
            changed = db.execute(
                f"UPDATE sources SET status = 'lost' WHERE sha256 = ? AND status IN {_LIVE_SQL}",
                (sha256,),
            ).rowcount
            if changed:
                self._journal(db, "lost", sha256, None)
        return int(changed)

    def locked(self, sha256: str, action: Callable[[bool], _T]) -> _T:
        """See :meth:`~audiogate.store.backend.RecordBackend.locked`."""
        with self._writer.write() as db:
            live = db.execute(
                f"SELECT 1 FROM sources WHERE sha256 = ? AND status IN {_LIVE_SQL} LIMIT 1",
                (sha256,),
            ).fetchone()
            return action(live is not None)

    def resume(self) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.resume`."""
        with self._writer.write() as db:
            return int(
                db.execute(
                    "UPDATE sources SET status = 'ready' WHERE status = 'processing'"
                ).rowcount
            )

    def live_blobs(self) -> list[tuple[str, int]]:
        """See :meth:`~audiogate.store.backend.RecordBackend.live_blobs`."""
        with self._writer.lock:
            rows = self._db.execute(
                f"SELECT DISTINCT sha256, bytes FROM sources WHERE status IN {_LIVE_SQL}"
            ).fetchall()
        return [(str(sha256), int(nbytes)) for sha256, nbytes in rows]

    def retired_count(self) -> int:
        """See :meth:`~audiogate.store.backend.RecordBackend.retired_count`."""
        with self._writer.lock:
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM sources WHERE status = 'retired'"
            ).fetchone()
        return int(count)

    def note(self, event: str, detail: str) -> None:
        """See :meth:`~audiogate.store.backend.RecordBackend.note` (a journal row)."""
        with self._writer.write() as db:
            db.execute(
                "INSERT INTO journal (at, event, sha256, detail) VALUES (?, ?, '', ?)",
                (time.time(), event, detail),
            )

    def close(self) -> None:
        """Close the index."""
        with self._read_lock:
            self._reader.close()
        with self._writer.lock:
            self._db.close()


class SqliteLeases:
    """Leases and retirement marks in the SQLite file ``path`` (created if absent), see
    the module docstring. Opening it drops the expired marks and those of holders on this
    machine whose process is gone. A lease is one statement to take and one to release
    (no transaction of their own: every reference takes one)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError:
            # Leases outlive no crash anyway (synchronous=OFF): a damaged file is made anew.
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            self._db = self._open()
        self._writer = _Writer(self._db)
        # Lease ids: unique across processes (a random prefix), cheap within one.
        self._prefix = f"{uuid.uuid4().hex[:16]}-"
        self._ids = itertools.count()
        self._drop_dead_holders()

    def _open(self) -> sqlite3.Connection:
        db = _connect(self.path, synchronous="OFF")
        try:
            db.executescript(_LEASE_SCHEMA)
            db.execute("SELECT COUNT(*) FROM leases").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _drop_dead_holders(self) -> None:
        with self._writer.write() as db:
            holders = [row[0] for row in db.execute("SELECT DISTINCT holder FROM leases")]
            dead = [h for h in holders if not holder_alive(h)]
            db.executemany("DELETE FROM leases WHERE holder = ?", [(h,) for h in dead])
            db.execute("DELETE FROM leases WHERE expires <= ?", (time.time(),))

    def take(self, sha256: str, owner: str, holder: str, ttl_s: float) -> str | None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.take` (one statement: atomic
        against a retirement's mark without a transaction of its own)."""
        lease_id = f"{self._prefix}{next(self._ids)}"
        now = time.time()
        with self._writer.lock:
            inserted = self._db.execute(
                "INSERT INTO leases (id, sha256, owner, holder, retiring, expires) "
                "SELECT ?, ?, ?, ?, 0, ? WHERE NOT EXISTS (SELECT 1 FROM leases "
                "WHERE sha256 = ? AND owner = ? AND retiring = 1 AND expires > ?)",
                (lease_id, sha256, owner, holder, now + ttl_s, sha256, owner, now),
            ).rowcount
        return lease_id if inserted else None

    def release(self, lease_id: str) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.release`."""
        with self._writer.lock:
            self._db.execute("DELETE FROM leases WHERE id = ?", (lease_id,))

    def held(self, sha256: str, owner: str) -> int:
        """See :meth:`~audiogate.store.backend.LeaseBackend.held`; the leases of a
        process of this machine that is gone are dropped, not counted (a server killed
        while serving does not hold a retirement until its leases expire)."""
        with self._writer.lock:
            rows = self._db.execute(
                "SELECT holder, COUNT(*) FROM leases WHERE sha256 = ? AND owner = ? "
                "AND retiring = 0 AND expires > ? GROUP BY holder",
                (sha256, owner, time.time()),
            ).fetchall()
            dead = [holder for holder, _ in rows if not holder_alive(holder)]
            if dead:
                self._db.executemany(
                    "DELETE FROM leases WHERE holder = ?", [(holder,) for holder in dead]
                )
        return sum(int(count) for holder, count in rows if holder not in dead)

    def begin_retire(self, sha256: str, owner: str, holder: str, ttl_s: float) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.begin_retire`."""
        with self._writer.write() as db:
            db.execute(
                "INSERT INTO leases (id, sha256, owner, holder, retiring, expires) "
                "VALUES (?, ?, ?, ?, 1, ?)",
                (uuid.uuid4().hex, sha256, owner, holder, time.time() + ttl_s),
            )

    def end_retire(self, sha256: str, owner: str, holder: str) -> None:
        """See :meth:`~audiogate.store.backend.LeaseBackend.end_retire`."""
        with self._writer.write() as db:
            db.execute(
                "DELETE FROM leases WHERE sha256 = ? AND owner = ? AND holder = ? AND retiring = 1",
                (sha256, owner, holder),
            )

    def retiring(self, sha256: str, owner: str) -> bool:
        """See :meth:`~audiogate.store.backend.LeaseBackend.retiring`."""
        with self._writer.lock:
            return self._retiring(self._db, sha256, owner, time.time())

    def _retiring(self, db: sqlite3.Connection, sha256: str, owner: str, now: float) -> bool:
        row = db.execute(
            "SELECT 1 FROM leases WHERE sha256 = ? AND owner = ? AND retiring = 1 "
            "AND expires > ? LIMIT 1",
            (sha256, owner, now),
        ).fetchone()
        return row is not None

    def close(self) -> None:
        """Close the file."""
        with self._writer.lock:
            self._db.close()
