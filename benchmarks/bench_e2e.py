"""End to end, WAV bytes to model-input features: the public API against what a
transformers user runs instead, in one run, printing ratios (issue #25).

For each family at 1 s and 30 s, 16 kHz mono and 48 kHz stereo PCM16 WAV:

* **ours**: ``acquire_bytes`` (sniff, ceilings) and ``AudioGate.prepare(clips=...)`` of a
  gate on the family's pinned defaults, without a worker: admission from the header,
  strict decode and downmix, the family's resampler and frontend, collation, the result
  records;
* **transformers**: ``soundfile.read`` (float32, mean downmix), ``soxr.resample(...,
  "HQ")`` to 16 kHz where the rate differs (``transformers.audio_utils.load_audio``'s
  soundfile backend) and the family's feature extractor (``Phi4MultimodalFeatureExtractor``,
  ``Gemma3nAudioFeatureExtractor``, ``WhisperFeatureExtractor(feature_size=128)`` with the
  Qwen2-Audio processor's ``padding="max_length"``);
* **original** (Phi-4 MM only): ``soundfile.read`` (float64, as ``processing_phi4mm.py``
  reads) and the remote-code algorithm (``plugins/phi4mm/tests/reference_phi4mm.py``, its
  ``resample_poly`` included).

The six families added in 0.2 (Qwen2.5-Omni, Qwen3-Omni, Voxtral, Audio Flamingo 3,
GLM-ASR, Granite Speech) are measured in the same run by their own benchmark modules
(``benchmarks/bench_<family>.py``: ``AudioGate.prepare`` on the bundled checkpoint, prompt
included, against the family's transformers processor as its docs call it, at the same
four cases), each of which prints its table and verdicts here.

The ratio is the fastest reference's median over ours; target at least 2x in every case.
Printed after the table: the floors a case cannot go under (soxr where the reference
resamples with it, since our samples must equal its output; a parity-exact frontend's
FFT), and the framework's overhead per 1 s clip: ``prepare()`` against the family's own
stage functions called directly on the decoded samples (target at most 0.15 ms).

Timing as the family benchmarks: paths take turns in rounds, each turn after 0.2 s of
untimed runs of the same path (OpenBLAS and torch threads spin after a call), wall-clock
medians (bests). Tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_e2e.py [--repeat N] [--family NAME ...]
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import statistics
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "phi4mm" / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from family_bench import timed, wav  # noqa: E402

from audiogate.acquire import AcquisitionPolicy, acquire_bytes  # noqa: E402
from audiogate.api import AudioGate  # noqa: E402
from audiogate.cancel import NEVER  # noqa: E402

__all__ = ["main"]

#: Measured here against their feature extractors; every other shipped family by its
#: own ``bench_<family>.py``, in this process.
FEATURE_FAMILIES = ("phi4mm", "gemma3n", "qwen2audio")
FAMILIES = tuple(
    entry["name"]
    for entry in tomllib.loads((ROOT / "families.toml").read_text("utf-8"))["families"]
)
TARGET = 2.0
OVERHEAD_TARGET_MS = 0.15
CASES = ((1.0, 16_000, 1), (1.0, 48_000, 2), (30.0, 16_000, 1), (30.0, 48_000, 2))


def references(family: str) -> dict[str, Callable[[bytes], Any]]:
    """What a transformers user runs (and, for Phi-4 MM, the remote code), bytes in."""
    import soundfile
    import soxr
    from transformers.utils import logging

    logging.set_verbosity_error()

    def load(data: bytes) -> np.ndarray:
        x, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        if x.ndim == 2:
            x = x.mean(axis=1)
        return x if rate == 16_000 else soxr.resample(x, rate, 16_000, "HQ")

    if family == "phi4mm":
        from reference_phi4mm import original_features
        from transformers import Phi4MultimodalFeatureExtractor

        phi = Phi4MultimodalFeatureExtractor()

        def original(data: bytes) -> Any:
            x, rate = soundfile.read(io.BytesIO(data))
            return original_features(x, rate)

        return {
            "transformers": lambda data: phi(load(data), sampling_rate=16_000, return_tensors="np")[
                "audio_input_features"
            ],
            "original": original,
        }
    if family == "gemma3n":
        from transformers import Gemma3nAudioFeatureExtractor

        gemma = Gemma3nAudioFeatureExtractor()
        return {"transformers": lambda data: gemma(load(data), return_tensors="np")}
    from transformers import WhisperFeatureExtractor

    whisper = WhisperFeatureExtractor(feature_size=128)
    return {
        "transformers": lambda data: whisper(
            load(data),
            sampling_rate=16_000,
            return_attention_mask=True,
            padding="max_length",
            return_tensors="np",
        )
    }


def ours(gate: AudioGate) -> Callable[[bytes], Any]:
    """Bytes in, model inputs out, through the public API."""
    policy = AcquisitionPolicy().narrowed(gate.policy)

    def run(data: bytes) -> Any:
        return gate.prepare(clips=acquire_bytes([data], policy=policy)).model_inputs

    return run


def direct(gate: AudioGate, family: str) -> Callable[[bytes], Any]:
    """The family's stage functions on the samples (PCM16 after a 44-byte header, mono),
    without the host, the pipeline or the records: what the framework adds is ours
    minus this."""
    import importlib

    features = importlib.import_module(f"audiogate_{family}.features")
    resample = importlib.import_module(f"audiogate_{family}.resample")
    collate = importlib.import_module(f"audiogate_{family}.collate")
    policy = gate.policy

    def run(data: bytes) -> Any:
        x = np.frombuffer(data, dtype="<i2", offset=44).astype(np.float32) * (1 / 32768)
        rplan = resample.plan_resample(
            policy, source_rate_hz=16_000, source_samples=x.size, clip_index=0
        )
        y = resample.resample(policy, rplan, x, clip_index=0, cancel=NEVER)
        fplan = features.plan_features(policy, rate_hz=16_000, samples=y.size, clip_index=0)
        clip = features.extract_features(
            policy, fplan, y, rate_hz=16_000, clip_index=0, cancel=NEVER
        )
        return collate.collate_features(policy, [clip]).inputs

    return run


def floors(repeat: int) -> None:
    """soxr HQ 48 kHz → 16 kHz (every reference and ours where it resamples with soxr)."""
    import soxr

    print("\nfloors (median ms):")
    for seconds in (1.0, 30.0):
        x = (0.3 * np.random.default_rng(1).standard_normal(int(seconds * 48_000))).astype(
            np.float32
        )
        [times] = timed([lambda x=x: soxr.resample(x, 48_000, 16_000, "HQ")], repeat)
        print(f"  soxr HQ 48 → 16 kHz, {seconds:g} s: {statistics.median(times):.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, the floors and the overhead; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=0, help="runs per path (default: auto)")
    parser.add_argument("--family", action="append", choices=FAMILIES)
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("wall ms, median (best); ratio = fastest reference's median / ours (bests' ratio)")
    header = f"{'case':<30}{'ours':>17}{'transformers':>17}{'original':>17}{'ratio':>8}"
    print(header + "  target")
    verdicts: list[str] = []
    overheads: list[str] = []
    delegated = [family for family in families if family not in FEATURE_FAMILIES]
    families = [family for family in families if family in FEATURE_FAMILIES]
    for family in families:
        gate = AudioGate.from_family(family)
        refs = references(family)
        mine = ours(gate)
        for seconds, rate, channels in CASES:
            data = wav(seconds, rate, channels)
            paths = [lambda data=data, mine=mine: mine(data)]
            paths += [lambda data=data, ref=ref: ref(data) for ref in refs.values()]
            repeat = args.repeat or (100 if seconds < 2 else 20)
            times = timed(paths, repeat)
            medians = [statistics.median(t) for t in times]
            bests = [min(t) for t in times]
            ratio = min(medians[1:]) / medians[0]
            best_ratio = min(bests[1:]) / bests[0]
            cells = [f"{m:8.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
            if len(cells) == 2:
                cells.append("-")
            label = (
                f"{family} {seconds:g} s {rate // 1000} kHz {'stereo' if channels > 1 else 'mono'}"
            )
            verdict = "PASS" if ratio >= TARGET else "MISS"
            verdicts.append(f"{label}: {verdict} (median {ratio:.2f}x, best {best_ratio:.2f}x)")
            print(
                f"{label:<30}"
                + "".join(f"{c:>17}" for c in cells)
                + f"{ratio:7.2f}x ({best_ratio:.2f}x)  {verdict}"
            )
        data = wav(1.0, 16_000, 1)
        repeat = args.repeat or 300
        stages = direct(gate, family)
        via_api, via_stages = timed(
            [lambda data=data, mine=mine: mine(data), lambda data=data, f=stages: f(data)], repeat
        )
        extra = statistics.median(via_api) - statistics.median(via_stages)
        overheads.append(
            f"  {family}: prepare() {statistics.median(via_api):.3f} ms, stages directly "
            f"{statistics.median(via_stages):.3f} ms: {extra:.3f} ms "
            f"({'PASS' if extra <= OVERHEAD_TARGET_MS else 'MISS'}, target ≤ {OVERHEAD_TARGET_MS})"
        )
    floors(args.repeat or 50)
    print("\nframework overhead per 1 s clip at 16 kHz (median of prepare() - the stages):")
    print("\n".join(overheads))
    if families:
        print(f"\ntargets (>= {TARGET:g}x the fastest reference, on medians):")
        print("\n".join(f"  {line}" for line in verdicts))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    for family in delegated:
        print(f"\n== {family}: benchmarks/bench_{family}.py")
        bench = importlib.import_module(f"bench_{family}")
        bench.main(["--repeat", str(args.repeat)] if args.repeat else [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
