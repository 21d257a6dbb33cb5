"""Audio Flamingo 3 passes the family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

import audiogate_audioflamingo3.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestAudioFlamingo3Contract(FamilyContract):
    family = "audioflamingo3"
    plugins = (family_plugin,)
    sample_rates_hz = (16_000, 8_000, 44_100, 48_000, 96_000)
    model_dir = MODELS / "audio-flamingo-3-hf"
    user_placeholder = "<sound>"
    # Two windows: the long clip crosses a window boundary.
    long_clip_seconds = 47.0
