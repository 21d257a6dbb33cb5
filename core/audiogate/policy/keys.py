"""Recognized checkpoint config keys: where they live, their type and allowed range.

One table per family drives three things, so they cannot drift apart: the lookup that
builds the policy, the JSON schema the family ships (``audiogate schema FAMILY``), and
the wording of start-up errors. Keys a family does not declare are ignored; real
configs carry hundreds.

Lookup rule (mlxcel's, ``src/audio/preprocessing_policy.rs``): the processor file shadows
``config.json``. For each key, the first file that contains *any* of its paths wins, and
within that file the first path in list order wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from audiogate.policy.model import AudioPolicy, str_tuple

__all__ = [
    "LIMIT_NAMESPACES",
    "PolicyKey",
    "flat_constants",
    "standard_keys",
]

#: Our own bounds live under the first; checkpoints prepared for mlxcel use the second
#: (``src/audio/preprocessing_policy.rs``; ``seed_name`` below is mlxcel's key name).
LIMIT_NAMESPACES: Final = ("audiogate_audio_limits", "mlxcel_audio_limits")

_UNSET: Final = object()

Apply = Literal["set", "cap_samples_by_seconds"]


@attrs.frozen
class PolicyKey:
    """One recognized setting.

    :param target: the :class:`AudioPolicy` field it sets, or ``options.<name>`` for a
        family option.
    :param paths: JSON pointers, in precedence order within one file.
    :param kind: JSON type accepted: ``"integer"`` (non-negative, never a float or bool),
        ``"string"`` or ``"boolean"``.
    :param minimum: inclusive lower bound for integers.
    :param maximum: inclusive upper bound for integers (the family's pinned maximum).
    :param const: the only value accepted (a frontend the family cannot change).
    :param enum: the values accepted.
    :param apply: ``"set"`` stores the value; ``"cap_samples_by_seconds"`` lowers
        ``max_samples_per_clip`` to ``value × target rate``.
    :param description: one line for the schema and the docs.
    """

    target: str
    paths: tuple[str, ...] = attrs.field(converter=str_tuple)
    kind: Literal["integer", "string", "boolean"] = "integer"
    minimum: int | None = None
    maximum: int | None = None
    const: Any = _UNSET
    enum: tuple[Any, ...] | None = None
    apply: Apply = "set"
    description: str = ""

    @property
    def has_const(self) -> bool:
        """Whether only one value is accepted."""
        return self.const is not _UNSET

    def rule(self) -> str:
        """The rule in words, with the allowed values (used in every error message)."""
        if self.has_const:
            return f"must be exactly {self.const!r} ({self.description or 'pinned frontend'})"
        if self.enum is not None:
            return "must be one of " + ", ".join(repr(v) for v in self.enum)
        if self.kind == "integer":
            low = 0 if self.minimum is None else self.minimum
            if self.maximum is None:
                return f"must be an integer of at least {low}"
            return f"must be an integer from {low} to {self.maximum} (the family's pinned maximum)"
        return f"must be a JSON {self.kind}"

    def property_schema(self) -> dict[str, Any]:
        """The JSON-schema fragment for one path of this key."""
        schema: dict[str, Any] = {"type": self.kind}
        if self.description:
            schema["description"] = self.description
        if self.has_const:
            schema["const"] = self.const
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        if self.kind == "integer" and not self.has_const and self.enum is None:
            schema["minimum"] = 0 if self.minimum is None else self.minimum
            if self.maximum is not None:
                schema["maximum"] = self.maximum
        schema["x-audiogate-target"] = self.target
        return schema


def _limit_paths(name: str, *, seed_name: str | None = None) -> tuple[str, ...]:
    ours = f"/{LIMIT_NAMESPACES[0]}/{name}"
    theirs = f"/{LIMIT_NAMESPACES[1]}/{seed_name or name}"
    return (ours, theirs)


def _bound(field: str, pinned: AudioPolicy, description: str, **paths: str) -> PolicyKey:
    return PolicyKey(
        target=field,
        paths=_limit_paths(paths.get("name", field), seed_name=paths.get("seed_name")),
        minimum=1,
        maximum=int(getattr(pinned, field)),
        description=description,
    )


def standard_keys(
    pinned: AudioPolicy,
    *,
    declared_frame_length: int | None = None,
    declared_frame_hop: int | None = None,
    overflow_modes: Sequence[str] = ("reject",),
    extra: Iterable[PolicyKey] = (),
) -> tuple[PolicyKey, ...]:
    """The keys every family recognizes, bounded by ``pinned``: the sample rate, the clip
    duration and the ``audiogate_audio_limits`` namespace (``docs/reference/`` lists each
    family's).

    :param pinned: the family's pinned defaults; every bound's maximum is its pinned value.
    :param declared_frame_length: the frame length a checkpoint's feature extractor
        declares for this frontend (defaults to ``pinned.frame_length_samples``).
    :param declared_frame_hop: likewise for the hop.
    :param overflow_modes: the ``overflow`` values the family supports.
    :param extra: family-specific keys, appended after the standard ones.
    """
    rate = pinned.target_rate_hz
    keys: list[PolicyKey] = [
        PolicyKey(
            target="target_rate_hz",
            paths=(
                "/audio_processor/sampling_rate",
                "/audio_processor/sample_rate",
                "/feature_extractor/sampling_rate",
                "/sampling_rate",
            ),
            const=rate,
            description="sample rate of the family frontend, Hz",
        ),
        PolicyKey(
            target="max_samples_per_clip",
            paths=(
                "/audio_processor/max_audio_samples",
                "/feature_extractor/max_length",
                "/max_audio_samples",
            ),
            minimum=1,
            maximum=pinned.max_samples_per_clip,
            description=f"normalized samples per clip at {rate} Hz",
        ),
        PolicyKey(
            target="max_samples_per_clip",
            paths=(
                "/audio_processor/max_audio_duration",
                "/audio_processor/max_duration_seconds",
                "/feature_extractor/max_audio_duration",
                "/feature_extractor/max_duration_seconds",
                "/max_audio_duration",
                "/max_duration_seconds",
            ),
            minimum=1,
            maximum=pinned.max_duration_seconds,
            apply="cap_samples_by_seconds",
            description="seconds per clip (lowers the per-clip sample cap)",
        ),
        _bound("max_encoded_bytes_per_clip", pinned, "encoded bytes per clip"),
        _bound("max_clips", pinned, "clips per request"),
        _bound("max_encoded_bytes_per_request", pinned, "encoded bytes per request"),
        _bound("max_source_samples_per_request", pinned, "source sample frames per request"),
        _bound("max_normalized_samples_per_request", pinned, "normalized samples per request"),
        _bound("max_frames_per_request", pinned, "feature frames per request"),
        _bound(
            "max_waveform_result_bytes_per_request",
            pinned,
            "bytes of retained normalized waveforms per request",
        ),
        _bound(
            "max_waveform_working_bytes_per_request",
            pinned,
            "peak host bytes of waveform work per request (encoded bytes excluded)",
        ),
        _bound(
            "max_prepared_result_bytes_per_request",
            pinned,
            "bytes of prepared features per request",
        ),
        _bound(
            "max_source_duration_us_per_request",
            pinned,
            "source duration per request, microseconds",
            name="max_source_duration_us_per_request",
            seed_name="max_source_duration_micros_per_request",
        ),
        _bound(
            "max_source_rate_hz",
            pinned,
            "highest source sample rate accepted, Hz",
            name="max_source_rate_hz",
            seed_name="maximum_source_sample_rate",
        ),
        PolicyKey(
            target="max_source_channels",
            paths=(f"/{LIMIT_NAMESPACES[0]}/max_source_channels",),
            minimum=1,
            maximum=pinned.max_source_channels,
            description="channels per source",
        ),
        PolicyKey(
            target="overflow",
            paths=(f"/{LIMIT_NAMESPACES[0]}/overflow",),
            kind="string",
            enum=tuple(overflow_modes),
            description="over-long audio: 'reject' (default) or 'truncate' where supported",
        ),
        PolicyKey(
            target="frame_length_samples",
            paths=("/audio_processor/frame_length_samples", "/feature_extractor/frame_length"),
            const=declared_frame_length or pinned.frame_length_samples,
            description="analysis frame length of the family frontend, samples",
        ),
        PolicyKey(
            target="frame_hop_samples",
            paths=("/audio_processor/frame_hop_samples", "/feature_extractor/hop_length"),
            const=declared_frame_hop or pinned.frame_hop_samples,
            description="frame hop of the family frontend, samples",
        ),
        PolicyKey(
            target="target_channels",
            paths=("/audio_processor/channels", "/feature_extractor/channels"),
            const=pinned.target_channels,
            description="channels after downmix",
        ),
        PolicyKey(
            target="dtype",
            paths=("/audio_processor/dtype", "/feature_extractor/dtype"),
            kind="string",
            const=pinned.dtype,
            description="waveform sample type",
        ),
        PolicyKey(
            target="resampling",
            paths=_limit_paths("resampling_algorithm"),
            kind="string",
            const=pinned.resampling,
            description="resampling algorithm of the family frontend",
        ),
    ]
    keys.extend(extra)
    return tuple(keys)


def flat_constants(values: Mapping[str, tuple[int | str, str]]) -> tuple[PolicyKey, ...]:
    """Keys for settings a processor file states at its top level (as transformers' feature
    extractors save them), each of which may only restate the value this frontend uses.

    :param values: ``name -> (value, description)``; each becomes the key ``/name`` with
        target ``options.name`` and ``const=value`` (a string or an integer).
    """
    return tuple(
        PolicyKey(
            target=f"options.{name}",
            paths=(f"/{name}",),
            kind="string" if isinstance(value, str) else "integer",
            const=value,
            description=description,
        )
        for name, (value, description) in values.items()
    )
