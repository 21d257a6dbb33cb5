"""The feature cache: prepared clips in memory under a byte budget (LRU), with an optional
persistent tier behind :class:`FeatureStore`.

Its resident bytes are charged to a :class:`ByteAccount` (an :class:`~audiogate.worker.
AudioWorker`'s ledger): they count against the worker's in-flight host-bytes cap together
with the requests' reservations, an entry that does not fit is not kept, and a
reservation that does not fit evicts entries first. Concurrent misses of one key compute
once: the first claims the key, the others wait for it (polling their cancel token) and
hit, or compute themselves if it gave up.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Final, Protocol, cast, runtime_checkable

from audiogate.cache.entry import CachedClip, from_blob, to_blob
from audiogate.cache.key import FeatureKey
from audiogate.cancel import NEVER, CancelToken, Checkpoint

if TYPE_CHECKING:
    from audiogate.metrics import AudioMetrics

__all__ = [
    "ByteAccount",
    "Claim",
    "FeatureCache",
    "FeatureStore",
    "ScopedFeatureCache",
    "SelectiveFeatureStore",
]

_log = logging.getLogger(__name__)

#: How often a waiter for another thread's computation polls its cancel token.
_POLL_SECONDS: Final = 0.02


class FeatureStore(Protocol):
    """The persistent tier: blobs by (source digest, key); a ``SourceStore`` is one."""

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        """Keep ``blob`` for ``(sha256, key)`` (replacing any)."""
        ...

    def get_features(self, sha256: str, key: str) -> bytes | None:
        """The blob kept for ``(sha256, key)``, or ``None``."""
        ...


@runtime_checkable
class SelectiveFeatureStore(FeatureStore, Protocol):
    """A persistent tier that keeps the entries of some sources only (a ``SourceStore``
    keeps those of its live sources): the cache asks it before encoding a clip, so a clip
    it would drop (inline audio that is no stored source) is never encoded nor written."""

    def keeps_features(self, sha256: str) -> bool:
        """Whether :meth:`put_features` would keep an entry of source ``sha256``."""
        ...


class ByteAccount(Protocol):
    """Where the cache's resident bytes are charged (a worker's ledger)."""

    def charge_cache(self, nbytes: int) -> bool:
        """Charge ``nbytes`` more if they fit under the cap; ``False`` (nothing charged)
        if not."""
        ...

    def release_cache(self, nbytes: int) -> None:
        """Give back ``nbytes`` charged before."""
        ...


class Claim:
    """The right and duty to compute one missing key; :meth:`release` in a ``finally``."""

    def __init__(self, cache: FeatureCache, key: FeatureKey, event: threading.Event) -> None:
        self._cache = cache
        self.key = key
        self._event = event

    def fill(self, clip: CachedClip) -> None:
        """Store the computed clip (memory, then the persistent tier)."""
        self._cache.put(self.key, clip)

    def release(self) -> None:
        """Wake the waiters (filled or not); idempotent."""
        self._cache._unclaim(self.key, self._event)


class FeatureCache:
    """Prepared clips by :class:`~audiogate.cache.key.FeatureKey`, least recently used
    evicted first; thread-safe.

    :param max_bytes: the memory budget (``0`` disables the cache: every lookup misses
        without counting, nothing is kept or persisted).
    :param store: the optional persistent tier.
    :param metrics: where hits, misses, evictions and bytes are recorded.
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        store: FeatureStore | None = None,
        metrics: AudioMetrics | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"the feature cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.store = store
        # Asked once: isinstance against a runtime protocol inspects the object.
        self._selective = isinstance(store, SelectiveFeatureStore)
        self.metrics = metrics
        self._account: ByteAccount | None = None
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[FeatureKey, CachedClip] = collections.OrderedDict()
        self._sizes: dict[FeatureKey, int] = {}
        self._claims: dict[FeatureKey, threading.Event] = {}
        self.resident_bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._publish()

    @property
    def enabled(self) -> bool:
        """Whether the cache keeps anything (a budget above 0)."""
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def bind_account(self, account: ByteAccount) -> None:
        """Charge resident bytes to ``account`` from now on (before any entry is kept)."""
        with self._lock:
            if self._entries:
                raise RuntimeError("bind the feature cache's account before it holds entries")
            self._account = account

    # --- lookups ---------------------------------------------------------------------

    def lookup(
        self,
        key: FeatureKey,
        *,
        family: str,
        cancel: CancelToken = NEVER,
        clip_index: int | None = None,
    ) -> CachedClip | Claim | None:
        """The cached clip (a hit), else a :class:`Claim` to compute it (a miss), else
        ``None`` (a miss another thread was computing and gave up on: compute without
        storing a claim). Waiting for another thread polls ``cancel`` at ``Decode``.
        """
        if not self.enabled:
            return None
        waited = False
        while True:
            claim: Claim | None = None
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    event = None
                else:
                    event = self._claims.get(key)
                    if event is None and not waited:
                        event = threading.Event()
                        self._claims[key] = event
                        claim = Claim(self, key, event)
            if found is not None:
                self._count_hit(family, "memory")
                return found
            if claim is not None:
                stored = self._load(key)
                if stored is not None:
                    self.put(key, stored, persist=False)
                    claim.release()
                    self._count_hit(family, "store")
                    return stored
                self._count_miss(family)
                return claim
            if event is None:
                # The thread that claimed it gave up (failed, cancelled, or too large to
                # keep): compute it here rather than queue behind another claim.
                self._count_miss(family)
                return None
            while not event.wait(_POLL_SECONDS):
                cancel.check(Checkpoint.DECODE, clip_index)
            waited = True

    def _load(self, key: FeatureKey) -> CachedClip | None:
        if self.store is None:
            return None
        try:
            blob = self.store.get_features(key.sha256, key.fingerprint)
        except Exception as exc:  # the persistent tier failing is a miss, never an error
            _log.warning("feature store read failed for %s: %r", key.sha256, exc)
            return None
        if blob is None:
            return None
        clip = from_blob(key, blob)
        if clip is None:
            _log.warning("feature store blob for %s is invalid; recomputing", key.sha256)
        return clip

    def _unclaim(self, key: FeatureKey, event: threading.Event) -> None:
        with self._lock:
            if self._claims.get(key) is event:
                del self._claims[key]
        event.set()

    # --- storing ---------------------------------------------------------------------

    def put(self, key: FeatureKey, clip: CachedClip, *, persist: bool = True) -> bool:
        """Keep ``clip`` under ``key`` (evicting the least recently used as needed) and,
        with ``persist``, hand it to the persistent tier; returns whether memory kept it.

        A clip larger than the budget, one with non-numpy arrays, or one whose bytes the
        account cannot take even with the cache emptied is not kept.
        """
        if not self.enabled or not clip.cacheable:
            return False
        clip.freeze()
        size = clip.nbytes
        kept = False
        if size <= self.max_bytes:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return True
                while self._entries and self.resident_bytes + size > self.max_bytes:
                    self._evict_oldest()
                # The account refuses while requests hold its cap: make room from the
                # oldest entries, or keep nothing.
                charged = self._account is None or self._account.charge_cache(size)
                while not charged and self._entries:
                    self._evict_oldest()
                    charged = self._account is None or self._account.charge_cache(size)
                if charged:
                    self._entries[key] = clip
                    self._sizes[key] = size
                    self.resident_bytes += size
                    kept = True
                self._publish()
        store = self.store
        if persist and store is not None and self._persists(store, key.sha256):
            blob = to_blob(key, clip)
            if blob is not None:
                try:
                    store.put_features(key.sha256, key.fingerprint, blob)
                except Exception as exc:  # the request succeeded; only the copy failed
                    _log.warning("feature store write failed for %s: %r", key.sha256, exc)
        return kept

    def _persists(self, store: FeatureStore, sha256: str) -> bool:
        """Whether ``store`` would keep an entry of ``sha256`` (asked before the clip is
        encoded: inline audio's entries are neither encoded nor written)."""
        if not self._selective:
            return True
        try:
            return cast(SelectiveFeatureStore, store).keeps_features(sha256)
        except Exception as exc:  # the persistent tier failing is no copy, never an error
            _log.warning("feature store check failed for %s: %r", sha256, exc)
            return False

    def _evict_oldest(self) -> None:
        """Drop the least recently used entry (call with the lock held)."""
        key, _ = self._entries.popitem(last=False)
        size = self._sizes.pop(key)
        self.resident_bytes -= size
        self.evictions += 1
        if self._account is not None:
            self._account.release_cache(size)
        if self.metrics is not None:
            self.metrics.record_cache_eviction()

    def scoped(self, scope: str) -> FeatureCache:
        """This cache as owner ``scope`` sees it (:class:`ScopedFeatureCache`)."""
        return ScopedFeatureCache(self, scope)

    def forget(self, key: FeatureKey) -> None:
        """Drop ``key``'s entry from memory (a plugin step failed on it); the next
        :meth:`put` of it replaces the persistent tier's copy too."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key, last=False)
                self._evict_oldest()
                self._publish()

    def reclaim(self, nbytes: int) -> int:
        """Evict least recently used entries until ``nbytes`` are freed (or the cache is
        empty); returns the bytes freed. A worker calls this when a reservation does not
        fit."""
        freed = 0
        with self._lock:
            while self._entries and freed < nbytes:
                before = self.resident_bytes
                self._evict_oldest()
                freed += before - self.resident_bytes
            self._publish()
        return freed

    def clear(self) -> None:
        """Drop every entry (the persistent tier keeps its blobs)."""
        self.reclaim(self.resident_bytes)

    # --- metrics ---------------------------------------------------------------------

    def _count_hit(self, family: str, tier: str) -> None:
        if tier != "memory":  # memory hits are counted under the lock that found them
            with self._lock:
                self.hits += 1
        if self.metrics is not None:
            self.metrics.record_cache_lookup(family, hit=True, tier=tier)

    def _count_miss(self, family: str) -> None:
        with self._lock:
            self.misses += 1
        if self.metrics is not None:
            self.metrics.record_cache_lookup(family, hit=False)

    def _publish(self) -> None:
        """Publish the gauges (with the lock held, so they are never set out of order)."""
        if self.metrics is not None:
            self.metrics.set_cache_gauges(
                resident_bytes=self.resident_bytes, entries=len(self._entries)
            )


class ScopedFeatureCache(FeatureCache):
    """One owner's view of a :class:`FeatureCache`: every key is
    :meth:`~audiogate.cache.key.FeatureKey.scoped` to ``scope``, so a look-up hits only
    what the same owner computed (no existence oracle across owners, by answer or by
    latency). The entries, budget, account and counters are the shared cache's."""

    def __init__(self, cache: FeatureCache, scope: str) -> None:
        # A view: none of the base's state is made; everything else is the cache's.
        self.cache = cache
        self.scope = scope

    def __getattr__(self, name: str) -> object:
        return getattr(self.cache, name)

    def __len__(self) -> int:
        return len(self.cache)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, FeatureKey) and key.scoped(self.scope) in self.cache

    def lookup(
        self,
        key: FeatureKey,
        *,
        family: str,
        cancel: CancelToken = NEVER,
        clip_index: int | None = None,
    ) -> CachedClip | Claim | None:
        """:meth:`FeatureCache.lookup` of ``key`` in this scope."""
        return self.cache.lookup(
            key.scoped(self.scope), family=family, cancel=cancel, clip_index=clip_index
        )

    def put(self, key: FeatureKey, clip: CachedClip, *, persist: bool = True) -> bool:
        """:meth:`FeatureCache.put` of ``key`` in this scope."""
        return self.cache.put(key.scoped(self.scope), clip, persist=persist)

    def forget(self, key: FeatureKey) -> None:
        """:meth:`FeatureCache.forget` of ``key`` in this scope."""
        self.cache.forget(key.scoped(self.scope))

    def scoped(self, scope: str) -> FeatureCache:
        """The shared cache's view for ``scope``."""
        return self.cache.scoped(scope)
