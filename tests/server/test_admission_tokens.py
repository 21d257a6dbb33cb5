"""Fair share by bearer token (issue #33): with ``--auth-tokens`` a client is its token's
owner by default (``fair_share_by="auto"``), so one owner is held to one share from any
number of addresses and owners behind one address each get theirs; ``"address"`` keeps
counting by address."""

from __future__ import annotations

import contextlib
import json
import socket

import pytest
from serverkit import PREPARE, Running, chat, serving, wait_until, wav_b64

from audiogate.cli import build_parser
from audiogate.server import ServerLimits
from audiogate.server.admission import ClientAddresses, HeadAdmission
from audiogate.server.options import serve_options

SLOW = {"header_timeout_s": 60.0, "body_idle_timeout_s": 60.0, "min_body_rate": 0}
OWNERS = {"token-alice": "alice", "token-bob": "bob"}


def _head(length: int, token: str | None, *, close: bool = False) -> bytes:
    lines = [f"POST {PREPARE} HTTP/1.1", "Host: x", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if close:
        lines.append("Connection: close")
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _connect(running: Running, source: str) -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", running.server.port), timeout=10, source_address=(source, 0)
    )


def _upload(running: Running, source: str, token: str | None) -> socket.socket:
    """A request admitted and held in flight: its head and the first byte of its body."""
    sock = _connect(running, source)
    sock.sendall(_head(100_000, token) + b"{")
    return sock


def _refused(running: Running, source: str, token: str | None) -> dict:
    """The error of a request refused from its head (429, the connection closed)."""
    with _connect(running, source) as sock:
        sock.sendall(_head(100_000, token, close=True))
        reply = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 429"), reply
    return json.loads(reply.partition(b"\r\n\r\n")[2])["error"]


def _held(running: Running) -> float:
    """Body bytes the server holds (``/metrics`` needs a token: bob's, which no
    request in flight here is counted by)."""
    running.client.headers["authorization"] = "Bearer token-bob"
    return running.gauges()[2]


@pytest.mark.slow
def test_by_token_one_owner_is_one_client_from_any_address() -> None:
    limits = ServerLimits(max_requests_per_client=1, **SLOW)
    with serving(limits=limits, owners=OWNERS) as running:
        with _upload(running, "127.0.0.2", "token-alice"):
            wait_until(lambda: _held(running) > 0)
            # The same owner from another address: past its one request in flight.
            error = _refused(running, "127.0.0.3", "token-alice")
            assert "at most 1" in error["message"]
            # Another owner from the first's address has its own count.
            response = running.client.post(
                PREPARE,
                json=chat(wav_b64(0.2)),
                headers={"authorization": "Bearer token-bob"},
            )
            assert response.status_code == 200
        running.wait_idle()


@pytest.mark.slow
def test_a_client_is_its_owner_by_token_and_its_address_without_a_known_token() -> None:
    with serving(owners=OWNERS) as running:
        server = running.server.config.app.state.audiogate
        addresses = ClientAddresses()

        def client(by: str, *headers: tuple[bytes, bytes]) -> str:
            limits = ServerLimits(fair_share_by=by)  # type: ignore[arg-type]
            return HeadAdmission(server, limits, addresses).client_of("10.0.0.1", headers)

        bearer = (b"authorization", b"Bearer token-alice")
        assert client("auto", bearer) == client("token", bearer) == "token:alice"
        assert client("auto", (b"authorization", b"bearer \ttoken-bob ")) == "token:bob"
        assert client("address", bearer) == "10.0.0.1"
        for headers in (
            (),
            ((b"authorization", b"Bearer nobody"),),
            ((b"authorization", b"Basic token-alice"),),
        ):
            assert client("token", *headers) == "10.0.0.1"
    with serving() as running:  # no tokens: "auto" is by address
        server = running.server.config.app.state.audiogate
        admission = HeadAdmission(server, ServerLimits(), ClientAddresses())
        assert admission.client_of("10.0.0.1", [bearer]) == "10.0.0.1"


@pytest.mark.slow
def test_by_address_owners_behind_one_address_share_its_count() -> None:
    limits = ServerLimits(max_requests_per_client=1, fair_share_by="address", **SLOW)
    with serving(limits=limits, owners=OWNERS) as running:
        with _upload(running, "127.0.0.2", "token-alice"):
            wait_until(lambda: _held(running) > 0)
            error = _refused(running, "127.0.0.2", "token-bob")
            assert "at most 1" in error["message"]
            # Another address, the same owner: admitted (its body starts to be held).
            with _upload(running, "127.0.0.3", "token-alice"):
                wait_until(lambda: _held(running) == 2)
        running.wait_idle()


def test_fair_share_by_is_validated() -> None:
    with pytest.raises(ValueError, match="fair_share_by"):
        ServerLimits(fair_share_by="cookie")  # type: ignore[arg-type]


@pytest.mark.parametrize("choice", ["auto", "address", "token"])
def test_serve_takes_fair_share_by(choice: str) -> None:
    args = build_parser().parse_args(["serve", "--model", "m", "--fair-share-by", choice])
    assert serve_options(args).limits.fair_share_by == choice
    default = build_parser().parse_args(["serve", "--model", "m"])
    assert serve_options(default).limits.fair_share_by == "auto"


def test_an_unknown_fair_share_by_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--model", "m", "--fair-share-by", "cookie"])
    assert exited.value.code == 2
    assert "--fair-share-by" in capsys.readouterr().err
