"""Honest reservations: each family's largest admitted request stays within its plan.

For each shipped family this builds the largest request its pinned policy admits, runs
the preflight (which sizes the reservation the worker takes), then processes the request
under tracemalloc and prints the traced peak against the reserved host bytes. The ratio
must stay below 1. The encoded input is allocated before the measurement starts; it is
reserved separately, as queued encoded bytes.

Run: ``.venv/bin/python benchmarks/bench_reservations.py``
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from audiogate import create_host
from audiogate.pipeline import EncodedClip, preflight, process_request
from audiogate.testing.audio import wav_bytes

MIB = 1 << 20


def clip(seconds: float, rate_hz: int, channels: int, ordinal: int, seed: int) -> EncodedClip:
    rng = np.random.default_rng(seed)
    n = int(seconds * rate_hz)
    samples = rng.uniform(-0.3, 0.3, size=(n, channels) if channels > 1 else n)
    return EncodedClip(data=wav_bytes(samples, rate_hz=rate_hz), ordinal=ordinal, origin="bytes")


REQUESTS = {
    # 30 minutes at 16 kHz: every per-request sample and frame cap at its maximum.
    "phi4mm": lambda: [clip(1_800, 16_000, 1, 1, 0)],
    # 30 s at 192 kHz stereo: the largest source the working budget admits.
    "gemma3n": lambda: [clip(30, 192_000, 2, 1, 0)],
    # 16 clips of 30 s, ten of them 48 kHz stereo, within the 64 MiB encoded cap.
    "qwen2audio": lambda: [
        clip(30, 48_000, 2, k + 1, k) if k < 10 else clip(30, 16_000, 1, k + 1, k)
        for k in range(16)
    ],
}


def main() -> None:
    host = create_host()
    header = ("family", "clips", "encoded", "reserved", "peak", "ratio", "time")
    print("{:<11} {:>5} {:>10} {:>10} {:>10} {:>6} {:>7}".format(*header))
    worst = 0.0
    for family, build in REQUESTS.items():
        policy = host.default_policy(family)
        clips = build()
        plan = preflight(host, policy, clips)
        tracemalloc.start()
        tracemalloc.reset_peak()
        started = time.perf_counter()
        batch = process_request(host, plan, clips)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        ratio = peak / plan.host_bytes
        worst = max(worst, ratio)
        print(
            f"{family:<11} {len(clips):>5} {plan.encoded_bytes / MIB:>8.1f}Mi "
            f"{plan.host_bytes / MIB:>8.1f}Mi {peak / MIB:>8.1f}Mi {ratio:>6.3f} {elapsed:>6.2f}s"
        )
        del batch
    print(f"\nworst peak / reserved = {worst:.3f} ({'OK' if worst < 1 else 'OVER BUDGET'})")


if __name__ == "__main__":
    main()
