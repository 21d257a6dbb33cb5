"""Voxtral end to end, WAV bytes to model inputs and prompt ids: ``AudioGate.prepare``
against what a transformers user runs, in one run, printing ratios (issue #30).

For 1 s and 30 s (and 75 s: three windows), 16 kHz mono and 48 kHz stereo PCM16 WAV:

* **ours**: ``acquire_bytes`` and ``AudioGate.prepare(messages, clips=...)`` of a gate on
  ``examples/models/voxtral-mini-3b-2507`` (its stand-in tokenizer and chat template),
  without a worker: admission, strict decode and downmix, soxr HQ, the Whisper frontend
  over the clip padded to 30 s windows, collation, the template and the ``[AUDIO]``
  expansion with its ids;
* **chat** (where mistral-common is installed: the plugin's ``reference`` extra):
  ``VoxtralProcessor.apply_chat_template`` of the same directory on a user message with an
  audio part naming the WAV file (transformers reads it, mistral-common decodes, resamples,
  pads and counts, the processor extracts the features), as the model card shows;
* **features**: only the processor's audio path, without any tokenization: ``soundfile.read``
  (float32, mean downmix), ``soxr.resample(..., "HQ")`` where the rate differs, the zero
  padding to 30 s windows and ``VoxtralProcessor._retrieve_input_features``
  (``WhisperFeatureExtractor``, 128 bins): a lower bound of any reference's time.

Paths take turns in rounds, each turn after 0.2 s of untimed runs; wall-clock medians
(bests). The ratio is the fastest reference's median over ours; target at least 2x at
1 s and 30 s. Tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_voxtral.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audiogate.acquire import AcquisitionPolicy, acquire_bytes  # noqa: E402
from audiogate.api import AudioGate  # noqa: E402
from audiogate.host import create_host  # noqa: E402
from audiogate.testing.audio import wav_bytes  # noqa: E402

__all__ = ["main"]

MODEL_DIR = ROOT / "examples" / "models" / "voxtral-mini-3b-2507"
PROMPT = "What is said in the audio?"
TARGET = 2.0
SETTLE_SECONDS = 0.2
CASES = (
    (1.0, 16_000, 1),
    (1.0, 48_000, 2),
    (30.0, 16_000, 1),
    (30.0, 48_000, 2),
    (75.0, 16_000, 1),
)


def timed(
    fns: Sequence[Callable[[], object]], repeat: int, *, rounds: int = 5
) -> list[list[float]]:
    """Wall-clock ms of each function, in ``rounds`` turns of consecutive runs."""
    out: list[list[float]] = [[] for _ in fns]
    per_round = max(1, repeat // rounds)
    for _ in range(rounds):
        for fn, times in zip(fns, out, strict=True):
            settled = time.perf_counter() + SETTLE_SECONDS
            fn()
            while time.perf_counter() < settled:
                fn()
            for _ in range(per_round):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
    return out


def wav(seconds: float, rate_hz: int, channels: int) -> bytes:
    """Speech-like PCM16 WAV: an amplitude-modulated tone in noise, ``channels`` alike."""
    t = np.arange(round(seconds * rate_hz)) / rate_hz
    x = 0.4 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 300 * t)
    x += 0.05 * np.random.default_rng(0).standard_normal(t.size)
    samples = np.clip(x, -1, 1).astype(np.float32)
    if channels > 1:
        samples = np.stack([samples * (1 - 0.1 * c) for c in range(channels)], axis=1)
    return wav_bytes(samples, rate_hz=rate_hz)


def references(folder: Path) -> dict[str, Callable[[bytes, Path], Any]]:
    """Bytes (and the same bytes as a file) in, the processor's outputs out."""
    import soundfile
    import soxr
    from transformers import AutoProcessor
    from transformers.utils import logging

    logging.set_verbosity_error()
    processor = AutoProcessor.from_pretrained(str(MODEL_DIR))
    kwargs = {
        "sampling_rate": 16_000,
        "padding": True,
        "truncation": False,
        "pad_to_multiple_of": 480_000,
        "return_tensors": "pt",
    }

    def features(data: bytes, path: Path) -> Any:
        x, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        if x.ndim == 2:
            x = x.mean(axis=1)
        if rate != 16_000:
            x = soxr.resample(x, rate, 16_000, "HQ")
        padded = np.zeros(-(-x.shape[0] // 480_000) * 480_000, dtype=np.float32)
        padded[: x.shape[0]] = x
        return processor._retrieve_input_features([padded], 3000, **kwargs)

    paths: dict[str, Callable[[bytes, Path], Any]] = {"features": features}
    if importlib.util.find_spec("mistral_common") is not None:

        def chat(data: bytes, path: Path) -> Any:
            content = [{"type": "audio", "path": str(path)}, {"type": "text", "text": PROMPT}]
            return processor.apply_chat_template([{"role": "user", "content": content}])

        paths = {"chat": chat, **paths}
    return paths


def ours(gate: AudioGate) -> Callable[[bytes], Any]:
    """Bytes in, model inputs and prompt ids out, through the public API."""
    policy = AcquisitionPolicy().narrowed(gate.policy)
    # The audio part only marks the position; its bytes come as ``clips``.
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
                {"type": "text", "text": PROMPT},
            ],
        }
    ]

    def run(data: bytes) -> Any:
        return gate.prepare(messages, clips=acquire_bytes([data], policy=policy))

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table and the verdicts; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=0, help="runs per path (default: auto)")
    args = parser.parse_args(argv)
    import audiogate_voxtral.plugin as family_plugin

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    # Only this family's plugin: the host it is measured in, whatever else is installed.
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    gate = AudioGate.from_model_dir(MODEL_DIR, host=host)
    folder = Path(tempfile.mkdtemp(prefix="bench_voxtral_"))
    mine, theirs = ours(gate), references(folder)
    names = list(theirs)
    print("wall ms, median (best); ratio = the fastest reference's median / ours")
    print(f"{'case':<30}{'ours':>19}" + "".join(f"{n:>19}" for n in names) + "   ratio  target")
    verdicts: list[str] = []
    for seconds, rate, channels in CASES:
        data = wav(seconds, rate, channels)
        path = folder / f"clip-{seconds:g}-{rate}-{channels}.wav"
        path.write_bytes(data)
        prepared = mine(data)
        if "chat" in theirs:
            # Text ids differ only where a stand-in differs; here both tokenize the same.
            want = theirs["chat"](data, path)["input_ids"][0].tolist()
            assert list(prepared.input_ids) == want, "the paths disagree on the ids"
        repeat = args.repeat or (60 if seconds < 2 else 8)
        paths = [lambda d=data: mine(d)]
        paths += [lambda d=data, p=path, f=f: f(d, p) for f in theirs.values()]
        times = timed(paths, repeat)
        medians = [statistics.median(t) for t in times]
        bests = [min(t) for t in times]
        ratio, best_ratio = min(medians[1:]) / medians[0], min(bests[1:]) / bests[0]
        label = f"voxtral {seconds:g} s {rate // 1000} kHz " + (
            "stereo" if channels > 1 else "mono"
        )
        required = seconds in (1.0, 30.0)
        verdict = ("PASS" if ratio >= TARGET else "MISS") if required else "info"
        verdicts.append(f"{label}: {verdict} (median {ratio:.2f}x, best {best_ratio:.2f}x)")
        cells = [f"{m:9.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
        print(f"{label:<30}" + "".join(f"{c:>19}" for c in cells) + f"{ratio:7.2f}x  {verdict}")
    print(f"\ntargets (>= {TARGET:g}x the fastest reference at 1 s and 30 s, on medians):")
    print("\n".join(f"  {line}" for line in verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
