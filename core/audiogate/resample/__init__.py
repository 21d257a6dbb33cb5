"""Resamplers every family may use: the identity and band-limited soxr HQ.

Family-specific resamplers (Phi-4 MM's integer-ratio polyphase rule, Gemma 3n's
linear interpolation) live in their family packages.
"""

from __future__ import annotations

from audiogate.resample.soxr_hq import SOXR_QUALITY, soxr_output_length, soxr_resample

__all__ = ["SOXR_QUALITY", "soxr_output_length", "soxr_resample"]
