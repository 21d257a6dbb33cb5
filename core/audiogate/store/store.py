"""``SourceStore``: uploaded sources named by digest, with owners, scopes, a lifecycle
and leases (docs/sources.md).

The store composes three backends (:mod:`audiogate.store.backend`): records, blobs and
leases; it holds no state of its own that another process sharing them would miss.
Ownership is checked here: a reference to another owner's private source is refused
exactly like one to a source that does not exist
(:class:`~audiogate.errors.SourceNotFoundError`, same code, same message), so a digest
never tells a caller whether someone else holds it.

Every backend call can block (a disk, a database, a network): an event loop calls the
``*_async`` methods, which run them in the store's own bounded executor, and waits
(a source still processing, a retirement waiting for its leases) poll there without
holding a thread. :meth:`StoredLease.release` and :meth:`SourceStore.mark_lost` called on
an event loop hand their write to the executor and return at once.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Final, TypeVar

import attrs

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.geometry import AUTO, ClipGeometry, SourceFormat
from audiogate.errors import (
    SourceBusyError,
    SourceLostError,
    SourceNotFoundError,
    SourceRetiredError,
)
from audiogate.store.backend import BlobBackend, LeaseBackend, RecordBackend
from audiogate.store.damage import StoreWriteError
from audiogate.store.holders import new_holder
from audiogate.store.manifest import MANIFEST_KEY, manifest_blob, manifest_records
from audiogate.store.source_record import (
    SCOPES,
    RecoveryReport,
    Scope,
    SourceRecord,
    SourceStatus,
    StoreQuotas,
    check_digest,
    format_from_text,
    format_text,
    header_from_text,
    header_text,
)

__all__ = [
    "ANONYMOUS_OWNER",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_SOURCE_WAIT_S",
    "DEFAULT_STORE_THREADS",
    "AddedSource",
    "SourceStore",
    "StoredLease",
]

#: The owner of every request where no owners are configured (no ``--auth-tokens``).
ANONYMOUS_OWNER: Final = "anonymous"
#: How long a prompt waits for a source that is still processing.
DEFAULT_SOURCE_WAIT_S: Final = 30.0
#: How long a lease (or a retirement's mark) lasts unless released: the leases of a
#: process that died without releasing them end by themselves after this.
DEFAULT_LEASE_TTL_S: Final = 3600.0
#: The store executor's threads: how many backend calls an event loop has under way.
DEFAULT_STORE_THREADS: Final = 8
# How often a wait re-reads the backends (another process may have moved the source on).
_POLL_S: Final = 0.05
# A retirement on an event loop polls less and less often, up to this (a release in this
# process wakes it at once; this bounds how late it sees another process's).
_MAX_RETIRE_POLL_S: Final = 0.4

_T = TypeVar("_T")
_log = logging.getLogger("audiogate.store")


# Set in the store executor's threads: they never wait for the executor's own queue.
_executor_thread = threading.local()


def _mark_executor_thread() -> None:
    _executor_thread.store = True


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@attrs.frozen(kw_only=True)
class AddedSource:
    """The result of :meth:`SourceStore.add`: the record, and whether it is new (``False``:
    the same owner had already uploaded these bytes; that record is returned)."""

    record: SourceRecord
    created: bool


class StoredLease:
    """A leased source: its format, the header recorded at upload and its bytes (read when
    first asked for, unless the lease read them), held until :meth:`release` (idempotent)."""

    __slots__ = ("_data", "_released", "_store", "_verify", "lease_id", "record")

    def __init__(
        self, store: SourceStore, record: SourceRecord, lease_id: str, *, verify: bool
    ) -> None:
        self._store = store
        self.record = record
        self.lease_id = lease_id
        self._data: bytes | None = None
        self._verify = verify
        self._released = False

    @property
    def sha256(self) -> str:
        """The digest the source is stored under."""
        return self.record.sha256

    @property
    def nbytes(self) -> int:
        """The size of its bytes (checked against the blob when it was leased)."""
        return self.record.nbytes

    @property
    def header(self) -> ClipGeometry | None:
        """The header geometry admission read at upload (``None``: not kept)."""
        return self.record.header

    @property
    def source_format(self) -> SourceFormat:
        """The format the source was admitted as."""
        return format_from_text(self.record.source_format)

    @property
    def data(self) -> bytes:
        """The source's bytes, read once (their size checked, and their digest if leased
        with ``verify``); a backend read: call it off any event loop.

        :raises SourceLostError: they are gone or damaged (the source is marked lost).
        """
        if self._data is None:
            self._data = self._store._read_blob(self.record, verify=self._verify)
        return self._data

    def release(self) -> None:
        """Let go of the source; a retirement waiting for it may complete. On an event
        loop the release is handed to the store's executor (the loop never waits)."""
        if not self._released:
            self._released = True
            self._store._release(self.lease_id)


