"""The key of a prepared clip: its source digest and a fingerprint of what shapes the result.

A clip's prepared result (waveform, features, accounting) is a function of its encoded
bytes (``EncodedClip.sha256``), of the :class:`~audiogate.policy.AudioPolicy` fields the
decode, resample and feature stages read to *transform* it, of the plan's truncation point,
and of the code that runs: the family's distribution and version and the core's version.
Limits decide only whether a clip is admitted, never what it becomes, so they stay out of
the key: admission runs on every request, hit or miss. Every policy field is in exactly one
of :data:`RESULT_FIELDS` and :data:`LIMIT_FIELDS` (a test keeps it so, so a new field must
be placed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from audiogate._version import __version__
from audiogate.deprecation import forward_names
from audiogate.policy import AudioPolicy
from audiogate.policy.memo import per_policy

if TYPE_CHECKING:
    from audiogate.decode.geometry import SourceFormat
    from audiogate.host import FamilyHost

__all__ = [
    "KEY_FORMAT",
    "LIMIT_FIELDS",
    "RESULT_FIELDS",
    "FeatureKey",
    "feature_key",
    "policy_result_fields",
]

#: ``policy_fingerprint`` was also the batch output's string digest (``audiogate.batch``).
__getattr__ = forward_names(
    __name__, {"policy_fingerprint": "audiogate.cache.key:policy_result_fields"}, since="0.2.0"
)

#: Bumped when the entry or blob layout changes, so old persisted entries miss.
KEY_FORMAT: Final = 2

#: Policy fields that change a clip's prepared result, and why.
RESULT_FIELDS: Final[Mapping[str, str]] = {
    "family": "whose stages run",
    "variant": "the frontend variant (Phi-4 MM's remote_code/native)",
    "revision": "the pinned or checkpoint revision the frontend's constants come from",
    "target_rate_hz": "the resampler's output rate",
    "target_channels": "the downmix",
    "dtype": "the normalized sample type",
    "resampling": "the resampler",
    "refuse_all_zero": "decoding refuses an all-zero clip (checked after decode only)",
    "overflow": "truncate cuts the clip where reject refuses it",
    "frame_length_samples": "framing",
    "frame_hop_samples": "framing",
    "pad_multiple_samples": "padding before framing",
    "placeholder": "how the family counts a clip's tokens",
    "soft_tokens_per_clip": "the fixed token count",
    "feature_backend": "numpy or mlx arrays",
    "options": "the family's own settings (padding side, token ids, ...), all of them",
}

#: Policy fields that only admit or refuse (checked by the preflight on every request,
#: and against a hit's exact geometry), or that describe provenance.
LIMIT_FIELDS: Final = frozenset(
    {
        "min_source_rate_hz",
        "max_source_rate_hz",
        "allowed_source_rates_hz",
        "max_source_channels",
        "min_samples_per_clip",
        "max_duration_seconds",
        "max_samples_per_clip",
        "max_encoded_bytes_per_clip",
        "max_frames_per_clip",
        "max_clips",
        "max_encoded_bytes_per_request",
        "max_source_samples_per_request",
        "max_normalized_samples_per_request",
        "max_source_duration_us_per_request",
        "max_frames_per_request",
        "max_waveform_result_bytes_per_request",
        "max_waveform_working_bytes_per_request",
        "max_prepared_result_bytes_per_request",
        "sources",
    }
)


@attrs.frozen
class FeatureKey:
    """What one cache entry is stored under.

    :param sha256: lowercase hex digest of the clip's encoded bytes.
    :param fingerprint: lowercase hex digest of everything else that shapes the result.
    """

    sha256: str
    fingerprint: str

    def scoped(self, scope: str) -> FeatureKey:
        """The key of the same clip in ``scope``'s own part of the cache (an owner's):
        what one owner sent never answers another's look-up (docs/sources.md, "What
        another owner can learn")."""
        mixed = hashlib.sha256(f"{self.fingerprint}\0{scope}".encode()).hexdigest()
        return FeatureKey(self.sha256, mixed)


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    # Family options are JSON values in practice; anything else by its repr and type.
    return f"{type(value).__qualname__}:{value!r}"


def policy_result_fields(policy: AudioPolicy) -> dict[str, Any]:
    """The result-shaping part of ``policy``, JSON-ready (:data:`RESULT_FIELDS`): a dict,
    part of a clip's cache key (the batch output's short string digest is
    :func:`audiogate.batch.policy_fingerprint`)."""
    return {name: _canonical(getattr(policy, name)) for name in RESULT_FIELDS}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@per_policy
def _policy_json(policy: AudioPolicy) -> str:
    return _json(policy_result_fields(policy))


def feature_key(
    host: FamilyHost,
    policy: AudioPolicy,
    sha256: str,
    *,
    decode_frames: int,
    normalized_samples: int,
    source_format: SourceFormat | None = None,
) -> FeatureKey:
    """The key of one clip of a request planned under ``policy``.

    :param decode_frames: the source frames the plan decodes (a prefix when truncating).
    :param normalized_samples: the plan's normalized samples (where a truncation cuts).
    :param source_format: what the caller declared about the bytes. A raw source's
        encoding, rate and channels are in the key: the same bytes declared otherwise
        are other samples. A container's header is in its bytes, so its declaration is
        not (``"auto"`` and ``"wav"`` share their entries).
    """
    family = host.family(policy.family)
    parts: dict[str, Any] = {
        "format": KEY_FORMAT,
        "core": __version__,
        "distribution": family.distribution,
        "distribution_version": family.distribution_version,
        "family_version": family.spec.version,
        "decode_frames": decode_frames,
        "normalized_samples": normalized_samples,
    }
    if source_format is not None and source_format.container == "raw":
        parts["declared"] = [
            source_format.container,
            source_format.encoding,
            source_format.rate_hz,
            source_format.channels,
        ]
    # The JSON of ``{**parts, "policy": policy_result_fields(policy)}`` ("policy" sorts
    # after every other part), with the policy's part serialized once per policy.
    text = f'{_json(parts)[:-1]},"policy":{_policy_json(policy)}}}'
    return FeatureKey(sha256, hashlib.sha256(text.encode()).hexdigest())
