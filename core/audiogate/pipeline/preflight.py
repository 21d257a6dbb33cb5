"""Admission before allocation: every budget of a request is checked from headers alone.

Order (mlxcel's ``preprocess_wav_refs`` in ``src/audio/preprocessing.rs``, so clients see
the same first error): cancellation; no clips; clip count; then per clip: ordinal, empty,
encoded bytes per clip and per request, header geometry (rate, channels, per-clip
duration), source samples and duration per request, the family's resample plan (output
length, rate, work), normalized samples per clip and per request, feature frames per clip
and per request; then retained waveform bytes, waveform working bytes and prepared-result
bytes (mlxcel checks the last only after the features). Limits are request aggregates,
never a per-clip value multiplied by the clip count.

In truncate mode (a family's opt-in, not in mlxcel) the request's source totals are
charged after the plan, for the part of each clip that is kept: a clip cut at the
per-clip limit counts as that limit's duration, not as what was received (and not as
the few extra source frames its resampler reads past the cut).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import attrs

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode import ClipGeometry, DecodeLimits, check_limits, inspect
from audiogate.decode.samples import BLOCK_FRAMES
from audiogate.errors import (
    EmptyAudioError,
    FeatureError,
    LimitError,
    MemoryLimitError,
    PlaceholderError,
    SizeOverflowError,
)
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan, RequestPlan
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy
from audiogate.policy.memo import per_policy

__all__ = [
    "COLLATED_BYTES",
    "FLOAT32_BYTES",
    "decode_limits",
    "decode_working_bytes",
    "per_clip_sample_cap",
    "plan_clip",
    "preflight",
    "preflight_one",
]

FLOAT32_BYTES: Final = 4
_INT64_MAX: Final = 2**63 - 1


@per_policy
def decode_limits(policy: AudioPolicy) -> DecodeLimits:
    """The decoder's per-clip checks derived from the policy.

    In truncate mode the per-clip source duration is not refused at the header: the clip
    is cut after resampling, and only the part that is kept is decoded.
    """
    truncating = policy.overflow == "truncate"
    return DecodeLimits(
        min_rate_hz=policy.min_source_rate_hz,
        max_rate_hz=policy.max_source_rate_hz,
        allowed_rates_hz=(
            frozenset(policy.allowed_source_rates_hz) if policy.allowed_source_rates_hz else None
        ),
        max_channels=policy.max_source_channels,
        max_duration_us=None if truncating else policy.max_duration_seconds * MICROS_PER_SECOND,
        refuse_all_zero=policy.refuse_all_zero,
    )


def per_clip_sample_cap(policy: AudioPolicy, effective_rate_hz: int) -> int:
    """Most normalized samples one clip may have at ``effective_rate_hz``.

    The duration cap is applied at the effective rate (so a Phi-4 MM clip treated as
    8 kHz gets half the samples), and never above ``max_samples_per_clip``.
    """
    return min(policy.max_samples_per_clip, effective_rate_hz * policy.max_duration_seconds)


def _prefix(geometry: ClipGeometry, frames: int) -> ClipGeometry:
    if frames >= geometry.frames:
        return geometry
    return attrs.evolve(
        geometry,
        frames=frames,
        duration_us=frames * MICROS_PER_SECOND // geometry.rate_hz,
        # A compressed clip is decoded from all its bytes and stopped at the prefix.
        data_length=frames * geometry.frame_bytes if geometry.in_process else geometry.data_length,
        prefix=not geometry.in_process,
    )


def decode_working_bytes(geometry: ClipGeometry) -> int:
    """Scratch the decoder needs besides its float32 output: one block of accumulators."""
    return min(geometry.frames, BLOCK_FRAMES) * (geometry.channels * 8 + 16)


def _check(
    total: int,
    maximum: int,
    limit: str,
    clip_index: int | None = None,
    *,
    kind: type[LimitError] = LimitError,
) -> None:
    if total > _INT64_MAX:
        raise SizeOverflowError(limit)
    if total > maximum:
        raise kind(limit, actual=total, maximum=maximum, clip_index=clip_index)


def _charge_source(
    policy: AudioPolicy, geometry: ClipGeometry, samples: int, duration_us: int, index: int
) -> tuple[int, int]:
    """Add one clip's source frames and duration to the request totals and check both
    (mlxcel's source-samples and duration checks); returns the new totals."""
    samples += geometry.frames
    _check(samples, policy.max_source_samples_per_request, "source samples per request", index)
    duration_us += geometry.duration_us
    _check(
        duration_us,
        policy.max_source_duration_us_per_request,
        "source duration per request (µs)",
        index,
    )
    return samples, duration_us


def plan_clip(
    host: FamilyHost, policy: AudioPolicy, geometry: ClipGeometry, *, index: int
) -> ClipPlan:
    """One clip's plan from its geometry (a header's, a recorded header's, or a feature
    cache hit's exact one) and every per-clip limit the plan is held to: the duration
    cap in normalized samples (or the truncated prefix to decode), the family's minimum
    length, the feature frames per clip. The source limits are the caller's
    (:func:`~audiogate.decode.check_limits`, which :func:`~audiogate.decode.inspect`
    applies).

    :raises LimitError: over the duration cap (not truncating) or the frames per clip.
    :raises FeatureError: shorter than the family's minimum.
    """
    resample = host.plan_resample(
        policy,
        source_rate_hz=geometry.rate_hz,
        source_samples=geometry.frames,
        clip_index=index,
    )
    received = resample.output_samples
    cap = per_clip_sample_cap(policy, resample.output_rate_hz)
    decoded = geometry
    kept = received
    if received > cap:
        if policy.overflow != "truncate":
            raise LimitError("duration samples", actual=received, maximum=cap, clip_index=index)
        # Decode only the source prefix that produces the kept samples (exact for the
        # identity and linear resamplers, the only ones that offer truncation: the
        # linear one reads one source frame past the last kept position).
        if resample.algorithm == "identity":
            needed = cap
        else:
            needed = ((cap - 1) * geometry.rate_hz) // resample.output_rate_hz + 2
        decoded = _prefix(geometry, needed)
        resample = host.plan_resample(
            policy,
            source_rate_hz=decoded.rate_hz,
            source_samples=decoded.frames,
            clip_index=index,
        )
        kept = cap
        if resample.output_samples < kept:
            raise SizeOverflowError(f"the truncated length of clip {index + 1}")
    if kept < policy.min_samples_per_clip:
        raise FeatureError(
            f"{kept} normalized samples at {resample.output_rate_hz} Hz is too short; the "
            f"family needs at least {policy.min_samples_per_clip}",
            clip_index=index,
        )
    features = host.plan_features(
        policy, rate_hz=resample.output_rate_hz, samples=kept, clip_index=index
    )
    _check(features.frames, policy.max_frames_per_clip, "feature frames per clip", index)
    return ClipPlan(
        index=index,
        geometry=geometry,
        decode_geometry=decoded,
        resample=resample,
        normalized_samples=kept,
        received_samples=received,
        features=features,
    )


def preflight(
    host: FamilyHost,
    policy: AudioPolicy,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken = NEVER,
) -> RequestPlan:
    """Check every budget of a request from the clips' headers; allocate nothing large.

    :param host: the plugin host (the family's resample and feature plans).
    :param policy: the loaded model's policy.
    :param clips: the request's clips in order.
    :returns: the plan that :func:`~audiogate.pipeline.process.process_request` executes.
    :raises LimitError: a budget is exceeded (names the limit, actual and maximum).
    :raises DecodeError: a header is invalid or outside the policy.
    :raises PlaceholderError: clip ordinals are not 1..n.
    """
    cancel.check(Checkpoint.ACQUISITION)
    if not clips:
        raise EmptyAudioError(clip_index=0, detail="the request declares no audio clips")
    if len(clips) > policy.max_clips:
        raise LimitError("clip count", actual=len(clips), maximum=policy.max_clips)

    limits = decode_limits(policy)
    plans: list[ClipPlan] = []
    encoded = source_samples = duration_us = normalized = frames = 0
    largest_decode = 0
    largest_resample_work = 0
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"clip {index + 1} carries ordinal {clip.ordinal}, expected {index + 1}"
            )
        size = clip.nbytes
        if size == 0:
            raise EmptyAudioError(clip_index=index, detail="no encoded bytes")
        _check(size, policy.max_encoded_bytes_per_clip, "encoded bytes per clip", index)
        encoded += size
        _check(
            encoded,
            policy.max_encoded_bytes_per_request,
            "encoded bytes per request",
            index,
            kind=MemoryLimitError,
        )

        geometry = clip.header
        if geometry is not None:
            # Recorded when it was stored, by inspect() of the same bytes; the policy's
            # limits are this request's. The pipeline proves it before any decoding.
            check_limits(geometry, limits, clip_index=index)
        else:
            geometry = inspect(
                clip.data,
                clip_index=index,
                source_format=clip.source_format,
                limits=limits,
                cancel=cancel,
            )
        clip_plan, source_samples, duration_us = _plan_charged(
            host, policy, geometry, index, source_samples, duration_us
        )
        normalized += clip_plan.normalized_samples
        _check(
            normalized,
            policy.max_normalized_samples_per_request,
            "normalized samples per request",
            index,
        )
        frames += clip_plan.features.frames
        _check(frames, policy.max_frames_per_request, "feature frames per request", index)
        decoded = clip_plan.decode_geometry

        largest_decode = max(
            largest_decode, decoded.frames * FLOAT32_BYTES + decode_working_bytes(decoded)
        )
        largest_resample_work = max(largest_resample_work, clip_plan.resample.working_bytes)
        plans.append(clip_plan)
        cancel.check(Checkpoint.ACQUISITION, index)

    return _request_plan(policy, plans, encoded, normalized, largest_decode + largest_resample_work)


