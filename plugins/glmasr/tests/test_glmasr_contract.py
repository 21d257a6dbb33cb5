"""GLM-ASR passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_glmasr.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestGlmAsrContract(FamilyContract):
    family = "glmasr"
    plugins = (family_plugin,)
    sample_rates_hz = (16_000, 8_000, 44_100, 48_000, 96_000)
    model_dir = MODELS / "glm-asr-nano-2512"
    user_placeholder = "<|pad|>"
    # Two windows: the long clip crosses a window boundary.
    long_clip_seconds = 47.0
