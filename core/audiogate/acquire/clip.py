"""The record acquisition makes: one clip's encoded bytes, for the later stages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs

from audiogate.decode.geometry import AUTO, ClipGeometry, SourceFormat
from audiogate.errors import SourceLostError

__all__ = ["EncodedClip", "StoredHeader"]


def _as_bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    return value if value is None or isinstance(value, bytes) else bytes(value)


@attrs.frozen(kw_only=True)
class StoredHeader:
    """What a source store recorded of a clip's bytes when they were stored, so that the
    clip is admitted, and a feature-cache hit served, without reading them
    (docs/sources.md, "Reading a source").

    :param nbytes: the size of the bytes (the store checked its blob's size when leased).
    :param geometry: the WAV or raw header geometry admission read at upload.
    :param read: reads the bytes (their size checked).
    """

    nbytes: int
    geometry: ClipGeometry
    read: Callable[[], bytes] = attrs.field(repr=False, eq=False)


def _summary(data: bytes | None) -> str:
    return "<not read>" if data is None else f"<{len(data)} bytes>"


@attrs.frozen(kw_only=True)
class EncodedClip:
    """One clip's encoded bytes, as acquired.

    :param data: the encoded bytes (copied to immutable ``bytes`` if given mutable); may
        be left out with ``stored_header``: then read when first asked for.
    :param source_format: what the bytes are declared to be: :data:`~audiogate.decode.
        geometry.AUTO` (the default: recognised from the bytes), a container, or a raw
        ``SourceFormat``.
    :param ordinal: one-based placeholder ordinal (clip ``i`` must have ``i + 1``).
    :param origin: where the bytes came from (``"file"``, ``"inline base64"``, ``"data URI"``,
        ``"URL"``, ``"bytes"``), for observability only: it never changes the result.
    :param stored_sha256: the digest ``data`` is stored under (a source store's lease),
        taken as :attr:`sha256` without hashing; :meth:`check_digest` proves it before
        any sample is decoded (docs/sources.md, "Reading a source").
    :param stored_header: what the store recorded of a stored clip (needs
        ``stored_sha256``): the preflight admits it by :attr:`header`, and its bytes are
        read only if it is decoded.
    :raises TypeError: neither ``data`` nor ``stored_header``, or ``stored_header``
        without ``stored_sha256``.
    """

    _data: bytes | None = attrs.field(
        alias="data", default=None, converter=_as_bytes, repr=_summary
    )
    source_format: SourceFormat = AUTO
    ordinal: int
    origin: str = "bytes"
    stored_sha256: str | None = attrs.field(default=None, eq=False, repr=False)
    stored_header: StoredHeader | None = attrs.field(default=None, eq=False, repr=False)
    # The digest once computed (one hash per clip, however often it is asked for).
    _hashed: str | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self._data is None and self.stored_header is None:
            raise TypeError("an EncodedClip needs its data= (or a stored_header= to read it)")
        if self.stored_header is not None and self.stored_sha256 is None:
            raise TypeError("a stored_header= needs the stored_sha256= it was recorded under")

    @property
    def data(self) -> bytes:
        """The encoded bytes (a stored clip's read on first use).

        :raises SourceLostError: a stored clip's bytes are gone, or not the recorded size.
        """
        if self._data is None:
            stored = self.stored_header
            assert stored is not None
            assert self.stored_sha256 is not None
            data = stored.read()
            if len(data) != stored.nbytes:
                raise SourceLostError(self.stored_sha256)
            object.__setattr__(self, "_data", data)
            return data
        return self._data

    @property
    def nbytes(self) -> int:
        """The size of the encoded bytes, read or not."""
        if self._data is None:
            assert self.stored_header is not None
            return self.stored_header.nbytes
        return len(self._data)

    @property
    def header(self) -> ClipGeometry | None:
        """The header geometry recorded when the clip was stored (``None``: read its
        header from its bytes)."""
        return None if self.stored_header is None else self.stored_header.geometry

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
            under (damaged since they were stored), or are gone.
        """
        if self.stored_sha256 is None:
            return
        try:
            digest = self._hash()
        except SourceLostError:
            raise SourceLostError(self.stored_sha256, clip_index=clip_index) from None
        if digest != self.stored_sha256:
            raise SourceLostError(self.stored_sha256, clip_index=clip_index)
