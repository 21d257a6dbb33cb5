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
            # A commit hash is shortened as git does; any other revision is kept whole.
            short = all(c in "0123456789abcdef" for c in self.origin) and len(self.origin) > 12
            return f"pinned@{self.origin[:12] if short else self.origin}"
        if self.kind == "derived":
            return f"derived from {self.key} ({self.origin})"
        return f"{self.origin}:{self.key}"


def str_tuple(value: Iterable[str] | str) -> tuple[str, ...]:
    """Converter: any iterable of strings to a tuple (typed, unlike a bare ``tuple``); a
    single string is one item, not its characters."""
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _tuple_or_none(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(sorted(int(v) for v in value))


@attrs.frozen(kw_only=True)
class AudioPolicy:
    """Everything that decides how one family turns audio into model input.

    Request-level caps are aggregates over all clips of a request, never a per-clip
    value multiplied by the clip count. Sizes are in bytes, durations in seconds or
    microseconds as the name says, samples are mono sample frames. The core's preflight
    checks every limit from the clips' headers and the family's plans before anything is
    decoded (``docs/architecture.md``); a checkpoint can only lower a limit, through the
    keys its family declares.

    :param family: the family's name (its :class:`~audiogate.family.FamilySpec` ``name``).
    :param variant: a family-specific frontend variant (``"default"`` unless it has several).
    :param revision: the checkpoint revision or reference commit the pinned values come from.
    :param target_rate_hz: the rate the frontend takes; resampling goes there.
    :param target_channels: always 1: clips are averaged to mono when decoded.
    :param dtype: the normalized waveform's sample type, ``"f32"``.
    :param resampling: the resampler's name. ``"soxr_hq"`` is the core's default (soxr HQ
        with ``librosa.load``'s output length, used when the family implements no resample
        hooks); any other name is the family's own, planned and run by its hooks.
    :param min_source_rate_hz: lowest source rate admitted (else ``DecodeError``).
    :param max_source_rate_hz: highest source rate admitted (else ``LimitError``).
    :param allowed_source_rates_hz: if set, the only source rates admitted.
    :param max_source_channels: most channels of a source.
    :param refuse_all_zero: refuse a clip whose decoded samples are all exactly 0.0.
    :param min_samples_per_clip: fewest normalized samples a clip may have (a shorter clip
        is a ``FeatureError`` in the preflight; 0: the family's frontend decides).
    :param max_duration_seconds: longest source duration per clip (checked on the header),
        and the normalized-sample cap at the effective rate.
    :param max_samples_per_clip: most normalized samples per clip (``"duration samples"``).
    :param max_encoded_bytes_per_clip: most encoded bytes of one clip.
    :param max_frames_per_clip: most feature frames of one clip.
    :param overflow: ``"reject"`` over-long audio, or ``"truncate"`` it at the limit (only
        where the family's key table allows it: ``standard_keys(overflow_modes=...)``).
    :param max_clips: most clips per request.
    :param max_encoded_bytes_per_request: encoded bytes of all clips.
    :param max_source_samples_per_request: decoded source frames of all clips.
    :param max_normalized_samples_per_request: normalized samples of all clips.
    :param max_source_duration_us_per_request: source duration of all clips (µs).
    :param max_frames_per_request: feature frames of all clips.
    :param max_waveform_result_bytes_per_request: the retained normalized waveforms,
        4 bytes per normalized sample of all clips.
    :param max_waveform_working_bytes_per_request: the peak while one clip is decoded and
        resampled: its decoded source (4 bytes per frame plus the decoder's block of
        accumulators, :func:`audiogate.pipeline.preflight.decode_working_bytes`: up to
        65,536 × (8 · channels + 16) bytes, 2 MiB in stereo), the largest resample plan's
        ``working_bytes`` (soxr HQ's: :data:`audiogate.resample.soxr_hq.SOXR_WORKING_BYTES`,
        1 MiB), and every retained normalized waveform. Size it as the result bytes plus
        the longest admitted source at ``max_source_rate_hz`` (4 bytes per frame) plus the
        decoder block at ``max_source_channels`` plus the resampler's scratch.
    :param max_prepared_result_bytes_per_request: the feature arrays (each plan's
        ``feature_bytes``) plus the collated batch (every clip padded to the largest).
    :param frame_length_samples: the frontend's frame length, for the preflight's frame
        estimate (:meth:`estimate_frames`).
    :param frame_hop_samples: its hop.
    :param pad_multiple_samples: normalized length padded up to a multiple of this before
        framing (Gemma 3n: 128).
    :param placeholder: how the family's prompt places clips (descriptive):
        ``"numbered_per_clip"`` (a placeholder per clip expanding to that clip's count),
        ``"fixed_soft_tokens_per_clip"`` (the same count for every clip, see
        ``soft_tokens_per_clip``) or ``"rows_per_clip"`` (a count that follows the clip's
        features).
    :param soft_tokens_per_clip: the fixed count of ``"fixed_soft_tokens_per_clip"``.
    :param feature_backend: ``"numpy"`` or ``"mlx"``; the caller's choice, never read from
        checkpoint files.
    :param options: the family's own settings (token ids, padding side, ...), read-only.
    :param sources: where each value came from (:meth:`source_of`).
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
    feature_backend: FeatureBackend = attrs.field(
        default="numpy", validator=attrs.validators.in_(("numpy", "mlx"))
    )

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
