"""What the family end-to-end benches share (``bench_<family>.py``): WAV bytes to model
inputs and prompt ids, ``AudioGate.prepare`` against what a transformers user runs.

A family's bench names its model directory, its chat messages and its references (each a
function of one :class:`Case`); :func:`run_bench` does the rest in one run:

* **ours**: ``acquire_bytes`` and ``AudioGate.prepare(messages, clips=...)`` of a gate on
  the bundled directory with only the family's plugin, without a worker (admission,
  strict decode and downmix, soxr HQ, features, collation, the template and expansion);
* each **reference**, after checking that ours gives the ids it gives.

Paths take turns in rounds, each turn after 0.2 s of untimed runs; wall-clock medians
(bests). The ratio is the fastest reference's median over ours; the target is at least 2x
at 1 s and 30 s. Tests never assert on these numbers.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "models"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audiogate.acquire import AcquisitionPolicy, acquire_bytes  # noqa: E402
from audiogate.api import AudioGate  # noqa: E402
from audiogate.host import create_host  # noqa: E402
from audiogate.testing.audio import wav_bytes  # noqa: E402

__all__ = [
    "CASES",
    "MODELS",
    "ROOT",
    "TARGET",
    "Case",
    "audio_only_processor",
    "load",
    "rendered_turn",
    "run_bench",
    "timed",
    "user_turn",
    "wav",
]

TARGET = 2.0
SETTLE_SECONDS = 0.2
#: (seconds, rate in Hz, channels): 1 s and 30 s, 16 kHz mono and 48 kHz stereo; a
#: family adds its own long case.
CASES = ((1.0, 16_000, 1), (1.0, 48_000, 2), (30.0, 16_000, 1), (30.0, 48_000, 2))
#: The durations whose ratio is held to :data:`TARGET`; others are for information.
REQUIRED_SECONDS = (1.0, 30.0)


@dataclass(frozen=True)
class Case:
    """One measured input: the WAV's bytes, and the same bytes as a file at ``path``."""

    seconds: float
    rate_hz: int
    channels: int
    data: bytes
    path: Path

    @property
    def label(self) -> str:
        layout = "stereo" if self.channels > 1 else "mono"
        return f"{self.seconds:g} s {self.rate_hz // 1000} kHz {layout}"


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


def load(data: bytes) -> Any:
    """The waveform a transformers user hands the processor: ``soundfile.read`` (float32,
    mean downmix), ``soxr.resample(..., "HQ")`` to 16 kHz where the rate differs
    (``transformers.audio_utils.load_audio``'s soundfile backend)."""
    import soundfile
    import soxr

    x, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    if x.ndim == 2:
        x = x.mean(axis=1)
    return x if rate == 16_000 else soxr.resample(x, rate, 16_000, "HQ")


def audio_only_processor(processor_class: type, model_dir: Path) -> Any:
    """``processor_class`` of ``model_dir`` with its tokenizer and feature extractor only.

    ``AutoProcessor`` would also build an Omni checkpoint's image and video processors,
    which need Pillow and torchvision; the audio path never uses them.
    """
    from unittest import mock

    from transformers import AutoFeatureExtractor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin
    from transformers.utils import logging

    logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    extractor = AutoFeatureExtractor.from_pretrained(str(model_dir))
    with mock.patch.object(
        ProcessorMixin, "check_argument_for_proper_class", lambda self, name, arg: type(arg)
    ):
        return processor_class(
            image_processor=None,
            video_processor=None,
            feature_extractor=extractor,
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )


def rendered_turn(processor: Any, prompt: str) -> str:
    """The processor's chat template on one user turn: an audio part, then ``prompt``."""
    content = [{"type": "audio", "audio": "x"}, {"type": "text", "text": prompt}]
    return str(
        processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
    )


def user_turn(
    prompt: str, *, system: str | None = None, audio_first: bool = True
) -> list[dict[str, Any]]:
    """Chat messages of one user turn with one audio part (which only marks the position:
    the bytes come as ``clips``) and ``prompt``, after an optional system message."""
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    text = {"type": "text", "text": prompt}
    content = [audio, text] if audio_first else [text, audio]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": content}]


def _ours(gate: AudioGate, messages: Sequence[Mapping[str, Any]]) -> Callable[[bytes], Any]:
    """Bytes in, model inputs and prompt ids out, through the public API."""
    policy = AcquisitionPolicy().narrowed(gate.policy)

    def prepare(data: bytes) -> Any:
        return gate.prepare(messages, clips=acquire_bytes([data], policy=policy))

    return prepare


def run_bench(
    *,
    family: str,
    plugin: ModuleType,
    model_dir: Path,
    messages: Sequence[Mapping[str, Any]],
    references: Callable[[], Mapping[str, Callable[[Case], Any]]],
    cases: Sequence[tuple[float, int, int]],
    repeat: Callable[[float], int],
    doc: str,
    argv: Sequence[str] | None = None,
    checked: Sequence[str] | None = None,
) -> int:
    """Parse ``--repeat``, measure every case and print the table and the verdicts.

    :param plugin: the family's plugin module: the only one in the measured host.
    :param references: builds the reference paths (after the gate is loaded), by name.
    :param repeat: runs per path for a clip of so many seconds (``--repeat`` overrides).
    :param doc: the bench's docstring (its first line is ``--help``'s).
    :param checked: the references whose ``input_ids`` ours must equal (default: all).
    :returns: 0.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=0, help="runs per path (default: auto)")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    host = create_host(plugins=[plugin], load_entry_points=False)
    gate = AudioGate.from_model_dir(model_dir, host=host)
    mine, theirs = _ours(gate, messages), references()
    names = list(theirs)
    width = len(family) + 24
    print("wall ms, median (best); ratio = the fastest reference's median / ours")
    print(
        f"{'case':<{width}}{'ours':>21}" + "".join(f"{n:>21}" for n in names) + "   ratio  target"
    )
    folder = Path(tempfile.mkdtemp(prefix=f"bench_{family}_"))
    verdicts: list[str] = []
    for seconds, rate, channels in cases:
        data = wav(seconds, rate, channels)
        path = folder / f"clip-{seconds:g}-{rate}-{channels}.wav"
        path.write_bytes(data)
        case = Case(seconds, rate, channels, data, path)
        ids = list(mine(data).input_ids)
        for name in names if checked is None else checked:
            want = theirs[name](case)["input_ids"][0].tolist()
            assert ids == want, f"ours and {name} disagree on the ids"
        paths = [lambda d=data: mine(d)]
        paths += [lambda c=case, f=f: f(c) for f in theirs.values()]
        times = timed(paths, args.repeat or repeat(seconds))
        medians = [statistics.median(t) for t in times]
        bests = [min(t) for t in times]
        ratio, best_ratio = min(medians[1:]) / medians[0], min(bests[1:]) / bests[0]
        label = f"{family} {case.label}"
        required = seconds in REQUIRED_SECONDS
        verdict = ("PASS" if ratio >= TARGET else "MISS") if required else "info"
        verdicts.append(f"{label}: {verdict} (median {ratio:.2f}x, best {best_ratio:.2f}x)")
        cells = [f"{m:9.3f} ({b:.3f})" for m, b in zip(medians, bests, strict=True)]
        print(
            f"{label:<{width}}" + "".join(f"{c:>21}" for c in cells) + f"{ratio:7.2f}x  {verdict}"
        )
    print(f"\ntargets (>= {TARGET:g}x the fastest reference at 1 s and 30 s, on medians):")
    print("\n".join(f"  {line}" for line in verdicts))
    return 0
