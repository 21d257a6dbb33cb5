"""Benchmark the Qwen2-Audio frontend against ``WhisperFeatureExtractor(feature_size=128)``.

Run: ``python benchmarks/bench_qwen2audio.py [--runs N] [--torch-threads T]``. For 1 s and
30 s of audio, prints the median time of our features (plan + extraction, as the plugin
runs them) against the reference extractor (torch path, ``padding="max_length"``, as
``Qwen2AudioProcessor`` calls it), and for 48 kHz input our soxr resampling + features
against ``soxr.resample`` + the extractor. Ratios are reference / ours. Targets: at least
20x at 1 s (the reference always computes the 30 s window) and at least 5x at 30 s.

Both paths are timed interleaved, run by run, so load on the machine hits both alike.
Ours is single-threaded; the reference runs with ``--torch-threads`` intra-op threads
(default 1, for a like-for-like comparison; torch's own default is the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import soxr

from audiogate.cancel import NEVER
from audiogate.host import create_host
from audiogate.policy import CheckpointConfigs
from audiogate_qwen2audio import plugin

RATE_HZ = 16_000


def signal(seconds: float, rate_hz: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    n = round(seconds * rate_hz)
    t = np.arange(n) / rate_hz
    x = 0.3 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 440 * t)
    return (x + 0.05 * rng.standard_normal(n)).astype(np.float32)


def interleaved(
    a: Callable[[], object], b: Callable[[], object], runs: int
) -> tuple[list[float], list[float]]:
    """Run times of ``a`` and ``b``, alternating, after one warm-up call each."""
    a()
    b()
    times_a, times_b = [], []
    for _ in range(runs):
        start = time.perf_counter()
        a()
        times_a.append(time.perf_counter() - start)
        start = time.perf_counter()
        b()
        times_b.append(time.perf_counter() - start)
    return times_a, times_b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import WhisperFeatureExtractor

    torch.set_num_threads(args.torch_threads)
    extractor = WhisperFeatureExtractor(feature_size=128)
    host = create_host(plugins=[plugin], load_entry_points=False)
    policy = host.parse_policy("qwen2audio", CheckpointConfigs(model={"model_type": "qwen2_audio"}))

    def reference(waveform: np.ndarray) -> object:
        return extractor(
            waveform,
            sampling_rate=RATE_HZ,
            return_attention_mask=True,
            padding="max_length",
            return_tensors="np",
        )

    def ours(waveform: np.ndarray) -> object:
        plan = host.plan_features(policy, rate_hz=RATE_HZ, samples=waveform.shape[0], clip_index=0)
        return host.extract_features(
            policy, plan, waveform, rate_hz=RATE_HZ, clip_index=0, cancel=NEVER
        )

    def ours_48k(source: np.ndarray) -> object:
        plan = host.plan_resample(
            policy, source_rate_hz=48_000, source_samples=source.shape[0], clip_index=0
        )
        return ours(host.resample(policy, plan, source, clip_index=0, cancel=NEVER))

    def reference_48k(source: np.ndarray) -> object:
        return reference(soxr.resample(source, 48_000, RATE_HZ, "soxr_hq"))

    print(
        f"torch {torch.__version__}, {args.torch_threads} intra-op thread(s); "
        f"{args.runs} interleaved runs; ratios of medians (and of minima)"
    )
    print(f"{'case':40s} {'ref ms':>7s} {'ours ms':>8s} {'ratio':>7s} {'(min)':>7s}  target")
    for seconds, target in ((1.0, 20.0), (30.0, 5.0)):
        at16 = signal(seconds, RATE_HZ)
        at48 = signal(seconds, 48_000)
        rows = (
            (f"16 kHz input, {seconds:g} s", reference, ours, at16, target),
            (f"48 kHz input (soxr + features), {seconds:g} s", reference_48k, ours_48k, at48, None),
        )
        for label, ref, mine, x, goal in rows:
            ref_t, our_t = interleaved(
                lambda ref=ref, x=x: ref(x), lambda mine=mine, x=x: mine(x), args.runs
            )
            ref_s, our_s = statistics.median(ref_t), statistics.median(our_t)
            ratio, best = ref_s / our_s, min(ref_t) / min(our_t)
            verdict = (
                "" if goal is None else f">= {goal:g}x: {'met' if ratio >= goal else 'missed'}"
            )
            print(
                f"{label:40s} {ref_s * 1e3:7.2f} {our_s * 1e3:8.2f} {ratio:6.1f}x "
                f"{best:6.1f}x  {verdict}"
            )


if __name__ == "__main__":
    main()
