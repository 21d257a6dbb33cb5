"""The MLX feature backend against the numpy one, per family, in one run.

Cases: 1 s and 30 s of 16 kHz audio for every family, and 10 min for Phi-4 MM (the only
family that takes clips that long). Both backends run the same stage through the plugin
host (``extract_features`` with ``policy.feature_backend`` set), on the same read-only
float32 waveform; the MLX result is evaluated (``mx.eval`` per block, as the backend always
does), so its time includes the device work and the waveform upload. Printed per case: the
median (and best) wall time of each backend, the ratio numpy / mlx (above 1: MLX is
faster), and the largest feature difference between the two.

The MLX device is the GPU where there is one (Apple silicon's Metal, or a CUDA build of
MLX), else the CPU; ``--device`` forces one. On Linux with ``mlx[cpu]`` the MLX backend is
a correctness backend, not a performance one: its CPU GEMM is far slower than OpenBLAS,
and Phi-4 MM's and Gemma 3n's float-float FFT is hundreds of elementwise ops per pass
(``docs/mlx.md``). On Apple silicon or CUDA the
same run shows the device's speed, with nothing to change here.

Timings are medians of runs taken in alternating rounds after a warm-up; tests never
assert on them.

Usage: ``python benchmarks/bench_mlx.py [--repeat N] [--device auto|cpu|gpu]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable

import attrs
import numpy as np

from audiogate.cancel import NEVER
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy, CheckpointConfigs

try:
    import mlx.core as mx
except ImportError:  # pragma: no cover - depends on the platform
    sys.exit("bench_mlx needs MLX: pip install 'audiogate[mlx]' (on Linux: pip install 'mlx[cpu]')")

RATE = 16_000
CASES: dict[str, tuple[float, ...]] = {
    "phi4mm": (1.0, 30.0, 600.0),
    "gemma3n": (1.0, 30.0),
    "qwen2audio": (1.0, 30.0),
}


def gpu_available() -> bool:
    """Whether MLX has a GPU here (Metal on Apple silicon, or a CUDA build)."""
    cuda = getattr(mx, "cuda", None)
    return bool(mx.metal.is_available() or (cuda is not None and cuda.is_available()))


def select_device(choice: str) -> str:
    """Set MLX's default device (``auto``: the GPU where there is one) and describe it."""
    use_gpu = choice == "gpu" or (choice == "auto" and gpu_available())
    mx.set_default_device(mx.gpu if use_gpu else mx.cpu)
    kind = ("Metal" if mx.metal.is_available() else "CUDA") if use_gpu else "CPU"
    return f"{mx.default_device()} ({kind})"


def signal(seconds: float) -> np.ndarray:
    """Speech-like test audio: a modulated tone over a noise floor, read-only float32."""
    t = np.arange(round(seconds * RATE)) / RATE
    rng = np.random.default_rng(0)
    x = 0.4 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 300 * t)
    x += 0.05 * rng.standard_normal(len(t))
    out = np.clip(x, -1, 1).astype(np.float32)
    out.flags.writeable = False
    return out


def policy_of(host: FamilyHost, family: str) -> AudioPolicy:
    if family == "phi4mm":  # the remote-code variant (the checkpoint's own processor)
        return host.parse_policy("phi4mm", CheckpointConfigs(model={"model_type": "phi4mm"}))
    return host.default_policy(family)


def alternating_ms(fns: list[Callable[[], object]], repeat: int) -> list[tuple[float, float]]:
    """``(median, best)`` wall ms of each function, runs taken in alternating rounds."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [(statistics.median(t) * 1e3, min(t) * 1e3) for t in times]


def bench_case(host: FamilyHost, numpy_policy: AudioPolicy, seconds: float, repeat: int) -> str:
    """One printed row: both backends on ``seconds`` of audio."""
    mlx_policy = attrs.evolve(numpy_policy, feature_backend="mlx")
    wave = signal(seconds)
    plan = host.plan_features(numpy_policy, rate_hz=RATE, samples=wave.shape[0], clip_index=0)
    runs = [
        functools.partial(
            host.extract_features, policy, plan, wave, rate_hz=RATE, clip_index=0, cancel=NEVER
        )
        for policy in (numpy_policy, mlx_policy)
    ]
    audio = f"{seconds:g} s" if seconds < 60 else f"{seconds / 60:g} min"
    try:
        diff = np.abs(np.asarray(runs[1]().features) - runs[0]().features).max()
    except RuntimeError as exc:  # e.g. an MLX build whose device lacks an FFT
        ((np_med, np_best),) = alternating_ms(runs[:1], repeat)
        return (
            f"{numpy_policy.family:<11} {audio:>7} {np_med:>8.2f} ({np_best:>5.2f}) "
            f"mlx failed on {mx.default_device()}: {exc}"
        )
    (np_med, np_best), (mx_med, mx_best) = alternating_ms(runs, repeat)
    return (
        f"{numpy_policy.family:<11} {audio:>7} {np_med:>8.2f} ({np_best:>5.2f}) "
        f"{mx_med:>8.2f} ({mx_best:>5.2f}) {np_med / mx_med:>7.2f} {diff:>10.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs per case and backend")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    args = parser.parse_args()
    device = select_device(args.device)
    host = create_host(load_entry_points=True)
    print(f"mlx {mx.__version__}, numpy {np.__version__}; MLX device: {device}")
    if mx.default_device().type == mx.cpu:
        print(
            "note: MLX runs on the CPU here. On Linux (mlx[cpu]) the MLX backend is a\n"
            "correctness backend, not a performance one: its CPU GEMM is far slower than\n"
            "OpenBLAS, and the float-float FFT (phi4mm, gemma3n) is hundreds of elementwise\n"
            "ops per pass. On Apple silicon or a CUDA build, this run shows the device's speed."
        )
    else:
        print("note: MLX runs on the GPU; times include the waveform upload and mx.eval.")
    columns = ("family", "audio", "numpy ms", "mlx ms", "np/mlx", "max|diff|")
    header = "{:<11} {:>7} {:>16} {:>16} {:>7} {:>10}".format(*columns)
    print(header)
    print("-" * len(header))
    for family, durations in CASES.items():
        numpy_policy = policy_of(host, family)
        for seconds in durations:
            repeat = max(3, args.repeat // 5) if seconds > 60 else args.repeat
            print(bench_case(host, numpy_policy, seconds, repeat))
    print("(median (best) of alternating runs; np/mlx above 1: MLX is faster)")


if __name__ == "__main__":
    main()
