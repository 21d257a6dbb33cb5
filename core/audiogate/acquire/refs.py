"""Stored sources named by digest: what acquisition needs of a source store.

An ``audio_ref`` content part names a source by its SHA-256; the request's
:class:`SourceAccess` resolves it through a :class:`SourceResolver` (the core's
:class:`~audiogate.store.SourceStore` is one) into the stored bytes and their declared
format, holding a lease on the source until the request lets go of it. Acquisition
knows only this protocol, never the store (the store's admission uses acquisition).
"""

from __future__ import annotations

import threading
from typing import Final, Protocol, runtime_checkable

import attrs

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.geometry import ClipGeometry, SourceFormat
from audiogate.errors import PreprocessCancelled

__all__ = [
    "NO_STORE_MESSAGE",
    "ORIGIN_REFERENCE",
    "SourceAccess",
    "SourceLease",
    "SourceResolver",
]

#: The origin of a clip resolved from the store.
ORIGIN_REFERENCE: Final = "source reference"
#: The refusal of an ``audio_ref`` part where no store is configured (names the option).
NO_STORE_MESSAGE: Final = (
    "audio_ref parts need a source store, and none is configured (start the server with "
    "`audiogate serve --store DIR`, or give AudioGate a store=)"
)


@runtime_checkable
class SourceLease(Protocol):
    """A held source: its bytes, declared format and recorded header, until
    :meth:`release`."""

    @property
    def data(self) -> bytes:
        """The source's encoded bytes, read once (their size checked; their digest too
        unless leased with ``verify=False``).

        :raises SourceError: they are gone or damaged (``SourceLostError``).
        """
        ...

    @property
    def nbytes(self) -> int:
        """The size of its bytes (checked against what is stored when it was leased)."""
        ...

    @property
    def header(self) -> ClipGeometry | None:
        """The WAV or raw header geometry admission read at upload (``None``: not kept)."""
        ...

    @property
    def sha256(self) -> str:
        """The digest the source is stored under."""
        ...

    @property
    def source_format(self) -> SourceFormat:
        """The format the source was admitted as."""
        ...

    def release(self) -> None:
        """Let go of the source (idempotent)."""
        ...


@runtime_checkable
class SourceResolver(Protocol):
    """Resolves digests to leased sources (``audiogate.store.SourceStore``)."""

    def lease(
        self,
        sha256: str,
        *,
        owner: str,
        cancel: CancelToken = NEVER,
        wait_s: float | None = None,
        clip_index: int | None = None,
        verify: bool = True,
        read: bool = True,
    ) -> SourceLease:
        """Lease ``sha256`` as ``owner`` sees it, waiting up to ``wait_s`` for a source
        still processing.

        :param verify: check the bytes' digest on reading (``False``: the caller proves
            it before using them, as :meth:`~audiogate.acquire.EncodedClip.check_digest`
            does before decoding; the size is checked either way).
        :param read: read the bytes now (``False``: check only that they are there, of
            their size, and read them when :attr:`SourceLease.data` is first asked for).

        :raises SourceError: missing, not accessible, retired, lost, or still processing.
        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        """
        ...

    async def lease_async(
        self,
        sha256: str,
        *,
        owner: str,
        cancel: CancelToken = NEVER,
        wait_s: float | None = None,
        clip_index: int | None = None,
        verify: bool = True,
        read: bool = True,
    ) -> SourceLease:
        """:meth:`lease` from an event loop, which never waits on the store's backends
        (they run in the store's executor; a wait sleeps on the loop). A task cancelled
        meanwhile takes no lease (one taken is released).

        :raises SourceError: missing, not accessible, retired, lost, or still processing.
        :raises PreprocessCancelled: ``cancel`` was cancelled while waiting.
        """
        ...


@attrs.define
class SourceAccess:
    """One request's view of a store: who asks, and the leases it holds.

    :param resolver: the store.
    :param owner: the caller (a server maps bearer tokens to owners).
    :param wait_s: how long a reference to a processing source waits (``None``: the
        store's default).
    """

    resolver: SourceResolver
    owner: str
    wait_s: float | None = None
    leases: list[SourceLease] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)
    _released: bool = attrs.field(default=False, repr=False)

    def open(self, sha256: str, *, cancel: CancelToken, clip_index: int) -> SourceLease:
        """Lease ``sha256`` for this request (released by :meth:`release`): its bytes are
        checked to be there, of their size, and read when first asked for (a source
        with a recorded header only if it is decoded); their digest is proven where
        they are decoded.

        :raises PreprocessCancelled: the request let go of its leases while this one was
            being taken (its task was cancelled): the lease is released at once.
        """
        # Not verified here: the clip carries the stored digest, and the pipeline proves
        # it before decoding (a feature-cache hit decodes nothing, so it hashes nothing).
        lease = self.resolver.lease(
            sha256,
            owner=self.owner,
            cancel=cancel,
            wait_s=self.wait_s,
            clip_index=clip_index,
            verify=False,
            read=False,
        )
        return self._keep(lease, clip_index)

    async def open_async(self, sha256: str, *, cancel: CancelToken, clip_index: int) -> SourceLease:
        """:meth:`open` from an event loop (:meth:`SourceResolver.lease_async`)."""
        lease = await self.resolver.lease_async(
            sha256,
            owner=self.owner,
            cancel=cancel,
            wait_s=self.wait_s,
            clip_index=clip_index,
            verify=False,
            read=False,
        )
        return self._keep(lease, clip_index)

    def _keep(self, lease: SourceLease, clip_index: int) -> SourceLease:
        with self._lock:
            if not self._released:
                self.leases.append(lease)
                return lease
        lease.release()
        raise PreprocessCancelled(checkpoint=Checkpoint.ACQUISITION, clip_index=clip_index)

    def release(self) -> None:
        """Release every lease this request holds (and any it takes later)."""
        with self._lock:
            self._released = True
            leases, self.leases = self.leases, []
        for lease in leases:
            lease.release()