def preflight_one(
    host: FamilyHost, policy: AudioPolicy, geometry: ClipGeometry, *, nbytes: int
) -> RequestPlan:
    """:func:`preflight` of a request of one clip whose header ``geometry`` is recorded
    (``nbytes`` encoded bytes): the same checks in the same order, the same plan and
    the same errors, without the request's walk (a stream's admission at its running
    length, and the final plan in its ``finish()``: one call, a third of the CPU).

    :raises LimitError: a budget is exceeded.
    :raises DecodeError: the header is outside the policy.
    :raises FeatureError: too short for the family.
    :raises EmptyAudioError: ``nbytes`` is 0.
    """
    if policy.max_clips < 1:
        raise LimitError("clip count", actual=1, maximum=policy.max_clips)
    if nbytes == 0:
        raise EmptyAudioError(clip_index=0, detail="no encoded bytes")
    _check(nbytes, policy.max_encoded_bytes_per_clip, "encoded bytes per clip", 0)
    _check(
        nbytes,
        policy.max_encoded_bytes_per_request,
        "encoded bytes per request",
        0,
        kind=MemoryLimitError,
    )
    check_limits(geometry, decode_limits(policy), clip_index=0)
    clip_plan, _, _ = _plan_charged(host, policy, geometry, 0, 0, 0)
    normalized = clip_plan.normalized_samples
    _check(
        normalized, policy.max_normalized_samples_per_request, "normalized samples per request", 0
    )
    _check(
        clip_plan.features.frames, policy.max_frames_per_request, "feature frames per request", 0
    )
    decoded = clip_plan.decode_geometry
    largest = (
        decoded.frames * FLOAT32_BYTES
        + decode_working_bytes(decoded)
        + clip_plan.resample.working_bytes
    )
    return _request_plan(policy, (clip_plan,), nbytes, normalized, largest)


