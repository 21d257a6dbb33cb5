"""The request pipeline: preflight budgets from headers, then decode → resample →
features → collate, producing an immutable :class:`PreparedBatch`.

Its records: :class:`EncodedClip` comes from acquisition (``audiogate.acquire.clip``);
admission makes the plans (:mod:`audiogate.pipeline.plans`), processing the batch
(:mod:`audiogate.pipeline.prepared`).
"""

from __future__ import annotations

from audiogate.acquire.clip import EncodedClip
from audiogate.pipeline.plans import ClipPlan, RequestPlan
from audiogate.pipeline.preflight import decode_limits, per_clip_sample_cap, preflight
from audiogate.pipeline.prepared import PreparedBatch, PreparedClip, RequestTotals
from audiogate.pipeline.process import Progress, prepare_clips, process_request

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
