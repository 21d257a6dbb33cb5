"""``SourceStore``: uploaded sources named by digest, with owners, scopes, a lifecycle
and leases (docs/sources.md).

The store is the backend's durable state plus what lives in this process: the leases
in-flight requests hold and the retirements waiting for them. Ownership is checked
here: a reference to another owner's private source is refused exactly like one to a
source that does not exist (:class:`~audiogate.errors.SourceNotFoundError`, same code,
same message), so a digest never tells a caller whether someone else holds it.
"""

from __future__ import annotations

import collections
import hashlib
import os
import threading
import time
from typing import Final

import attrs

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.geometry import WAV, ClipGeometry, SourceFormat
from audiogate.errors import (
    SourceBusyError,
    SourceLostError,
    SourceNotFoundError,
    SourceRetiredError,
)
from audiogate.store.backend import SourceBackend
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

__all__ = ["ANONYMOUS_OWNER", "DEFAULT_SOURCE_WAIT_S", "AddedSource", "SourceStore", "StoredLease"]

#: The owner of every request where no owners are configured (no ``--auth-tokens``).
ANONYMOUS_OWNER: Final = "anonymous"
#: How long a prompt waits for a source that is still processing.
DEFAULT_SOURCE_WAIT_S: Final = 30.0
# How often a wait re-reads the index (another process may have moved the source on).
_POLL_S: Final = 0.05

_Key = tuple[str, str]  # (sha256, the record's owner)


@attrs.frozen(kw_only=True)
class AddedSource:
    """The result of :meth:`SourceStore.add`: the record, and whether it is new (``False``:
    the same owner had already uploaded these bytes; that record is returned)."""

    record: SourceRecord
    created: bool


