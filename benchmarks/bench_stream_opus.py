"""Benchmark streamed Ogg Opus and WebM Opus preparation against the whole clip's.

Run: ``python benchmarks/bench_stream_opus.py [--seconds 29.9] [--runs 3]
[--families qwen2audio,gemma3n]``. The Opus section of the streaming benchmark
(``bench_streaming.py`` measures raw PCM); kept apart so that the two are edited
independently.

A ``--seconds`` clip (a modulated tone in noise, 48 kHz mono) is encoded to Ogg Opus by
libsndfile (20 ms packets, 1 s pages) and rewritten as a live WebM as MediaRecorder
writes it (unknown sizes, one ``SimpleBlock`` per packet, 1 s clusters), then prepared
two ways:

* **whole**: the bytes in hand, ``preflight`` then ``process_request`` (the decode in a
  decoder process, resample, features);
* **streamed**: :func:`audiogate.streaming.transport.prepare_stream` fed 20 ms of bytes
  per chunk (the file's bytes per 20 ms on average) as fast as it takes them.

Printed per container and family: the median whole preparation, the median *last chunk
→ ready* latency, their ratio (the issue's target: at most 10 %), the CPU of the
streamed preparation over the whole one's, both counting the decoder process's CPU
(read from ``/proc``; Linux), and that CPU split: this process's and the decoder
process's, whole / streamed, in ms. Medians of ``--runs``; run it idle (``flock
/tmp/bench.lock``) and state the load next to any figure.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import struct
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import soundfile

from audiogate.acquire.clip import EncodedClip
from audiogate.decode.geometry import SourceFormat
from audiogate.decode.isolation import DecoderPool
from audiogate.host import create_host
from audiogate.pipeline.preflight import preflight
from audiogate.pipeline.process import process_request
from audiogate.streaming.transport import prepare_stream

OPUS = SourceFormat("opus")


def _signal(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(round(seconds * 48_000)) / 48_000
    x = 0.3 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 440 * t)
    return (x + 0.05 * rng.standard_normal(t.shape[0])).astype(np.float32)


def _ogg_opus(seconds: float) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, _signal(seconds), 48_000, format="OGG", subtype="OPUS")
    return out.getvalue()


def _ogg_packets(data: bytes) -> list[bytes]:
    """Every packet of an Ogg stream, in order (headers first)."""
    packets, offset, partial = [], 0, b""
    while offset < len(data):
        count = data[offset + 26]
        table = data[offset + 27 : offset + 27 + count]
        body = offset + 27 + count
        for value in table:
            partial += data[body : body + value]
            body += value
            if value < 255:
                packets.append(partial)
                partial = b""
        offset = body
    return packets


def _element(element_id: int, payload: bytes, *, unknown: bool = False) -> bytes:
    size = b"\x01\xff\xff\xff\xff\xff\xff\xff" if unknown else (len(payload) | 1 << 56).to_bytes(8)
    return element_id.to_bytes((element_id.bit_length() + 7) // 8) + size + payload


def _live_webm(ogg: bytes) -> bytes:
    """The Ogg's Opus packets in a WebM as MediaRecorder writes it (unknown sizes)."""
    head, _tags, *packets = _ogg_packets(ogg)
    track = _element(
        0xAE,
        _element(0xD7, b"\x01")
        + _element(0x83, b"\x02")
        + _element(0x86, b"A_OPUS")
        + _element(0x63A2, head)
        + _element(0xE1, _element(0xB5, struct.pack(">d", 48_000.0)) + _element(0x9F, b"\x01")),
    )
    body = _element(0x1549A966, _element(0x2AD7B1, (1_000_000).to_bytes(3))) + _element(
        0x1654AE6B, track
    )
    for first in range(0, len(packets), 50):  # 1 s clusters of 20 ms blocks
        blocks = b"".join(
            _element(0xA3, b"\x81" + (20 * i).to_bytes(2) + b"\x80" + packet)
            for i, packet in enumerate(packets[first : first + 50])
        )
        body += _element(
            0x1F43B675, _element(0xE7, (first * 20).to_bytes(4)) + blocks, unknown=True
        )
    header = _element(0x1A45DFA3, _element(0x4282, b"webm"))
    return header + _element(0x18538067, body, unknown=True)