class SourceStore:
    """Sources by digest, over a :class:`~audiogate.store.backend.RecordBackend`, a
    :class:`~audiogate.store.backend.BlobBackend` and a
    :class:`~audiogate.store.backend.LeaseBackend`; constructing it recovers them
    (:attr:`recovery` says what was repaired).

    :param quotas: what each owner, and the store, may hold.
    :param wait_s: how long a reference to a processing source waits by default.
    :param verify: recompute every live blob's digest while recovering (else sizes only;
        every read checks the digest anyway).
    :param lease_ttl_s: how long a lease lasts unless released.
    :param threads: the executor's threads for the ``*_async`` methods.
    """

    def __init__(
        self,
        records: RecordBackend,
        blobs: BlobBackend,
        leases: LeaseBackend,
        *,
        quotas: StoreQuotas | None = None,
        wait_s: float = DEFAULT_SOURCE_WAIT_S,
        verify: bool = False,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        threads: int = DEFAULT_STORE_THREADS,
    ) -> None:
        self.records = records
        self.blobs = blobs
        self.leases_backend = leases
        self.quotas = quotas or StoreQuotas()
        self.wait_s = wait_s
        self.lease_ttl_s = lease_ttl_s
        #: This store's name in the lease backend (host, process, instance).
        self.holder = new_holder()
        # Wakes this process's waiters at once; other processes' changes are polled.
        self._cond = threading.Condition()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix="audiogate-store",
            initializer=_mark_executor_thread,
        )
        self._pending: set[concurrent.futures.Future[None]] = set()
        # Event-loop waiters (retirements) that this process's writes wake.
        self._listening: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._pending_lock = threading.Lock()
        self.recovery: RecoveryReport = self._recover(verify=verify)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        verify: bool = False,
        quotas: StoreQuotas | None = None,
        wait_s: float = DEFAULT_SOURCE_WAIT_S,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        threads: int = DEFAULT_STORE_THREADS,
    ) -> SourceStore:
        """The embedded store in directory ``path`` (created if absent): blobs in it
        (:class:`~audiogate.store.directory.DirectoryBlobs`), records in its
        ``index.sqlite3`` and leases in its ``leases.sqlite3``
        (:mod:`audiogate.store.sqlite`); recovered. The other parameters are the
        constructor's.

        :param verify: recompute every blob's digest while recovering.
        """
        from audiogate.store.directory import DirectoryBlobs
        from audiogate.store.sqlite import SqliteLeases, SqliteRecords

        blobs = DirectoryBlobs(path)
        records = SqliteRecords(blobs.root / "index.sqlite3")
        leases = SqliteLeases(blobs.root / "leases.sqlite3")
        return cls(
            records,
            blobs,
            leases,
            quotas=quotas,
            wait_s=wait_s,
            verify=verify,
            lease_ttl_s=lease_ttl_s,
            threads=threads,
        )

    # --- writing ---------------------------------------------------------------------

    def add(
        self,
        data: bytes,
        *,
        owner: str,
        duration_us: int,
        scope: Scope = "private",
        source_format: SourceFormat = AUTO,
        status: SourceStatus = "ready",
        header: ClipGeometry | None = None,
    ) -> AddedSource:
        """Store admitted ``data`` (:func:`~audiogate.store.admission.admit_source` admits
        it first) and acknowledge it: when this returns, the source survives a crash.

        :param status: ``"processing"`` while its features are computed (references wait;
            :meth:`mark_ready` ends it), or ``"ready"``.
        :param header: the geometry admission read from its header (kept for a WAV or raw
            source: references to it are then admitted without reading it).
        :raises SourceQuotaError: a quota refuses it.
        :raises StoreWriteError: the disk or the index failed (a full disk: ``full``);
            nothing is acknowledged and no staged file is left.
        :raises ValueError: an empty owner, an unknown scope or status.
        """
        if not owner:
            raise ValueError("a source needs a non-empty owner")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {list(SCOPES)}, not {scope!r}")
        if status not in ("processing", "ready"):
            raise ValueError(f"a new source is 'processing' or 'ready', not {status!r}")
        sha256 = hashlib.sha256(data).hexdigest()
        existing = self._own(sha256, owner)
        if existing is not None and existing.live:
            if not self._blob_good(sha256, existing.nbytes):
                try:
                    self._repair_blob(sha256, data)
                except (OSError, sqlite3.OperationalError) as exc:
                    raise StoreWriteError(f"the repair of {sha256}", exc) from exc
            return AddedSource(record=existing, created=False)
        record = SourceRecord(
            sha256=sha256,
            owner=owner,
            scope=scope,
            status=status,
            nbytes=len(data),
            duration_us=duration_us,
            source_format=format_text(source_format),
            created_at=time.time(),
            header=header_from_text(header_text(header)),
        )
        try:
            handle = self.blobs.stage(sha256, bytes(data))
            try:
                stored, created = self.records.insert(
                    record, self.quotas, lambda: self._publish_source(handle, record)
                )
            finally:
                self.blobs.discard(handle)
        except (OSError, sqlite3.OperationalError) as exc:
            raise StoreWriteError(f"the upload of {sha256}", exc) from exc
        return AddedSource(record=stored, created=created)

    def _publish_source(self, handle: str, record: SourceRecord) -> None:
        """Publish a new record's blob, then its manifest with the record added (under
        the records' write lock: :meth:`RecordBackend.insert` calls this)."""
        self.blobs.publish(handle, record.sha256)
        self._write_manifest(record.sha256, add=record)

    def _write_manifest(
        self, sha256: str, *, add: SourceRecord | None = None, drop: str | None = None
    ) -> None:
        """Rewrite the manifest of ``sha256`` with ``add`` in it or owner ``drop`` out
        (under the records' write lock)."""
        held = manifest_records(sha256, self.blobs.read_features(sha256, MANIFEST_KEY)) or []
        gone = {drop, None if add is None else add.owner}
        kept = [r for r in held if r.owner not in gone] + ([add] if add is not None else [])
        if not kept:
            return  # the blob and its entries go with the last record
        handle = self.blobs.stage(sha256, manifest_blob(kept))
        try:
            self.blobs.publish(handle, sha256, MANIFEST_KEY)
        finally:
            self.blobs.discard(handle)

    def _blob_good(self, sha256: str, nbytes: int) -> bool:
        """Whether the blob of ``sha256`` is there with its bytes (digest checked)."""
        data = self.blobs.read(sha256, nbytes)
        return data is not None and hashlib.sha256(data).hexdigest() == sha256

    def _repair_blob(self, sha256: str, data: bytes) -> None:
        """Publish ``data`` (of digest ``sha256``) over a damaged or missing blob that a
        live record names; the records are left as they are."""
        handle = self.blobs.stage(sha256, bytes(data))
        try:
            self.records.locked(
                sha256, lambda live: self.blobs.publish(handle, sha256) if live else None
            )
        finally:
            self.blobs.discard(handle)

    def mark_ready(self, sha256: str, *, owner: str) -> SourceRecord | None:
        """End ``owner``'s source's processing: references waiting for it go on."""
        record = self.records.set_status(check_digest(sha256), owner, "ready")
        with self._cond:
            self._cond.notify_all()
        return record

    def mark_lost(self, sha256: str) -> None:
        """Mark every live record of ``sha256`` lost (its bytes were found damaged, as the
        pipeline's digest proof finds them). On an event loop the write is handed to the
        store's executor."""
        self._write_soon(self.records.mark_lost, check_digest(sha256))

    def retire(
        self,
        sha256: str,
        *,
        owner: str,
        timeout_s: float | None = None,
        cancel: CancelToken = NEVER,
    ) -> SourceRecord:
        """Retire ``owner``'s source: new references are refused at once; the call
        completes when the requests holding a lease on it (in any process) have released
        it, then its record becomes history and its blob is removed unless another
        owner's record names the same bytes.

        :param timeout_s: the longest wait for the leases (``None``: no limit).
        :raises SourceNotFoundError: ``owner`` has no such source (another owner's source,
            shared or not, cannot be retired by ``owner``).
        :raises SourceBusyError: the leases were still held after ``timeout_s``.
        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        """
        done = self._begin_retire(sha256, owner)
        if done is not None:
            return done
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while held := self.leases_backend.held(sha256, owner):
                left = self._retire_left(sha256, held, timeout_s, deadline, cancel)
                with self._cond:
                    self._cond.wait(left)
            return self._finish_retire(sha256, owner)
        finally:
            self._end_retire(sha256, owner)

    def _begin_retire(self, sha256: str, owner: str) -> SourceRecord | None:
        """Mark the retirement (``None``), or the record that needs none (retired)."""
        check_digest(sha256)
        own = self._own(sha256, owner)
        if own is None:
            raise SourceNotFoundError(sha256)
        if own.status == "retired":
            return own
        self.leases_backend.begin_retire(sha256, owner, self.holder, self.lease_ttl_s)
        return None

    def _retire_left(
        self,
        sha256: str,
        held: int,
        timeout_s: float | None,
        deadline: float | None,
        cancel: CancelToken,
        poll_s: float = _POLL_S,
    ) -> float:
        """The next poll's wait while ``held`` leases remain.

        :raises SourceBusyError: past the deadline.
        """
        cancel.check(Checkpoint.ACQUISITION)
        left = poll_s if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise SourceBusyError(
                sha256,
                detail=f"{held} request(s) still hold it after {timeout_s:g} s; it is not retired",
            )
        return min(left, poll_s)

    def _finish_retire(self, sha256: str, owner: str) -> SourceRecord:
        record = self.records.retire(sha256, owner)
        if record is None:  # retired by another process meanwhile
            record = self._own(sha256, owner)
            assert record is not None
        elif not self._drop_if_unused(sha256):
            # Another owner keeps the bytes: a rebuilt index must not bring this back.
            self.records.locked(
                sha256, lambda live: self._write_manifest(sha256, drop=owner) if live else None
            )
        return record

    def _end_retire(self, sha256: str, owner: str) -> None:
        self.leases_backend.end_retire(sha256, owner, self.holder)
        with self._cond:
            self._cond.notify_all()

    def _drop_if_unused(self, sha256: str) -> bool:
        """Remove the blob (and its features) if no live record names it, under the
        records' write lock (a concurrent upload of the same bytes publishes under it)."""

        def drop(live: bool) -> bool:
            if live:
                return False
            self.blobs.remove(sha256)
            return True

        return self.records.locked(sha256, drop)

    # --- reading ---------------------------------------------------------------------

    def _own(self, sha256: str, owner: str) -> SourceRecord | None:
        return next((r for r in self.records.current(sha256) if r.owner == owner), None)

    def _visible(
        self, sha256: str, owner: str, *, marks: bool = True
    ) -> tuple[SourceRecord | None, bool]:
        """The record ``owner`` sees: its own live one, another's shared live one, its own
        lost or retired one, another's shared lost or retired one, or none; and whether
        it is being retired.

        :param marks: read the retirement marks even where one live record is seen (a
            lease need not: :meth:`LeaseBackend.take` refuses a marked one itself).
        """
        records = self.records.current(sha256)
        own = [r for r in records if r.owner == owner]
        shared = [r for r in records if r.owner != owner and r.scope == "shared"]
        candidates = [r for r in own + shared if r.live]
        if not marks and len(candidates) == 1:
            return candidates[0], False
        for record in candidates:
            if not self.leases_backend.retiring(sha256, record.owner):
                return record, False
        first = next(iter(own + shared), None)
        # Live yet passed over above: being retired.
        return first, first is not None and first.live

    def get(self, sha256: str, *, owner: str) -> SourceRecord:
        """The record of ``sha256`` that ``owner`` sees (their own, in any status, or a
        shared one).

        :raises SourceNotFoundError: none (missing, or another owner's private source).
        """
        self._flush()
        record, retiring = self._visible(check_digest(sha256), owner)
        if record is None:
            raise SourceNotFoundError(sha256)
        return attrs.evolve(record, status="retired") if retiring else record

    def list(self, owner: str, *, include_retired: bool = False) -> list[SourceRecord]:
        """``owner``'s sources, oldest first (retired history only when asked)."""
        self._flush()
        return self.records.records(owner, include_retired=include_retired)

    def lease(
        self,
        sha256: str,
        *,
        owner: str,
        cancel: CancelToken = NEVER,
        wait_s: float | None = None,
        clip_index: int | None = None,
        verify: bool = True,
        read: bool = True,
    ) -> StoredLease:
        """Lease ``sha256`` as ``owner`` sees it, for one request; a processing source
        is waited for (up to ``wait_s``, default the store's; polling ``cancel``).

        :param verify: check the bytes' digest as they are read (``False``: only their
            size; the caller proves the digest before using them, as acquisition's clips
            do before decoding).
        :param read: read the bytes now (``False``: check that the blob is there with
            their size, and read them when :attr:`StoredLease.data` is first asked for).

        :raises SourceNotFoundError: missing, or another owner's private source.
        :raises SourceRetiredError: retired, or being retired.
        :raises SourceLostError: its bytes are gone, of the wrong size, or (``verify``)
            of the wrong digest.
        :raises SourceBusyError: still processing after ``wait_s``.
        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        """
        deadline = time.monotonic() + (self.wait_s if wait_s is None else wait_s)
        while True:
            lease = self._attempt(sha256, owner, clip_index, verify=verify, read=read)
            if lease is not None:
                return lease
            left = self._lease_left(sha256, deadline, wait_s, cancel, clip_index)
            with self._cond:
                self._cond.wait(left)

    def _lease_left(
        self,
        sha256: str,
        deadline: float,
        wait_s: float | None,
        cancel: CancelToken,
        clip_index: int | None,
    ) -> float:
        """The next poll's wait for a processing source.

        :raises SourceBusyError: past the deadline.
        """
        cancel.check(Checkpoint.ACQUISITION, clip_index)
        left = deadline - time.monotonic()
        if left <= 0:
            wait = self.wait_s if wait_s is None else wait_s
            raise SourceBusyError(
                sha256,
                clip_index=clip_index,
                detail=f"waited {wait:g} s for its processing to finish",
            )
        return min(left, _POLL_S)

    def _attempt(
        self, sha256: str, owner: str, clip_index: int | None, *, verify: bool, read: bool
    ) -> StoredLease | None:
        """One try at :meth:`lease`: ``None`` while the source is processing."""
        taken = self._take(sha256, owner, clip_index)
        if taken is None:
            return None
        lease = StoredLease(self, *taken, verify=verify)
        try:
            if read:
                lease.data  # noqa: B018 (read now: a lost blob is refused here)
            elif not self.blobs.exists(sha256, lease.nbytes):
                self.records.mark_lost(sha256)
                raise SourceLostError(sha256)
        except SourceLostError:
            lease.release()
            raise SourceLostError(sha256, clip_index=clip_index) from None
        except BaseException:
            lease.release()
            raise
        return lease

    def _take(
        self, sha256: str, owner: str, clip_index: int | None
    ) -> tuple[SourceRecord, str] | None:
        """Lease the record ``owner`` sees if it is ready (``None``: still processing).

        :raises SourceError: missing or not accessible, retired, or lost.
        """
        if not isinstance(sha256, str) or not sha256:
            raise SourceNotFoundError(repr(sha256), clip_index=clip_index)
        record, retiring = self._visible(sha256, owner, marks=False)
        if record is None:
            raise SourceNotFoundError(sha256, clip_index=clip_index)
        if record.status == "retired" or retiring:
            raise SourceRetiredError(sha256, clip_index=clip_index)
        if record.status == "lost":
            raise SourceLostError(sha256, clip_index=clip_index)
        if record.status != "ready":
            return None
        lease_id = self.leases_backend.take(sha256, record.owner, self.holder, self.lease_ttl_s)
        if lease_id is None:  # a retirement began since the look-up
            raise SourceRetiredError(sha256, clip_index=clip_index)
        # A retirement may also have begun and ended since the look-up: the lease holds
        # only a record still ready.
        now = self._own(sha256, record.owner)
        if now is None or now.status != "ready":
            self._release(lease_id)
            lost = now is not None and now.status == "lost"
            error = SourceLostError if lost else SourceRetiredError
            raise error(sha256, clip_index=clip_index)
        return now, lease_id

    def _read_blob(self, record: SourceRecord, *, verify: bool) -> bytes:
        """The bytes of ``record``, their size checked (and digest with ``verify``).

        :raises SourceLostError: gone or damaged (the source is marked lost).
        """
        sha256 = record.sha256
        data = self.blobs.read(sha256, record.nbytes)
        if data is not None and verify and hashlib.sha256(data).hexdigest() != sha256:
            data = None
        if data is None:
            self.records.mark_lost(sha256)
            raise SourceLostError(sha256)
        return data

    def read(self, sha256: str, *, owner: str) -> bytes:
        """The bytes of a source ``owner`` may reference (a lease taken and released)."""
        lease = self.lease(sha256, owner=owner, wait_s=0.0)
        lease.release()
        return lease.data

    def leases(self, sha256: str, *, owner: str) -> int:
        """How many unexpired leases (of every process) ``owner``'s record of ``sha256``
        has; releases handed to the executor are waited for first."""
        self._flush()
        return self.leases_backend.held(sha256, owner)

    def _flush(self) -> None:
        """Wait for the writes this process handed to the executor (a release, a lost
        mark), so a caller reads them; not in the executor's threads."""
        if getattr(_executor_thread, "store", False):
            return
        with self._pending_lock:
            pending = list(self._pending)
        if pending:
            concurrent.futures.wait(pending)

    def _release(self, lease_id: str) -> None:
        self._write_soon(self.leases_backend.release, lease_id)

    def _write_soon(self, write: Callable[[str], object], key: str) -> None:
        """``write(key)`` now, or in the executor where called on an event loop."""
        if not _on_loop():
            write(key)
            self._wake()
            return

        def later() -> None:
            write(key)
            self._wake()

        try:
            job = self._executor.submit(later)
        except RuntimeError:  # the store is closed, its backends with it: nothing to end
            return
        with self._pending_lock:
            self._pending.add(job)
        job.add_done_callback(self._settled)

    def _settled(self, job: concurrent.futures.Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(job)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
            listening = list(self._listening)
        for loop, event in listening:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(event.set)

    def _listen(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        """An event the next write of this process sets (listen before reading, so a
        write between the read and the wait is not missed)."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._cond:
            self._listening.add(entry)
        return entry

    def _unlisten(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._cond:
            self._listening.discard(entry)

    # --- from an event loop ----------------------------------------------------------

    async def _call(self, work: Callable[[], _T], orphan: Callable[[_T], None] | None = None) -> _T:
        """``work()`` in the store's executor. A task cancelled meanwhile leaves it to
        finish; ``orphan`` then gets what it returns (a lease to release)."""
        job = self._executor.submit(work)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if orphan is not None:
                job.add_done_callback(
                    lambda done: (
                        None
                        if done.cancelled() or done.exception() is not None
                        else orphan(done.result())
                    )
                )
            raise

    async def lease_async(
        self,
        sha256: str,
        *,
        owner: str,
        cancel: CancelToken = NEVER,
        wait_s: float | None = None,
        clip_index: int | None = None,
        verify: bool = True,
        read: bool = True,
    ) -> StoredLease:
        """:meth:`lease` from an event loop: each try runs in the store's executor, the
        wait for a processing source sleeps on the loop (holding no thread)."""
        deadline = time.monotonic() + (self.wait_s if wait_s is None else wait_s)
        while True:
            lease = await self._call(
                lambda: self._attempt(sha256, owner, clip_index, verify=verify, read=read),
                lambda taken: taken.release() if taken is not None else None,
            )
            if lease is not None:
                return lease
            await asyncio.sleep(self._lease_left(sha256, deadline, wait_s, cancel, clip_index))

    async def retire_async(
        self,
        sha256: str,
        *,
        owner: str,
        timeout_s: float | None = None,
        cancel: CancelToken = NEVER,
    ) -> SourceRecord:
        """:meth:`retire` from an event loop: the backend calls run in the store's
        executor, the wait for the leases sleeps on the loop."""
        done = await self._call(lambda: self._begin_retire(sha256, owner))
        if done is not None:
            return done
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            poll = _POLL_S
            while True:
                # Woken at once by a release in this process; other processes' releases
                # are polled, less often the longer the wait (100 waiting retirements
                # poll a few times a second each, not twenty).
                entry = self._listen()
                try:
                    held = await self._call(lambda: self.leases_backend.held(sha256, owner))
                    if not held:
                        break
                    wait = self._retire_left(sha256, held, timeout_s, deadline, cancel, poll)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(entry[1].wait(), wait)
                finally:
                    self._unlisten(entry)
                poll = min(poll * 2, _MAX_RETIRE_POLL_S)
            return await self._call(lambda: self._finish_retire(sha256, owner))
        finally:
            # Shielded: a cancelled retirement still removes its mark.
            await asyncio.shield(self._call(lambda: self._end_retire(sha256, owner)))

    async def run_async(self, work: Callable[[], _T]) -> _T:
        """``work()`` (store calls that may wait: an upload's admission and writes) in the
        store's executor, never a thread the event loop's other work shares."""
        return await self._call(work)

    async def get_async(self, sha256: str, *, owner: str) -> SourceRecord:
        """:meth:`get` in the store's executor."""
        return await self._call(lambda: self.get(sha256, owner=owner))

    async def list_async(
        self, owner: str, *, include_retired: bool = False
    ) -> builtins.list[SourceRecord]:
        """:meth:`list` in the store's executor."""
        return await self._call(lambda: self.list(owner, include_retired=include_retired))

    async def mark_ready_async(self, sha256: str, *, owner: str) -> SourceRecord | None:
        """:meth:`mark_ready` in the store's executor."""
        return await self._call(lambda: self.mark_ready(sha256, owner=owner))

    # --- the feature cache's persistence ---------------------------------------------

    def keeps_features(self, sha256: str) -> bool:
        """Whether :meth:`put_features` would keep an entry of ``sha256``: a live source
        (any owner's) is stored under it. The feature cache asks before encoding a clip,
        so inline audio's features are never written (a look-up that never waits for a
        writer)."""
        return self.records.live(check_digest(sha256))

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        """Persist a feature-cache entry of source ``sha256`` (kept while the source is
        live; removed with its blob; nothing written for a digest no live source has).
        ``key`` is the cache's own key text (policy fingerprint and family version)."""
        if not self.keeps_features(sha256):
            return
        handle = self.blobs.stage(sha256, blob)
        try:
            # Published under the records' lock: a retirement removes the blob's features
            # under it, so none is left behind a retired source.
            self.records.locked(
                sha256, lambda live: self.blobs.publish(handle, sha256, key) if live else None
            )
        finally:
            self.blobs.discard(handle)

    def get_features(self, sha256: str, key: str) -> bytes | None:
        """A persisted feature-cache entry, or ``None``."""
        return self.blobs.read_features(check_digest(sha256), key)

    # --- opening and closing ---------------------------------------------------------

    def _recover(self, *, verify: bool) -> RecoveryReport:
        """Repair what a crash (of any process sharing the backends) or a damaged index
        left: staged writes, records left processing, blobs no live record names (their
        records rebuilt from their manifest, else the blob quarantined, never deleted),
        and live records whose blob is gone or damaged (lost)."""
        unfinished = self.blobs.recover()
        resumed = self.records.resume()
        live_digests = {sha256 for sha256, _ in self.records.live_blobs()}
        rebuilt = quarantined = orphans = 0
        for sha256 in sorted(set(self.blobs.digests()) - live_digests):
            outcome = self._account_for(sha256)
            rebuilt += self._rebuild(sha256) if outcome == "rebuild" else 0
            quarantined += outcome == "quarantined"
            orphans += outcome == "removed"
        live = self.records.live_blobs()
        lost = 0
        for sha256, nbytes in live:
            good = self.blobs.exists(sha256, nbytes)
            if good and verify:
                good = self._blob_good(sha256, nbytes)
            if not good:
                lost += self.records.mark_lost(sha256)
        if unfinished or orphans or lost or resumed or rebuilt or quarantined:
            self.records.note(
                "recover",
                f"unfinished={unfinished} orphans={orphans} lost={lost} "
                f"rebuilt={rebuilt} quarantined={quarantined}",
            )
        report = RecoveryReport(
            unfinished_removed=unfinished,
            orphans_removed=orphans,
            lost=lost,
            resumed=resumed,
            checked=len(live),
            verified=verify,
            retired_kept=self.records.retired_count(),
            rebuilt=rebuilt,
            quarantined=quarantined,
        )
        repaired = unfinished or orphans or lost or rebuilt or quarantined
        _log.log(
            logging.WARNING if repaired else logging.INFO,
            "source store recovered: %s",
            " ".join(f"{name}={value}" for name, value in report.as_dict().items()),
        )
        return report

    def _account_for(self, sha256: str) -> str:
        """What recovery does with a digest held by the blobs that no live record names:
        ``"rebuild"`` (its manifest's records, the blob's digest checked), ``"removed"``
        (retired since its manifest was written, or entries without a blob),
        ``"quarantined"`` (a blob nothing accounts for), ``"kept"`` (nothing there)."""
        if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
            return "quarantined" if self.blobs.quarantine(sha256) else "kept"
        named = manifest_records(sha256, self.blobs.read_features(sha256, MANIFEST_KEY))
        if named is None:
            return "quarantined" if self.blobs.quarantine(sha256) else "removed"
        current = {r.owner: r for r in self.records.current(sha256)}
        # Only the uploads the index does not know of (it lost them) are rebuilt: one it
        # knows is as the index says (retired, or lost until the bytes come again).
        pending = [
            r
            for r in named
            if (held := current.get(r.owner)) is None or held.created_at < r.created_at
        ]
        if not pending:
            if all(r.status == "retired" for r in current.values()):
                # Every owner retired it: a crash before the blob was removed.
                return "removed" if self._drop_if_unused(sha256) else "kept"
            return "kept"  # a lost record's bytes stay; uploading them again revives it
        if not self._blob_good(sha256, pending[0].nbytes):
            if self.blobs.quarantine(sha256):
                return "quarantined"
            return "removed"
        return "rebuild"

    def _rebuild(self, sha256: str) -> int:
        """Commit the records of ``sha256``'s manifest the index does not know of (see
        :meth:`_account_for`, which checked its blob); returns how many."""
        named = manifest_records(sha256, self.blobs.read_features(sha256, MANIFEST_KEY)) or []
        current = {r.owner: r for r in self.records.current(sha256)}
        unlimited = StoreQuotas()
        count = 0
        for record in named:
            held = current.get(record.owner)
            if held is None or held.created_at < record.created_at:
                count += self.records.insert(record, unlimited, lambda: None)[1]
        return count

    def close(self) -> None:
        """Finish the writes handed to the executor, then close the backends."""
        self._executor.shutdown(wait=True)
        self.leases_backend.close()
        self.blobs.close()
        self.records.close()