class StoredLease:
    """A leased source: its format, the header recorded at upload and its bytes (read when
    first asked for, unless the lease read them), held until :meth:`release` (idempotent)."""

    __slots__ = ("_data", "_released", "_store", "_verify", "key", "record")

    def __init__(self, store: SourceStore, record: SourceRecord, *, verify: bool) -> None:
        self._store = store
        self.record = record
        self.key: _Key = (record.sha256, record.owner)
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
        with ``verify``).

        :raises SourceLostError: they are gone or damaged (the source is marked lost).
        """
        if self._data is None:
            sha256 = self.record.sha256
            data = self._store.backend.read(sha256, self.record.nbytes, verify=self._verify)
            if data is None:
                self._store.backend.mark_lost(sha256)
                raise SourceLostError(sha256)
            self._data = data
        return self._data

    def release(self) -> None:
        """Let go of the source; a retirement waiting for it may complete."""
        if not self._released:
            self._released = True
            self._store._release(self.key)


class SourceStore:
    """Sources by digest, over a :class:`~audiogate.store.backend.SourceBackend`.

    :param backend: where blobs and records live (:meth:`open` makes the embedded one).
    :param quotas: what each owner, and the store, may hold.
    :param wait_s: how long a reference to a processing source waits by default.
    """

    def __init__(
        self,
        backend: SourceBackend,
        *,
        quotas: StoreQuotas | None = None,
        wait_s: float = DEFAULT_SOURCE_WAIT_S,
    ) -> None:
        self.backend = backend
        self.quotas = quotas or StoreQuotas()
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._leases: collections.Counter[_Key] = collections.Counter()
        self._retiring: set[_Key] = set()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        verify: bool = False,
        quotas: StoreQuotas | None = None,
        wait_s: float = DEFAULT_SOURCE_WAIT_S,
    ) -> SourceStore:
        """The embedded store in directory ``path`` (created if absent), recovered
        (:attr:`recovery` says what was repaired).

        :param verify: recompute every blob's digest while recovering.
        """
        from audiogate.store.directory import DirectoryBackend

        return cls(DirectoryBackend(path, verify=verify), quotas=quotas, wait_s=wait_s)

    @property
    def recovery(self) -> RecoveryReport:
        """What opening the backend found and repaired."""
        return self.backend.report

    # --- writing ---------------------------------------------------------------------

    def add(
        self,
        data: bytes,
        *,
        owner: str,
        duration_us: int,
        scope: Scope = "private",
        source_format: SourceFormat = WAV,
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
        :raises ValueError: an empty owner, an unknown scope or status.
        """
        if not owner:
            raise ValueError("a source needs a non-empty owner")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {list(SCOPES)}, not {scope!r}")
        if status not in ("processing", "ready"):
            raise ValueError(f"a new source is 'processing' or 'ready', not {status!r}")
        record = SourceRecord(
            sha256=hashlib.sha256(data).hexdigest(),
            owner=owner,
            scope=scope,
            status=status,
            nbytes=len(data),
            duration_us=duration_us,
            source_format=format_text(source_format),
            created_at=time.time(),
            header=header_from_text(header_text(header)),
        )
        stored, created = self.backend.insert(bytes(data), record, self.quotas)
        return AddedSource(record=stored, created=created)

    def mark_ready(self, sha256: str, *, owner: str) -> SourceRecord | None:
        """End ``owner``'s source's processing: references waiting for it go on."""
        record = self.backend.set_status(check_digest(sha256), owner, "ready")
        with self._cond:
            self._cond.notify_all()
        return record

    def retire(
        self,
        sha256: str,
        *,
        owner: str,
        timeout_s: float | None = None,
        cancel: CancelToken = NEVER,
    ) -> SourceRecord:
        """Retire ``owner``'s source: new references are refused at once; the call
        completes when the requests holding a lease on it have released it, then its
        record becomes history and its blob is removed unless another owner's record
        names the same bytes.

        :param timeout_s: the longest wait for the leases (``None``: no limit).
        :raises SourceNotFoundError: ``owner`` has no such source (another owner's source,
            shared or not, cannot be retired by ``owner``).
        :raises SourceBusyError: the leases were still held after ``timeout_s``.
        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        """
        check_digest(sha256)
        own = self._own(sha256, owner)
        if own is None:
            raise SourceNotFoundError(sha256)
        if own.status == "retired":
            return own
        key: _Key = (sha256, owner)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self._retiring.add(key)
            try:
                while self._leases[key]:
                    cancel.check(Checkpoint.ACQUISITION)
                    left = _POLL_S if deadline is None else deadline - time.monotonic()
                    if left <= 0:
                        raise SourceBusyError(
                            sha256,
                            detail=f"{self._leases[key]} request(s) still hold it after "
                            f"{timeout_s:g} s; it is not retired",
                        )
                    self._cond.wait(min(left, _POLL_S))
            except BaseException:
                self._retiring.discard(key)
                raise
        try:
            record = self.backend.retire(sha256, owner)
        finally:
            with self._cond:
                self._retiring.discard(key)
                self._cond.notify_all()
        if record is None:  # retired by another process meanwhile
            record = self._own(sha256, owner)
            assert record is not None
        return record

    # --- reading ---------------------------------------------------------------------

    def _own(self, sha256: str, owner: str) -> SourceRecord | None:
        return next((r for r in self.backend.current(sha256) if r.owner == owner), None)

    def _visible(self, sha256: str, owner: str) -> SourceRecord | None:
        """The record ``owner`` sees: its own live one, another's shared live one, its own
        lost or retired one, another's shared lost or retired one, or none."""
        records = self.backend.current(sha256)
        own = [r for r in records if r.owner == owner]
        shared = [r for r in records if r.owner != owner and r.scope == "shared"]
        for group in (own, shared):
            for record in group:
                if record.live and (sha256, record.owner) not in self._retiring:
                    return record
        return next(iter(own + shared), None)

    def get(self, sha256: str, *, owner: str) -> SourceRecord:
        """The record of ``sha256`` that ``owner`` sees (their own, in any status, or a
        shared one).

        :raises SourceNotFoundError: none (missing, or another owner's private source).
        """
        record = self._visible(check_digest(sha256), owner)
        if record is None:
            raise SourceNotFoundError(sha256)
        if (record.sha256, record.owner) in self._retiring:
            record = attrs.evolve(record, status="retired")
        return record

    def list(self, owner: str, *, include_retired: bool = False) -> list[SourceRecord]:
        """``owner``'s sources, oldest first (retired history only when asked)."""
        return self.backend.records(owner, include_retired=include_retired)

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
        wait = self.wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait
        while True:
            with self._cond:
                record = self._take(sha256, owner, clip_index)
                if record is not None:
                    break
                cancel.check(Checkpoint.ACQUISITION, clip_index)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SourceBusyError(
                        sha256,
                        clip_index=clip_index,
                        detail=f"waited {wait:g} s for its processing to finish",
                    )
                self._cond.wait(min(left, _POLL_S))
        lease = StoredLease(self, record, verify=verify)
        try:
            if read:
                lease.data  # noqa: B018 (read now: a lost blob is refused here)
            elif not self.backend.exists(sha256, record.nbytes):
                self.backend.mark_lost(sha256)
                raise SourceLostError(sha256)
        except SourceLostError:
            lease.release()
            raise SourceLostError(sha256, clip_index=clip_index) from None
        except BaseException:
            lease.release()
            raise
        return lease

    def try_lease(
        self, sha256: str, *, owner: str, clip_index: int | None = None
    ) -> StoredLease | None:
        """:meth:`lease` with ``verify=False, read=False`` where it neither waits nor
        writes, so an event loop may call it: ``None`` where :meth:`lease` would wait
        for a processing source or mark a lost one (call it then, off the loop). The
        look-up never waits for a writer; the blob's size is checked by ``stat``.

        :raises SourceNotFoundError: missing, or another owner's private source.
        :raises SourceRetiredError: retired, or being retired.
        :raises SourceLostError: already marked lost.
        """
        with self._cond:
            record = self._take(sha256, owner, clip_index)
        if record is None:
            return None
        lease = StoredLease(self, record, verify=False)
        if not self.backend.exists(sha256, record.nbytes):
            lease.release()
            return None
        return lease

    def _take(self, sha256: str, owner: str, clip_index: int | None) -> SourceRecord | None:
        """Count a lease on the record ``owner`` sees if it is ready (``None``: still
        processing); call with ``_cond`` held.

        :raises SourceError: missing or not accessible, retired, or lost.
        """
        if not isinstance(sha256, str) or not sha256:
            raise SourceNotFoundError(repr(sha256), clip_index=clip_index)
        record = self._visible(sha256, owner)
        if record is None:
            raise SourceNotFoundError(sha256, clip_index=clip_index)
        key: _Key = (sha256, record.owner)
        if record.status == "retired" or key in self._retiring:
            raise SourceRetiredError(sha256, clip_index=clip_index)
        if record.status == "lost":
            raise SourceLostError(sha256, clip_index=clip_index)
        if record.status != "ready":
            return None
        self._leases[key] += 1
        return record

    def read(self, sha256: str, *, owner: str) -> bytes:
        """The bytes of a source ``owner`` may reference (a lease taken and released)."""
        lease = self.lease(sha256, owner=owner, wait_s=0.0)
        lease.release()
        return lease.data

    def leases(self, sha256: str, *, owner: str) -> int:
        """How many leases requests hold on ``owner``'s record of ``sha256``."""
        with self._cond:
            return self._leases[(sha256, owner)]

    def _release(self, key: _Key) -> None:
        with self._cond:
            self._leases[key] -= 1
            if self._leases[key] <= 0:
                del self._leases[key]
            self._cond.notify_all()

    # --- the feature cache's persistence ---------------------------------------------

    def keeps_features(self, sha256: str) -> bool:
        """Whether :meth:`put_features` would keep an entry of ``sha256``: a live source
        (any owner's) is stored under it. The feature cache asks before encoding a clip,
        so inline audio's features are never written (a look-up that never waits for a
        writer)."""
        return any(record.live for record in self.backend.current(check_digest(sha256)))

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        """Persist a feature-cache entry of source ``sha256`` (kept while the source is
        live; removed with its blob; nothing written for a digest no live source has).
        ``key`` is the cache's own key text (policy fingerprint and family version)."""
        if self.keeps_features(sha256):
            self.backend.put_features(sha256, key, blob)

    def get_features(self, sha256: str, key: str) -> bytes | None:
        """A persisted feature-cache entry, or ``None``."""
        return self.backend.get_features(check_digest(sha256), key)

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()
