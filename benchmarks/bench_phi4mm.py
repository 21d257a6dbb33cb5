"""Phi-4 MM frontend speed and memory against both references, in one run.

For 1 s, 30 s and 10 min of audio at 16 kHz and 48 kHz it times:

* ``audiogate``: the plugin's resample plan + resampler + feature plan + extractor,
  through the host, from the decoded float32 waveform;
* ``original``: the remote-code ``_extract_features`` restated in
  ``tests/phi4mm/reference_phi4mm.py`` (its ``resample_poly(x, 1, 3)`` included at 48 kHz);
* ``transformers``: ``Phi4MultimodalFeatureExtractor`` (5.x), with soxr HQ to 16 kHz
  first at 48 kHz as its loader does (skipped if torch/transformers are missing).

The three run alternately, round after round, so that load from other processes hits
all of them; it prints the best and the median time of each, the ratios (best times) of
each reference and of the faster one to audiogate, and the peak memory traced while
audiogate runs (``tracemalloc``: numpy's buffers are traced, BLAS and pocketfft
internals are not; the run happens in a fresh thread so that the per-thread block
scratch counts). The policy refuses 10 min at 48 kHz in its preflight (the seed's
polyphase work bound allows about 9.2 min at factor 3); that row times the same
resampler and extractor without the preflight. A last row processes a 30-minute 16 kHz
clip and compares its peak with the policy's 512 MiB waveform working budget.

Usage: ``python benchmarks/bench_phi4mm.py [--repeat N] [--threads N] [--cpu-time]
[--no-transformers]``. ``--threads`` caps BLAS/OpenMP threads (and torch's) for every
implementation alike; with ``--threads 1``, ``--cpu-time`` compares CPU time, which other
processes on a shared machine disturb far less than wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _early_threads(argv: list[str]) -> None:
    # BLAS reads its thread count when numpy loads, so this must run before the imports.
    if "--threads" in argv:
        value = argv[argv.index("--threads") + 1]
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = value


_early_threads(sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "phi4mm"))

from reference_phi4mm import original_features  # noqa: E402

from audiogate.cancel import NEVER  # noqa: E402
from audiogate.errors import LimitError  # noqa: E402
from audiogate.host import create_host  # noqa: E402
from audiogate.policy import CheckpointConfigs  # noqa: E402
from audiogate.records import ResamplePlan, readonly  # noqa: E402
from audiogate_phi4mm.resample import decimate, speechlib_rate_rule  # noqa: E402

MIB = 1 << 20
CASES = [(1, 16_000), (1, 48_000), (30, 16_000), (30, 48_000), (600, 16_000), (600, 48_000)]


def interleaved_ms(
    runs: dict[str, Callable[[], object]], rounds: int, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """Time each callable once per round, alternating, so load from neighbours hits all."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm caches, plans and banks
    for _ in range(rounds):
        for name, run in runs.items():
            start = clock()
            run()
            times[name].append((clock() - start) * 1e3)
    return times


def traced_peak(run: Callable[[], object]) -> int:
    """Peak traced bytes of ``run`` in a fresh thread, so its per-thread scratch counts."""
    peak: list[int] = []

    def target() -> None:
        tracemalloc.start()
        try:
            run()
            peak.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return peak[0]


def make_audiogate(policy, host):
    def run(wave: np.ndarray, rate: int) -> np.ndarray:
        try:
            plan = host.plan_resample(
                policy, source_rate_hz=rate, source_samples=wave.size, clip_index=0
            )
        except LimitError:
            # The pinned work bound (536,870,912 units) refuses 48 kHz clips longer than
            # ~9.2 min; time the same resampler and extractor without the preflight.
            down, effective = speechlib_rate_rule(rate, clip_index=0)
            out = decimate(wave, down=down, clip_index=0, cancel=NEVER)
            plan = ResamplePlan(
                source_rate_hz=rate,
                source_samples=wave.size,
                output_rate_hz=effective,
                output_samples=out.size,
                algorithm="scipy_polyphase_integer",
            )
        else:
            out = host.resample(policy, plan, wave, clip_index=0, cancel=NEVER)
        features = host.plan_features(
            policy, rate_hz=plan.output_rate_hz, samples=out.size, clip_index=0
        )
        return host.extract_features(
            policy, features, out, rate_hz=plan.output_rate_hz, clip_index=0, cancel=NEVER
        ).features

    return run


