"""Qwen2-Audio passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_qwen2audio.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestQwen2AudioContract(FamilyContract):
    family = "qwen2audio"
    plugins = (family_plugin,)
    # Exactly the rates the policy admits (the Qwen2-Audio serving guide's 16, 44.1 and 48 kHz).
    sample_rates_hz = (16_000, 44_100, 48_000)
    model_dir = MODELS / "qwen2-audio-7b-instruct"
    user_placeholder = "[audio:{sha256}]"
