"""Inline sources: strict base64 and ``data:audio/<type>;base64,`` URIs.

Strict means the standard alphabet only (no URL-safe ``-``/``_``, no whitespace or line
breaks), padding required, ``=`` only at the end, and canonical trailing bits (``QR==`` is
refused: only ``QQ==`` encodes that byte), like the Rust ``STANDARD`` engine of mlxcel's
``decode_data_uri_with_limit`` (``src/server/media.rs``).

Order: the character count is checked against ``ceil(max/3)*4`` before anything else
(mlxcel's preflight), then the exact decoded size (known from the length and padding)
against the byte cap, and only then is anything decoded, in slices so a cancellation is
noticed and other threads run.
"""

from __future__ import annotations

import binascii
import re
from typing import Final

import pybase64

from audiogate.acquire.context import ClipContext, SourceRefused
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import LimitError, MemoryLimitError

__all__ = [
    "CONTAINER_MEDIA_SUBTYPES",
    "DECODE_SLICE_CHARS",
    "RAW_MEDIA_SUBTYPES",
    "WAV_MEDIA_SUBTYPES",
    "data_uri_payload",
    "decode_base64",
]

_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_VALUE: Final = {c: i for i, c in enumerate(_ALPHABET)}
_NOT_BASE64: Final = re.compile(r"[^A-Za-z0-9+/=]")

#: Characters decoded per slice (a multiple of 4: slices never split a quantum). Each
#: ``a2b_base64`` call holds the GIL, about 1 ms for this many (15 to 20 ms at 4 Mi):
#: another thread (a server's event loop) waits at most that long for it.
DECODE_SLICE_CHARS: Final = 256 * 1024

#: ``audio/<subtype>`` names accepted for a WAV declaration.
WAV_MEDIA_SUBTYPES: Final = frozenset({"wav", "wave", "x-wav", "vnd.wave", "vnd.wav", "x-pn-wav"})
#: ``audio/<subtype>`` names accepted for each compressed container's declaration.
CONTAINER_MEDIA_SUBTYPES: Final = {
    "mp3": frozenset({"mpeg", "mp3", "x-mp3", "mpeg3", "x-mpeg-3", "mpa"}),
    "flac": frozenset({"flac", "x-flac"}),
    "ogg": frozenset({"ogg", "x-ogg", "vorbis", "opus"}),
    "opus": frozenset({"opus", "ogg", "webm"}),
    "webm": frozenset({"webm"}),
    "mp4": frozenset({"mp4", "m4a", "x-m4a", "aac", "x-aac", "mp4a-latm"}),
    "aiff": frozenset({"aiff", "x-aiff", "aifc", "x-aifc"}),
    "au": frozenset({"basic", "au", "x-au", "snd"}),
    "caf": frozenset({"x-caf", "caf"}),
    "rifx": WAV_MEDIA_SUBTYPES | {"x-rifx"},
}
#: ``audio/<subtype>`` names accepted for a raw (``pcm16`` / ``f32``) declaration.
RAW_MEDIA_SUBTYPES: Final = frozenset({"pcm", "x-pcm", "raw", "x-raw"})

# The metadata of a data URI is short; a comma further away than this is not one.
_MAX_METADATA_CHARS: Final = 256
_TOKEN: Final = re.compile(r"[A-Za-z0-9!#$&^_.+-]+")


def _describe_bad_char(text: str, start: int, stop: int, *, first: int) -> str:
    found = _NOT_BASE64.search(text, start, stop)
    if found is None:
        return ""
    return f": {found.group()!r} at character {found.start() - first}"


