"""The store's records: a source as the index holds it, quotas and the recovery report."""

from __future__ import annotations

import json
import re
from typing import Any, Final, Literal

import attrs

from audiogate._version import __version__
from audiogate.decode.geometry import ClipGeometry, SourceFormat

__all__ = [
    "DIGEST_RE",
    "LIVE_STATUSES",
    "SCOPES",
    "STATUSES",
    "RecoveryReport",
    "Scope",
    "SourceRecord",
    "SourceStatus",
    "StoreQuotas",
    "check_digest",
    "format_from_text",
    "format_text",
    "header_from_text",
    "header_text",
]

#: A source's name: the SHA-256 of its encoded bytes, 64 lowercase hex digits (the
#: Qwen2-Audio serving guide's "64 lowercase hexadecimal characters").
DIGEST_RE: Final = re.compile(r"[0-9a-f]{64}")

SourceStatus = Literal["processing", "ready", "retired", "lost"]
Scope = Literal["private", "shared"]
STATUSES: Final = ("processing", "ready", "retired", "lost")
#: Statuses that keep a source's blob: it may be referenced (or waited for).
LIVE_STATUSES: Final = ("processing", "ready")
SCOPES: Final = ("private", "shared")


def check_digest(sha256: object) -> str:
    """``sha256`` if it is 64 lowercase hex digits.

    :raises ValueError: anything else (the message shows what was given).
    """
    if not isinstance(sha256, str) or not DIGEST_RE.fullmatch(sha256):
        shown = repr(sha256)[:80]
        raise ValueError(
            f"a source digest is the SHA-256 of its bytes as 64 lowercase hexadecimal "
            f"characters, not {shown}"
        )
    return sha256


def format_text(source_format: SourceFormat) -> str:
    """``source_format`` as the index stores it: ``"wav"``, ``"mp3"``, ``"raw:pcm16:16000:1"``."""
    if source_format.container == "raw":
        return f"raw:{source_format.encoding}:{source_format.rate_hz}:{source_format.channels}"
    return str(source_format.container)


def format_from_text(text: str) -> SourceFormat:
    """The inverse of :func:`format_text`."""
    if text.startswith("raw:"):
        _, encoding, rate, channels = text.split(":")
        return SourceFormat.raw(encoding, rate_hz=int(rate), channels=int(channels))  # type: ignore[arg-type]
    return SourceFormat(text)  # type: ignore[arg-type]


# The ClipGeometry fields a recorded header keeps (its flags are those of a full WAV or
# raw header: exact, no prefix).
_HEADER_FIELDS: Final = (
    "container",
    "encoding",
    "rate_hz",
    "channels",
    "frames",
    "duration_us",
    "data_offset",
    "data_length",
)


def header_text(geometry: ClipGeometry | None) -> str | None:
    """``geometry`` as the index keeps it (JSON, with the core version that read it), or
    ``None`` where it is not worth keeping: only a WAV or raw header's exact geometry is
    (a compressed header's frames are a bound the policy caps)."""
    if geometry is None or not geometry.in_process or not geometry.exact or geometry.prefix:
        return None
    fields = {name: getattr(geometry, name) for name in _HEADER_FIELDS}
    return json.dumps({"core": __version__, **fields}, separators=(",", ":"))


def header_from_text(text: str | None) -> ClipGeometry | None:
    """The inverse of :func:`header_text`; ``None`` for no header, one another core
    version read (its bytes' header is read again instead) or anything malformed."""
    if not text:
        return None
    try:
        fields = json.loads(text)
        if fields.pop("core", None) != __version__ or set(fields) != set(_HEADER_FIELDS):
            return None
        if not all(type(fields[name]) is int for name in _HEADER_FIELDS[2:]):
            return None
        geometry = ClipGeometry(**fields)
    except (ValueError, TypeError, AttributeError):
        return None
    return geometry if geometry.in_process and geometry.frame_bytes else None


@attrs.frozen(kw_only=True)
class SourceRecord:
    """One owner's record of a stored source.

    :param sha256: the digest of the source's bytes (its name).
    :param owner: who uploaded it (a server maps bearer tokens to owners).
    :param scope: ``"private"`` (only the owner may reference or retire it) or
        ``"shared"`` (anyone may reference it; only the owner may retire it).
    :param status: ``"processing"`` → ``"ready"`` → ``"retired"``; ``"lost"`` when its
        bytes were found missing or damaged.
    :param nbytes: the encoded bytes.
    :param duration_us: the duration its header declares, in microseconds.
    :param source_format: the declared format, as :func:`format_text` writes it.
    :param created_at: when it was acknowledged (Unix seconds).
    :param retired_at: when it was retired (or ``None``).
    :param header: the header geometry admission read at upload (WAV and raw sources;
        ``None``: not kept), so a reference is admitted without reading the bytes
        (docs/sources.md, "Reading a source").
    """

    sha256: str
    owner: str
    scope: Scope = "private"
    status: SourceStatus
    nbytes: int
    duration_us: int
    source_format: str = "wav"
    created_at: float
    retired_at: float | None = None
    header: ClipGeometry | None = attrs.field(default=None, repr=False)

    @property
    def live(self) -> bool:
        """Whether the record may still be referenced (processing or ready)."""
        return self.status in LIVE_STATUSES

    def as_dict(self) -> dict[str, Any]:
        """The record as the server's JSON answers show it."""
        return {
            "sha256": self.sha256,
            "status": self.status,
            "bytes": self.nbytes,
            "duration_us": self.duration_us,
            "scope": self.scope,
            "format": self.source_format,
            "created_at": self.created_at,
            "retired_at": self.retired_at,
        }


@attrs.frozen(kw_only=True)
class StoreQuotas:
    """What a store may hold (``None``: no limit).

    :param max_bytes_per_owner: encoded bytes of one owner's live sources.
    :param max_sources_per_owner: one owner's live sources.
    :param max_total_bytes: bytes of every live blob together (a blob shared by several
        owners' records counts once).
    """

    max_bytes_per_owner: int | None = None
    max_sources_per_owner: int | None = None
    max_total_bytes: int | None = None


@attrs.frozen(kw_only=True)
class RecoveryReport:
    """What opening a store found and repaired.

    :param unfinished_removed: partial uploads (temporary files) removed.
    :param orphans_removed: blobs no live record names (a crash between the blob and its
        journal row, or during a retirement) removed.
    :param lost: records whose blob was missing, of the wrong size or (verified) of the
        wrong digest, now ``lost``.
    :param resumed: records found ``processing``, now ``ready`` (what was computing died
        with the process; features are computed again when needed).
    :param checked: live records whose blob was checked.
    :param verified: whether every blob's digest was recomputed (``verify=True``).
    :param retired_kept: historical records of retired sources kept.
    :param rebuilt: records the index had lost (a damaged or missing index or WAL)
        rebuilt from their blob's manifest, the blob's digest checked.
    :param quarantined: blobs no record or manifest accounts for, set aside (never
        deleted) under the store's ``quarantine/``.
    """

    unfinished_removed: int = 0
    orphans_removed: int = 0
    lost: int = 0
    resumed: int = 0
    checked: int = 0
    verified: bool = False
    retired_kept: int = 0
    rebuilt: int = 0
    quarantined: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return attrs.asdict(self)
