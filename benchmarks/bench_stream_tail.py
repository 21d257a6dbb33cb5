"""Measure a streamed clip's tail (its last batch pushed, then ``finish()``) after an idle
pause and warm, per family, with the frontend's own steps apart.

Run: ``python benchmarks/bench_stream_tail.py [--seconds 30] [--rate 16000] [--repeats 15]
[--families a,b] [--pause-ms 20] [--steps]``.

A clip of ``--seconds`` of tone and noise (PCM16 values) at ``--rate`` is pushed into
:func:`audiogate.streaming.frontend.open_clip_stream` in the transport's batches (half a
second), all but the last; then, after ``--pause-ms`` idle (*cold*: as the benchmark's
last chunk comes, when caches, predictors and the core are another process's) or none
(*warm*), the last batch's push and ``finish()`` are timed in this thread's CPU time.
Printed per family and mode: the median and the best of ``--repeats`` tails, push and
``finish()`` apart, in µs, and the minor page faults of the tail (median; a fault costs
about 25 µs on the shared VM, and a process whose allocator hands out fresh pages pays
them in the tail). ``--steps`` adds the median of the frontend's steps: the admission at
the final length (``_admitted``) and the family's ``finish``.

This is the tail of ``benchmarks/bench_streaming.py`` without the transport (the last
chunk's receipt, decode and hash, the loop's wake): issue #34's tail target is read there
(``cpu %``); here a change of tens of µs is resolved that the benchmark's run-to-run
spread (±40 % on the shared machine) hides. Read the *best* column to compare two
versions (other processes only ever add time), alternated, under
``flock /tmp/bench.lock``, and state the load.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from audiogate.decode.geometry import SourceFormat
from audiogate.decode.raw import inspect_raw
from audiogate.streaming import frontend
from audiogate.streaming.stage import batch_frames

_STEPS: dict[str, int] = defaultdict(int)
_TIMING = [False]


def _timed(owner: type, name: str) -> None:
    """Add ``owner.name``'s CPU time to :data:`_STEPS` while :data:`_TIMING` is set."""
    function: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        if not _TIMING[0]:
            return function(*args, **kwargs)
        # (_family_call's first argument names the family's method: push, finish)
        key = f"family {args[1]}" if name == "_family_call" else name
        start = time.thread_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            _STEPS[key] += time.thread_time_ns() - start

    setattr(owner, name, timed)


def _samples(seconds: float, rate_hz: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    n = round(seconds * rate_hz)
    t = np.arange(n) / rate_hz
    x = 0.3 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 440 * t)
    pcm = np.clip((x + 0.05 * rng.standard_normal(n)) * 32767, -32768, 32767).astype(np.int16)
    out = (pcm.astype(np.float32) / np.float32(32768)).astype(np.float32)
    out.flags.writeable = False
    return out


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _tail(
    host: Any, policy: Any, header: Any, batches: list[np.ndarray], pause_s: float
) -> tuple[int, int, int, dict[str, int]]:
    """One stream: every batch but the last pushed; after ``pause_s`` idle, the last
    pushed and ``finish()``: ``(push ns, finish ns, minor faults, steps' ns)``."""
    stream = frontend.open_clip_stream(host, policy, header)
    for batch in batches[:-1]:
        stream.push(batch)
    if pause_s:
        time.sleep(pause_s)
    _STEPS.clear()
    _TIMING[0] = True
    faults = _faults()
    start = time.thread_time_ns()
    stream.push(batches[-1])
    pushed = time.thread_time_ns()
    clip = stream.finish()
    done = time.thread_time_ns()
    _TIMING[0] = False
    faults = _faults() - faults
    del clip  # (freed after the clock: the caller keeps it)
    return pushed - start, done - pushed, faults, dict(_STEPS)


def main() -> None:
    from audiogate.host import FamilyHost, create_host

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--families", default="")
    parser.add_argument("--pause-ms", type=float, default=20.0)
    parser.add_argument("--steps", action="store_true")
    args = parser.parse_args()
    if args.steps:
        _timed(frontend.IncrementalClipStream, "_admitted")
        _timed(frontend.IncrementalClipStream, "_family_call")
    host: FamilyHost = create_host()
    families = [f for f in args.families.split(",") if f] or sorted(host.families)
    x = _samples(args.seconds, args.rate)
    header = inspect_raw(2, SourceFormat.raw("pcm16", rate_hz=args.rate, channels=1), clip_index=0)
    size = batch_frames(args.rate)
    batches = [x[i : i + size] for i in range(0, x.shape[0], size)]
    print(
        f"{args.seconds:g} s at {args.rate} Hz in {size}-frame batches, the last after "
        f"{args.pause_ms:g} ms idle (cold) or none (warm), {args.repeats} tails; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'family':15} {'mode':5} {'tail med':>8} {'best':>6} {'push best':>9} "
        f"{'finish best':>11} {'faults':>6}  (µs CPU)"
    )
    for family in families:
        policy = host.default_policy(family)

        for _ in range(3):
            _tail(host, policy, header, batches, 0.0)
        for mode, pause_s in (("warm", 0.0), ("cold", args.pause_ms / 1000)):
            runs = [_tail(host, policy, header, batches, pause_s) for _ in range(args.repeats)]
            totals = [push + finish for push, finish, _, _ in runs]
            print(
                f"{family:15} {mode:5} {statistics.median(totals) / 1e3:8.0f} "
                f"{min(totals) / 1e3:6.0f} {min(r[0] for r in runs) / 1e3:9.0f} "
                f"{min(r[1] for r in runs) / 1e3:11.0f} "
                f"{statistics.median(r[2] for r in runs):6.0f}"
            )
            if args.steps:
                for step in sorted({k for r in runs for k in r[3]}):
                    median = statistics.median(r[3].get(step, 0) for r in runs) / 1e3
                    print(f"{'':15} {'':5} {step:>24} {median:6.0f}")
    print(
        "Compare versions on 'best' (alternated, same load); issue #34's tail target is "
        "read on bench_streaming.py's 'cpu %', which adds the transport's tail."
    )


if __name__ == "__main__":
    main()
