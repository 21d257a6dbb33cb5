"""``--engine ray``: the same per-row code as a Ray Data pipeline.

``read_text`` (JSON Lines) or ``read_parquet`` → ``map_batches`` with
:class:`RayRowPreparer`, a callable class whose actors each load the gate once →
``write_parquet`` into a staging folder of the output directory, whose files are then
renamed to ``part-NNNNN.parquet``. JSON Lines are read as text, one line per row, and
parsed by :func:`~audiogate.batch.rows.prepare_row`: Arrow's JSON reader would infer one
schema for every row and give each message part every field of it (``"audio_url":
null`` on a text part), which the strict message validation refuses.

Ray is the ``ray`` extra (``ray[data,serve]``), imported only here.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from audiogate.batch.manifest import Manifest, ref_key
from audiogate.batch.rows import GateSpec, policy_fingerprint, prepare_row
from audiogate.batch.shards import (
    BatchCounts,
    parquet_options,
    part_name,
    require_pyarrow,
    rows_table,
)
from audiogate.extras import require_module

__all__ = ["RayRowPreparer", "require_ray", "run_ray", "salvage_staging"]

STAGING_PREFIX = "_staging-"


def require_ray() -> Any:
    """The ``ray`` module, with Ray Data loaded.

    :raises MissingExtraError: Ray is not installed (names the ``ray`` extra).
    """
    require_module("ray.data", purpose="audiogate batch --engine ray (Ray Data)")
    return require_module("ray", purpose="audiogate batch --engine ray")


class RayRowPreparer:
    """The ``map_batches`` callable: one gate per actor, one output row per input row.

    :param spec: how to build the gate.
    :param done: resume keys (:func:`~audiogate.batch.rows.row_key`) of rows a previous
        run finished; they are skipped.
    :param text_column: the column holding JSON Lines text, or ``None`` for a Parquet
        manifest (each row is the dict of its columns).
    """

    def __init__(self, spec: GateSpec, done: frozenset[str], text_column: str | None) -> None:
        self.gate = spec.build()
        self.fingerprint = policy_fingerprint(self.gate.policy)
        self.done = done
        self.text_column = text_column

    def __call__(self, batch: Any) -> Any:
        raws: Iterable[Any]
        if self.text_column is not None:
            raws = batch.column(self.text_column).to_pylist()
        else:
            raws = batch.to_pylist()
        rows = [
            prepare_row(self.gate, raw, fingerprint=self.fingerprint)
            for raw in raws
            if not self.done or ref_key(_as_raw(raw)) not in self.done
        ]
        return rows_table(rows)


def _as_raw(raw: Any) -> Any:
    return raw.encode() if isinstance(raw, str) else raw


def salvage_staging(out_dir: Path, first_part: int) -> tuple[int, BatchCounts]:
    """Move the Parquet files of staging folders (a finished or crashed Ray run) into
    place as ``part-NNNNN.parquet`` from ``first_part`` on, dropping empty ones; returns
    the next free part number and the counts of the rows moved. A file cut short is
    moved too, uncounted: :func:`~audiogate.batch.shards.finished_shards` then removes
    it, and its rows run again."""
    pq = require_pyarrow().parquet
    number = first_part
    counts = BatchCounts()
    for staging in sorted(out_dir.glob(f"{STAGING_PREFIX}*")):
        if not staging.is_dir():
            continue
        for path in sorted(staging.rglob("*.parquet")):
            try:
                table = pq.read_table(str(path), columns=["status", "error_code"])
            except (OSError, ValueError):
                table = None
            if table is not None and table.num_rows == 0:
                path.unlink()
                continue
            os.replace(path, out_dir / part_name(number))
            number += 1
            if table is not None:
                for status, code in zip(
                    table.column("status").to_pylist(),
                    table.column("error_code").to_pylist(),
                    strict=True,
                ):
                    counts.add_row(status, code)
        for leftover in sorted(staging.rglob("*"), reverse=True):
            if leftover.is_dir():
                leftover.rmdir()
            else:
                leftover.unlink()
        staging.rmdir()
    return number, counts


def run_ray(
    spec: GateSpec,
    manifest: Manifest,
    out_dir: Path,
    done: frozenset[str],
    *,
    workers: int,
    batch_rows: int,
    address: str | None,
    first_part: int,
    progress_bars: bool,
    on_shard: Callable[[BatchCounts], None],
) -> BatchCounts:
    """Run the pipeline on ``address`` (``None``: ``ray.init()``'s local cluster) with
    ``workers`` actors; returns the counts of the rows it wrote."""
    ray = require_ray()
    DataContext = ray.data.DataContext

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    try:
        context = DataContext.get_current()
        # Ray Data's bars on a terminal (ours counts rows only once the files are in).
        context.enable_progress_bars = progress_bars
        # Reading and writing take no CPU slot: the actors hold one each, and on a
        # machine with as many cores as actors a read task waiting for a slot would
        # wait forever.
        # One block per batch: Ray Data's default of a few large blocks per file keeps
        # the writers idle until a whole block is prepared and balances badly.
        blocks = max(1, -(-len(manifest.refs) // batch_rows))
        if manifest.kind == "parquet":
            dataset = ray.data.read_parquet(
                str(manifest.path), num_cpus=0, override_num_blocks=blocks
            )
            text_column = None
        else:
            dataset = ray.data.read_text(str(manifest.path), num_cpus=0, override_num_blocks=blocks)
            text_column = "text"
        prepared = dataset.map_batches(
            RayRowPreparer,
            fn_constructor_kwargs={
                "spec": spec.for_workers(1),  # an actor reserves one CPU
                "done": done,
                "text_column": text_column,
            },
            batch_size=batch_rows,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=1,
        )
        staging = out_dir / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}"
        prepared.write_parquet(
            str(staging),
            min_rows_per_file=batch_rows,
            ray_remote_args={"num_cpus": 0},
            # Without a cap, tasks that hold no CPU start as many worker processes as
            # there are blocks ready, and their start-up starves the actors.
            concurrency=workers,
            **parquet_options(),
        )
    finally:
        if started:
            ray.shutdown()
    _, counts = salvage_staging(out_dir, first_part)
    on_shard(counts)
    return counts
