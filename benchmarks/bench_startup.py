"""Start-up: CPU time of CLI commands relative to ``python -c "import numpy"``.

Every command runs in a fresh interpreter of this environment, in alternating rounds with
the baseline, and its CPU time (user + system, from ``getrusage`` of the children) is
compared with the baseline's median in the same run. Targets (issue #25): ``audiogate
families`` at most 3x, ``audiogate prepare --family gemma3n`` on the bundled 16 kHz clip
at most 4x. Also printed: the first ``AudioGate.from_model_dir`` of a process on each
bundled checkpoint (wall time, imports included) and what is left of it once
transformers is imported.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLIP = ROOT / "examples" / "audio" / "speech_16k.wav"
MODELS = ROOT / "examples" / "models"
TARGETS = {"audiogate families": 3.0, "audiogate prepare --family gemma3n": 4.0}

_FROM_MODEL_DIR = """
import sys, time
start = time.perf_counter()
import transformers  # noqa: F401
imported = time.perf_counter()
from audiogate.api import AudioGate
AudioGate.from_model_dir(sys.argv[1])
done = time.perf_counter()
print(done - start, done - imported, "torch" in sys.modules)
"""


def _cpu(command: Sequence[str]) -> float:
    """CPU seconds (user + system) of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the ratios; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    commands: dict[str, list[str]] = {
        'python -c "import numpy"': [sys.executable, "-c", "import numpy"],
        "audiogate families": [str(BIN / "audiogate"), "families"],
        "audiogate prepare --family gemma3n": [
            str(BIN / "audiogate"),
            "prepare",
            "--family",
            "gemma3n",
            "--audio",
            str(CLIP),
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():  # warm the file cache
        _cpu(command)
    for _ in range(args.rounds):
        for name, command in commands.items():
            times[name].append(_cpu(command))
    base = statistics.median(times['python -c "import numpy"'])
    print(f"CPU seconds, median of {args.rounds} (best); ratio to the numpy import's median\n")
    print(f"{'command':<38} {'median':>8} {'best':>8} {'ratio':>7} {'target':>7}")
    for name, values in times.items():
        median = statistics.median(values)
        target = TARGETS.get(name)
        verdict = "" if target is None else f"{'≤' if median / base <= target else '>'}{target:g}x"
        print(f"{name:<38} {median:8.3f} {min(values):8.3f} {median / base:6.2f}x {verdict:>7}")
    print("\nfirst AudioGate.from_model_dir of a process (wall s, best of 3)")
    print(f"{'checkpoint':<32} {'total':>7} {'after transformers':>19} {'torch imported':>15}")
    for model in sorted(p for p in MODELS.iterdir() if (p / "config.json").is_file()):
        runs = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", _FROM_MODEL_DIR, str(model)],
                capture_output=True,
                text=True,
                check=True,
            )
            total, rest, torch = out.stdout.split()
            runs.append((float(total), float(rest), torch))
        total_s, rest_s, torch = min(runs)
        print(f"{model.name:<32} {total_s:7.3f} {rest_s:19.3f} {torch:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