def make_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import soxr
    from transformers import Phi4MultimodalFeatureExtractor
    from transformers.utils import logging

    logging.set_verbosity_error()
    extractor = Phi4MultimodalFeatureExtractor()

    def run(wave: np.ndarray, rate: int) -> np.ndarray:
        x = wave if rate == 16_000 else soxr.resample(wave, rate, 16_000, "HQ")
        return extractor(x, sampling_rate=16_000, return_tensors="np")["audio_input_features"]

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds per case")
    parser.add_argument("--threads", type=int, default=None, help="cap BLAS/OpenMP threads")
    parser.add_argument("--no-transformers", action="store_true", help="skip the HF reference")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="measure process CPU time instead of wall time (meaningful with --threads 1 on "
        "a shared machine: it leaves out time spent waiting for the cores)",
    )
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.threads is not None:
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            pass

    host = create_host()
    policy = host.parse_policy("phi4mm", CheckpointConfigs(model={"model_type": "phi4mm"}))
    ours = make_audiogate(policy, host)
    hf = None
    if not args.no_transformers:
        try:
            hf = make_transformers()
        except ImportError as exc:
            print(f"transformers reference skipped: {exc}")

    print(
        f"cpus={os.cpu_count()}  threads={args.threads or 'default'}  numpy={np.__version__}"
        f"  rounds={args.repeat}  clock={'process CPU' if args.cpu_time else 'wall'}"
    )
    print("ms: best of the rounds (median in brackets); ratio = reference time / audiogate time")
    print(
        f"{'case':>10} {'audiogate':>16} {'original':>16} {'transformers':>16} "
        f"{'x orig':>7} {'x hf':>6} {'x faster':>9} {'peak MiB':>9}"
    )
    rng = np.random.default_rng(0)
    for seconds, rate in CASES:
        n = seconds * rate
        wave = readonly((0.3 * rng.standard_normal(n)).astype(np.float32))
        runs: dict[str, Callable[[], object]] = {
            "ours": lambda w=wave, r=rate: ours(w, r),
            "orig": lambda w=wave, r=rate: original_features(w.astype(np.float64), r),
        }
        if hf is not None:
            runs["hf"] = lambda w=wave, r=rate: hf(w, r)
        rounds = max(3, args.repeat // 2) if seconds >= 600 else args.repeat
        times = interleaved_ms(runs, rounds, clock)
        best = {name: min(values) for name, values in times.items()}
        middle = {name: statistics.median(values) for name, values in times.items()}
        best.setdefault("hf", float("nan"))
        middle.setdefault("hf", float("nan"))
        faster = min(best["orig"], best["hf"]) if hf is not None else best["orig"]
        peak = traced_peak(runs["ours"]) / MIB
        cells = " ".join(
            f"{f'{best[k]:.2f} ({middle[k]:.2f})':>16}" for k in ("ours", "orig", "hf")
        )
        print(
            f"{f'{seconds}s@{rate // 1000}k':>10} {cells} {best['orig'] / best['ours']:7.2f} "
            f"{best['hf'] / best['ours']:6.2f} {faster / best['ours']:9.2f} {peak:9.1f}"
        )

    samples = 16_000 * 1_800
    wave = readonly(np.full(samples, 0.01, dtype=np.float32))
    start = time.perf_counter()
    peak = traced_peak(lambda: ours(wave, 16_000))
    elapsed = time.perf_counter() - start
    features = samples // 160 * 80 * 4
    budget = policy.max_waveform_working_bytes_per_request
    total = wave.nbytes + peak
    print(
        f"30 min @16k: {elapsed:.2f} s, traced peak {peak / MIB:.1f} MiB (features "
        f"{features / MIB:.1f} MiB) + waveform {wave.nbytes / MIB:.1f} MiB = {total / MIB:.1f} "
        f"MiB of the {budget / MIB:.0f} MiB working budget"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
