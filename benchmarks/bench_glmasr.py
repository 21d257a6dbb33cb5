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

The rounds, ratios and targets are :mod:`family_bench`'s (at least 2x the fastest
reference at 1 s and 30 s); tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_glmasr.py [--repeat N]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from family_bench import CASES, MODELS, Case, load, run_bench, user_turn

__all__ = ["main"]

MODEL_DIR = MODELS / "glm-asr-nano-2512"
PROMPT = "Please transcribe this audio into text"


def references() -> Mapping[str, Callable[[Case], Any]]:
    """The processor's ``BatchFeature`` of a case, as a transformers user gets it:
    ``apply_transcription_request`` (the template rendered per call), and the processor
    called on the prompt rendered once beforehand (the faster of the two)."""
    from transformers import AutoProcessor
    from transformers.utils import logging

    logging.set_verbosity_error()
    processor = AutoProcessor.from_pretrained(str(MODEL_DIR))
    rendered = processor.apply_transcription_request("x", prompt=PROMPT, tokenize=False)[0]
    return {
        "request": lambda case: processor.apply_transcription_request(
            load(case.data), prompt=PROMPT
        ),
        "processor": lambda case: processor(text=rendered, audio=[load(case.data)]),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table and the verdicts; returns 0."""
    import audiogate_glmasr.plugin as family_plugin

    return run_bench(
        family="glmasr",
        plugin=family_plugin,
        model_dir=MODEL_DIR,
        messages=user_turn(PROMPT),
        references=references,
        cases=(*CASES, (120.0, 16_000, 1)),
        repeat=lambda seconds: 60 if seconds < 2 else 10,
        doc=__doc__ or "",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
