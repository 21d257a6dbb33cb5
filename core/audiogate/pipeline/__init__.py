"""The request pipeline: preflight budgets from headers, then decode → resample →
features → collate, producing an immutable :class:`PreparedBatch`."""

from __future__ import annotations

from audiogate.pipeline.preflight import decode_limits, per_clip_sample_cap, preflight
from audiogate.pipeline.process import Progress, prepare_clips, process_request
from audiogate.pipeline.records import (
    ClipPlan,
    EncodedClip,
    PreparedBatch,
    PreparedClip,
    RequestPlan,
    RequestTotals,
)

__all__ = [
    "ClipPlan",
    "EncodedClip",
    "PreparedBatch",
    "PreparedClip",
    "Progress",
    "RequestPlan",
    "RequestTotals",
    "decode_limits",
    "per_clip_sample_cap",
    "preflight",
    "prepare_clips",
    "process_request",
]
