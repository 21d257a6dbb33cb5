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

The rounds, ratios and targets are :mod:`family_bench`'s (at least 2x the fastest
reference at 1 s and 30 s); tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_voxtral.py [--repeat N]
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from family_bench import CASES, MODELS, Case, load, run_bench, user_turn

__all__ = ["main"]

MODEL_DIR = MODELS / "voxtral-mini-3b-2507"
PROMPT = "What is said in the audio?"


def references() -> Mapping[str, Callable[[Case], Any]]:
    """The processor's outputs of a case: ``features`` always, ``chat`` where
    mistral-common is installed."""
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

    def features(case: Case) -> Any:
        x = load(case.data)
        padded = np.zeros(-(-x.shape[0] // 480_000) * 480_000, dtype=np.float32)
        padded[: x.shape[0]] = x
        return processor._retrieve_input_features([padded], 3000, **kwargs)

    paths: dict[str, Callable[[Case], Any]] = {"features": features}
    if importlib.util.find_spec("mistral_common") is not None:

        def chat(case: Case) -> Any:
            content = [{"type": "audio", "path": str(case.path)}, {"type": "text", "text": PROMPT}]
            return processor.apply_chat_template([{"role": "user", "content": content}])

        paths = {"chat": chat, **paths}
    return paths


def main(argv: list[str] | None = None) -> int:
    """Print the table and the verdicts; returns 0."""
    import audiogate_voxtral.plugin as family_plugin

    return run_bench(
        family="voxtral",
        plugin=family_plugin,
        model_dir=MODEL_DIR,
        messages=user_turn(PROMPT),
        references=references,
        cases=(*CASES, (75.0, 16_000, 1)),
        repeat=lambda seconds: 60 if seconds < 2 else 8,
        doc=__doc__ or "",
        argv=argv,
        # Text ids differ only where a stand-in differs; here both tokenize the same.
        checked=["chat"] if importlib.util.find_spec("mistral_common") else [],
    )


if __name__ == "__main__":
    sys.exit(main())
