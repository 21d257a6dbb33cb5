"""Granite Speech passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_granitespeech.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestGraniteSpeechContract(FamilyContract):
    family = "granitespeech"
    plugins = (family_plugin,)
    # The target rate, CD audio and a high-resolution rate (the policy admits 8-192 kHz).
    sample_rates_hz = (16_000, 44_100, 96_000)
    model_dir = MODELS / "granite-speech-3.3-2b"
    user_placeholder = "<|audio|>"
