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
    "AUTO",
    "BYTES_PER_SAMPLE",
    "CONTAINER_LABELS",
    "CONVERT_ADVICE",
    "DECLARED_CONTAINERS",
    "OTHER_AUDIO_LABELS",
    "PCM_CONTAINERS",
    "WAV",
    "ClipGeometry",
    "Container",
    "DeclaredContainer",
    "DecodeLimits",
    "Encoding",
    "SourceFormat",
    "describe_signature",
    "id3_size",
    "sniff_container",
]

#: What a clip's bytes are: RIFF/WAVE (RF64 included), headerless samples, or a container
#: that the codecs decode (``audiogate[codecs]``; see docs/formats.md).
Container: TypeAlias = Literal[
    "wav", "raw", "aiff", "flac", "mp3", "ogg", "webm", "mp4", "au", "caf", "wavcodec", "rifx"
]
#: The sample encoding (PCM containers) or the codec (compressed containers).
Encoding: TypeAlias = Literal[
    "u8",
    "pcm16",
    "pcm24",
    "pcm32",
    "f32",
    "f64",
    "mulaw",
    "alaw",
    "pcm",
    "flac",
    "mp3",
    "vorbis",
    "opus",
    "aac",
    "alac",
]

#: Bytes per sample of each encoding the core decodes in-process (WAV and raw).
BYTES_PER_SAMPLE: Final[Mapping[str, int]] = MappingProxyType(
    {"u8": 1, "pcm16": 2, "pcm24": 3, "pcm32": 4, "f32": 4, "f64": 8, "mulaw": 1, "alaw": 1}
)

#: Containers decoded in-process by the core; the others go through the codecs.
PCM_CONTAINERS: Final = frozenset({"wav", "raw"})

DeclaredContainer: TypeAlias = Literal[
    "wav", "raw", "auto", "aiff", "flac", "mp3", "ogg", "opus", "webm", "mp4", "au", "caf", "rifx"
]
#: What a caller may declare: a container, ``"opus"`` (Ogg or WebM), or ``"auto"`` (sniffed).
DECLARED_CONTAINERS: Final = (
    "wav",
    "raw",
    "auto",
    "aiff",
    "flac",
    "mp3",
    "ogg",
    "opus",
    "webm",
    "mp4",
    "au",
    "caf",
    "rifx",
)

_CONTAINERS: Final = DECLARED_CONTAINERS
_RAW_ENCODINGS: Final = ("pcm16", "f32")


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
    if container != "raw":
        given = sorted(name for name, value in declared.items() if value is not None)
        if given:
            raise ValueError(
                f"SourceFormat({container!r}) takes its geometry from the header; "
                f"{', '.join(given)} must be None "
                f"(got {', '.join(repr(declared[n]) for n in given)})"
            )
        return
    if instance.encoding not in _RAW_ENCODINGS:
        raise ValueError(
            f"SourceFormat('raw').encoding must be one of {_RAW_ENCODINGS}, "
            f"not {instance.encoding!r}"
        )
    for name in ("rate_hz", "channels"):
        value = declared[name]
        # Only the type is checked here: the values come from the client and are refused
        # per clip by ``inspect`` (zero, negative, above the policy's limits).
        if not _is_int(value):
            raise TypeError(f"SourceFormat('raw').{name} must be an int, not {value!r}")


#: Human names of the containers (messages and docs).
CONTAINER_LABELS: Final[dict[str, str]] = {
    "wav": "RIFF/WAVE",
    "aiff": "AIFF/AIFF-C",
    "flac": "FLAC",
    "mp3": "MP3",
    "ogg": "Ogg",
    "webm": "WebM/Matroska",
    "mp4": "MP4/M4A",
    "au": "Sun AU",
    "caf": "CAF (Core Audio Format)",
    "wavcodec": "RIFF/WAVE with ADPCM or GSM 6.10",
    "rifx": "RIFX (big-endian RIFF/WAVE)",
}


def id3_size(view: memoryview) -> int:
    """Bytes of a leading ID3v2 tag (0 if none)."""
    if view.nbytes < 10 or bytes(view[:3]) != b"ID3":
        return 0
    flags = view[5]
    size = 0
    for byte in bytes(view[6:10]):
        size = (size << 7) | (byte & 0x7F)
    return 10 + size + (10 if flags & 0x10 else 0)


def sniff_container(view: memoryview) -> Container | None:
    """The container ``view`` starts with, or ``None`` (not one audiogate decodes)."""
    head = bytes(view[:12])
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b".snd":
        return "au"
    if head[:4] == b"caff":
        return "caf"
    if head[:4] == b"RIFX" and head[8:12] == b"WAVE":
        return "rifx"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1aE\xdf\xa3":
        return "webm"
    if head[4:8] == b"ftyp":
        return "mp4"
    tag = id3_size(view)
    if tag:
        # An ID3v2 tag is written in front of FLAC files too (libsndfile and FFmpeg skip
        # it): what follows the tag decides.
        return "flac" if bytes(view[tag : tag + 4]) == b"fLaC" else "mp3"
    if _mp3_sync(head):
        return "mp3"
    return None


#: Signatures of formats audiogate does not decode, to name them in a refusal:
#: ``(offset, magic, label)``; four bytes or more, so raw samples do not match by chance.
_OTHER_SIGNATURES: Final = (
    (0, b"RIFX", "RIFX (big-endian RIFF)"),
    (0, b"FORM", "IFF (not AIFF/AIFC)"),
    (0, b"caff", "CAF (Core Audio Format)"),
    (0, b"#!AMR", "AMR"),
    (0, b".snd", "Sun AU"),
    (0, b"MThd", "MIDI"),
    (0, b"%PDF", "PDF"),
    (0, b"\x89PNG", "PNG image"),
    (0, b"\xff\xd8\xff", "JPEG image"),
    (0, b"GIF8", "GIF image"),
    (0, b"PK\x03\x04", "ZIP archive"),
    (0, b"\x1f\x8b\x08", "gzip data"),
    (0, b"<!DOCTYPE", "an HTML document"),
    (0, b"<html", "an HTML document"),
    (0, b"{", "JSON text"),
)


