"""The feature cache: prepared clips by source digest and result-shaping policy, in memory
under a byte budget, optionally persisted (``docs/architecture.md``, "The feature cache")."""

from __future__ import annotations

from audiogate.cache.entry import CachedClip, from_blob, to_blob
from audiogate.cache.features import ByteAccount, Claim, FeatureCache, FeatureStore
from audiogate.cache.key import LIMIT_FIELDS, RESULT_FIELDS, FeatureKey, feature_key

__all__ = [
    "LIMIT_FIELDS",
    "RESULT_FIELDS",
    "ByteAccount",
    "CachedClip",
    "Claim",
    "FeatureCache",
    "FeatureKey",
    "FeatureStore",
    "feature_key",
    "from_blob",
    "to_blob",
]
