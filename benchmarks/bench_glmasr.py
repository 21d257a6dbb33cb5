"""GLM-ASR end to end, WAV bytes to model inputs and prompt ids: ``AudioGate.prepare``
against what a transformers user runs, in one run, printing ratios (issue #30).

For 1 s and 30 s (and 120 s: four windows), 16 kHz mono and 48 kHz stereo PCM16 WAV:

* **ours**: ``acquire_bytes`` and ``AudioGate.prepare(messages, clips=...)`` of a gate on
  ``examples/models/glm-asr-nano-2512`` (its stand-in tokenizer and chat template),
  without a worker: admission, strict decode and downmix, soxr HQ, the 30 s Whisper
  windows, collation, the chat template and the ``<|pad|>`` expansion with its ids;
* **transformers**: ``soundfile.read`` (float32, mean downmix), ``soxr.resample(..., "HQ")``
  to 16 kHz where the rate differs (``transformers.audio_utils.load_audio``'s soundfile
  backend), then ``GlmAsrProcessor.apply_transcription_request`` of the same
  directory (template, windows, ``WhisperFeatureExtractor``, expansion, tokenization).

Paths take turns in rounds, each turn after 0.2 s of untimed runs; wall-clock medians
(bests). The ratio is the reference's median over ours; target at least 2x at 1 s and
30 s. Tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_glmasr.py [--repeat N]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
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

MODEL_DIR = ROOT / "examples" / "models" / "glm-asr-nano-2512"
PROMPT = "Please transcribe this audio into text"
TARGET = 2.0
SETTLE_SECONDS = 0.2
CASES = (
    (1.0, 16_000, 1),
    (1.0, 48_000, 2),
    (30.0, 16_000, 1),
    (30.0, 48_000, 2),
    (120.0, 16_000, 1),
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


def references() -> dict[str, Callable[[bytes], Any]]:
    """Bytes in, the processor's ``BatchFeature`` out, as a transformers user runs it:
    ``apply_transcription_request`` (the template rendered per call), and the processor
    called on the prompt rendered once beforehand (the faster of the two)."""
    import soundfile
    import soxr
    from transformers import AutoProcessor
    from transformers.utils import logging

    logging.set_verbosity_error()
    processor = AutoProcessor.from_pretrained(str(MODEL_DIR))

    rendered = processor.apply_transcription_request("x", prompt=PROMPT, tokenize=False)[0]

    def load(data: bytes) -> Any:
        x, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        if x.ndim == 2:
            x = x.mean(axis=1)
        return x if rate == 16_000 else soxr.resample(x, rate, 16_000, "HQ")

    return {
        "request": lambda data: processor.apply_transcription_request(load(data), prompt=PROMPT),
        "processor": lambda data: processor(text=rendered, audio=[load(data)]),
    }


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
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("wall ms, median (best); ratio = the faster reference's median / ours")
    print(f"{'case':<36}{'ours':>19}{'request':>19}{'processor':>19}{'ratio':>8}  target")
    import audiogate_glmasr.plugin as family_plugin

    # Only this family's plugin: the host it is measured in, whatever else is installed.
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    gate = AudioGate.from_model_dir(MODEL_DIR, host=host)
    mine, theirs = ours(gate), references()
    verdicts: list[str] = []
    for seconds, rate, channels in CASES:
        data = wav(seconds, rate, channels)
        ids = list(mine(data).input_ids)
        for ref in theirs.values():
            assert ids == ref(data)["input_ids"][0].tolist(), "the paths disagree on the ids"
        repeat = args.repeat or (60 if seconds < 2 else 10)
        paths = [lambda d=data: mine(d)] + [lambda d=data, f=f: f(d) for f in theirs.values()]
        times = timed(paths, repeat)
        medians = [statistics.median(t) for t in times]
        bests = [min(t) for t in times]
        ratio, best_ratio = min(medians[1:]) / medians[0], min(bests[1:]) / bests[0]
        label = f"glmasr {seconds:g} s {rate // 1000} kHz " + ("stereo" if channels > 1 else "mono")
        required = seconds in (1.0, 30.0)
        verdict = ("PASS" if ratio >= TARGET else "MISS") if required else "info"
        verdicts.append(f"{label}: {verdict} (median {ratio:.2f}x, best {best_ratio:.2f}x)")
        cells = [f"{m:9.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
        print(f"{label:<36}" + "".join(f"{c:>19}" for c in cells) + f"{ratio:7.2f}x  {verdict}")
    print(f"\ntargets (>= {TARGET:g}x the reference at 1 s and 30 s, on medians):")
    print("\n".join(f"  {line}" for line in verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
