"""Acquisition: untrusted audio sources → encoded bytes, under ceilings and a URL policy.

The first stage of the pipeline (acquire → admit → decode → ...). Servers pass a
request's OpenAI-style audio content parts to :func:`acquire_parts`; the CLI passes its
paths to :func:`acquire_paths`; an embedder with bytes in hand uses :func:`acquire_bytes`.
All three return :class:`EncodedClip` records for the preflight (admission).

What may be read is an :class:`AcquisitionPolicy`: absolute ceilings (16 clips,
500 MiB per clip and per request), URL fetching (off by default; public addresses only,
pinned connections, re-checked redirects, optional host allow-list and HTTPS-only) and
the media root for request paths (none by default). ``docs/security.md`` explains the
model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audiogate.acquire.acquire import (
    acquire_bytes,
    acquire_parts,
    acquire_parts_sync,
    acquire_paths,
    acquire_suspends,
)
from audiogate.acquire.addresses import refusal
from audiogate.acquire.clip import EncodedClip, StoredHeader
from audiogate.acquire.held import ACQUIRED_BYTES_LIMIT, AcquiredBytes
from audiogate.acquire.policy import (
    ABSOLUTE_MAX_BYTES,
    ABSOLUTE_MAX_CLIPS,
    ABSOLUTE_MAX_REDIRECTS,
    ALLOW_PRIVATE_MEDIA_URLS,
    PRIVATE_MEDIA_URLS_ENV,
    AcquisitionPolicy,
    IPAddress,
    Resolver,
)
from audiogate.acquire.refs import (
    NO_STORE_MESSAGE,
    ORIGIN_REFERENCE,
    SourceAccess,
    SourceLease,
    SourceResolver,
)

if TYPE_CHECKING:
    from audiogate.acquire.net import create_media_client, system_resolver

__all__ = [
    "ABSOLUTE_MAX_BYTES",
    "ABSOLUTE_MAX_CLIPS",
    "ABSOLUTE_MAX_REDIRECTS",
    "ACQUIRED_BYTES_LIMIT",
    "ALLOW_PRIVATE_MEDIA_URLS",
    "NO_STORE_MESSAGE",
    "ORIGIN_REFERENCE",
    "PRIVATE_MEDIA_URLS_ENV",
    "AcquiredBytes",
    "AcquisitionPolicy",
    "EncodedClip",
    "IPAddress",
    "Resolver",
    "SourceAccess",
    "SourceLease",
    "SourceResolver",
    "StoredHeader",
    "acquire_bytes",
    "acquire_parts",
    "acquire_parts_sync",
    "acquire_paths",
    "acquire_suspends",
    "create_media_client",
    "refusal",
    "system_resolver",
]


def __getattr__(name: str) -> Any:
    # The URL client imports httpx: only for the callers that ask for it.
    if name in {"create_media_client", "system_resolver"}:
        from audiogate.acquire import net

        return getattr(net, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
