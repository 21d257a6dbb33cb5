"""The Prometheus series of the audio boundary (listed in ``docs/reference/metrics.md``).

Every series carries a ``family`` label. Rejection reasons (the ``reason`` label) are
mutually exclusive and always exported (zero until used), so summing the family is safe;
there is no ``reason="all"`` line. Which series a request's end moves is decided in one
place, :func:`audiogate.metrics.outcome.record_outcome`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["CACHE_TIERS", "REJECTION_REASONS", "AudioMetrics"]

#: The values of the rejections' ``reason`` label (``AudioGateError.reason``), in the
#: order ``docs/reference/metrics.md`` lists them.
REJECTION_REASONS: Final = (
    "queue_full",
    "memory_limit",
    "worker_unavailable",
    "overflow",
    "waveform",
    "feature",
    "feature_panic",
    "context_limit",
)

#: Where a feature-cache hit came from (the ``tier`` label).
CACHE_TIERS: Final = ("memory", "store")


class AudioMetrics:
    """The audio series on one registry (a new private registry unless one is given).

    :param registry: where to register; pass your server's registry to export them.
    :param families: family labels to pre-create so every series is exported from the start.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, families: Iterable[str] = ()
    ) -> None:
        # Imported by the first metrics object: a CLI run or a gate without a worker has none.
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        label = ["family"]
        self.source_seconds = Counter(
            "audiogate_audio_source_seconds", "Source audio duration, seconds.", label, registry=r
        )
        self.source_samples = Counter(
            "audiogate_audio_source_samples",
            "Mono sample frames before resampling.",
            label,
            registry=r,
        )
        self.normalized_samples = Counter(
            "audiogate_audio_normalized_samples",
            "Mono samples after resampling (and truncation).",
            label,
            registry=r,
        )
        self.feature_frames = Counter(
            "audiogate_audio_feature_frames", "Feature frames produced.", label, registry=r
        )
        self.effective_tokens = Counter(
            "audiogate_audio_effective_tokens",
            "Internal audio prompt positions (not OpenAI usage).",
            label,
            registry=r,
        )
        self.effective_prefill_tokens = Counter(
            "audiogate_audio_effective_prefill_tokens",
            "Final prepared prefill length of audio requests.",
            label,
            registry=r,
        )
        self.latency_seconds = Counter(
            "audiogate_audio_preprocess_latency_seconds",
            "Preprocessing wall time of completed requests, seconds.",
            label,
            registry=r,
        )
        self.rejections = Counter(
            "audiogate_audio_preprocess_rejections",
            "Rejected requests by reason.",
            ["family", "reason"],
            registry=r,
        )
        self.cancelled = Counter(
            "audiogate_audio_preprocess_cancelled", "Cancelled requests.", label, registry=r
        )
        self.completed = Counter(
            "audiogate_audio_preprocess_completed",
            "Requests prepared successfully.",
            label,
            registry=r,
        )
        self.queued_bytes = Gauge(
            "audiogate_audio_preprocess_queued_bytes",
            "Encoded bytes held by queued, processing and handed-off requests.",
            registry=r,
        )
        self.inflight_host_bytes = Gauge(
            "audiogate_audio_preprocess_inflight_host_bytes",
            "Host bytes reserved by queued, processing and handed-off requests.",
            registry=r,
        )
        self.cache_hits = Counter(
            "audiogate_feature_cache_hits",
            "Clips served from the feature cache, by tier (memory or store).",
            ["family", "tier"],
            registry=r,
        )
        self.cache_misses = Counter(
            "audiogate_feature_cache_misses",
            "Clips the feature cache did not hold (decoded and featurised).",
            label,
            registry=r,
        )
        self.cache_evictions = Counter(
            "audiogate_feature_cache_evictions",
            "Entries evicted from the feature cache (budget or reservations).",
            registry=r,
        )
        self.cache_bytes = Gauge(
            "audiogate_feature_cache_bytes",
            "Bytes held by the feature cache (charged to the in-flight host-bytes cap).",
            registry=r,
        )
        self.cache_entries = Gauge(
            "audiogate_feature_cache_entries", "Entries in the feature cache.", registry=r
        )
        self._lock = threading.Lock()
        self._known: set[str] = set()
        for family in families:
            self.ensure_family(family)

    def ensure_family(self, family: str) -> None:
        """Create every series of ``family`` at zero (idempotent)."""
        with self._lock:
            if family in self._known:
                return
            self._known.add(family)
        for counter in (
            self.source_seconds,
            self.source_samples,
            self.normalized_samples,
            self.feature_frames,
            self.effective_tokens,
            self.effective_prefill_tokens,
            self.latency_seconds,
            self.cancelled,
            self.completed,
        ):
            counter.labels(family=family)
        for reason in REJECTION_REASONS:
            self.rejections.labels(family=family, reason=reason)
        for tier in CACHE_TIERS:
            self.cache_hits.labels(family=family, tier=tier)
        self.cache_misses.labels(family=family)

    def record_waveforms(
        self,
        family: str,
        *,
        source_duration_us: int,
        source_samples: int,
        normalized_samples: int,
        frames: int,
        tokens: int,
    ) -> None:
        """Record one request's waveform and feature accounting (once per request)."""
        self.ensure_family(family)
        self.source_seconds.labels(family=family).inc(source_duration_us / 1_000_000)
        self.source_samples.labels(family=family).inc(source_samples)
        self.normalized_samples.labels(family=family).inc(normalized_samples)
        self.feature_frames.labels(family=family).inc(frames)
        self.effective_tokens.labels(family=family).inc(tokens)

    def record_completed(self, family: str, *, latency_seconds: float, prefill_tokens: int) -> None:
        """Record one completed request."""
        self.ensure_family(family)
        self.completed.labels(family=family).inc()
        self.latency_seconds.labels(family=family).inc(max(latency_seconds, 1e-6))
        self.effective_prefill_tokens.labels(family=family).inc(prefill_tokens)

    def record_rejection(self, family: str, reason: str) -> None:
        """Record one rejected request under ``reason``."""
        if reason not in REJECTION_REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; one of {REJECTION_REASONS}")
        self.ensure_family(family)
        self.rejections.labels(family=family, reason=reason).inc()

    def record_cancelled(self, family: str) -> None:
        """Record one cancelled request."""
        self.ensure_family(family)
        self.cancelled.labels(family=family).inc()

    def set_gauges(self, *, queued_bytes: int, inflight_host_bytes: int) -> None:
        """Publish the current reservation totals."""
        self.queued_bytes.set(queued_bytes)
        self.inflight_host_bytes.set(inflight_host_bytes)

    def record_cache_lookup(self, family: str, *, hit: bool, tier: str = "memory") -> None:
        """Record one feature-cache lookup: a hit from ``tier``, or a miss."""
        self.ensure_family(family)
        if hit:
            self.cache_hits.labels(family=family, tier=tier).inc()
        else:
            self.cache_misses.labels(family=family).inc()

    def record_cache_eviction(self) -> None:
        """Record one entry evicted from the feature cache."""
        self.cache_evictions.inc()

    def set_cache_gauges(self, *, resident_bytes: int, entries: int) -> None:
        """Publish the feature cache's resident bytes and entries."""
        self.cache_bytes.set(resident_bytes)
        self.cache_entries.set(entries)

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample (tests and the load-test script)."""
        found = self.registry.get_sample_value(name, labels or None)
        return 0.0 if found is None else found
