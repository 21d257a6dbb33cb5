"""``mm_hashes``: per-clip identities a vLLM engine may cache encoder outputs under.

vLLM's engine, its prefix cache and llm-d's routing trust an item's hash and never
recompute it: the same hash for other features serves another clip's cached encoder
output. So a hash here covers everything that decides the features vLLM receives:

* the clip's source bytes (``sha256``), its declared geometry (rate, channels, samples)
  and where a truncating policy cut it (normalized samples);
* the family, its distribution and version, the core's version, and every policy field
  that shapes a result (:data:`audiogate.cache.key.RESULT_FIELDS`: resampler, framing,
  padding, token ids, the family's options, ...);
* the wire: the dtype the features travel in and the adapter's layout tag.

Change any of these (a new resampler, a policy key, bf16 instead of fp32) and every hash
changes: a stale entry can never be served. Limits are left out: they only admit.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from audiogate._version import __version__
from audiogate.cache.key import policy_result_fields
from audiogate.host import FamilyHost
from audiogate.pipeline import PreparedClip
from audiogate.policy import AudioPolicy
from audiogate.vllm.adapter import VllmFamily

__all__ = ["HASH_FORMAT", "mm_hash"]

#: Bumped when what goes into a hash changes.
HASH_FORMAT: Final = 1


def mm_hash(
    host: FamilyHost,
    policy: AudioPolicy,
    clip: PreparedClip,
    adapter: VllmFamily,
    dtype: str,
) -> str:
    """The 64-hex identity of ``clip`` as features in ``dtype`` for ``adapter``."""
    family = host.family(policy.family)
    parts: dict[str, Any] = {
        "format": HASH_FORMAT,
        "source": clip.sha256,
        "source_rate_hz": clip.source_rate_hz,
        "channels": clip.channels,
        "source_samples": clip.source_samples,
        "normalized_samples": clip.normalized_samples,
        "core": __version__,
        "distribution": family.distribution,
        "distribution_version": family.distribution_version,
        "family_version": family.spec.version,
        "policy": policy_result_fields(policy),
        "wire": [adapter.family, adapter.wire, dtype],
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
