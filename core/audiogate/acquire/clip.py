"""The record acquisition makes: one clip's encoded bytes, for the later stages."""

from __future__ import annotations

import hashlib

import attrs

from audiogate.decode.geometry import WAV, SourceFormat

__all__ = ["EncodedClip"]


def _as_bytes(value: bytes | bytearray | memoryview) -> bytes:
    return value if isinstance(value, bytes) else bytes(value)


@attrs.frozen(kw_only=True)
class EncodedClip:
    """One clip's encoded bytes, as acquired.

    :param data: the encoded bytes (copied to immutable ``bytes`` if given mutable).
    :param source_format: ``WAV`` or a raw ``SourceFormat``.
    :param ordinal: one-based placeholder ordinal (clip ``i`` must have ``i + 1``).
    :param origin: where the bytes came from (``"file"``, ``"inline base64"``, ``"data URI"``,
        ``"URL"``, ``"bytes"``), for observability only: it never changes the result.
    """

    data: bytes = attrs.field(converter=_as_bytes, repr=lambda d: f"<{len(d)} bytes>")
    source_format: SourceFormat = WAV
    ordinal: int
    origin: str = "bytes"

    @property
    def sha256(self) -> str:
        """Lowercase hex SHA-256 of the encoded bytes (content-digest references)."""
        return hashlib.sha256(self.data).hexdigest()