#: The audio formats of :data:`_OTHER_SIGNATURES` (a refusal says how to convert them).
OTHER_AUDIO_LABELS: Final = frozenset(
    {"RIFX (big-endian RIFF)", "IFF (not AIFF/AIFC)", "CAF (Core Audio Format)", "AMR", "Sun AU"}
)
#: What a refusal of an audio format audiogate does not decode tells the sender to do.
CONVERT_ADVICE: Final = (
    "convert it to one that is, e.g. FLAC or WAV: ffmpeg -i IN -c:a flac OUT.flac"
)


def describe_signature(view: memoryview | bytes) -> str:
    """A short label of what the bytes start with, for messages: a decoded container's
    label, another format's name, ``"RIFF (not WAVE)"``, or ``"no known signature"``."""
    view = memoryview(view)
    head = bytes(view[:16])
    container = sniff_container(view)
    if container is not None:
        return CONTAINER_LABELS[container]
    if head[:4] in (b"RIFF", b"RF64", b"BW64"):
        return f"{head[:4].decode()} (not WAVE)"
    for offset, magic, label in _OTHER_SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return label
    return "no known signature"


def _mp3_sync(head: bytes) -> bool:
    """An MPEG layer III frame header: sync, a version, a bitrate and a rate index."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    version, layer = (head[1] >> 3) & 3, (head[1] >> 1) & 3
    bitrate, rate = head[2] >> 4, (head[2] >> 2) & 3
    return version != 1 and layer == 1 and bitrate not in (0, 15) and rate != 3


@attrs.frozen
class SourceFormat:
    """What the caller declares about a clip's encoded bytes.

    ``SourceFormat("wav")`` (:data:`WAV`) reads everything from the RIFF header. A raw
    source is headerless little-endian interleaved samples; build it with
    :meth:`SourceFormat.raw`, which requires the encoding, the rate and the channel count.
    The compressed containers (``"aiff"``, ``"flac"``, ``"mp3"``, ``"ogg"``, ``"webm"``,
    ``"mp4"``, and ``"opus"`` for Ogg or WebM Opus) and ``"auto"`` (:data:`AUTO`, any
    container the bytes start with) also read everything from the header; the bytes must
    be what is declared.

    :param container: one of :data:`DECLARED_CONTAINERS`.
    :param encoding: raw only: ``"pcm16"`` (signed 16-bit) or ``"f32"`` (IEEE float).
    :param rate_hz: raw only: the declared sample rate in Hz.
    :param channels: raw only: the declared number of interleaved channels.
    :raises ValueError: the combination is not one of the two shapes above.
    :raises TypeError: ``rate_hz`` or ``channels`` of a raw source is not an ``int``.
    """

    container: DeclaredContainer = attrs.field(validator=_check_source_format)
    encoding: Encoding | None = None
    rate_hz: int | None = None
    channels: int | None = None

    @classmethod
    def raw(cls, encoding: Encoding, *, rate_hz: int, channels: int) -> SourceFormat:
        """A headerless little-endian interleaved source with declared geometry."""
        return cls("raw", encoding, rate_hz, channels)


#: The RIFF/WAVE source format; geometry comes from the header.
WAV: Final[SourceFormat] = SourceFormat("wav")
#: Any accepted container, recognised from the bytes (docs/formats.md).
AUTO: Final[SourceFormat] = SourceFormat("auto")


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

    :param container: where it came from (``"wav"``, ``"raw"``, or a compressed container).
    :param encoding: the sample encoding of a WAV or raw clip (an extensible header is
        reported by its sub-format), else the codec (``"flac"``, ``"mp3"``, ...).
    :param rate_hz: source sample rate.
    :param channels: interleaved channels.
    :param frames: sample frames (samples per channel).
    :param duration_us: ``frames * 1_000_000 // rate_hz`` (floor).
    :param data_offset: byte offset of the first sample in the buffer.
    :param data_length: bytes of sample data, ``frames * frame_bytes`` (a compressed
        clip: the whole buffer).
    :param exact: ``frames`` is the clip's length; ``False``: an upper bound (a compressed
        header without an exact length, see docs/formats.md), and the decoded clip may be
        shorter.
    :param prefix: only the first ``frames`` are wanted (truncate mode): the decoder stops
        there instead of refusing a longer stream.
    :param padding_frames: a compressed bound capped at the policy's length: frames of
        codec end padding (at most one codec frame) that may follow ``frames``. A stream
        that ends within them is trimmed to ``frames``, as FFmpeg trims a codec's padding;
        one that goes on past them is refused.
    """

    container: Container
    encoding: Encoding
    rate_hz: int
    channels: int
    frames: int
    duration_us: int
    data_offset: int
    data_length: int
    exact: bool = True
    prefix: bool = False
    padding_frames: int = 0

    @property
    def in_process(self) -> bool:
        """Decoded by the core in the calling process (WAV and raw PCM)."""
        return self.container in PCM_CONTAINERS

    @property
    def frame_bytes(self) -> int:
        """Bytes of one interleaved frame (``channels`` × bytes per sample); 0 when compressed."""
        per_sample = BYTES_PER_SAMPLE.get(self.encoding) if self.in_process else None
        return self.channels * per_sample if per_sample else 0
