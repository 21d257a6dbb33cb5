"""Voxtral passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from typing import Any

from voxtral_tokenizer import MODEL_DIR

import audiogate_voxtral.plugin as family_plugin
from audiogate.api import load_tokenizer
from audiogate.testing.contract import FamilyContract


class TestVoxtralContract(FamilyContract):
    family = "voxtral"
    plugins = (family_plugin,)
    sample_rates_hz = (16_000, 44_100, 48_000)
    model_dir = MODEL_DIR
    # Voxtral has no text placeholder: audio goes where its chat part stands, or (plain
    # prompts) after the last [INST].
    user_placeholder = None
    # Two windows: the arithmetic and cancellation checks cross a window boundary.
    long_clip_seconds = 45.0

    def make_tokenizer(self) -> Any:
        # What the gate loads (tokenizer.json as a fast tokenizer), not AutoTokenizer, which
        # picks mistral-common's backend on tekken.json where that is installed.
        return load_tokenizer(MODEL_DIR)
