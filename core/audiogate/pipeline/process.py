"""Executing a preflighted request: decode → resample → features → collate, per clip."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode import decode
from audiogate.errors import MemoryLimitError, PluginError
from audiogate.host import FamilyHost
from audiogate.pipeline.batch import PreparedBatch, PreparedClip, RequestTotals
from audiogate.pipeline.plans import RequestPlan
from audiogate.pipeline.preflight import decode_limits, preflight
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy
from audiogate.records import readonly

__all__ = ["Progress", "prepare_clips", "process_request"]

#: ``progress(stage, clip_index, clip_count)``; stage is ``"decode"``, ``"resample"``,
#: ``"features"`` or ``"done"``.
Progress = Callable[[str, int, int], None]


def _duration_us(samples: int, rate_hz: int) -> int:
    return samples * MICROS_PER_SECOND // rate_hz


def process_request(
    host: FamilyHost,
    plan: RequestPlan,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
) -> PreparedBatch:
    """Run a preflighted request and return its immutable batch.

    Each clip's decoded source is dropped as soon as it is resampled, so at most one
    source waveform is alive at a time (what the working budget assumes).

    :raises PreprocessCancelled: at the Decode, Resample or Feature checkpoint.
    :raises PluginError: a family produced something other than it planned.
    :raises MemoryLimitError: the collated inputs hold more than
        ``max_prepared_result_bytes_per_request`` (the preflight checked the plan's).
    """
    policy = plan.policy
    limits = decode_limits(policy)
    count = len(plan.clips)
    prepared: list[PreparedClip] = []
    for clip_plan, clip in zip(plan.clips, clips, strict=True):
        index = clip_plan.index
        if progress:
            progress("decode", index, count)
        cancel.check(Checkpoint.DECODE, index)
        source = decode(
            clip.data, clip_plan.decode_geometry, clip_index=index, limits=limits, cancel=cancel
        )
        if progress:
            progress("resample", index, count)
        cancel.check(Checkpoint.RESAMPLE, index)
        normalized = host.resample(
            policy, clip_plan.resample, source, clip_index=index, cancel=cancel
        )
        del source
        if normalized.shape[0] != clip_plan.normalized_samples:
            # Truncate mode: keep an owned copy so the cut-off tail is freed.
            normalized = readonly(np.array(normalized[: clip_plan.normalized_samples]))
        if progress:
            progress("features", index, count)
        cancel.check(Checkpoint.FEATURE, index)
        rate = clip_plan.resample.output_rate_hz
        features = host.extract_features(
            policy,
            clip_plan.features,
            normalized,
            rate_hz=rate,
            clip_index=index,
            cancel=cancel,
        )
        geometry = clip_plan.geometry
        prepared.append(
            PreparedClip(
                index=index,
                ordinal=clip.ordinal,
                origin=clip.origin,
                sha256=clip.sha256,
                encoded_bytes=len(clip.data),
                source_rate_hz=geometry.rate_hz,
                channels=geometry.channels,
                source_samples=geometry.frames,
                duration_us=geometry.duration_us,
                normalized_samples=clip_plan.normalized_samples,
                effective_rate_hz=rate,
                frames=features.frames,
                tokens=features.tokens,
                received_duration_us=geometry.duration_us,
                processed_duration_us=(
                    _duration_us(clip_plan.normalized_samples, rate)
                    if clip_plan.truncated
                    else geometry.duration_us
                ),
                truncated=clip_plan.truncated,
                waveform=normalized,
                features=features,
                detail=clip_plan.features.detail,
            )
        )
    cancel.check(Checkpoint.FEATURE)
    inputs = host.collate_features(policy, [clip.features for clip in prepared])
    if inputs.tokens != tuple(clip.tokens for clip in prepared):
        raise PluginError(
            f"family {policy.family!r} collated tokens {inputs.tokens}, but the clips have "
            f"{tuple(clip.tokens for clip in prepared)}"
        )
    _check_prepared_bytes(policy, inputs.inputs.values())
    if progress:
        progress("done", count, count)
    return PreparedBatch(
        family=policy.family,
        policy=policy,
        clips=tuple(prepared),
        totals=RequestTotals(
            clips=count,
            encoded_bytes=plan.encoded_bytes,
            source_samples=sum(c.source_samples for c in prepared),
            duration_us=sum(c.duration_us for c in prepared),
            normalized_samples=sum(c.normalized_samples for c in prepared),
            frames=sum(c.frames for c in prepared),
            tokens=sum(c.tokens for c in prepared),
        ),
        inputs=inputs,
        plan=plan,
    )


def _check_prepared_bytes(policy: AudioPolicy, arrays: Iterable[Any]) -> None:
    # What the family collated, not what it planned: the request's result must stay
    # within the policy whether or not a worker runs it.
    prepared = sum(int(array.nbytes) for array in arrays)
    if prepared > policy.max_prepared_result_bytes_per_request:
        raise MemoryLimitError(
            "prepared result bytes per request",
            actual=prepared,
            maximum=policy.max_prepared_result_bytes_per_request,
        )


def prepare_clips(
    host: FamilyHost,
    policy: AudioPolicy,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
) -> PreparedBatch:
    """Preflight and process a request in the calling thread (CLI, tests, simple servers)."""
    plan = preflight(host, policy, clips, cancel=cancel)
    return process_request(host, plan, clips, cancel=cancel, progress=progress)
