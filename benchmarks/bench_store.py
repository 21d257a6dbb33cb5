"""Inline audio with and without a source store: the feature-cache misses ``serve --store``
pays per clip (issue #29).

For each family, a 1 s and a 30 s 16 kHz mono PCM16 WAV, ``AudioGate.prepare(clips=...)``
on the family's pinned defaults with a 256 MiB feature cache (``serve``'s default), the
cache emptied before every call so each one is a miss:

* **off**: no store;
* **on**: a :class:`~audiogate.store.SourceStore` as the gate's store and the cache's
  persistent tier (what ``serve --store DIR`` builds). The clips are inline, no stored
  source: the store should cost a look-up, not a write.

Printed: medians (bests) in ms, the on/off ratio, and the bytes written per call with
the store on (``/proc/self/io``'s ``wchar``; the store used to write each miss's features,
fsync them and remove them). Timing as :mod:`bench_e2e` (paths take turns in rounds
after untimed runs).

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_store.py [--repeat N] [--family F]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench_e2e import FAMILIES, timed, wav

from audiogate.acquire import AcquisitionPolicy, acquire_bytes
from audiogate.api import AudioGate
from audiogate.store import SourceStore

__all__ = ["main"]

CACHE_BYTES = 256 << 20
CASES = ((1.0, 16_000, 1), (30.0, 16_000, 1))


def missing(gate: AudioGate) -> Callable[[bytes], Any]:
    """``prepare(clips=...)`` after emptying the gate's feature cache (every call a miss)."""
    policy = AcquisitionPolicy().narrowed(gate.policy)
    cache = gate.feature_cache
    assert cache is not None

    def run(data: bytes) -> Any:
        cache.clear()
        return gate.prepare(clips=acquire_bytes([data], policy=policy)).model_inputs

    return run


def written() -> int:
    """Bytes this process has passed to ``write`` so far (``wchar`` of ``/proc/self/io``;
    0 where there is none): what a file written and removed again leaves no trace of."""
    try:
        with open("/proc/self/io") as io:
            fields = dict(line.split(": ") for line in io.read().splitlines())
    except OSError:
        return 0
    return int(fields["wchar"])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=0, help="runs per path (default: auto)")
    parser.add_argument("--family", action="append", choices=FAMILIES)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("wall ms, median (best); every call a feature-cache miss")
    print(f"{'case':<26}{'store off':>18}{'store on':>18}{'on/off':>8}{'written/call':>14}")
    for family in args.family or FAMILIES:
        with tempfile.TemporaryDirectory(prefix="bench-store-") as folder:
            store = SourceStore.open(Path(folder) / "store")
            off = missing(AudioGate.from_family(family, feature_cache_bytes=CACHE_BYTES))
            on = missing(
                AudioGate.from_family(
                    family, store=store, feature_cache_bytes=CACHE_BYTES, feature_store=store
                )
            )
            for seconds, rate, channels in CASES:
                data = wav(seconds, rate, channels)
                repeat = args.repeat or (100 if seconds < 2 else 20)
                times = timed([lambda d=data, f=off: f(d), lambda d=data, f=on: f(d)], repeat)
                before = written()
                on(data)
                grown = written() - before
                medians = [statistics.median(t) for t in times]
                bests = [min(t) for t in times]
                cells = [f"{m:8.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
                label = f"{family} {seconds:g} s {rate // 1000} kHz"
                print(
                    f"{label:<26}{cells[0]:>18}{cells[1]:>18}"
                    f"{medians[1] / medians[0]:7.2f}x{grown:>14,}"
                )
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
