"""Executing a preflighted request: decode → resample → features → collate, per clip."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from audiogate.acquire.clip import EncodedClip
from audiogate.cache import CachedClip, Claim, FeatureCache, FeatureKey, feature_key
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.decode.decoder import check_rate
from audiogate.errors import (
    FeatureError,
    LimitError,
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
    from audiogate.decode.isolation import DecoderPool

__all__ = ["Progress", "prepare_clips", "process_request"]

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
    :param cache: the feature cache: a clip it holds skips decode, resample and
        features (its exact geometry is checked against the policy's limits first);
        a clip it lacks is stored once processed.

    :raises PreprocessCancelled: at the Decode, Resample or Feature checkpoint.
    :raises PluginError: a family produced something other than it planned.
    :raises MemoryLimitError: the collated inputs hold more than
        ``max_prepared_result_bytes_per_request`` (the preflight checked the plan's).
    """
    policy = plan.policy
    limits = decode_limits(policy)
    count = len(plan.clips)
    prepared: list[PreparedClip] = []
    # Computed clips are stored once the request is collated (a single clip's entry keeps
    # its collated inputs); their claims are released in the ``finally`` either way.
    claims: list[Claim] = []
    fills: list[tuple[FeatureKey, Claim | None, PreparedClip]] = []
    # A clip sent twice in one request is computed once: its second lookup would wait on
    # this request's own claim, which is filled only after collation (a deadlock).
    computed: dict[FeatureKey, PreparedClip] = {}
    collated: FeatureBatch | None = None
    try:
        for clip_plan, clip in zip(plan.clips, clips, strict=True):
            index = clip_plan.index
            found: CachedClip | Claim | None = None
            key: FeatureKey | None = None
            if cache is not None and cache.enabled:
                cancel.check(Checkpoint.DECODE, index)
                key = feature_key(
                    host,
                    policy,
                    clip.sha256,
                    decode_frames=clip_plan.decode_geometry.frames,
                    normalized_samples=clip_plan.normalized_samples,
                    source_format=clip.source_format,
                )
                if key in computed:
                    prepared.append(_from_cache(_to_cache(computed[key]), index=index, clip=clip))
                    continue
                found = cache.lookup(key, family=policy.family, cancel=cancel, clip_index=index)
            if isinstance(found, CachedClip) and not _fits_header(found, clip):
                # Computed from another reading of these bytes (a raw source stored under
                # another declared geometry): this clip is computed from its own, and a
                # recorded header that is not its bytes' is refused there.
                found = None
            if isinstance(found, CachedClip):
                _check_hit(policy, found, index)
                prepared.append(_from_cache(found, index=index, clip=clip))
                if count == 1:
                    collated = found.collated
                continue
            claim = found if isinstance(found, Claim) else None
            if claim is not None:
                claims.append(claim)
            # A stored digest is proven before any sample is decoded: features are only
            # ever computed from the bytes the digest names (and a recorded header from
            # the header they hold).
            clip.check_digest(clip_index=index)
            _check_header(clip, clip_plan, limits, index)
            done = _process_clip(
                host, policy, clip_plan, clip, limits, cancel, progress, count, decoders
            )
            if key is not None:
                fills.append((key, claim, done))  # no claim: another thread's gave up
                computed[key] = done
            prepared.append(done)
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
        for key, claim, done in fills:
            entry = _to_cache(done, collated=inputs if count == 1 else None)
            if claim is not None:
                claim.fill(entry)
            elif cache is not None:
                cache.put(key, entry)
    finally:
        for claim in claims:
            claim.release()
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
    geometry = clip_plan.geometry
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
            _duration_us(clip_plan.normalized_samples, rate)
            if clip_plan.truncated
            else geometry.duration_us
        ),
        truncated=clip_plan.truncated,
        waveform=normalized,
        features=features,
        detail=clip_plan.features.detail,
    )


def _to_cache(clip: PreparedClip, *, collated: FeatureBatch | None = None) -> CachedClip:
    """The request-independent part of a prepared clip (``collated``: the inputs of a
    request of this clip alone)."""
    return CachedClip(
        sha256=clip.sha256,
        encoded_bytes=clip.encoded_bytes,
        source_rate_hz=clip.source_rate_hz,
        channels=clip.channels,
        source_samples=clip.source_samples,
        duration_us=clip.duration_us,
        normalized_samples=clip.normalized_samples,
        effective_rate_hz=clip.effective_rate_hz,
        frames=clip.frames,
        tokens=clip.tokens,
        received_duration_us=clip.received_duration_us,
        processed_duration_us=clip.processed_duration_us,
        truncated=clip.truncated,
        waveform=clip.waveform,
        features=clip.features,
        detail=clip.detail,
        collated=collated,
    )


def _from_cache(cached: CachedClip, *, index: int, clip: EncodedClip) -> PreparedClip:
    """A hit as this request's clip: the same (read-only) arrays, this request's place."""
    return PreparedClip(
        index=index,
        ordinal=clip.ordinal,
        origin=clip.origin,
        sha256=cached.sha256,
        encoded_bytes=cached.encoded_bytes,
        source_rate_hz=cached.source_rate_hz,
        channels=cached.channels,
        source_samples=cached.source_samples,
        duration_us=cached.duration_us,
        normalized_samples=cached.normalized_samples,
        effective_rate_hz=cached.effective_rate_hz,
        frames=cached.frames,
        tokens=cached.tokens,
        received_duration_us=cached.received_duration_us,
        processed_duration_us=cached.processed_duration_us,
        truncated=cached.truncated,
        waveform=cached.waveform,
        features=cached.features,
        detail=cached.detail,
    )


def _fits_header(cached: CachedClip, clip: EncodedClip) -> bool:
    """Whether a hit was computed from a clip of the geometry a stored clip was admitted
    by (its recorded header); a clip without one is admitted by its own header."""
    header = clip.header
    return header is None or (
        cached.source_rate_hz == header.rate_hz
        and cached.channels == header.channels
        and cached.source_samples == header.frames
        and cached.encoded_bytes == clip.nbytes
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


def _check_hit(policy: AudioPolicy, cached: CachedClip, index: int) -> None:
    """What decoding would have refused, checked on the hit's exact geometry: the
    preflight saw only a compressed clip's upper bound, and limits are not in the key."""
    limits = decode_limits(policy)
    check_rate(cached.source_rate_hz, limits, clip_index=index)
    if cached.channels > limits.max_channels:
        raise LimitError(
            "source channels", actual=cached.channels, maximum=limits.max_channels, clip_index=index
        )
    if limits.max_duration_us is not None and cached.duration_us > limits.max_duration_us:
        raise LimitError(
            "source duration per clip",
            actual=cached.duration_us,
            maximum=limits.max_duration_us,
            clip_index=index,
        )
    if cached.normalized_samples < policy.min_samples_per_clip:
        raise FeatureError(
            f"{cached.normalized_samples} normalized samples at {cached.effective_rate_hz} Hz is "
            f"too short; the family needs at least {policy.min_samples_per_clip}",
            clip_index=index,
        )
    if cached.frames > policy.max_frames_per_clip:
        raise LimitError(
            "feature frames per clip",
            actual=cached.frames,
            maximum=policy.max_frames_per_clip,
            clip_index=index,
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