def _plan_charged(
    host: FamilyHost,
    policy: AudioPolicy,
    geometry: ClipGeometry,
    index: int,
    source_samples: int,
    duration_us: int,
) -> tuple[ClipPlan, int, int]:
    """One clip's plan, its source frames and duration charged to the request's totals
    (before the plan; in truncate mode after it, for the part kept): ``(plan, source
    samples, duration in µs)``."""
    truncating = policy.overflow == "truncate"
    if not truncating:
        source_samples, duration_us = _charge_source(
            policy, geometry, source_samples, duration_us, index
        )
    clip_plan = plan_clip(host, policy, geometry, index=index)
    if truncating:
        # The source frames the kept samples span: ceil(kept · in / out), at most all.
        kept, rate = clip_plan.normalized_samples, clip_plan.resample.output_rate_hz
        spanned = -(-kept * geometry.rate_hz // rate)
        source_samples, duration_us = _charge_source(
            policy, _prefix(geometry, spanned), source_samples, duration_us, index
        )
    return clip_plan, source_samples, duration_us


def _request_plan(
    policy: AudioPolicy,
    plans: Sequence[ClipPlan],
    encoded: int,
    normalized: int,
    largest_clip_work: int,
) -> RequestPlan:
    """The request's byte checks after its clips' (waveform result, working and prepared
    result bytes), and its plan. ``largest_clip_work``: the largest decoded source and
    its scratch plus the largest resampler scratch, in bytes."""
    # One pass over the clips for every sum and maximum below (no generator per total:
    # a stream's final plan runs this once, after a pause, when each costs several µs).
    truncated_extra: int | None = None
    feature_bytes = feature_working = stacked = padded = 0
    every_stacked = True
    for p in plans:
        extra = (p.resample.output_samples - p.normalized_samples) * FLOAT32_BYTES
        if truncated_extra is None or extra > truncated_extra:
            truncated_extra = extra
        features = p.features
        feature_bytes += features.feature_bytes
        feature_working = max(feature_working, features.working_bytes)
        collated = features.detail.get(COLLATED_BYTES)
        if isinstance(collated, int):
            stacked += int(collated)
        else:
            every_stacked = False
        padded = max(padded, _array_bytes(features.feature_shape))
    result_bytes = normalized * FLOAT32_BYTES
    _check(
        result_bytes,
        policy.max_waveform_result_bytes_per_request,
        "waveform result bytes per request",
        kind=MemoryLimitError,
    )
    # Peak while one clip is in flight: its decoded source and resampler scratch, plus
    # every retained normalized waveform (an untruncated resample output is retained as is;
    # a truncated one is copied, so count its full length once more).
    working = largest_clip_work + (truncated_extra or 0) + result_bytes
    _check(
        working,
        policy.max_waveform_working_bytes_per_request,
        "waveform working bytes per request",
        kind=MemoryLimitError,
    )
    # The collated batch: the sum of what each clip adds where the family says it
    # (stacked rows, :data:`COLLATED_BYTES`), else every clip padded to the largest.
    prepared = feature_bytes + (stacked if every_stacked else len(plans) * padded)
    _check(
        prepared,
        policy.max_prepared_result_bytes_per_request,
        "prepared result bytes per request",
        kind=MemoryLimitError,
    )
    return RequestPlan(
        policy=policy,
        clips=tuple(plans),
        encoded_bytes=encoded,
        waveform_result_bytes=result_bytes,
        waveform_working_bytes=working,
        feature_working_bytes=feature_working,
        prepared_result_bytes=prepared,
    )


#: The key of :attr:`~audiogate.records.FeaturePlan.detail` under which a family that
#: stacks its clips' rows in the collated batch (Audio Flamingo 3's and GLM-ASR's 30 s
#: windows) gives the bytes one clip adds to it.
COLLATED_BYTES: Final = "collated_bytes"


def _array_bytes(shape: tuple[int, ...]) -> int:
    # float32 features plus a bool mask over the largest axis.
    return math.prod(shape) * FLOAT32_BYTES + (max(shape) if shape else 0)
