"""Qwen2-Audio passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"


class TestQwen2AudioContract(FamilyContract):
    family = "qwen2audio"
    # Exactly the rates the policy admits (the seed's 16, 44.1 and 48 kHz).
    sample_rates_hz = (16_000, 44_100, 48_000)
    model_dir = MODELS / "qwen2-audio-7b-instruct"
    user_placeholder = "[audio:{sha256}]"
