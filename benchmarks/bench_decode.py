"""Benchmark the strict decoder against NumPy and soundfile on 10 min of 48 kHz stereo.

Run: ``python benchmarks/bench_decode.py [--runs N] [--minutes M]``. Prints the median
time of each path, the ratios against the references, and the tracemalloc peak of our
``decode`` against the budget of source bytes + 2x output. Targets: within 1.5x of the
``numpy.frombuffer`` baseline and faster than soundfile.
"""

from __future__ import annotations

import argparse
import io
import statistics
import struct
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import soundfile

from audiogate.decode import decode, inspect

RATE_HZ = 48_000
CHANNELS = 2


def wav_bytes(samples: np.ndarray, *, float32: bool) -> bytes:
    """A minimal RIFF/WAVE file of ``samples`` [shape=(frames, 2)]."""
    payload = samples.astype("<f4" if float32 else "<i2").tobytes()
    bits = 32 if float32 else 16
    block_align = CHANNELS * bits // 8
    fmt = struct.pack(
        "<HHIIHH", 3 if float32 else 1, CHANNELS, RATE_HZ, RATE_HZ * block_align, block_align, bits
    )
    body = (
        b"WAVE"
        + struct.pack("<4sI", b"fmt ", len(fmt))
        + fmt
        + struct.pack("<4sI", b"data", len(payload))
        + payload
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def median_seconds(function: Callable[[], object], runs: int) -> float:
    function()  # warm-up: page in the source, let the allocator settle
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ours(data: bytes) -> np.ndarray:
    return decode(data, inspect(data, clip_index=0), clip_index=0)


def frombuffer_baseline(data: bytes, dtype: str) -> np.ndarray:
    samples = np.frombuffer(data, dtype=dtype, offset=44)
    return samples.reshape(-1, CHANNELS).mean(axis=1).astype(np.float32)


def soundfile_baseline(data: bytes) -> np.ndarray:
    samples, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    return samples.mean(axis=1)


def tracemalloc_peak(function: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def bench(label: str, data: bytes, dtype: str, runs: int) -> None:
    frames = (len(data) - 44) // (CHANNELS * np.dtype(dtype).itemsize)
    # Ours must equal the float64 mean of the scaled samples, cast to float32, bit for bit
    # (clamping cannot change PCM16 means or this in-range float signal). The timed
    # baseline below skips the /32768 scaling, as a raw lower bound.
    scale = 32768.0 if dtype == "<i2" else 1.0
    wide = np.frombuffer(data, dtype=dtype, offset=44).reshape(-1, CHANNELS) / scale
    reference = wide.mean(axis=1).astype(np.float32)
    del wide
    if not np.array_equal(ours(data).view(np.uint32), reference.view(np.uint32)):
        raise SystemExit(f"{label}: decode differs from the numpy float64 mean")
    del reference

    t_ours = median_seconds(lambda: ours(data), runs)
    t_numpy = median_seconds(lambda: frombuffer_baseline(data, dtype), runs)
    t_sf = median_seconds(lambda: soundfile_baseline(data), runs)
    print(f"\n{label}: {frames:,} frames, {len(data) / 2**20:.1f} MiB, median of {runs} runs")
    print(f"  audiogate decode(inspect(...))        {t_ours * 1e3:8.1f} ms")
    print(f"  numpy frombuffer.reshape.mean.astype  {t_numpy * 1e3:8.1f} ms")
    print(f"  soundfile.read(float32) + mean        {t_sf * 1e3:8.1f} ms")
    print(
        f"  ratio ours / numpy     {t_ours / t_numpy:6.2f}x  (target <= 1.5x: "
        f"{'ok' if t_ours <= 1.5 * t_numpy else 'MISSED'})"
    )
    print(
        f"  ratio ours / soundfile {t_ours / t_sf:6.2f}x  (target < 1x: "
        f"{'ok' if t_ours < t_sf else 'MISSED'})"
    )

    output_bytes = frames * 4
    geometry = inspect(data, clip_index=0)
    peak_inspect = tracemalloc_peak(lambda: inspect(data, clip_index=0))
    peak_decode = tracemalloc_peak(lambda: decode(data, geometry, clip_index=0))
    budget = len(data) + 2 * output_bytes
    print(f"  tracemalloc peak, inspect   {peak_inspect:>13,} B")
    print(
        f"  tracemalloc peak, decode    {peak_decode:>13,} B  = output {output_bytes:,} B "
        f"+ {peak_decode - output_bytes:,} B of block buffers"
    )
    print(
        f"  budget source + 2x output   {budget:>13,} B  "
        f"({'ok' if len(data) + peak_decode <= budget else 'MISSED'}: the source is the "
        f"caller's and is not copied)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()

    frames = int(args.minutes * 60 * RATE_HZ)
    rng = np.random.default_rng(0)
    tone = np.sin(2 * np.pi * 440.0 * np.arange(frames) / RATE_HZ)
    noise = rng.standard_normal((frames, CHANNELS)) * 0.05
    signal = np.clip(0.5 * tone[:, None] + noise, -1.0, 1.0)
    pcm = np.round(signal * 32767.0).astype(np.int16)
    del tone, noise

    print(f"numpy {np.__version__}, soundfile {soundfile.__version__}")
    bench("PCM16 stereo 48 kHz", wav_bytes(pcm, float32=False), "<i2", args.runs)
    bench("float32 stereo 48 kHz", wav_bytes(signal, float32=True), "<f4", args.runs)


if __name__ == "__main__":
    main()
