"""Qwen2-Audio's Slaney mel bank: the 128-bin Whisper bank of :mod:`audiogate.dsp.whisper`.

Equal to transformers' ``mel_filter_bank(201, 128, 0, 8000, 16000, norm="slaney",
mel_scale="slaney")``; built by :mod:`audiogate.dsp.slaney` (no transformers at runtime).
"""

from __future__ import annotations

from typing import Any

from audiogate.dsp import whisper
from audiogate.dsp.slaney import hz_to_mel_slaney, mel_to_hz_slaney, slaney_mel_filters
from audiogate_qwen2audio.geometry import N_MELS

__all__ = ["hz_to_mel_slaney", "mel_to_hz_slaney", "slaney_mel_filters", "whisper_mel_matrix"]


def whisper_mel_matrix() -> Any:
    """The 128 × 201 Whisper bank as read-only float32 CSR (built once)."""
    return whisper.whisper_mel_matrix(N_MELS)
