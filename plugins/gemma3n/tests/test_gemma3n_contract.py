"""Gemma 3n passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_gemma3n.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestGemma3nContract(FamilyContract):
    family = "gemma3n"
    plugins = (family_plugin,)
    # The linear resampler takes any rate; these are the common ones.
    sample_rates_hz = (16_000, 8_000, 44_100, 48_000)
    model_dir = MODELS / "gemma-3n-e4b-it"
    user_placeholder = "<audio_soft_token>"
