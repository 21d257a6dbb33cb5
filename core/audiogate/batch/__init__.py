"""Preparing datasets: ``audiogate batch`` (docs/datasets.md).

A manifest of rows (an ``id``, then chat ``messages`` or an ``audio`` path/URL with an
optional ``prompt``) becomes Parquet shards of token ids, per-clip features and masks,
on a local process pool or on Ray Data. Importing this package imports neither pyarrow
(the ``batch`` extra) nor Ray (the ``ray`` extra).
"""

from __future__ import annotations

from audiogate.batch.rows import (
    BadRowError,
    GateSpec,
    error_code,
    npy_bytes,
    policy_fingerprint,
    prepare_row,
)
from audiogate.batch.run import BatchOptions, BatchProgress, run_batch
from audiogate.batch.shards import SUCCESS_FILE, ExtraMissingError, output_schema

__all__ = [
    "SUCCESS_FILE",
    "BadRowError",
    "BatchOptions",
    "BatchProgress",
    "ExtraMissingError",
    "GateSpec",
    "error_code",
    "npy_bytes",
    "output_schema",
    "policy_fingerprint",
    "prepare_row",
    "run_batch",
]
