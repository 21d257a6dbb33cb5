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

The rounds, ratios and targets are :mod:`family_bench`'s (at least 2x the fastest
reference at 1 s and 30 s); tests never assert on these numbers.

    .venv/bin/python benchmarks/bench_qwen3omni.py [--repeat N]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from family_bench import (
    CASES,
    MODELS,
    Case,
    audio_only_processor,
    load,
    rendered_turn,
    run_bench,
    user_turn,
)

__all__ = ["main"]

MODEL_DIR = MODELS / "qwen3-omni-30b-a3b-instruct"
PROMPT = "What is said?"


def references() -> Mapping[str, Callable[[Case], Any]]:
    """The processor's ``BatchFeature`` of a case, as a transformers user gets it."""
    from transformers import Qwen3OmniMoeProcessor

    processor = audio_only_processor(Qwen3OmniMoeProcessor, MODEL_DIR)
    rendered = rendered_turn(processor, PROMPT)
    return {
        "transformers": lambda case: processor(
            text=rendered, audio=[load(case.data)], return_tensors="np"
        )
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table and the verdicts; returns 0."""
    import audiogate_qwen3omni.plugin as family_plugin

    return run_bench(
        family="qwen3omni",
        plugin=family_plugin,
        model_dir=MODEL_DIR,
        messages=user_turn(PROMPT),
        references=references,
        cases=(*CASES, (300.0, 16_000, 1)),
        repeat=lambda seconds: 30 if seconds < 2 else 5,
        doc=__doc__ or "",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