def _strict_slice(text: str, offset: int, stop: int, *, first: int) -> bytes:
    """``text[offset:stop]`` decoded by binascii's strict mode, which says what is wrong."""
    try:
        return binascii.a2b_base64(text[offset:stop], strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        where = _describe_bad_char(text, offset, stop, first=first)
        raise SourceRefused(f"invalid base64 ({exc}){where}") from None


def decode_base64(
    text: str,
    ctx: ClipContext,
    *,
    start: int = 0,
    slice_chars: int = DECODE_SLICE_CHARS,
) -> bytes:
    """Decode ``text[start:]`` as strict standard base64 under ``ctx.cap``.

    :param text: the string holding the base64 (a JSON string; never copied whole).
    :param start: where the base64 begins (after a data URI's comma).
    :param slice_chars: characters per decode call (a multiple of 4).
    :raises LimitError: too many characters (``"base64 characters"``) or decoded bytes;
        :class:`~audiogate.errors.MemoryLimitError` when what is left of the request's
        bytes is the binding limit.
    :raises SourceRefused: not strict base64.
    :raises PreprocessCancelled: the request was cancelled between slices.
    """
    if slice_chars < 4 or slice_chars % 4:
        raise ValueError(f"slice_chars must be a positive multiple of 4, not {slice_chars}")
    n = len(text) - start
    cap = ctx.cap
    if n > cap.base64_chars:
        # The request's byte budget is a memory limit wherever the bytes come from.
        kind = MemoryLimitError if cap.limit == "encoded bytes per request" else LimitError
        raise kind(
            "base64 characters", actual=n, maximum=cap.base64_chars, clip_index=ctx.clip_index
        )
    if n == 0:
        raise SourceRefused("the base64 data is empty")
    if n % 4:
        raise SourceRefused(
            f"base64 length {n} is not a multiple of 4 (padding is required; a bare file "
            f"path must contain a character outside the base64 alphabet, such as '.')"
        )
    end = len(text)
    misplaced = text.find("=", start, end - 2)
    if misplaced != -1:
        raise SourceRefused(f"base64 padding '=' at character {misplaced - start} before the end")
    pad = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    cap.check(n // 4 * 3 - pad)

    pieces: list[bytes] = []
    for offset in range(start, end, slice_chars):
        ctx.check_cancel()
        stop = min(offset + slice_chars, end)
        # All but the last quantum hold no "=" (checked above): only alphabet characters
        # may be there, which pybase64's SIMD decoder checks 30 to 70 times faster than
        # binascii (whose loop held the GIL for 3 to 6 ms per 1.28 MB body, the largest
        # part of a render request's CPU). The last quantum, and any slice it refuses
        # (for the error message), go through binascii's strict mode as before.
        bulk = stop if stop < end else max(offset, end - 4)
        try:
            if bulk > offset:
                pieces.append(pybase64.b64decode(text[offset:bulk], validate=True))
            if bulk < stop:
                pieces.append(binascii.a2b_base64(text[bulk:stop], strict_mode=True))
        except (binascii.Error, ValueError):
            pieces.append(_strict_slice(text, offset, stop, first=start))
    ctx.check_cancel()
    if pad:
        # The bits after the last whole byte must be zero, or two strings decode alike.
        # "xy==": y carries 4 unused bits; "xyz=": z carries 2.
        last = _VALUE[text[end - 3]] if pad == 2 else _VALUE[text[end - 2]]
        if last & (0x0F if pad == 2 else 0x03):
            raise SourceRefused("base64 has non-zero trailing bits (not canonical)")
    return b"".join(pieces)


def data_uri_payload(uri: str, source_format: SourceFormat) -> int:
    """Check a ``data:audio/<type>[;param=value]*;base64,`` URI; return where its data starts.

    The media type must name the declared container: a WAV subtype
    (:data:`WAV_MEDIA_SUBTYPES`) for ``wav``, a raw one (:data:`RAW_MEDIA_SUBTYPES`) for
    ``pcm16``/``f32``. Parameters are checked for shape and otherwise ignored: the geometry
    of raw audio comes from the part's ``sample_rate``/``channels``.

    :raises SourceRefused: not a base64 audio data URI, or the type contradicts the
        declaration.
    """
    comma = uri.find(",", 0, _MAX_METADATA_CHARS)
    if uri[:5].lower() != "data:" or comma == -1:
        raise SourceRefused("a data URI must look like data:audio/<type>;base64,<data>")
    fields = uri[5:comma].split(";")
    if len(fields) < 2 or fields[-1].lower() != "base64":
        raise SourceRefused("a data URI must be base64-encoded (';base64,' before the data)")
    media_type = fields[0].lower()
    kind, _, subtype = media_type.partition("/")
    if kind != "audio" or not _TOKEN.fullmatch(subtype):
        raise SourceRefused(f"data URI media type {fields[0]!r} is not audio/<type>")
    for parameter in fields[1:-1]:
        name, eq, value = parameter.partition("=")
        if not eq or not _TOKEN.fullmatch(name) or not _TOKEN.fullmatch(value):
            raise SourceRefused(f"data URI parameter {parameter!r} is not name=value")
    declared = source_format.container
    if declared in CONTAINER_MEDIA_SUBTYPES:
        if subtype not in CONTAINER_MEDIA_SUBTYPES[declared]:
            raise SourceRefused(
                f"data URI media type audio/{subtype} does not match the declared format "
                f"{declared} (expected audio/ + one of "
                f"{sorted(CONTAINER_MEDIA_SUBTYPES[declared])})"
            )
    elif declared == "auto":
        pass
    elif declared == "wav":
        if subtype not in WAV_MEDIA_SUBTYPES:
            raise SourceRefused(
                f"data URI media type audio/{subtype} does not match the declared format wav "
                f"(expected audio/ + one of {sorted(WAV_MEDIA_SUBTYPES)})"
            )
    elif subtype not in RAW_MEDIA_SUBTYPES:
        raise SourceRefused(
            f"data URI media type audio/{subtype} does not match the declared raw format "
            f"{source_format.encoding} (expected audio/ + one of {sorted(RAW_MEDIA_SUBTYPES)})"
        )
    return comma + 1
