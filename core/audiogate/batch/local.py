"""``--engine local``: a process pool over this machine's cores.

Each process builds one gate (its policy's per-request budgets bound what a row holds)
and writes whole shards: the driver assigns each shard (a list of row places) to a
process, which prepares its rows one at a time and writes them in row groups of
:data:`~audiogate.batch.shards.ROW_GROUP_ROWS` under a temporary name, renamed when the
shard is complete. Memory stays bounded by the processes, not by the manifest.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from audiogate.batch.manifest import Manifest, RowRef, read_rows
from audiogate.batch.orphans import exit_with_parent
from audiogate.batch.rows import GateSpec, policy_fingerprint, prepare_row
from audiogate.batch.shards import BatchCounts, ShardWriter
from audiogate.dsp.blocks import usable_cpus

__all__ = ["Shard", "run_local", "run_shard"]

#: ``(part number, row places)``: one shard's work.
Shard = tuple[int, tuple[RowRef, ...]]

# One gate per process, built by the pool's initializer (or by the first in-process shard).
_GATE: dict[GateSpec, tuple[Any, str]] = {}


def _gate(spec: GateSpec) -> tuple[Any, str]:
    if spec not in _GATE:
        gate = spec.build()
        _GATE[spec] = (gate, policy_fingerprint(gate.policy))
    return _GATE[spec]


def _init_process(spec: GateSpec, driver_pid: int) -> None:
    exit_with_parent(driver_pid)  # a killed driver must not leave its pool running
    _gate(spec)


def run_shard(spec: GateSpec, manifest: Manifest, out_dir: Path, shard: Shard) -> BatchCounts:
    """Prepare one shard's rows and write ``part-NNNNN.parquet``; returns its counts."""
    gate, fingerprint = _gate(spec)
    number, refs = shard
    counts = BatchCounts()
    writer = ShardWriter(out_dir, number)
    try:
        for raw in read_rows(manifest, refs):
            row = prepare_row(gate, raw, fingerprint=fingerprint)
            counts.add_row(row["status"], row["error_code"])
            writer.write(row)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return counts


def run_local(
    spec: GateSpec,
    manifest: Manifest,
    out_dir: Path,
    shards: Sequence[Shard],
    *,
    workers: int,
    on_shard: Callable[[BatchCounts], None],
) -> BatchCounts:
    """Run ``shards`` on ``workers`` processes (1: in this process); ``on_shard`` gets
    each finished shard's counts, in completion order."""
    total = BatchCounts()
    if workers <= 1 or len(shards) <= 1:
        for shard in shards:
            counts = run_shard(spec, manifest, out_dir, shard)
            total.merge(counts)
            on_shard(counts)
        return total
    # Each process has cores // workers cores of its own: a second thread per clip would
    # only oversubscribe the others' (docs/datasets.md, "Memory and parallelism").
    spec = spec.for_workers(max(1, usable_cpus() // workers))
    # spawn, not fork: the driver may hold threads (tokenizers, a progress thread).
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(workers, len(shards)),
        mp_context=context,
        initializer=_init_process,
        initargs=(spec, os.getpid()),
    ) as pool:
        futures = [pool.submit(run_shard, spec, manifest, out_dir, shard) for shard in shards]
        try:
            for future in concurrent.futures.as_completed(futures):
                counts = future.result()
                total.merge(counts)
                on_shard(counts)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return total
