"""Phi-4 MM passes the family contract suite in both variants."""

from __future__ import annotations

from pathlib import Path

import audiogate_phi4mm.plugin as family_plugin
from audiogate.testing.contract import FamilyContract

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"


class TestPhi4mmRemoteCodeContract(FamilyContract):
    """The remote-code checkpoint (``model_type`` ``phi4mm``): SpeechLib resampler."""

    family = "phi4mm"
    plugins = (family_plugin,)
    model_type = "phi4mm"
    # 8 kHz takes SpeechLib's "fillzero" path; 22.05 kHz is relabelled, 48 kHz decimated.
    sample_rates_hz = (16_000, 8_000, 22_050, 44_100, 48_000)
    model_dir = MODELS / "phi-4-multimodal-instruct"
    user_placeholder = "<|audio_{n}|>"


class TestPhi4mmNativeContract(FamilyContract):
    """The transformers-native conversion (``phi4_multimodal``): soxr HQ from any rate."""

    family = "phi4mm"
    plugins = (family_plugin,)
    model_type = "phi4_multimodal"
    sample_rates_hz = (16_000, 22_050, 44_100, 48_000)
    model_dir = MODELS / "phi-4-multimodal-instruct-hf"
    user_placeholder = "<|audio|>"
    # The native frontend refuses a checkpoint that restates the remote-code resampler.
    round_trip_skip_targets = ("resampling",)
