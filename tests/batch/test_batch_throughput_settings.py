"""What the engines change for throughput, without changing a row: one thread per clip in
each worker process, acquisition in the row's own thread (no thread, no event loop), and
uncompressed feature columns."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import threading
import warnings
from pathlib import Path

import attrs
import pytest
from batchkit import GEMMA

import audiogate.dsp.blocks
from audiogate.batch import BatchOptions, GateSpec, policy_fingerprint, prepare_row, run_batch
from audiogate.batch.shards import RAW_COLUMNS, output_schema, rows_table

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_workers_sharing_the_cores_run_one_thread_per_clip(manifest, tmp_path, monkeypatch):
    import audiogate.batch.local as local

    specs: list[GateSpec] = []
    monkeypatch.setattr(local, "usable_cpus", lambda: 4)

    class Pool:
        """Records the spec the pool's processes would be spawned with."""

        def __init__(self, *, initargs, **kw) -> None:
            specs.append(initargs[0])

        def __enter__(self):
            raise RuntimeError("stop")

        def __exit__(self, *exc) -> None:
            return None

    monkeypatch.setattr(local.concurrent.futures, "ProcessPoolExecutor", Pool)
    _, media = manifest
    spec = GateSpec(model_dir=str(GEMMA), media_root=str(media))
    shards = [(0, ()), (1, ())]
    for workers, want in ((2, 2), (4, 1), (8, 1)):
        with pytest.raises(RuntimeError, match="stop"):
            local.run_local(spec, None, tmp_path, shards, workers=workers, on_shard=print)
        assert specs.pop().block_threads == want
    # The caller's own choice stands.
    with pytest.raises(RuntimeError, match="stop"):
        local.run_local(
            attrs.evolve(spec, block_threads=2), None, tmp_path, shards, workers=4, on_shard=print
        )
    assert specs.pop().block_threads == 2
    assert spec.for_workers(1).block_threads == 1


def test_one_worker_runs_in_the_caller_s_process_and_leaves_its_threads_alone(
    manifest, tmp_path, monkeypatch
):
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 2)
    path, media = manifest
    for workers in (1, 2):  # one shard: no pool either way
        run_batch(
            BatchOptions(
                gate=GateSpec(model_dir=str(GEMMA), media_root=str(media)),
                manifest=path,
                out_dir=tmp_path / f"w{workers}",
                workers=workers,
                shard_rows=100,
            ),
            progress=io.StringIO(),
        )
        assert audiogate.dsp.blocks.BLOCK_THREADS == 2


def test_building_the_gate_applies_its_block_threads(monkeypatch):
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 2)
    GateSpec(family="gemma3n", block_threads=1).build()
    assert audiogate.dsp.blocks.BLOCK_THREADS == 1
    GateSpec(family="gemma3n").build()  # None: the process keeps its setting
    assert audiogate.dsp.blocks.BLOCK_THREADS == 1


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_rows_start_no_thread_and_no_event_loop(manifest, monkeypatch):
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    loops: list[object] = []
    new_loop = asyncio.events.new_event_loop

    def counted_loop():
        loops.append(threading.current_thread())
        return new_loop()

    monkeypatch.setattr(asyncio.events, "new_event_loop", counted_loop)
    path, media = manifest
    gate = GateSpec(model_dir=str(GEMMA), media_root=str(media)).build()
    fingerprint = policy_fingerprint(gate.policy)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    found: dict[str, object] = {}

    def run() -> None:
        before = threading.active_count()
        rows = [prepare_row(gate, line, fingerprint=fingerprint) for line in lines * 3]
        found["statuses"] = [row["status"] for row in rows]
        found["threads"] = threading.active_count() - before

    run()
    fds = _open_fds()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for _ in range(3):
            thread = threading.Thread(target=run)
            thread.start()
            thread.join()
            assert found["threads"] == 0  # acquisition read every file in the row's thread
            gc.collect()
    assert _open_fds() == fds  # nothing a row opened outlives it
    assert loops == []  # media files are read in the row's thread; a URL row is refused first
    statuses = found["statuses"]
    assert statuses.count("ok") == 3 * 5
    assert statuses.count("error") == 3 * 8


def test_feature_columns_are_stored_uncompressed(manifest, tmp_path):
    path, media = manifest
    out = tmp_path / "out"
    run_batch(
        BatchOptions(
            gate=GateSpec(model_dir=str(GEMMA), media_root=str(media)),
            manifest=path,
            out_dir=out,
            workers=1,
        ),
        progress=io.StringIO(),
    )
    shard = next(out.glob("part-*.parquet"))
    group = pq.ParquetFile(str(shard)).metadata.row_group(0)
    codecs, stats = {}, {}
    for i in range(group.num_columns):
        column = group.column(i)
        name = column.path_in_schema.split(".")[0]
        codecs[name], stats[name] = column.compression, column.is_stats_set
    assert {codecs[name] for name in RAW_COLUMNS} == {"UNCOMPRESSED"}
    assert not any(stats[name] for name in RAW_COLUMNS)
    assert codecs["id"] == codecs["input_ids"] == codecs["status"] == "SNAPPY"
    assert stats["id"]
    assert stats["input_ids"]


def test_rows_table_builds_what_arrow_builds_from_the_rows(manifest):
    path, media = manifest
    gate = GateSpec(model_dir=str(GEMMA), media_root=str(media)).build()
    fingerprint = policy_fingerprint(gate.policy)
    rows = [
        prepare_row(gate, line, fingerprint=fingerprint) for line in path.read_text().splitlines()
    ]
    # A family without masks (null items), several clips, and no clip at all.
    rows.append({**rows[0], "masks": [None, b"m"], "features": [b"a", b"b"]})
    rows.append({**rows[0], "masks": [], "features": []})
    want = pa.Table.from_pylist(rows, schema=output_schema())
    assert rows_table(rows).equals(want)
    assert rows_table(rows[:0]).equals(pa.Table.from_pylist([], schema=output_schema()))
