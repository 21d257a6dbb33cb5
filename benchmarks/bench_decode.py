"""Benchmark the decoder against NumPy, soundfile and FFmpeg (PyAV) in one run.

Run: ``python benchmarks/bench_decode.py [--runs N] [--minutes M] [--seconds S]``.

1. PCM16 and float32 WAV, M minutes of 48 kHz stereo: the median time of each path, the
   ratios against ``numpy.frombuffer`` plus the conversion (target: at most 1.2x) and
   soundfile (target: faster), and the tracemalloc peak of ``decode`` against the
   budget of source bytes + 2x output.
2. Every other format (issue #20; docs/formats.md), S seconds (default 30) of 48 kHz
   stereo: audiogate's ``inspect`` + ``decode`` (compressed formats through a warm
   decoder process) against soundfile and PyAV called directly here (decode + the same
   mono mean), as ratios. Needs ``audiogate[codecs,codecs-ffmpeg]``.
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
    mean = samples.reshape(-1, CHANNELS).mean(axis=1)
    if dtype == "<i2":
        mean /= 32768.0  # the conversion to [-1, 1)
    return mean.astype(np.float32)


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
    # baseline is numpy.frombuffer plus that conversion.
    scale = 32768.0 if dtype == "<i2" else 1.0
    wide = np.frombuffer(data, dtype=dtype, offset=44).reshape(-1, CHANNELS) / scale
    reference = wide.mean(axis=1).astype(np.float32)
    del wide
    if not np.array_equal(ours(data).view(np.uint32), reference.view(np.uint32)):
        raise SystemExit(f"{label}: decode differs from the numpy float64 mean")
    del reference

    t_ours = median_seconds(lambda: ours(data), runs)
    t_numpy = median_seconds(lambda: frombuffer_baseline(data, dtype), runs)
    t_sf = median_seconds(lambda data=data: soundfile_baseline(data), runs)
    print(f"\n{label}: {frames:,} frames, {len(data) / 2**20:.1f} MiB, median of {runs} runs")
    print(f"  audiogate decode(inspect(...))        {t_ours * 1e3:8.1f} ms")
    print(f"  numpy frombuffer + conversion         {t_numpy * 1e3:8.1f} ms")
    print(f"  soundfile.read(float32) + mean        {t_sf * 1e3:8.1f} ms")
    print(
        f"  ratio ours / numpy     {t_ours / t_numpy:6.2f}x  (target <= 1.2x: "
        f"{'ok' if t_ours <= 1.2 * t_numpy else 'MISSED'})"
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


# soundfile subtypes of the other WAV encodings; the compressed formats are encoded by
# tests/support/codec_fixtures.py (PyAV).
_WAV_SUBTYPES = ("PCM_U8", "PCM_24", "PCM_32", "DOUBLE", "ULAW", "ALAW")
_COMPRESSED = ("aiff", "flac", "mp3", "vorbis", "ogg", "webm", "m4a")


def _pyav_mean(data: bytes) -> np.ndarray:
    import av

    blocks = []
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            array = frame.to_ndarray()
            array = array.T if frame.format.is_planar else array.reshape(-1, CHANNELS)
            blocks.append(array.mean(axis=1))
    return np.concatenate(blocks).astype(np.float32)


def bench_formats(seconds: float, runs: int) -> None:
    """Every other format: ours against soundfile and PyAV called directly."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    from codec_fixtures import encode, tone

    from audiogate.decode.geometry import AUTO
    from audiogate.decode.isolation import DecoderPool

    signal = tone(rate_hz=RATE_HZ, seconds=seconds, channels=CHANNELS)
    cases: list[tuple[str, bytes]] = []
    for subtype in _WAV_SUBTYPES:
        buf = io.BytesIO()
        soundfile.write(buf, signal, RATE_HZ, format="WAV", subtype=subtype)
        cases.append((f"wav {subtype.lower()}", buf.getvalue()))
    cases += [(name, encode(name, signal, rate_hz=RATE_HZ)) for name in _COMPRESSED]
    pool = DecoderPool(processes=1)
    print(f"\n{seconds:g} s of 48 kHz stereo, median of {runs} runs (ms; ratios ours / theirs)")
    print(
        f"  {'format':12s} {'ours':>8s} {'soundfile':>10s} {'PyAV':>8s} {'/sf':>6s} {'/PyAV':>6s}"
    )
    try:
        for label, data in cases:

            def mine(data: bytes = data) -> np.ndarray:
                geometry = inspect(data, clip_index=0, source_format=AUTO)
                return decode(data, geometry, clip_index=0, decoders=pool)

            t_ours = median_seconds(mine, runs)
            try:
                t_sf: float | None = median_seconds(
                    lambda data=data: soundfile_baseline(data), runs
                )
            except soundfile.LibsndfileError:
                t_sf = None
            t_av = median_seconds(lambda data=data: _pyav_mean(data), runs)
            sf_ms = f"{t_sf * 1e3:10.1f}" if t_sf else f"{'-':>10s}"
            sf_ratio = f"{t_ours / t_sf:6.2f}" if t_sf else f"{'-':>6s}"
            print(
                f"  {label:12s} {t_ours * 1e3:8.1f} {sf_ms} {t_av * 1e3:8.1f} "
                f"{sf_ratio} {t_ours / t_av:6.2f}"
            )
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
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
    bench_formats(args.seconds, args.runs)


if __name__ == "__main__":
    main()
