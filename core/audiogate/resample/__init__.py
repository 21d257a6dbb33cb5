"""Resamplers every family may use: the identity and band-limited soxr HQ.

Family-specific resamplers (Phi-4 MM's integer-ratio polyphase rule, Gemma 3n's
linear interpolation) live in their family packages.
"""

from __future__ import annotations

from audiogate.resample.soxr_hq import (
    SOXR_BLOCK_SAMPLES,
    SOXR_QUALITY,
    SOXR_WORKING_BYTES,
    SoxrStream,
    librosa_output_length,
    plan_soxr_hq,
    run_soxr_hq_plan,
    soxr_output_length,
    soxr_resample,
    soxr_resample_librosa,
)

__all__ = [
    "SOXR_BLOCK_SAMPLES",
    "SOXR_QUALITY",
    "SOXR_WORKING_BYTES",
    "SoxrStream",
    "librosa_output_length",
    "plan_soxr_hq",
    "run_soxr_hq_plan",
    "soxr_output_length",
    "soxr_resample",
    "soxr_resample_librosa",
]
