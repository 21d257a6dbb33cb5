"""Bearer tokens → owners (``--auth-tokens``), checked in time that does not depend on the
number of tokens or on which token matched.

A token is looked up by the SHA-256 of its UTF-8 bytes, then compared with
:func:`hmac.compare_digest`: the look-up is one hash and one dict probe whatever the table's
size (a linear scan cost 13.9 ms per bad request with 100,000 tokens), and what a probe's
timing could reveal is about a digest, from which no token can be recovered.

HTTP header values reach Starlette as bytes decoded as latin-1; the bytes the client sent are
recovered by encoding back to latin-1, so a token with non-ASCII characters matches when the
client sends it as UTF-8 (the file is read as UTF-8), as every HTTP client does.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Mapping

from starlette.requests import Request

from audiogate.server.errors import UnauthorizedError
from audiogate.store import ANONYMOUS_OWNER

__all__ = ["OwnerTokens", "owner_of"]


def _token_digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class OwnerTokens(Mapping[str, str]):
    """Tokens → owners, keyed for look-up by each token's digest.

    A read-only :class:`~collections.abc.Mapping` of the tokens as given (iteration, ``len``
    and ``[]`` behave as the dict it was built from); :meth:`owner` is the constant-time
    look-up the server uses.
    """

    def __init__(self, owners: Mapping[str, str]) -> None:
        self._owners = dict(owners)
        self._by_digest = {
            _token_digest(token.encode("utf-8")): (token.encode("utf-8"), owner)
            for token, owner in self._owners.items()
        }

    @classmethod
    def of(cls, owners: Mapping[str, str]) -> OwnerTokens:
        """``owners`` itself when it is already an :class:`OwnerTokens`, else a new one."""
        return owners if isinstance(owners, OwnerTokens) else cls(owners)

    def owner(self, token: bytes) -> str | None:
        """The owner of ``token`` (its raw bytes), or ``None`` for an unknown token."""
        found = self._by_digest.get(_token_digest(token))
        if found is None:
            return None
        known, owner = found
        # The digests matched; the bytes are compared too (in constant time), so a digest
        # collision could never stand in for the token.
        return owner if hmac.compare_digest(known, token) else None

    def __getitem__(self, token: str) -> str:
        return self._owners[token]

    def __iter__(self) -> Iterator[str]:
        return iter(self._owners)

    def __len__(self) -> int:
        return len(self._owners)

    def __repr__(self) -> str:  # never print the tokens themselves
        return f"OwnerTokens(<{len(self._owners)} tokens>)"


def owner_of(request: Request, owners: Mapping[str, str] | None) -> str:
    """Who sends ``request``: the owner of its bearer token, or the anonymous owner.

    :param owners: an :class:`OwnerTokens` (a plain mapping is indexed on each call: build
        one :class:`OwnerTokens` up front instead).
    :raises UnauthorizedError: owners are configured and the token is missing or unknown.
    """
    if owners is None:
        return ANONYMOUS_OWNER
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip(" \t")
    if scheme.lower() == "bearer" and token:
        owner = OwnerTokens.of(owners).owner(token.encode("latin-1"))
        if owner is not None:
            return owner
    raise UnauthorizedError("this server needs 'Authorization: Bearer TOKEN' with a known token")
