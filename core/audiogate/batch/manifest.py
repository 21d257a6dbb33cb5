"""Reading the manifest: JSON Lines (one object per line) or Parquet.

The driver scans it once for the rows' places (a line's byte offset and length, a
Parquet row's index); each process reads only the rows of its own shards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from audiogate.batch.rows import row_digest, row_key

__all__ = ["Manifest", "RowRef", "manifest_kind", "read_rows", "ref_key", "scan_manifest"]

ManifestKind = Literal["jsonl", "parquet"]
#: The bytes read at a time while scanning JSON Lines.
_CHUNK: Final = 1 << 20


@attrs.frozen
class RowRef:
    """Where one row is: a line's ``(offset, length)`` in bytes, or a Parquet row index
    (``length`` -1)."""

    offset: int
    length: int


@attrs.frozen
class Manifest:
    """A scanned manifest: its path, kind and each (non-blank) row's place."""

    path: Path
    kind: ManifestKind
    refs: tuple[RowRef, ...]


def manifest_kind(path: Path) -> ManifestKind:
    """``parquet`` for a ``.parquet`` / ``.pq`` file, else JSON Lines."""
    return "parquet" if path.suffix.lower() in {".parquet", ".pq"} else "jsonl"


def scan_manifest(path: str | Path) -> Manifest:
    """Every row's place in the manifest (blank lines are skipped).

    :raises OSError: the manifest cannot be read.
    """
    path = Path(path)
    kind = manifest_kind(path)
    if kind == "parquet":
        from audiogate.batch.shards import require_pyarrow

        pq = require_pyarrow().parquet
        count = pq.ParquetFile(str(path)).metadata.num_rows
        return Manifest(path, kind, tuple(RowRef(i, -1) for i in range(count)))
    refs: list[RowRef] = []
    with path.open("rb") as file:
        offset = 0
        carry = b""
        while chunk := file.read(_CHUNK):
            data = carry + chunk
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                line = data[start:end]
                if line.strip():
                    # Without a CR of a CRLF ending, as line readers (Ray's) give it.
                    refs.append(RowRef(offset + start, len(line.removesuffix(b"\r"))))
                start = end + 1
            offset += start
            carry = data[start:]
        if carry.strip():
            refs.append(RowRef(offset, len(carry)))
    return Manifest(path, kind, tuple(refs))


def read_rows(manifest: Manifest, refs: Sequence[RowRef]) -> Iterator[bytes | dict[str, Any]]:
    """The rows at ``refs``: a line's bytes, or a Parquet row as a dict."""
    if manifest.kind == "parquet":
        from audiogate.batch.shards import require_pyarrow

        pq = require_pyarrow().parquet
        table = pq.read_table(str(manifest.path), memory_map=True)
        for ref in refs:
            yield table.slice(ref.offset, 1).to_pylist()[0]
        return
    with manifest.path.open("rb") as file:
        for ref in refs:
            file.seek(ref.offset)
            yield file.read(ref.length)


def ref_key(raw: bytes | dict[str, Any]) -> str:
    """The resume key of a raw row (:func:`~audiogate.batch.rows.row_key`), as the
    output row will have it."""
    try:
        value = raw if isinstance(raw, dict) else json.loads(raw)
        row_id = value.get("id") if isinstance(value, dict) else None
    except ValueError:
        row_id = None
    if isinstance(row_id, bool) or not isinstance(row_id, str | int) or row_id == "":
        row_id = None
    return row_key(None if row_id is None else str(row_id), row_digest(raw))