def _children_cpu(pool: DecoderPool) -> float:
    """CPU seconds of the pool's idle decoder processes so far (``/proc``, Linux)."""
    total = 0.0
    for child in pool._idle:
        with open(f"/proc/{child.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _cpu(pool: DecoderPool) -> tuple[float, float]:
    """``(this process's, the decoder processes')`` CPU seconds so far."""
    return time.process_time(), _children_cpu(pool)


def _spent(pool: DecoderPool, before: tuple[float, float]) -> tuple[float, float]:
    now = _cpu(pool)
    return now[0] - before[0], now[1] - before[1]


#: (wall or latency, parent CPU, decoder CPU), seconds.
Run = tuple[float, float, float]


def _whole(host, policy, data: bytes, pool: DecoderPool) -> Run:
    wall, cpu = time.perf_counter(), _cpu(pool)
    clip = EncodedClip(data=data, source_format=OPUS, ordinal=1)
    process_request(host, preflight(host, policy, [clip]), [clip], decoders=pool)
    return time.perf_counter() - wall, *_spent(pool, cpu)


def _streamed(host, policy, data: bytes, chunk: int, pool: DecoderPool) -> Run:
    last: list[float] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), chunk):
            if start + chunk >= len(data):
                last.append(time.perf_counter())
            yield data[start : start + chunk]

    cpu = _cpu(pool)
    asyncio.run(prepare_stream(host, policy, chunks(), source_format=OPUS, decoders=pool))
    ready = time.perf_counter()
    return ready - last[0], *_spent(pool, cpu)


def _median(runs: list[Run], pick: Callable[[Run], float]) -> float:
    return statistics.median(pick(run) for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    # 30 s of input decodes to 30.0035 s (the last packet's padding): past the 30 s cap.
    parser.add_argument("--seconds", type=float, default=29.9)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--families", default="qwen2audio,gemma3n")
    args = parser.parse_args()
    host = create_host()
    pool = DecoderPool(processes=1)
    ogg = _ogg_opus(args.seconds)
    files = {"ogg opus": ogg, "webm opus": _live_webm(ogg)}
    print(
        f"{args.seconds:g} s of 48 kHz mono Opus, 20 ms chunks, median of {args.runs}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'container':10} {'family':13} {'bytes':>7} {'whole ms':>9} {'last->ready ms':>15} "
        f"{'ratio':>7} {'cpu x':>6} {'parent ms':>13} {'decoder ms':>13}"
    )
    try:
        for name, data in files.items():
            chunk = max(1, round(len(data) * 0.02 / args.seconds))
            for family in [f for f in args.families.split(",") if f]:
                policy = host.default_policy(family)
                _whole(host, policy, data, pool)  # warm: the process, banks, plans
                _streamed(host, policy, data, chunk, pool)
                wholes = [_whole(host, policy, data, pool) for _ in range(args.runs)]
                streams = [_streamed(host, policy, data, chunk, pool) for _ in range(args.runs)]
                whole_wall = _median(wholes, lambda r: r[0])
                latency = _median(streams, lambda r: r[0])
                ratio = _median(streams, lambda r: r[1] + r[2]) / _median(
                    wholes, lambda r: r[1] + r[2]
                )
                # CPU split (whole / streamed): where an excess lies; the decoder's is
                # counted in clock ticks (10 ms on most Linux systems).
                parent = [_median(runs, lambda r: r[1]) * 1e3 for runs in (wholes, streams)]
                decoder = [_median(runs, lambda r: r[2]) * 1e3 for runs in (wholes, streams)]
                print(
                    f"{name:10} {family:13} {len(data):7} {whole_wall * 1e3:9.1f} "
                    f"{latency * 1e3:15.1f} {latency / whole_wall:7.1%} {ratio:6.2f} "
                    f"{parent[0]:6.1f}/{parent[1]:6.1f} {decoder[0]:6.1f}/{decoder[1]:6.1f}"
                )
    finally:
        pool.close()


if __name__ == "__main__":
    main()
