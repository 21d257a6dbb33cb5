"""Bearer tokens: one digest look-up whatever the number of tokens, UTF-8 bytes compared."""

from __future__ import annotations

import hmac
from pathlib import Path

import pytest
from starlette.requests import Request

from audiogate.server import auth
from audiogate.server.auth import OwnerTokens, owner_of
from audiogate.server.errors import UnauthorizedError
from audiogate.server.sources import load_auth_tokens
from audiogate.store import ANONYMOUS_OWNER


def _request(authorization: bytes | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization)]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


@pytest.fixture
def compares(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    calls: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    return calls


@pytest.mark.parametrize("size", [1, 100_000])
def test_a_look_up_compares_at_most_one_token_whatever_the_table_size(
    size: int, compares: list[tuple[bytes, bytes]]
) -> None:
    tokens = OwnerTokens({f"token-{i:06d}": f"owner-{i}" for i in range(size)})
    last = f"token-{size - 1:06d}"
    assert owner_of(_request(f"Bearer {last}".encode()), tokens) == f"owner-{size - 1}"
    assert len(compares) == 1
    with pytest.raises(UnauthorizedError):
        owner_of(_request(b"Bearer token-x"), tokens)
    assert len(compares) == 1  # an unknown token's digest is not in the table: no compare


def test_a_non_ascii_token_matches_when_sent_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("clé-ünïcode-✓ alice\nplain bob\n", encoding="utf-8")
    tokens = load_auth_tokens(path)
    header = "Bearer clé-ünïcode-✓".encode()
    assert owner_of(_request(header), tokens) == "alice"
    # The same characters sent as latin-1 are other bytes: not the token.
    with pytest.raises(UnauthorizedError):
        owner_of(_request("Bearer clé".encode("latin-1")), OwnerTokens({"clé": "carol"}))
    assert owner_of(_request("Bearer clé".encode()), OwnerTokens({"clé": "carol"})) == "carol"


@pytest.mark.parametrize(
    "header", [None, b"", b"Bearer", b"Bearer ", b"Basic plain", b"bearer  wrong", b"plain"]
)
def test_missing_or_unknown_tokens_are_refused(header: bytes | None) -> None:
    with pytest.raises(UnauthorizedError):
        owner_of(_request(header), OwnerTokens({"plain": "bob"}))


def test_the_scheme_is_case_insensitive_and_a_plain_mapping_still_works() -> None:
    assert owner_of(_request(b"bEaReR plain"), {"plain": "bob"}) == "bob"
    assert owner_of(_request(None), None) == ANONYMOUS_OWNER


def test_the_table_is_a_read_only_mapping_that_never_prints_its_tokens() -> None:
    tokens = OwnerTokens({"secret-1": "alice", "secret-2": "bob"})
    assert dict(tokens) == {"secret-1": "alice", "secret-2": "bob"}
    assert len(tokens) == 2
    assert tokens["secret-2"] == "bob"
    assert "secret" not in repr(tokens)
    assert OwnerTokens.of(tokens) is tokens
