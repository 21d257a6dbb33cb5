"""Granite Speech end to end, WAV bytes to model inputs and prompt ids: ``AudioGate.prepare``
against what a transformers user runs, in one run, printing ratios (issue #30).

For 1 s and 30 s (and 300 s, the per-clip cap), 16 kHz mono and 48 kHz stereo PCM16 WAV:

* **ours**: ``acquire_bytes`` and ``AudioGate.prepare(messages, clips=...)`` of a gate on
  ``examples/models/granite-speech-3.3-2b`` (its stand-in tokenizer and chat template),
  without a worker: admission, strict decode and downmix, soxr HQ, the 80-bin HTK
  log-mel with pair stacking, collation, the chat template and the ``<|audio|>``
  expansion with its ids;
* **transformers**: ``soundfile.read`` (float32, mean downmix), ``soxr.resample(..., "HQ")``
  to 16 kHz where the rate differs (``transformers.audio_utils.load_audio``'s soundfile
  backend), then ``AutoProcessor`` of the same directory (``GraniteSpeechProcessor``) on
  the chat template's text rendered once beforehand. Its ``MelSpectrogram`` is the
  test suite's torchaudio stand-in (no torchaudio wheel exists for torch 2.13):
  torchaudio's own ``torch.stft`` and ``matmul``, the same work torchaudio does.

The rounds, ratios and targets are :mod:`family_bench`'s (at least 2x the fastest
reference at 1 s and 30 s); tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_granitespeech.py [--repeat N]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from family_bench import CASES, MODELS, ROOT, Case, load, run_bench, user_turn

__all__ = ["main"]

MODEL_DIR = MODELS / "granite-speech-3.3-2b"
SYSTEM = "You are a helpful AI assistant"
PROMPT = "can you transcribe the speech into a written format?"

sys.path.insert(0, str(ROOT / "plugins" / "granitespeech" / "tests"))


def references() -> Mapping[str, Callable[[Case], Any]]:
    """The processor's ``BatchFeature`` of a case, as a transformers user gets it."""
    from granitespeech_helpers import install_torchaudio_stand_in
    from transformers import AutoProcessor
    from transformers.utils import logging

    logging.set_verbosity_error()
    install_torchaudio_stand_in()
    processor = AutoProcessor.from_pretrained(str(MODEL_DIR))
    rendered = processor.tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"<|audio|>{PROMPT}"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    return {"transformers": lambda case: processor(rendered, load(case.data), return_tensors="np")}


def main(argv: list[str] | None = None) -> int:
    """Print the table and the verdicts; returns 0."""
    import audiogate_granitespeech.plugin as family_plugin

    return run_bench(
        family="granitespeech",
        plugin=family_plugin,
        model_dir=MODEL_DIR,
        messages=user_turn(PROMPT, system=SYSTEM),
        references=references,
        cases=(*CASES, (300.0, 16_000, 1)),
        repeat=lambda seconds: 30 if seconds < 2 else 5 if seconds < 100 else 2,
        doc=__doc__ or "",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
