"""The output directory: Parquet shards ``part-NNNNN.parquet``, written under a temporary
name and renamed when complete, the rows a resumed run skips, and ``_SUCCESS.json``.

pyarrow is the ``batch`` extra: imported here only, when a batch runs.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from audiogate.batch.rows import row_key
from audiogate.errors import MissingExtraError
from audiogate.extras import require_module

__all__ = [
    "SUCCESS_FILE",
    "BatchCounts",
    "ExtraMissingError",
    "ShardWriter",
    "finished_shards",
    "next_part_number",
    "output_schema",
    "parquet_options",
    "part_name",
    "require_pyarrow",
    "rows_table",
    "write_success",
]

SUCCESS_FILE: Final = "_SUCCESS.json"
_PART: Final = re.compile(r"^part-(\d{5,})\.parquet$")
#: Rows per Parquet row group: what a writer holds in memory before flushing.
ROW_GROUP_ROWS: Final = 16


#: The batch engine's name for :class:`~audiogate.errors.MissingExtraError` (the same class).
ExtraMissingError = MissingExtraError


def require_pyarrow() -> Any:
    """The ``pyarrow`` module (with ``pyarrow.parquet`` loaded).

    :raises MissingExtraError: pyarrow is not installed (names the ``batch`` extra).
    """
    require_module("pyarrow.parquet", purpose="audiogate batch (Parquet manifests and shards)")
    return require_module("pyarrow", purpose="audiogate batch")


def output_schema() -> Any:
    """The Arrow schema of every shard (``docs/datasets.md`` describes each column)."""
    pa = require_pyarrow()
    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("status", pa.string(), nullable=False),
            pa.field("error_code", pa.string()),
            pa.field("error", pa.string()),
            pa.field("input_ids", pa.list_(pa.int64())),
            pa.field("tokens", pa.list_(pa.int32())),
            pa.field("frames", pa.list_(pa.int32())),
            pa.field("family", pa.string()),
            pa.field("policy_fingerprint", pa.string()),
            # One .npy file per clip: features vary in frame count per clip, so no
            # fixed-shape tensor column can hold them (docs/datasets.md).
            pa.field("features", pa.list_(pa.binary())),
            pa.field("masks", pa.list_(pa.binary())),
            pa.field("row_sha256", pa.string()),
        ]
    )


#: Columns stored without compression, dictionary or statistics: the ``.npy`` bytes of
#: float32 log-mel features do not compress (snappy saved 0.02 % and doubled the write
#: time), and min/max statistics of binary blobs serve no reader.
RAW_COLUMNS: Final = ("features", "masks")


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """``rows`` (from :func:`~audiogate.batch.rows.prepare_row`) as an Arrow table."""
    pa = require_pyarrow()
    schema = output_schema()
    columns = {name: [row[name] for row in rows] for name in schema.names}
    arrays = [
        _blob_lists(pa, columns[f.name], f.type)
        if f.name in RAW_COLUMNS
        else pa.array(columns[f.name], type=f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _blob_lists(pa: Any, lists: Sequence[Sequence[bytes | None]], type_: Any) -> Any:
    # pa.array converts a list of lists of large bytes objects item by item (about six
    # times slower than one flat binary array and its offsets).
    offsets = [0]
    for items in lists:
        offsets.append(offsets[-1] + len(items))
    flat = pa.array([item for items in lists for item in items], type=type_.value_type)
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), flat, type=type_)


def parquet_options() -> dict[str, Any]:
    """The ``pyarrow.parquet`` writer options of every shard (both engines): snappy,
    dictionaries and statistics for the small columns, none of them for
    :data:`RAW_COLUMNS`. Options name Parquet's leaf columns (``input_ids.list.element``)."""
    pa = require_pyarrow()

    def leaf(field: Any) -> str:
        return f"{field.name}.list.element" if pa.types.is_list(field.type) else field.name

    fields = list(output_schema())
    small = [leaf(f) for f in fields if f.name not in RAW_COLUMNS]
    return {
        "compression": {leaf(f): "none" if f.name in RAW_COLUMNS else "snappy" for f in fields},
        "use_dictionary": small,
        "write_statistics": small,
    }


