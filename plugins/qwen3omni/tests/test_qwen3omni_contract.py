"""Qwen3-Omni passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_qwen3omni.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestQwen3OmniContract(FamilyContract):
    family = "qwen3omni"
    plugins = (family_plugin,)
    sample_rates_hz = (8_000, 16_000, 44_100, 48_000, 96_000)
    model_dir = MODELS / "qwen3-omni-30b-a3b-instruct"
    user_placeholder = "<|audio_start|><|audio_pad|><|audio_end|>"
