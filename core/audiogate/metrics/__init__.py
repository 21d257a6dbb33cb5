"""Prometheus metrics of the audio boundary (mlxcel's ``metrics_audio.rs`` series, renamed).

Every series carries a ``family`` label. Rejection reasons are mutually exclusive and
always exported (zero until used), so summing the family is safe; there is no
``reason="all"`` line. A request is counted exactly once: as completed, as cancelled,
or under one rejection reason.
"""

from __future__ import annotations

from audiogate.metrics.outcome import (
    Completed,
    OutcomeRecord,
    outcome_scope,
    record_outcome,
    rejection_reason,
)
from audiogate.metrics.series import REJECTION_REASONS, AudioMetrics

__all__ = [
    "REJECTION_REASONS",
    "AudioMetrics",
    "Completed",
    "OutcomeRecord",
    "outcome_scope",
    "record_outcome",
    "rejection_reason",
]
