"""Plain heads kept by their bytes (issue #33): a head read before is the same reading,
not parsed again; what follows the head is still checked on each read; the heads kept
are bounded."""

from __future__ import annotations

import h11
import pytest

from audiogate.server import fast_refusal
from audiogate.server.fast_refusal import KEPT_HEADS, plain_head

MAX = 16 * 1024
PLAIN = (
    b"POST /v1/audio/prepare HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 5\r\n\r\n"
)


def _idle() -> h11.Connection:
    return h11.Connection(h11.SERVER, MAX)


@pytest.fixture(autouse=True)
def _forget() -> None:
    fast_refusal._kept.clear()


def test_a_head_read_again_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first = plain_head(PLAIN + b"{}", _idle(), MAX)
    assert first is not None

    def parse(data: bytes, end: int) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(fast_refusal, "_parse", parse)
    again = plain_head(PLAIN + b'{"a"', _idle(), MAX)  # the same head, another body
    assert again is first


def test_a_kept_head_with_a_request_pipelined_after_its_body_is_left_to_h11() -> None:
    assert plain_head(PLAIN, _idle(), MAX) is not None
    assert plain_head(PLAIN + b"{}{}}" + PLAIN, _idle(), MAX) is None
    assert plain_head(PLAIN + b"{}{}}", _idle(), MAX) is not None


def test_a_kept_head_is_read_only_on_a_connection_between_requests() -> None:
    assert plain_head(PLAIN, _idle(), MAX) is not None
    conn = _idle()
    conn.receive_data(b"POST /x")
    assert conn.next_event() is h11.NEED_DATA
    assert plain_head(PLAIN, conn, MAX) is None


def test_unusual_heads_are_not_kept_and_the_kept_ones_are_bounded() -> None:
    assert plain_head(PLAIN.replace(b"Host: x\r\n", b""), _idle(), MAX) is None
    assert not fast_refusal._kept
    for index in range(KEPT_HEADS + 10):
        data = PLAIN.replace(b"Host: x", b"Host: x%d" % index)
        head = plain_head(data, _idle(), MAX)
        assert head is not None
        assert (b"host", b"x%d" % index) in head.headers
        assert len(fast_refusal._kept) <= KEPT_HEADS
