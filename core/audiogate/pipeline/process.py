"""Executing a preflighted request: decode → resample → features → collate, per clip."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.errors import (
    FeatureError,
    MemoryLimitError,
    PluginError,
    SourceLostError,
)
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan, RequestPlan
from audiogate.pipeline.preflight import decode_limits, preflight
from audiogate.pipeline.prepared import PreparedBatch, PreparedClip, RequestTotals
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy
from audiogate.records import FeatureBatch, readonly

if TYPE_CHECKING:
    from audiogate.cache import FeatureCache
    from audiogate.decode.isolation import DecoderPool

__all__ = ["Progress", "collate_clips", "prepare_clips", "process_clip", "process_request"]

#: ``progress(stage, clip_index, clip_count)``; stage is ``"decode"``, ``"resample"``,
#: ``"features"`` or ``"done"``.
Progress = Callable[[str, int, int], None]


def _duration_us(samples: int, rate_hz: int) -> int:
    return samples * MICROS_PER_SECOND // rate_hz


def _replan(host: FamilyHost, policy: AudioPolicy, clip_plan: ClipPlan, frames: int) -> ClipPlan:
    """The plan of a compressed clip that decoded to fewer frames than its header's bound.

    Shorter never costs more, so every budget the preflight checked still holds.
    """
    index = clip_plan.index
    geometry = attrs.evolve(
        clip_plan.geometry,
        frames=frames,
        duration_us=frames * MICROS_PER_SECOND // clip_plan.geometry.rate_hz,
        exact=True,
    )
    resample = host.plan_resample(
        policy, source_rate_hz=geometry.rate_hz, source_samples=frames, clip_index=index
    )
    kept = min(resample.output_samples, clip_plan.normalized_samples)
    if kept < policy.min_samples_per_clip:
        raise FeatureError(
            f"{kept} normalized samples at {resample.output_rate_hz} Hz is too short; the "
            f"family needs at least {policy.min_samples_per_clip}",
            clip_index=index,
        )
    features = host.plan_features(
        policy, rate_hz=resample.output_rate_hz, samples=kept, clip_index=index
    )
    # The stream ended before its bound (or before the truncation point), so this is
    # the whole clip.
    return attrs.evolve(
        clip_plan,
        geometry=geometry,
        decode_geometry=geometry,
        resample=resample,
        normalized_samples=kept,
        received_samples=resample.output_samples,
        features=features,
    )


def process_request(
    host: FamilyHost,
    plan: RequestPlan,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
    decoders: DecoderPool | None = None,
    cache: FeatureCache | None = None,
) -> PreparedBatch:
    """Run a preflighted request and return its immutable batch.

    Each clip's decoded source is dropped as soon as it is resampled, so at most one
    source waveform is alive at a time (what the working budget assumes). A compressed
    clip planned for an upper bound that decodes shorter is planned again for what it
    holds (never more than the preflight admitted).

    :param decoders: the process pool of compressed clips (default: the process-wide
        one, :func:`audiogate.decode.isolation.default_pool`).
    :param cache: the feature cache (:func:`audiogate.cache.lookup.process_cached`): a
        clip it holds skips decode, resample and features, admitted by the preflight's
        own planning of its exact geometry; a clip it lacks is stored once processed.

    :raises PreprocessCancelled: at the Decode, Resample or Feature checkpoint.
    :raises PluginError: a family produced something other than it planned.
    :raises MemoryLimitError: the collated inputs hold more than
        ``max_prepared_result_bytes_per_request`` (the preflight checked the plan's).
    """
    if cache is not None and cache.enabled:
        from audiogate.cache.lookup import process_cached

        return process_cached(
            cache, host, plan, clips, cancel=cancel, progress=progress, decoders=decoders
        )
    limits = decode_limits(plan.policy)
    prepared = [
        process_clip(
            host,
            plan,
            clip_plan,
            clip,
            cancel=cancel,
            progress=progress,
            decoders=decoders,
            limits=limits,
        )
        for clip_plan, clip in zip(plan.clips, clips, strict=True)
    ]
    return collate_clips(host, plan, prepared, cancel=cancel, progress=progress)


def process_clip(
    host: FamilyHost,
    plan: RequestPlan,
    clip_plan: ClipPlan,
    clip: EncodedClip,
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
    decoders: DecoderPool | None = None,
    limits: DecodeLimits | None = None,
) -> PreparedClip:
    """Decode, resample and featurise one planned clip of ``plan`` (``limits``: the
    policy's :func:`~audiogate.pipeline.preflight.decode_limits`, if at hand).

    A stored digest is proven before any sample is decoded: features are only ever
    computed from the bytes the digest names (and a recorded header from the header they
    hold).
    """
    index = clip_plan.index
    if limits is None:
        limits = decode_limits(plan.policy)
    if clip.stored_sha256 is not None:  # a stored clip (inline audio has nothing to prove)
        clip.check_digest(clip_index=index)
        _check_header(clip, clip_plan, limits, index)
    return _process_clip(
        host, plan.policy, clip_plan, clip, limits, cancel, progress, len(plan.clips), decoders
    )


def collate_clips(
    host: FamilyHost,
    plan: RequestPlan,
    prepared: Sequence[PreparedClip],
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
    collated: FeatureBatch | None = None,
) -> PreparedBatch:
    """The batch of a request's prepared clips: the family's collated inputs (or
    ``collated``, a single-clip request's inputs kept from before), checked against the
    clips' tokens and the prepared-bytes budget, and the totals."""
    policy = plan.policy
    count = len(prepared)
    cancel.check(Checkpoint.FEATURE)
    if collated is None:
        inputs = host.collate_features(policy, [clip.features for clip in prepared])
    else:
        inputs = collated
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


def _process_clip(
    host: FamilyHost,
    policy: AudioPolicy,
    clip_plan: ClipPlan,
    clip: EncodedClip,
    limits: DecodeLimits,
    cancel: CancelToken,
    progress: Progress | None,
    count: int,
    decoders: DecoderPool | None,
) -> PreparedClip:
    """Decode, resample and featurise one clip."""
    index = clip_plan.index
    if progress:
        progress("decode", index, count)
    cancel.check(Checkpoint.DECODE, index)
    source = decode(
        clip.data,
        clip_plan.decode_geometry,
        clip_index=index,
        limits=limits,
        cancel=cancel,
        decoders=decoders,
    )
    if source.shape[0] != clip_plan.decode_geometry.frames:
        clip_plan = _replan(host, policy, clip_plan, source.shape[0])
    if progress:
        progress("resample", index, count)
    cancel.check(Checkpoint.RESAMPLE, index)
    normalized = host.resample(policy, clip_plan.resample, source, clip_index=index, cancel=cancel)
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
    geometry, truncated = clip_plan.geometry, clip_plan.truncated
    return PreparedClip(
        index=index,
        ordinal=clip.ordinal,
        origin=clip.origin,
        sha256=clip.sha256,
        encoded_bytes=clip.nbytes,
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
            _duration_us(clip_plan.normalized_samples, rate) if truncated else geometry.duration_us
        ),
        truncated=truncated,
        waveform=normalized,
        features=features,
        detail=clip_plan.features.detail,
    )


def _check_header(clip: EncodedClip, clip_plan: ClipPlan, limits: DecodeLimits, index: int) -> None:
    """The header of a clip admitted by its recorded one, read from its (proven) bytes,
    must be the one that was planned."""
    if clip.header is None:
        return
    found = inspect(clip.data, clip_index=index, source_format=clip.source_format, limits=limits)
    if found != clip_plan.geometry:
        raise SourceLostError(
            clip.sha256, clip_index=index, detail="its recorded header is not its bytes'"
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
    decoders: DecoderPool | None = None,
    cache: FeatureCache | None = None,
) -> PreparedBatch:
    """Preflight and process a request in the calling thread (CLI, tests, simple servers)."""
    plan = preflight(host, policy, clips, cancel=cancel)
    return process_request(
        host, plan, clips, cancel=cancel, progress=progress, decoders=decoders, cache=cache
    )
