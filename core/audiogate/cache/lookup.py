"""One request's use of the feature cache: keys, look-ups, hit admission, fills.

:func:`process_cached` runs a preflighted request as
:func:`~audiogate.pipeline.process.process_request` does, clip by clip, with the cache
in front of each clip's decode → resample → features:

* the key (:func:`~audiogate.cache.key.feature_key`) from the clip's digest and its plan;
* a hit is admitted by the same code as a miss: the preflight's own per-clip planning
  (:func:`~audiogate.pipeline.preflight.plan_clip`) and the decoder's source limits
  (:func:`~audiogate.decode.check_limits`), on the hit's exact geometry (the preflight
  saw only a compressed clip's upper bound, and limits are not in the key);
* a miss is claimed (concurrent misses of one key compute once), computed, and stored
  once the request is collated (a single clip's entry keeps its collated inputs); the
  claims are released whatever happens;
* a clip sent twice in one request is computed once (its second look-up would wait on
  this request's own claim);
* a plugin step that fails on hits (collation raising a :class:`~audiogate.errors.
  PluginError` or an error that is no audiogate error) makes those hits misses: their
  entries are dropped and they are recomputed from the source, once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from audiogate.acquire.clip import EncodedClip
from audiogate.cache.entry import CachedClip
from audiogate.cache.features import Claim, FeatureCache
from audiogate.cache.key import FeatureKey, feature_key
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode import check_limits
from audiogate.errors import AudioGateError, PluginError
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan, RequestPlan
from audiogate.pipeline.preflight import decode_limits, plan_clip
from audiogate.pipeline.prepared import PreparedBatch, PreparedClip
from audiogate.pipeline.process import Progress, collate_clips, process_clip
from audiogate.policy import AudioPolicy

if TYPE_CHECKING:
    from audiogate.decode.isolation import DecoderPool

__all__ = ["admit_hit", "process_cached"]

_log = logging.getLogger(__name__)


def process_cached(
    cache: FeatureCache,
    host: FamilyHost,
    plan: RequestPlan,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken = NEVER,
    progress: Progress | None = None,
    decoders: DecoderPool | None = None,
) -> PreparedBatch:
    """:func:`~audiogate.pipeline.process.process_request` through ``cache``."""
    policy = plan.policy
    prepared: list[PreparedClip] = []
    claims: list[Claim] = []
    fills: list[tuple[FeatureKey, Claim | None, PreparedClip]] = []
    computed: dict[FeatureKey, PreparedClip] = {}
    collated = None
    limits = decode_limits(policy)
    # (position in ``prepared``, key, plan, clip) of each hit, for a recomputation.
    hits: list[tuple[int, FeatureKey, ClipPlan, EncodedClip]] = []
    try:
        for clip_plan, clip in zip(plan.clips, clips, strict=True):
            index = clip_plan.index
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
                prepared.append(_placed(computed[key], clip_plan, clip))
                continue
            found = cache.lookup(key, family=policy.family, cancel=cancel, clip_index=index)
            if isinstance(found, CachedClip) and _fits_header(found.clip, clip):
                admit_hit(host, policy, clip_plan, found.clip)
                hits.append((len(prepared), key, clip_plan, clip))
                prepared.append(found.placed(index=index, ordinal=clip.ordinal, origin=clip.origin))
                if len(plan.clips) == 1:
                    collated = found.collated
                continue
            # A hit computed from another reading of these bytes (a raw source stored
            # under another declared geometry) is computed from this clip's own, where a
            # recorded header that is not its bytes' is refused.
            claim = found if isinstance(found, Claim) else None
            if claim is not None:
                claims.append(claim)
            done = process_clip(
                host,
                plan,
                clip_plan,
                clip,
                cancel=cancel,
                progress=progress,
                decoders=decoders,
                limits=limits,
            )
            fills.append((key, claim, done))  # no claim: another thread's gave up
            computed[key] = done
            prepared.append(done)
        try:
            batch = collate_clips(
                host, plan, prepared, cancel=cancel, progress=progress, collated=collated
            )
        except Exception as exc:
            if not hits or not _plugin_failure(exc):
                raise
            _log.warning("a plugin step failed on cached features (%r); recomputing", exc)
            for at, key, clip_plan, clip in hits:
                cache.forget(key)
                done = process_clip(
                    host,
                    plan,
                    clip_plan,
                    clip,
                    cancel=cancel,
                    progress=progress,
                    decoders=decoders,
                    limits=limits,
                )
                fills.append((key, None, done))
                prepared[at] = done
            batch = collate_clips(host, plan, prepared, cancel=cancel, progress=progress)
        single = batch.inputs if len(prepared) == 1 else None
        for key, claim, done in fills:
            entry = CachedClip(done, collated=single)
            if claim is not None:
                claim.fill(entry)
            else:
                cache.put(key, entry)
    finally:
        for claim in claims:
            claim.release()
    return batch


def _plugin_failure(exc: Exception) -> bool:
    """Whether ``exc`` is a plugin breaking its contract (not a refusal of the input)."""
    return isinstance(exc, PluginError) or not isinstance(exc, AudioGateError)


def admit_hit(
    host: FamilyHost, policy: AudioPolicy, clip_plan: ClipPlan, hit: PreparedClip
) -> ClipPlan:
    """Admit a hit as its clip would be: the source limits and the preflight's planning
    of its exact geometry (what decoding a compressed clip planned for an upper bound
    would have refused).

    :raises DecodeError: a source rate the policy refuses.
    :raises LimitError: source channels, frames or duration, the duration cap, or the
        feature frames per clip over the policy's.
    :raises FeatureError: shorter than the family's minimum.
    """
    exact = attrs.evolve(
        clip_plan.geometry,
        rate_hz=hit.source_rate_hz,
        channels=hit.channels,
        frames=hit.source_samples,
        duration_us=hit.duration_us,
        exact=True,
        prefix=False,
    )
    check_limits(exact, decode_limits(policy), clip_index=clip_plan.index)
    return plan_clip(host, policy, exact, index=clip_plan.index)


def _placed(done: PreparedClip, clip_plan: ClipPlan, clip: EncodedClip) -> PreparedClip:
    return attrs.evolve(done, index=clip_plan.index, ordinal=clip.ordinal, origin=clip.origin)


def _fits_header(cached: PreparedClip, clip: EncodedClip) -> bool:
    """Whether a hit was computed from a clip of the geometry a stored clip was admitted
    by (its recorded header); a clip without one is admitted by its own header."""
    header = clip.header
    return header is None or (
        cached.source_rate_hz == header.rate_hz
        and cached.channels == header.channels
        and cached.source_samples == header.frames
        and cached.encoded_bytes == clip.nbytes
    )
