"""``audiogate batch``: a manifest in, Parquet shards and ``_SUCCESS.json`` out.

:func:`run_batch` resumes what earlier runs in the same output directory finished
(rows are matched by id), runs the rest on the chosen engine, and writes the summary.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

import attrs

from audiogate.batch.manifest import RowRef, read_rows, ref_key, scan_manifest
from audiogate.batch.rows import GateSpec, policy_fingerprint
from audiogate.batch.shards import (
    SUCCESS_FILE,
    BatchCounts,
    finished_shards,
    next_part_number,
    require_pyarrow,
    write_success,
)

__all__ = ["BatchOptions", "BatchProgress", "run_batch"]

Engine = Literal["local", "ray"]


@attrs.frozen(kw_only=True)
class BatchOptions:
    """Everything ``audiogate batch`` takes.

    :param gate: the model directory or family, media root and URL switch.
    :param manifest: JSON Lines (``.jsonl``) or Parquet (``.parquet``) rows.
    :param out_dir: where the shards and ``_SUCCESS.json`` go (created if missing).
    :param engine: ``"local"`` (a process pool) or ``"ray"`` (Ray Data).
    :param workers: processes (local) or actors (Ray); default: this machine's cores.
    :param shard_rows: rows per shard (local) or per ``map_batches`` batch and file (Ray).
    :param ray_address: an existing Ray cluster (default: ``ray.init()``'s local one).
    """

    gate: GateSpec
    manifest: Path = attrs.field(converter=Path)
    out_dir: Path = attrs.field(converter=Path)
    engine: Engine = "local"
    workers: int = attrs.field(factory=lambda: os.cpu_count() or 1)
    shard_rows: int = attrs.field(default=128, validator=attrs.validators.ge(1))
    ray_address: str | None = None


class BatchProgress:
    """Rows done, clips/s, errors and ETA: a bar redrawn on a terminal, else a plain
    line at most every ``interval_s`` seconds (and at the end)."""

    def __init__(
        self, stream: TextIO, *, total: int, tty: bool | None = None, interval_s: float = 5.0
    ) -> None:
        self.stream = stream
        self.total = total
        self.tty = stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self.counts = BatchCounts()
        self.started = time.monotonic()
        self._last = -float("inf")
        self._shown = -1  # rows in the last plain line

    def __call__(self, counts: BatchCounts) -> None:
        self.counts.merge(counts)
        self.show(final=False)

    def show(self, *, final: bool) -> None:
        """Draw the bar (or print a line, when due)."""
        now = time.monotonic()
        if not self.tty and not final and now - self._last < self.interval_s:
            return
        self._last = now
        done = self.counts.rows
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        left = self.total - done
        eta = _clock(left / rate) if rate > 0 and left > 0 else "-"
        errors = sum(self.counts.errors.values())
        text = f"{done}/{self.total} clips  {rate:.1f} clips/s  errors {errors}  ETA {eta}"
        if self.tty:
            width = 24
            filled = int(width * done / max(self.total, 1))
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}")
            if final:
                self.stream.write("\n")
        elif done != self._shown:
            self.stream.write(f"audiogate batch: {text}\n")
        self._shown = done
        self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _pending(manifest: Any, done: set[str]) -> list[RowRef]:
    if not done:
        return list(manifest.refs)
    raws = read_rows(manifest, manifest.refs)
    return [ref for ref, raw in zip(manifest.refs, raws, strict=True) if ref_key(raw) not in done]


def _shards(refs: Sequence[RowRef], size: int, first: int) -> list[tuple[int, tuple[RowRef, ...]]]:
    return [
        (first + n, tuple(refs[start : start + size]))
        for n, start in enumerate(range(0, len(refs), size))
    ]


def run_batch(options: BatchOptions, *, progress: TextIO | None = None) -> dict[str, Any]:
    """Prepare every row of the manifest not finished yet; returns ``_SUCCESS.json``'s
    content (rows, ok and errors by code over the whole output, and this run's seconds
    and clips/s).

    :raises ExtraMissingError: pyarrow (or, for the Ray engine, Ray) is not installed.
    :raises AudioGateError: the gate cannot be built (a bad model directory, an unknown
        family, a media root that is not a directory).
    :raises OSError: the manifest cannot be read or the output cannot be written.
    """
    require_pyarrow()
    if options.engine == "ray":
        from audiogate.batch.ray_engine import require_ray

        require_ray()
    started = time.monotonic()
    out_dir = options.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUCCESS_FILE).unlink(missing_ok=True)  # written again at the end
    # A bad model directory or family fails here, once, before any process starts.
    gate = options.gate.build()
    fingerprint = policy_fingerprint(gate.policy)
    family = str(gate.policy.family)
    del gate
    if options.engine == "ray":
        from audiogate.batch.ray_engine import salvage_staging

        salvage_staging(out_dir, next_part_number(out_dir))
    done, earlier, _ = finished_shards(out_dir)
    manifest = scan_manifest(options.manifest)
    pending = _pending(manifest, done)
    stream = progress if progress is not None else sys.stderr
    bar = BatchProgress(stream, total=len(pending))
    first = next_part_number(out_dir)
    if options.engine == "ray":
        from audiogate.batch.ray_engine import run_ray

        counts = run_ray(
            options.gate,
            manifest,
            out_dir,
            frozenset(done),
            workers=options.workers,
            batch_rows=options.shard_rows,
            address=options.ray_address,
            first_part=first,
            progress_bars=bar.tty,
            on_shard=bar,
        )
    else:
        from audiogate.batch.local import run_local

        counts = run_local(
            options.gate,
            manifest,
            out_dir,
            _shards(pending, options.shard_rows, first),
            workers=options.workers,
            on_shard=bar,
        )
    bar.show(final=True)
    seconds = time.monotonic() - started
    total = BatchCounts()
    total.merge(earlier)
    total.merge(counts)
    summary = {
        "rows": total.rows,
        "ok": total.ok,
        "errors": sum(total.errors.values()),
        "errors_by_code": dict(sorted(total.errors.items())),
        "seconds": round(seconds, 3),
        "clips_per_s": round(counts.rows / seconds, 3) if seconds > 0 else None,
        "rows_this_run": counts.rows,
        "rows_resumed": earlier.rows,
        "engine": options.engine,
        "workers": options.workers,
        "family": family,
        "policy_fingerprint": fingerprint,
        "manifest": str(options.manifest),
    }
    write_success(out_dir, summary)
    return summary
