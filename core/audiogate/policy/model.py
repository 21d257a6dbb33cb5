"""The immutable audio policy of one loaded checkpoint, and where each value came from."""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = [
    "MICROS_PER_SECOND",
    "AudioPolicy",
    "FeatureBackend",
    "OverflowMode",
    "PlaceholderKind",
    "ValueSource",
    "frozen_mapping",
    "str_tuple",
]

MICROS_PER_SECOND = 1_000_000

#: How over-long audio is handled: refused (the default everywhere) or cut at the limit
#: with processed and received durations reported (opt-in, where a family allows it).
OverflowMode = Literal["reject", "truncate"]

#: Which array library computes and returns features.
FeatureBackend = Literal["numpy", "mlx"]

#: How a clip becomes prompt positions.
PlaceholderKind = Literal["numbered_per_clip", "fixed_soft_tokens_per_clip", "rows_per_clip"]


def frozen_mapping(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """Return a read-only copy of ``value`` (``MappingProxyType`` over a new dict)."""
    return types.MappingProxyType(dict(value or {}))


@attrs.frozen
class ValueSource:
    """Provenance of one policy value.

    :param kind: ``"pinned"`` (the family's pinned default), ``"checkpoint"`` (read from a
        checkpoint file) or ``"derived"`` (computed from another value, named in ``key``).
    :param origin: the pinned revision, or the checkpoint file name.
    :param key: the JSON pointer read, or for derived values the field derived from.
    """

    kind: Literal["pinned", "checkpoint", "derived"]
    origin: str
    key: str | None = None

    def describe(self) -> str:
        """One short human-readable line (``preprocessor_config.json:/sampling_rate``)."""
        if self.kind == "pinned":
            return f"pinned@{self.origin[:12]}"
        if self.kind == "derived":
            return f"derived from {self.key} ({self.origin})"
        return f"{self.origin}:{self.key}"


def str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Converter: any iterable of strings to a tuple (typed, unlike a bare ``tuple``)."""
    return tuple(value)


def _tuple_or_none(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(sorted(int(v) for v in value))


@attrs.frozen(kw_only=True)
class AudioPolicy:
    """Everything that decides how one family turns audio into model input.

    Request-level caps are aggregates over all clips of a request, never a per-clip
    value multiplied by the clip count. Sizes are in bytes, durations in seconds or
    microseconds as the name says, samples are mono sample frames.
    """

    family: str
    #: Family-specific frontend variant (``"remote_code"`` / ``"native"`` for Phi-4 MM).
    variant: str = "default"
    #: The checkpoint revision or reference commit the pinned defaults come from.
    revision: str

    # --- waveform frontend -------------------------------------------------------
    target_rate_hz: int = 16_000
    target_channels: int = 1
    dtype: str = "f32"
    resampling: str
    min_source_rate_hz: int = 1
    max_source_rate_hz: int = 192_000
    allowed_source_rates_hz: tuple[int, ...] | None = attrs.field(
        default=None, converter=_tuple_or_none
    )
    max_source_channels: int = 8
    #: Refuse a clip whose decoded samples are all exactly 0.0 (not a silence detector).
    refuse_all_zero: bool = False
    #: Fewest normalized samples a clip may have (0: no family minimum beyond features).
    min_samples_per_clip: int = 0

    # --- per-clip limits ---------------------------------------------------------
    max_duration_seconds: int
    max_samples_per_clip: int
    max_encoded_bytes_per_clip: int
    max_frames_per_clip: int
    overflow: OverflowMode = "reject"

    # --- request aggregates --------------------------------------------------------
    max_clips: int = 16
    max_encoded_bytes_per_request: int
    max_source_samples_per_request: int
    max_normalized_samples_per_request: int
    max_source_duration_us_per_request: int
    max_frames_per_request: int
    max_waveform_result_bytes_per_request: int
    max_waveform_working_bytes_per_request: int
    max_prepared_result_bytes_per_request: int

    # --- feature framing (estimate used by the preflight) ----------------------------
    frame_length_samples: int
    frame_hop_samples: int
    #: Pad normalized length up to a multiple of this before framing (Gemma 3n: 128).
    pad_multiple_samples: int = 1

    # --- prompt ----------------------------------------------------------------------
    placeholder: PlaceholderKind
    soft_tokens_per_clip: int | None = None

    #: Where features are computed: ``"numpy"`` (the default and the reference) or ``"mlx"``
    #: (arrays come back as ``mx.array``). A runtime choice of the caller, per model or per
    #: call; never read from checkpoint files.
    feature_backend: FeatureBackend = "numpy"

    #: Family-specific settings (token ids, padding side, ...), read-only.
    options: Mapping[str, Any] = attrs.field(factory=frozen_mapping, converter=frozen_mapping)
    #: Where each field's value came from, keyed by field name (``options.<name>`` for options).
    sources: Mapping[str, ValueSource] = attrs.field(
        factory=frozen_mapping, converter=frozen_mapping, eq=False
    )

    # ---------------------------------------------------------------------------------
    def source_of(self, field: str) -> ValueSource:
        """The provenance of ``field``; pinned unless a checkpoint value was recorded."""
        return self.sources.get(field, ValueSource("pinned", self.revision))

    @property
    def from_checkpoint(self) -> bool:
        """Whether any value was read from the checkpoint's own config files."""
        return any(src.kind != "pinned" for src in self.sources.values())

    def estimate_frames(self, samples: int) -> int:
        """Feature frames for ``samples`` normalized samples at the target rate.

        ``pad`` up to ``pad_multiple_samples``, then ``(n - frame) // hop + 1``, or 0 when
        shorter than one frame. Families refine this per clip in their feature plan.
        """
        padded = math.ceil(samples / self.pad_multiple_samples) * self.pad_multiple_samples
        if padded < self.frame_length_samples:
            return 0
        return (padded - self.frame_length_samples) // self.frame_hop_samples + 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values (without sources)."""
        out: dict[str, Any] = {}
        for field in attrs.fields(AudioPolicy):
            if field.name == "sources":
                continue
            value = getattr(self, field.name)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        return out
