"""Measure a streamed clip's ``finish()`` on a warm thread, per family.

Run: ``python benchmarks/bench_stream_finish.py [--seconds 30] [--rate 16000]
[--repeats 30] [--families a,b] [--profile]``.

For each family a clip of ``--seconds`` of mono noise at ``--rate`` is pushed into
:func:`audiogate.streaming.frontend.open_clip_stream` in half-second batches (what the
transport hands the stream's thread), then ``finish()`` is timed in this thread's CPU time
(``time.thread_time``: the thread is warm, as a kept stream thread is). Printed: the
median and best of ``--repeats`` finishes in ms, and the CPU of the pushes. ``--profile``
prints the cProfile of the finishes (cumulative, top 25). The tail of
``benchmarks/bench_streaming.py`` adds the wake of the thread after the last chunk's pause
and the last batch to this. Run it under ``flock /tmp/bench.lock`` and state the load.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time

import numpy as np

from audiogate.decode import inspect
from audiogate.decode.geometry import ClipGeometry, SourceFormat
from audiogate.host import create_host
from audiogate.streaming.frontend import open_clip_stream


def _header(rate_hz: int) -> ClipGeometry:
    fmt = SourceFormat.raw("pcm16", rate_hz=rate_hz, channels=1)
    return inspect(b"\0\0" * rate_hz, clip_index=0, source_format=fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--families", default="")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    host = create_host()
    families = [f for f in args.families.split(",") if f] or sorted(host.families)
    rng = np.random.default_rng(0)
    n = round(args.seconds * args.rate)
    t = np.arange(n) / args.rate
    samples = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)
    # The last 20 ms come apart, as the benchmark's last chunk does.
    batch = args.rate // 2
    last = args.rate // 50
    header = _header(args.rate)
    print(
        f"{args.seconds:g} s at {args.rate} Hz, {args.repeats} finishes; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'family':15} {'finish med':>10} {'best':>6} {'pushes':>7}  (ms CPU)")
    for family in families:
        policy = host.default_policy(family)
        finishes: list[float] = []
        pushes: list[float] = []
        profile = cProfile.Profile() if args.profile else None
        for _ in range(args.repeats + 2):
            stream = open_clip_stream(host, policy, header)
            cpu = time.thread_time()
            body = samples[: n - last]
            for start in range(0, body.shape[0], batch):
                stream.push(body[start : start + batch])
            stream.push(samples[n - last :])
            pushes.append(time.thread_time() - cpu)
            if profile is not None:
                profile.enable()
            cpu = time.thread_time()
            stream.finish()
            finishes.append(time.thread_time() - cpu)
            if profile is not None:
                profile.disable()
        finishes, pushes = finishes[2:], pushes[2:]
        print(
            f"{family:15} {statistics.median(finishes) * 1e3:10.3f} {min(finishes) * 1e3:6.3f} "
            f"{statistics.median(pushes) * 1e3:7.2f}"
        )
        if profile is not None:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
