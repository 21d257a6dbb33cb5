"""Prometheus metrics of the audio boundary (mlxcel's ``metrics_audio.rs`` series, renamed).

Every series carries a ``family`` label. Rejection reasons are mutually exclusive and
always exported (zero until used), so summing the family is safe; there is no
``reason="all"`` line. A request is counted exactly once: as completed, as cancelled,
or under one rejection reason.
"""

from __future__ import annotations

from audiogate.deprecation import forward_names
from audiogate.metrics.outcome import Completed, record_outcome, rejection_reason
from audiogate.metrics.series import REJECTION_REASONS, AudioMetrics

__all__ = [
    "REJECTION_REASONS",
    "AudioMetrics",
    "Completed",
    "record_outcome",
    "rejection_reason",
]

# 0.1.0's request outcome record: inert since 0.2.0 (Request.close records the outcome).
__getattr__ = forward_names(
    __name__,
    {
        "OutcomeRecord": "audiogate.metrics.legacy:OutcomeRecord",
        "outcome_scope": "audiogate.metrics.legacy:outcome_scope",
    },
    since="0.2.0",
)