def part_name(number: int) -> str:
    """``part-00007.parquet``."""
    return f"part-{number:05d}.parquet"


class ShardWriter:
    """Writes one shard to a temporary name beside it, in row groups of
    :data:`ROW_GROUP_ROWS`, and renames it into place on :meth:`commit`: a shard that
    exists is complete, and a crash leaves only a temporary file."""

    def __init__(self, out_dir: Path, number: int) -> None:
        pq = require_pyarrow().parquet
        self.path = out_dir / part_name(number)
        self.partial = out_dir / f".{self.path.name}.{os.getpid()}.partial"
        self._writer = pq.ParquetWriter(str(self.partial), output_schema(), **parquet_options())
        self._pending: list[Mapping[str, Any]] = []

    def write(self, row: Mapping[str, Any]) -> None:
        """Add one output row (flushed every :data:`ROW_GROUP_ROWS` rows)."""
        self._pending.append(row)
        if len(self._pending) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(rows_table(self._pending))
            self._pending = []

    def commit(self) -> Path:
        """Close the file and rename it to its final name."""
        self._flush()
        self._writer.close()
        os.replace(self.partial, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the temporary file."""
        try:
            self._writer.close()
        finally:
            self.partial.unlink(missing_ok=True)


@attrs.define
class BatchCounts:
    """Rows, successes and errors by code (summed over shards)."""

    rows: int = 0
    ok: int = 0
    errors: Counter[str] = attrs.field(factory=Counter)

    def add_row(self, status: str, code: str | None) -> None:
        """Count one output row."""
        self.rows += 1
        if status == "ok":
            self.ok += 1
        else:
            self.errors[code or "unknown"] += 1

    def merge(self, other: BatchCounts) -> None:
        """Add ``other``'s counts."""
        self.rows += other.rows
        self.ok += other.ok
        self.errors.update(other.errors)


def _shard_rows(path: Path) -> Iterable[tuple[str | None, str, str, str | None]]:
    """``(id, row_sha256, status, error_code)`` of each row of a complete shard."""
    pq = require_pyarrow().parquet
    table = pq.read_table(str(path), columns=["id", "row_sha256", "status", "error_code"])
    columns = [table.column(name).to_pylist() for name in table.column_names]
    return zip(*columns, strict=True)


def finished_shards(out_dir: Path) -> tuple[set[str], BatchCounts, int]:
    """What earlier runs finished in ``out_dir``: the row keys (:func:`row_key`), their
    counts and the number of shards. A shard whose Parquet footer cannot be read (a
    file written in place by another tool and cut short) is removed, so its rows run
    again; temporary files of a crashed run are removed too."""
    done: set[str] = set()
    counts = BatchCounts()
    shards = 0
    if not out_dir.is_dir():
        return done, counts, shards
    for path in sorted(out_dir.iterdir()):
        if path.name.startswith(".part-") and path.name.endswith(".partial"):
            path.unlink(missing_ok=True)
            continue
        if not _PART.match(path.name):
            continue
        try:
            rows = list(_shard_rows(path))
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            if (
                "footer" in str(exc).lower()
                or "parquet magic" in str(exc).lower()
                or (path.stat().st_size == 0)
            ):
                path.unlink(missing_ok=True)
                continue
            raise
        shards += 1
        for row_id, digest, status, code in rows:
            done.add(row_key(row_id, digest))
            counts.add_row(status, code)
    return done, counts, shards


def next_part_number(out_dir: Path) -> int:
    """One more than the highest ``part-NNNNN`` in ``out_dir`` (0 for none)."""
    numbers = [int(m.group(1)) for p in out_dir.iterdir() if (m := _PART.match(p.name))]
    return max(numbers, default=-1) + 1


def write_success(out_dir: Path, payload: Mapping[str, Any]) -> Path:
    """``_SUCCESS.json`` (written under a temporary name, then renamed)."""
    path = out_dir / SUCCESS_FILE
    partial = out_dir / f".{SUCCESS_FILE}.partial"
    partial.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
    return path
