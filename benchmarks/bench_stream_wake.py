"""Measure what a batch of a real-time stream costs over the same batch warm, per family,
and the floor it sets on issue #34's two targets together at a live source's pace.

Run: ``python benchmarks/bench_stream_wake.py [--seconds 30] [--rate 16000]
[--interval-ms 500] [--nap-ms 20] [--families a,b]``.

A clip of ``--seconds`` (tone and noise, PCM16 values) at ``--rate`` is pushed into
:func:`audiogate.streaming.frontend.open_clip_stream` in the transport's batches (half
a second of audio), two ways, in this thread:

* **paced**: between two batches the thread idles ``--interval-ms`` in naps of
  ``--nap-ms`` (a live source's chunks wake the process every 20 ms and the transport
  hands a batch over every half second), so each batch runs on caches and predictors
  that other processes used meanwhile;
* **warm**: the batches back to back.

Printed per family, in µs of process CPU: the median batch push paced and warm and
``c``, their difference (what a batch costs for coming at a live pace; the naps' own
wake-ups are not in it); ``W``, the whole clip prepared at once (``preflight`` then
``process_request``) 20 ms after an idle pause, as after a live source's last chunk;
and the floor's verdict.

**The floor.** A design that prepares a live clip of duration ``D`` as it arrives, in
batches of ``B`` seconds each paying ``c`` more than warm, has a tail of at least ``c``
plus the audio pending at the end, ``B / 2`` on average (of ``W``'s work: ``W B / 2D``,
finish's fixed costs left out), and ``D / B`` batches, so at least ``c D / B`` more CPU
than the whole clip. The tail target (at most ``0.1 W``) needs
``B <= 2 D (0.1 W - c) / W``; the CPU target (at most ``0.3 W`` more) then needs
``c W / (2 (0.1 W - c)) <= 0.3 W``, that is **c <= 0.0375 W**. Where ``c`` is larger, no
batching meets both targets at a live pace on this machine; where it is smaller, some
``B`` does (the ``B range`` column: the batch lengths, in seconds, that meet both, when
any). With the whole last batch in the tail (a clip that ends on a batch's end, as a
30 s clip does in half-second batches) the tail needs ``c + W B / D <= 0.1 W`` and the
bound is ``c <= 0.1 W / (1 + 1 / 0.3)``, about 0.023 W (``STRICT_FLOOR_SHARE``, printed
at the end). Run under ``flock /tmp/bench.lock`` and state the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from bench_streaming import pcm16, prepare_whole

from audiogate.decode.geometry import SourceFormat
from audiogate.decode.raw import inspect_raw
from audiogate.host import FamilyHost, create_host
from audiogate.streaming import frontend
from audiogate.streaming.stage import batch_frames

#: The largest batch cost over warm (a fraction of the whole clip's CPU) with which some
#: batching meets both targets (the module docstring's derivation).
FLOOR_SHARE = 0.0375
#: The same with the whole last batch in the tail (the clip ends on a batch's end).
STRICT_FLOOR_SHARE = 0.1 / (1 + 1 / 0.3)


def _pushes(
    host: FamilyHost, policy, header, batches: list[np.ndarray], interval_s: float, nap_s: float
) -> list[float]:
    """Process CPU of each batch's push (the first left out), ``interval_s`` idle in
    naps of ``nap_s`` before each, or none."""
    stream = frontend.open_clip_stream(host, policy, header)
    costs = []
    try:
        for batch in batches:
            if interval_s:
                until = time.perf_counter() + interval_s
                while (left := until - time.perf_counter()) > 0:
                    time.sleep(min(nap_s, left))
            start = time.process_time()
            stream.push(batch)
            costs.append(time.process_time() - start)
        stream.finish()
    finally:
        stream.close()
    return costs[1:]


def _whole_after_pause(host: FamilyHost, policy, data: bytes, fmt: SourceFormat) -> float:
    """Process CPU of the whole clip prepared 20 ms after an idle pause."""
    time.sleep(0.02)
    start = time.process_time()
    prepare_whole(host, policy, data, fmt)
    return time.process_time() - start


def _b_range(c: float, whole: float, seconds: float) -> str:
    """The batch lengths (s) that meet both targets, or ``-``: tail
    ``c + whole * B / (2 D) <= 0.1 whole`` and extra CPU ``(D / B) * c <= 0.3 whole``."""
    if c <= 0:
        return "any"
    most = 2 * seconds * (0.1 * whole - c) / whole
    least = seconds * c / (0.3 * whole)
    return f"{least:.2f}-{most:.2f}" if least <= most and most > 0 else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=16_000)
    parser.add_argument("--interval-ms", type=float, default=500.0)
    parser.add_argument("--nap-ms", type=float, default=20.0)
    parser.add_argument("--families", default="")
    args = parser.parse_args()
    host = create_host()
    families = [f for f in args.families.split(",") if f] or sorted(host.families)
    data = pcm16(args.seconds, args.rate)
    samples = np.frombuffer(data, "<i2").astype(np.float32) / np.float32(32768)
    fmt = SourceFormat.raw("pcm16", rate_hz=args.rate, channels=1)
    header = inspect_raw(2, fmt, clip_index=0)
    size = batch_frames(args.rate)
    batches = [samples[i : i + size] for i in range(0, samples.shape[0], size)]
    interval_s, nap_s = args.interval_ms / 1000, args.nap_ms / 1000
    print(
        f"{args.seconds:g} s at {args.rate} Hz in {size}-frame batches; paced: "
        f"{args.interval_ms:g} ms idle before each (naps of {args.nap_ms:g} ms); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'family':15} {'paced':>6} {'warm':>6} {'c':>6} {'W':>7} {'c / W':>6} "
        f"{'floor':>5}  B range (s)   (µs of process CPU)"
    )
    for family in families:
        policy = host.default_policy(family)
        for _ in range(2):
            _pushes(host, policy, header, batches, 0.0, nap_s)
            _whole_after_pause(host, policy, data, fmt)
        warm = statistics.median(
            cost for _ in range(3) for cost in _pushes(host, policy, header, batches, 0.0, nap_s)
        )
        paced = statistics.median(_pushes(host, policy, header, batches, interval_s, nap_s))
        whole = statistics.median(_whole_after_pause(host, policy, data, fmt) for _ in range(7))
        c = paced - warm
        print(
            f"{family:15} {paced * 1e6:6.0f} {warm * 1e6:6.0f} {c * 1e6:6.0f} "
            f"{whole * 1e6:7.0f} {c / whole:6.1%} "
            f"{'over' if c > FLOOR_SHARE * whole else 'under':>5}  "
            f"{_b_range(c, whole, args.seconds)}"
        )
    print(
        f"floor: 'over' where c > {FLOOR_SHARE:.2%} of W, the most with which some batching "
        "meets both of issue #34's targets at a live pace (see the module docstring); "
        f"{STRICT_FLOOR_SHARE:.2%} when the clip ends on a batch's end."
    )


if __name__ == "__main__":
    main()
