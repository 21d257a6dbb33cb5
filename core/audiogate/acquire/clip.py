"""The record acquisition makes: one clip's encoded bytes, for the later stages."""

from __future__ import annotations

import hashlib

import attrs

from audiogate.decode.geometry import WAV, SourceFormat
from audiogate.errors import SourceLostError

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
    :param stored_sha256: the digest ``data`` is stored under (a source store's lease),
        taken as :attr:`sha256` without hashing; :meth:`check_digest` proves it before
        any sample is decoded (docs/sources.md, "Reading a source").
    """

    data: bytes = attrs.field(converter=_as_bytes, repr=lambda d: f"<{len(d)} bytes>")
    source_format: SourceFormat = WAV
    ordinal: int
    origin: str = "bytes"
    stored_sha256: str | None = attrs.field(default=None, eq=False, repr=False)
    # The digest once computed (one hash per clip, however often it is asked for).
    _hashed: str | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def _hash(self) -> str:
        if self._hashed is None:
            object.__setattr__(self, "_hashed", hashlib.sha256(self.data).hexdigest())
        assert self._hashed is not None
        return self._hashed

    @property
    def sha256(self) -> str:
        """Lowercase hex SHA-256 of the encoded bytes (content-digest references, the
        feature cache's key): the stored digest where there is one, else computed once."""
        return self.stored_sha256 if self.stored_sha256 is not None else self._hash()

    def check_digest(self, *, clip_index: int | None = None) -> None:
        """Prove a stored digest against the bytes (nothing to prove without one).

        :raises SourceLostError: the bytes no longer match the digest they are stored
            under (damaged since they were stored).
        """
        if self.stored_sha256 is not None and self._hash() != self.stored_sha256:
            raise SourceLostError(self.stored_sha256, clip_index=clip_index)
