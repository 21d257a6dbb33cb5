"""Qwen3-Omni end to end, WAV bytes to model inputs and prompt ids: ``AudioGate.prepare``
against what a transformers user runs, in one run, printing ratios (issue #30).

For 1 s and 30 s (and 300 s, the bound), 16 kHz mono and 48 kHz stereo PCM16 WAV:

* **ours**: ``acquire_bytes`` and ``AudioGate.prepare(messages, clips=...)`` of a gate on
  ``examples/models/qwen3-omni-30b-a3b-instruct`` (its stand-in tokenizer and chat
  template), without a worker: admission, strict decode and downmix, soxr HQ, the
  Whisper log-mel of the clip, collation, the chat template and the ``<|audio_pad|>``
  expansion with its ids;
* **transformers**: ``soundfile.read`` (float32, mean downmix), ``soxr.resample(..., "HQ")``
  to 16 kHz where the rate differs (``transformers.audio_utils.load_audio``'s soundfile
  backend), then ``Qwen3OmniMoeProcessor`` of the same directory called on the chat
  template's text rendered once beforehand (``WhisperFeatureExtractor``, expansion,
  tokenization). ``AutoProcessor`` would also build the image and video processors,
  which need Pillow and torchvision; the audio path never uses them, so the processor is
  built from the directory's tokenizer and feature extractor.

Paths take turns in rounds, each turn after 0.2 s of untimed runs; wall-clock medians
(bests). The ratio is the reference's median over ours; target at least 2x at 1 s and
30 s. Tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_qwen3omni.py [--repeat N]
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
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audiogate.acquire import AcquisitionPolicy, acquire_bytes  # noqa: E402
from audiogate.api import AudioGate  # noqa: E402
from audiogate.host import create_host  # noqa: E402
from audiogate.testing.audio import wav_bytes  # noqa: E402

__all__ = ["main"]

MODEL_DIR = ROOT / "examples" / "models" / "qwen3-omni-30b-a3b-instruct"
PROMPT = "What is said?"
TARGET = 2.0
SETTLE_SECONDS = 0.2
CASES = (
    (1.0, 16_000, 1),
    (1.0, 48_000, 2),
    (30.0, 16_000, 1),
    (30.0, 48_000, 2),
    (300.0, 16_000, 1),
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


def reference() -> Callable[[bytes], Any]:
    """Bytes in, the processor's ``BatchFeature`` out, as a transformers user runs it."""
    import soundfile
    import soxr
    from transformers import AutoFeatureExtractor, AutoTokenizer, Qwen3OmniMoeProcessor
    from transformers.processing_utils import ProcessorMixin
    from transformers.utils import logging

    logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    extractor = AutoFeatureExtractor.from_pretrained(str(MODEL_DIR))
    with mock.patch.object(
        ProcessorMixin, "check_argument_for_proper_class", lambda self, name, arg: type(arg)
    ):
        processor = Qwen3OmniMoeProcessor(
            image_processor=None,
            video_processor=None,
            feature_extractor=extractor,
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )
    rendered = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "audio", "audio": "x"}, {"type": "text", "text": PROMPT}],
            }
        ],
        add_generation_prompt=True,
        tokenize=False,
    )

    def load(data: bytes) -> Any:
        x, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        if x.ndim == 2:
            x = x.mean(axis=1)
        return x if rate == 16_000 else soxr.resample(x, rate, 16_000, "HQ")

    return lambda data: processor(text=rendered, audio=[load(data)], return_tensors="np")


def ours(gate: AudioGate) -> Callable[[bytes], Any]:
    """Bytes in, model inputs and prompt ids out, through the public API."""
    policy = AcquisitionPolicy().narrowed(gate.policy)
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
    print("wall ms, median (best); ratio = the reference's median / ours")
    print(f"{'case':<34}{'ours':>21}{'transformers':>21}{'ratio':>8}  target")
    import audiogate_qwen3omni.plugin as family_plugin

    # Only this family's plugin: the host it is measured in, whatever else is installed.
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    gate = AudioGate.from_model_dir(MODEL_DIR, host=host)
    mine, theirs = ours(gate), reference()
    verdicts: list[str] = []
    for seconds, rate, channels in CASES:
        data = wav(seconds, rate, channels)
        ids = list(mine(data).input_ids)
        assert ids == theirs(data)["input_ids"][0].tolist(), "the paths disagree on the ids"
        repeat = args.repeat or (30 if seconds < 2 else 5)
        times = timed([lambda d=data: mine(d), lambda d=data: theirs(d)], repeat)
        medians = [statistics.median(t) for t in times]
        bests = [min(t) for t in times]
        ratio, best_ratio = medians[1] / medians[0], bests[1] / bests[0]
        label = f"qwen3omni {seconds:g} s {rate // 1000} kHz " + (
            "stereo" if channels > 1 else "mono"
        )
        required = seconds in (1.0, 30.0)
        verdict = ("PASS" if ratio >= TARGET else "MISS") if required else "info"
        verdicts.append(f"{label}: {verdict} (median {ratio:.2f}x, best {best_ratio:.2f}x)")
        cells = [f"{m:9.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
        print(f"{label:<34}" + "".join(f"{c:>21}" for c in cells) + f"{ratio:7.2f}x  {verdict}")
    print(f"\ntargets (>= {TARGET:g}x the reference at 1 s and 30 s, on medians):")
    print("\n".join(f"  {line}" for line in verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
