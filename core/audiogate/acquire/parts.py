"""OpenAI-style audio content parts → declared sources (nothing is read here).

Accepted parts (anything else, and any unknown key, is refused):

* ``{"type": "input_audio", "input_audio": {"data": ..., "format": ...}}`` — OpenAI's
  shape. ``format`` is ``"wav"`` (or ``"wave"``), ``"mp3"``, or — **audiogate
  extensions** — another container (:data:`CONTAINER_FORMATS`: ``flac``, ``ogg``,
  ``opus``, ``webm``, ``m4a``/``mp4``/``aac``, ``aiff``, ``au``/``snd`` (Sun AU), ``caf``,
  ``rifx`` (big-endian WAV); docs/formats.md), or a headerless
  raw format ``"pcm16"`` / ``"f32"`` (little-endian, interleaved), which then *requires*
  integer ``"sample_rate"`` and ``"channels"`` fields next to it. A container takes its
  geometry from its header, so those fields are refused with it. The bytes must be what
  ``format`` declares. Without ``format`` (or with ``"auto"``) the container is recognised
  from the bytes.
* ``{"type": "audio_url", "audio_url": {"url": ...}}`` — the vLLM shape. ``format``
  (default ``"auto"``: recognised from the bytes), ``sample_rate`` and ``channels`` may be
  given as above (audiogate extension).
* ``{"type": "audio_ref", "audio_ref": {"sha256": ...}}`` — **audiogate extension**: a
  source uploaded to the store before, named by the SHA-256 of its bytes (64 lowercase
  hex digits; docs/sources.md). Its format is the one it was admitted as.

The source string of either part is classified by **syntax alone**, never by probing
the file system (mlx-vlm treats base64 that fails to decode as a path; we never do):

1. ``data:`` (any case) → ``"data URI"``;
2. ``scheme:`` → ``http``/``https`` give ``"URL"``, ``file`` gives ``"file"``, any other
   scheme is refused (``:`` is not a base64 character, so this is unambiguous);
3. a string longer than 4096 characters, or made only of base64 characters, or
   containing a line break or tab → ``"inline base64"`` (strictly checked later);
4. anything else (it contains e.g. ``.``, ``-``, ``_`` or a space) → a bare path,
   ``"file"``.

So a bare path needs a character outside the base64 alphabet, which a file name with an
extension always has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from audiogate.acquire.context import (
    ORIGIN_DATA_URI,
    ORIGIN_FILE,
    ORIGIN_INLINE,
    ORIGIN_PART,
    ORIGIN_URL,
    SourceRefused,
)
from audiogate.acquire.refs import ORIGIN_REFERENCE
from audiogate.decode.geometry import AUTO, WAV, SourceFormat
from audiogate.errors import AcquisitionError, LimitError

__all__ = [
    "CONTAINER_FORMATS",
    "FORMAT_NAMES",
    "DeclaredSource",
    "classify_source",
    "declare_part",
    "declare_parts",
    "parse_format",
]

#: Declared container names (case-insensitive) → the container the bytes must be.
CONTAINER_FORMATS: Final[Mapping[str, SourceFormat]] = {
    "wav": WAV,
    "wave": WAV,
    "mp3": SourceFormat("mp3"),
    "flac": SourceFormat("flac"),
    "ogg": SourceFormat("ogg"),
    "oga": SourceFormat("ogg"),
    "opus": SourceFormat("opus"),
    "webm": SourceFormat("webm"),
    "m4a": SourceFormat("mp4"),
    "mp4": SourceFormat("mp4"),
    "aac": SourceFormat("mp4"),
    "aiff": SourceFormat("aiff"),
    "aif": SourceFormat("aiff"),
    "aifc": SourceFormat("aiff"),
    "au": SourceFormat("au"),
    "snd": SourceFormat("au"),
    "caf": SourceFormat("caf"),
    "rifx": SourceFormat("rifx"),
    "auto": AUTO,
}

#: Accepted ``format`` values (case-insensitive).
FORMAT_NAMES: Final = (*CONTAINER_FORMATS, "pcm16", "f32")

_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:")
_BASE64_CHARS: Final = re.compile(r"[A-Za-z0-9+/=]*")
_MAX_PATH_CHARS: Final = 4096

_PAYLOAD_KEYS: Final = {
    "input_audio": ("data", frozenset({"data", "format", "sample_rate", "channels"})),
    "audio_url": ("url", frozenset({"url", "format", "sample_rate", "channels"})),
    "audio_ref": ("sha256", frozenset({"sha256"})),
}
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


@attrs.frozen(kw_only=True)
class DeclaredSource:
    """One audio part as declared: where its bytes are and what they should be.

    :param index: zero-based clip index (its ordinal is ``index + 1``).
    :param origin: ``"inline base64"``, ``"data URI"``, ``"URL"`` or ``"file"``.
    :param value: the source string as given (base64, URI, URL or path).
    """

    index: int
    origin: str
    value: str = attrs.field(repr=lambda v: f"<{len(v)} chars>")
    source_format: SourceFormat


def classify_source(value: str) -> str:
    """The origin of a source string (see the module docstring for the rules).

    :raises SourceRefused: a scheme other than ``data``, ``http(s)`` or ``file``.
    """
    if value[:5].lower() == "data:":
        return ORIGIN_DATA_URI
    scheme = _SCHEME.match(value)
    if scheme is not None:
        name = scheme.group()[:-1].lower()
        if name in ("http", "https"):
            return ORIGIN_URL
        if name == "file":
            return ORIGIN_FILE
        raise SourceRefused(
            f"source scheme {scheme.group()[:-1]!r} is not supported "
            f"(expected data:, http://, https://, file:// or base64)"
        )
    if (
        len(value) > _MAX_PATH_CHARS
        or _BASE64_CHARS.fullmatch(value)
        or any(c in value for c in "\r\n\t")
    ):
        return ORIGIN_INLINE
    return ORIGIN_FILE


def parse_format(payload: Mapping[str, Any], *, default: str | None) -> SourceFormat:
    """The declared :class:`SourceFormat` of a part's payload.

    :param default: the format when ``format`` is absent (``None``: it is required).
    :raises SourceRefused: unknown format, or raw geometry missing / given with wav.
    """
    given = payload.get("format", default)
    if given is None:
        raise SourceRefused(f"the audio format is missing; expected one of {list(FORMAT_NAMES)}")
    if not isinstance(given, str) or given.lower() not in FORMAT_NAMES:
        raise SourceRefused(
            f"audio format {given!r} is not supported; expected one of {list(FORMAT_NAMES)}"
        )
    name = given.lower()
    rate, channels = payload.get("sample_rate"), payload.get("channels")
    if name in CONTAINER_FORMATS:
        if rate is not None or channels is not None:
            raise SourceRefused(
                f"sample_rate and channels are only for raw formats (pcm16, f32); "
                f"{name} takes them from its header"
            )
        return CONTAINER_FORMATS[name]
    return SourceFormat.raw(
        "pcm16" if name == "pcm16" else "f32",
        rate_hz=_positive_int(name, "sample_rate", rate),
        channels=_positive_int(name, "channels", channels),
    )


def _positive_int(name: str, field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SourceRefused(
            f"raw format {name} needs an integer {field} >= 1 next to it (got {value!r})"
        )
    return value


def declare_part(part: object, index: int) -> DeclaredSource:
    """Parse one content part.

    :raises AcquisitionError: malformed part, naming ``index`` and the origin (``"content
        part"`` until the source string has been classified).
    """
    origin = ORIGIN_PART
    try:
        if not isinstance(part, Mapping):
            raise SourceRefused(f"a content part must be an object, not {type(part).__name__}")
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in _PAYLOAD_KEYS:
            raise SourceRefused(
                f"content part type {kind!r} is not an audio part "
                f"(expected 'input_audio', 'audio_url' or 'audio_ref')"
            )
        extra = sorted(set(part) - {"type", kind})
        if extra:
            raise SourceRefused(f"unknown keys in the {kind} part: {extra}")
        payload = part.get(kind)
        if not isinstance(payload, Mapping):
            raise SourceRefused(f"{kind} must be an object")
        source_key, allowed = _PAYLOAD_KEYS[kind]
        extra = sorted(str(k) for k in set(payload) - allowed)
        if extra:
            raise SourceRefused(f"unknown keys in {kind}: {extra} (allowed: {sorted(allowed)})")
        value = payload.get(source_key)
        if not isinstance(value, str) or not value:
            raise SourceRefused(f"{kind}.{source_key} must be a non-empty string")
        if kind == "audio_ref":
            origin = ORIGIN_REFERENCE
            if not _DIGEST.fullmatch(value):
                raise SourceRefused(
                    f"audio_ref.sha256 must be the source's SHA-256 as 64 lowercase "
                    f"hexadecimal characters, not {value[:80]!r}"
                )
            # The stored source's own format replaces this placeholder when it is read.
            return DeclaredSource(index=index, origin=origin, value=value, source_format=WAV)
        origin = classify_source(value)
        # Without a declared format the bytes say what they are (what vLLM and OpenAI
        # clients send for audio_url; input_audio's format is OpenAI's, but optional here).
        source_format = parse_format(payload, default="auto")
    except SourceRefused as exc:
        raise AcquisitionError(exc.detail, clip_index=index, origin=origin) from None
    return DeclaredSource(index=index, origin=origin, value=value, source_format=source_format)


def declare_parts(parts: Sequence[Mapping[str, Any]], *, max_clips: int) -> list[DeclaredSource]:
    """Count, then parse, a request's audio parts (in order).

    :raises LimitError: more than ``max_clips`` parts (``"clip count"``), before anything
        else is looked at.
    :raises AcquisitionError: the first malformed part.
    :raises TypeError: ``parts`` is not a sequence (a caller bug, not a client error).
    """
    if isinstance(parts, str | bytes | Mapping) or not isinstance(parts, Sequence):
        raise TypeError(f"parts must be a sequence of content parts, not {type(parts).__name__}")
    if len(parts) > max_clips:
        raise LimitError("clip count", actual=len(parts), maximum=max_clips)
    return [declare_part(part, index) for index, part in enumerate(parts)]
