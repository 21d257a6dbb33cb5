"""Records of the decode stage: what the caller declares, what policy admits, what a clip is.

All three are frozen attrs classes. :class:`SourceFormat` and :class:`DecodeLimits` are
built by the pipeline (from the request and the family policy) and are validated on
construction, so a wrong combination is a programming error (``TypeError`` /
``ValueError``), never a per-clip rejection. :class:`ClipGeometry` is produced by
:func:`audiogate.decode.inspect` from the header alone and consumed by
:func:`audiogate.decode.decode`, which re-checks it against the buffer it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import attrs

__all__ = [
    "BYTES_PER_SAMPLE",
    "WAV",
    "ClipGeometry",
    "Container",
    "DecodeLimits",
    "Encoding",
    "SourceFormat",
]

Container: TypeAlias = Literal["wav", "raw"]
Encoding: TypeAlias = Literal["pcm16", "f32"]

#: Bytes per sample of each accepted encoding.
BYTES_PER_SAMPLE: Final[Mapping[str, int]] = MappingProxyType({"pcm16": 2, "f32": 4})

_CONTAINERS: Final = ("wav", "raw")


def _is_int(value: object) -> bool:
    # bool is an int subclass; ``channels=True`` is a bug, not one channel.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_source_format(instance: SourceFormat, _attribute: Any, _value: Any) -> None:
    container = instance.container
    if container not in _CONTAINERS:
        raise ValueError(f"SourceFormat.container must be one of {_CONTAINERS}, not {container!r}")
    declared = {
        "encoding": instance.encoding,
        "rate_hz": instance.rate_hz,
        "channels": instance.channels,
    }
    if container == "wav":
        given = sorted(name for name, value in declared.items() if value is not None)
        if given:
            raise ValueError(
                f"SourceFormat('wav') takes its geometry from the RIFF header; "
                f"{', '.join(given)} must be None "
                f"(got {', '.join(repr(declared[n]) for n in given)})"
            )
        return
    if instance.encoding not in BYTES_PER_SAMPLE:
        raise ValueError(
            f"SourceFormat('raw').encoding must be one of {tuple(BYTES_PER_SAMPLE)}, "
            f"not {instance.encoding!r}"
        )
    for name in ("rate_hz", "channels"):
        value = declared[name]
        # Only the type is checked here: the values come from the client and are refused
        # per clip by ``inspect`` (zero, negative, above the policy's limits).
        if not _is_int(value):
            raise TypeError(f"SourceFormat('raw').{name} must be an int, not {value!r}")


@attrs.frozen
class SourceFormat:
    """What the caller declares about a clip's encoded bytes.

    ``SourceFormat("wav")`` (:data:`WAV`) reads everything from the RIFF header. A raw
    source is headerless little-endian interleaved samples; build it with
    :meth:`SourceFormat.raw`, which requires the encoding, the rate and the channel count.

    :param container: ``"wav"`` or ``"raw"``.
    :param encoding: raw only: ``"pcm16"`` (signed 16-bit) or ``"f32"`` (IEEE float).
    :param rate_hz: raw only: the declared sample rate in Hz.
    :param channels: raw only: the declared number of interleaved channels.
    :raises ValueError: the combination is not one of the two shapes above.
    :raises TypeError: ``rate_hz`` or ``channels`` of a raw source is not an ``int``.
    """

    container: Container = attrs.field(validator=_check_source_format)
    encoding: Encoding | None = None
    rate_hz: int | None = None
    channels: int | None = None

    @classmethod
    def raw(cls, encoding: Encoding, *, rate_hz: int, channels: int) -> SourceFormat:
        """A headerless little-endian interleaved source with declared geometry."""
        return cls("raw", encoding, rate_hz, channels)


#: The RIFF/WAVE source format; geometry comes from the header.
WAV: Final[SourceFormat] = SourceFormat("wav")


def _optional_positive(instance: DecodeLimits, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not _is_int(value) or value < 1):
        raise ValueError(
            f"DecodeLimits.{attribute.name} must be None or an int >= 1, not {value!r}"
        )


def _positive(instance: DecodeLimits, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not _is_int(value) or value < 1:
        raise ValueError(f"DecodeLimits.{attribute.name} must be an int >= 1, not {value!r}")


def _rate_set(instance: DecodeLimits, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, frozenset) or not value:
        raise ValueError(
            f"DecodeLimits.allowed_rates_hz must be None or a non-empty frozenset, not {value!r}"
        )
    bad = sorted((r for r in value if not _is_int(r) or r < 1), key=repr)
    if bad:
        raise ValueError(f"DecodeLimits.allowed_rates_hz must hold ints >= 1, not {bad!r}")


@attrs.frozen
class DecodeLimits:
    """Per-clip policy the decoder enforces from the header, before any sample is read.

    Derived from the family policy by the pipeline. ``None`` means "no cap".

    :param min_rate_hz: lowest accepted source rate (below → ``DecodeError``).
    :param max_rate_hz: highest accepted source rate (above → ``LimitError``).
    :param allowed_rates_hz: if set, the only accepted source rates.
    :param max_channels: most interleaved channels.
    :param max_duration_us: longest clip, in microseconds of source audio.
    :param max_frames: most source sample frames per clip.
    :param refuse_all_zero: after decoding, refuse a clip whose every sample is exactly
        0.0 (the Qwen2-Audio serving guide's zero-signal refusal; not a silence
        detector).
    :raises ValueError: a field is out of range or ``max_rate_hz < min_rate_hz``.
    """

    min_rate_hz: int = attrs.field(default=1, validator=_positive)
    max_rate_hz: int = attrs.field(default=192_000, validator=_positive)
    allowed_rates_hz: frozenset[int] | None = attrs.field(default=None, validator=_rate_set)
    max_channels: int = attrs.field(default=8, validator=_positive)
    max_duration_us: int | None = attrs.field(default=None, validator=_optional_positive)
    max_frames: int | None = attrs.field(default=None, validator=_optional_positive)
    refuse_all_zero: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.max_rate_hz < self.min_rate_hz:
            raise ValueError(
                f"DecodeLimits.max_rate_hz ({self.max_rate_hz}) must be >= "
                f"min_rate_hz ({self.min_rate_hz})"
            )


@attrs.frozen
class ClipGeometry:
    """The shape of one clip, read from its header (or declared, for raw sources).

    :param container: where it came from (``"wav"`` or ``"raw"``).
    :param encoding: ``"pcm16"`` or ``"f32"`` (an extensible header is reported by its
        sub-format).
    :param rate_hz: source sample rate.
    :param channels: interleaved channels.
    :param frames: sample frames (samples per channel).
    :param duration_us: ``frames * 1_000_000 // rate_hz`` (floor).
    :param data_offset: byte offset of the first sample in the buffer.
    :param data_length: bytes of sample data, ``frames * frame_bytes``.
    """

    container: Container
    encoding: Encoding
    rate_hz: int
    channels: int
    frames: int
    duration_us: int
    data_offset: int
    data_length: int

    @property
    def frame_bytes(self) -> int:
        """Bytes of one interleaved frame (``channels`` × bytes per sample)."""
        return self.channels * BYTES_PER_SAMPLE[self.encoding]
