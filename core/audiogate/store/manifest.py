"""A blob's manifest: the records of the owners that hold it, kept beside the blob so a
damaged or lost index can be rebuilt from what the blobs directory still holds.

The manifest is one entry of the blob backend under :data:`MANIFEST_KEY` (with the
source's feature entries, removed with its blob): the 32-byte SHA-256 of the body, then
a UTF-8 JSON body (a list of records). A manifest that does not check out is ``None``,
never an error: its blob is then quarantined, not trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any, Final

from audiogate.store.source_record import (
    SCOPES,
    SourceRecord,
    check_digest,
    header_from_text,
    header_text,
)

__all__ = ["MANIFEST_KEY", "manifest_blob", "manifest_records"]

#: The manifest's key among a blob's entries (a feature cache key is a 64-digit hex
#: fingerprint, so the two never meet).
MANIFEST_KEY: Final = "audiogate.store.manifest.v1"
_DIGEST: Final = 32


def _fields(record: SourceRecord) -> dict[str, Any]:
    return {
        "owner": record.owner,
        "scope": record.scope,
        "bytes": record.nbytes,
        "duration_us": record.duration_us,
        "format": record.source_format,
        "created_at": record.created_at,
        "header": header_text(record.header),
    }


def manifest_blob(records: Sequence[SourceRecord]) -> bytes:
    """The manifest of ``records`` (all of one digest)."""
    if not records:
        raise ValueError("a manifest names at least one record")
    body = json.dumps(
        {"sha256": records[0].sha256, "records": [_fields(r) for r in records]},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return hashlib.sha256(body).digest() + body


def manifest_records(sha256: str, blob: bytes | None) -> list[SourceRecord] | None:
    """The records (status ``"ready"``) a manifest of ``sha256`` names; ``None``: none,
    or damaged."""
    try:
        return _parse(sha256, blob)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _parse(sha256: str, blob: bytes | None) -> list[SourceRecord] | None:
    if blob is None or len(blob) <= _DIGEST:
        return None
    body = blob[_DIGEST:]
    if hashlib.sha256(body).digest() != blob[:_DIGEST]:
        return None
    data = json.loads(body)
    if data["sha256"] != check_digest(sha256):
        return None
    records = []
    for item in data["records"]:
        owner, scope, created = item["owner"], item["scope"], item["created_at"]
        nbytes, duration = item["bytes"], item["duration_us"]
        header = item["header"]
        if not (isinstance(owner, str) and owner and scope in SCOPES):
            return None
        if not (type(nbytes) is int and nbytes >= 0 and type(duration) is int and duration >= 0):
            return None
        if not (isinstance(created, float | int) and math.isfinite(created)):
            return None
        if not (header is None or isinstance(header, str)):
            return None
        records.append(
            SourceRecord(
                sha256=sha256,
                owner=owner,
                scope=scope,
                status="ready",
                nbytes=nbytes,
                duration_us=duration,
                source_format=str(item["format"]),
                created_at=float(created),
                header=header_from_text(header),
            )
        )
    return records or None
