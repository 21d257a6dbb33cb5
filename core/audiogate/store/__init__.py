"""The source store: upload audio once, reference it by digest (docs/sources.md).

:class:`SourceStore` keeps sources named by the SHA-256 of their bytes, with an owner, a
scope (``private`` or ``shared``) and a lifecycle (``processing`` → ``ready`` →
``retired``; ``lost`` when recovery finds the bytes gone), over three backends
(:mod:`audiogate.store.backend`): records, blobs and leases, each replaceable alone. The
embedded ones (:meth:`SourceStore.open`) are a directory of content-addressed blobs
(:mod:`audiogate.store.directory`) with SQLite records, journal and leases
(:mod:`audiogate.store.sqlite`), crash-safe and recovered on open;
:mod:`audiogate.store.memory` keeps all three in memory.
:func:`~audiogate.store.admission.admit_source` admits an upload as inline audio is
admitted (imported on first use: it drives the pipeline's stages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audiogate.store.backend import BlobBackend, LeaseBackend, RecordBackend
from audiogate.store.damage import StoreDamagedError, StoreWriteError
from audiogate.store.source_record import (
    DIGEST_RE,
    SCOPES,
    STATUSES,
    RecoveryReport,
    Scope,
    SourceRecord,
    SourceStatus,
    StoreQuotas,
    check_digest,
)
from audiogate.store.store import (
    ANONYMOUS_OWNER,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_SOURCE_WAIT_S,
    DEFAULT_STORE_THREADS,
    AddedSource,
    SourceStore,
    StoredLease,
)

if TYPE_CHECKING:
    from audiogate.store.admission import AdmittedSource, admit_source

__all__ = [
    "ANONYMOUS_OWNER",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_SOURCE_WAIT_S",
    "DEFAULT_STORE_THREADS",
    "DIGEST_RE",
    "SCOPES",
    "STATUSES",
    "AddedSource",
    "AdmittedSource",
    "BlobBackend",
    "LeaseBackend",
    "RecordBackend",
    "RecoveryReport",
    "Scope",
    "SourceRecord",
    "SourceStatus",
    "SourceStore",
    "StoreDamagedError",
    "StoreQuotas",
    "StoreWriteError",
    "StoredLease",
    "admit_source",
    "check_digest",
]


def __getattr__(name: str) -> Any:
    # Admission imports the pipeline's stages: only for the callers that admit uploads.
    if name in {"AdmittedSource", "admit_source"}:
        from audiogate.store import admission

        return getattr(admission, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
